/* A program with an AOT bundle compiled in: the bundle.cpp that the installed
 * `attnc aot` wrote, linked with the installed libattnc.so. Its registration
 * runs at start-up, so the bundle's name is taken before main(): loading its
 * folder at run time is loading the same bundle again (nothing new), and a
 * folder of other kernels under that name is refused as a bundle linked into
 * the program.
 *   consumer-bundled BUNDLE_DIR OTHER_DIR_OF_THE_SAME_NAME */
#include <attnc/attnc.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: consumer-bundled BUNDLE_DIR OTHER_DIR_OF_THE_SAME_NAME\n");
    return 2;
  }
  int64_t kernels = -1;
  if (attnc_bundle_load(argv[1], &kernels) != ATTNC_OK || kernels != 1) {
    fprintf(stderr, "%s: not the linked bundle again (%lld kernels): %s\n", argv[1],
            (long long)kernels, attnc_last_error());
    return 1;
  }
  if (attnc_bundle_load(argv[2], &kernels) == ATTNC_OK) {
    fprintf(stderr, "%s loaded as a new bundle: bundle.cpp registered nothing\n", argv[2]);
    return 1;
  }
  if (!strstr(attnc_last_error(), "already registered (linked into the program)")) {
    fprintf(stderr, "unexpected refusal: %s\n", attnc_last_error());
    return 1;
  }
  printf("bundle.cpp registered its bundle at start-up: %s\n", attnc_last_error());
  return 0;
}
