/* Links the installed libattnc.so through find_package(attnc): a plain C program. */
#include <attnc/attnc.h>
#include <stdio.h>

int main(void) {
  char spec[ATTNC_STRING_MAX];
  if (attnc_abi_version() != ATTNC_ABI_VERSION)
    return 1;
  if (attnc_spec_canonical("mode=decode,page_size=16,gqa=8", spec, sizeof spec) != ATTNC_OK)
    return 1;
  printf("%s\n%s\n", attnc_version(), spec);
  if (attnc_spec_canonical("head_dim=7", spec, sizeof spec) != ATTNC_ERROR_INVALID_ARGUMENT)
    return 1;
  printf("refused: %s\n", attnc_last_error());
  return 0;
}
