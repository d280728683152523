// Links the installed libattnc.so through find_package(attnc): a C++ program
// on attnc.hpp's classes (a C++17 compiler and the C ABI, nothing else).
#include <attnc/attnc.hpp>

#include <cstdio>

int main() {
  try {
    std::printf("%s\n%s\n", attnc::version().c_str(),
                attnc::canonicalSpec("mode=decode,page_size=16,gqa=8").c_str());
    attnc::PageAllocator pages(64, 16);
    const std::vector<int32_t> first = pages.allocate(7, 3);
    const std::vector<int32_t> next = pages.allocate(7);
    std::printf("sequence 7: pages %d, %d, %d, then %d of 64\n", first[0], first[1], first[2],
                next[0]);
  } catch (const attnc::Error &e) {
    std::printf("unexpected: %s\n", e.what());
    return 1;
  }
  try {
    attnc::canonicalSpec("head_dim=7");
    return 1;
  } catch (const attnc::Error &e) {
    std::printf("refused (status %d): %s\n", static_cast<int>(e.status()), e.what());
  }
  try {
    attnc::Runtime rt;
    std::printf("runtime on %s\n", rt.arch().c_str());
  } catch (const attnc::Error &e) {
    if (e.status() != ATTNC_ERROR_NO_GPU)
      return 1;
    std::printf("no GPU: %s\n", e.what());
  }
  return 0;
}
