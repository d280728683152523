//===- WatchdogProbe.cpp - A wait that outlives harness::StuckGuard -------===//
//
//   attn-watchdog-probe SECONDS
//
// Waits SECONDS under a StuckGuard, as attn-gpu-check waits for a kernel,
// then prints "finished". With $ATTNC_KERNEL_TIMEOUT_S below SECONDS the
// watchdog must stop it first, with its line and exit status 1
// (tests/unit/CMakeLists.txt checks both outcomes).
//
//===----------------------------------------------------------------------===//

#include "reference/Watchdog.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: attn-watchdog-probe SECONDS\n");
    return 2;
  }
  const double seconds = std::atof(argv[1]);
  {
    const attn::harness::StuckGuard guard("the probe's wait");
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }
  // A second guard after the first has ended is watched afresh.
  {
    const attn::harness::StuckGuard guard("the probe's second wait");
  }
  std::printf("finished\n");
  return 0;
}
