//===- WatchdogProbe.cpp - A wait that outlives harness::StuckGuard -------===//
//
//   attn-watchdog-probe GUARDED [AFTER]
//
// Waits GUARDED seconds under a StuckGuard (harness::guarded), as
// attn-gpu-check waits for a kernel, then AFTER seconds with no guard, then
// prints "finished". With $ATTNC_KERNEL_TIMEOUT_S below GUARDED the watchdog
// must stop it first, with its line and exit status 1; below AFTER only, it
// must not (the guard's end disarmed it). tests/unit/CMakeLists.txt checks
// these outcomes.
//
//===----------------------------------------------------------------------===//

#include "reference/Watchdog.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

int main(int argc, char **argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: attn-watchdog-probe GUARDED [AFTER]\n");
    return 2;
  }
  auto wait = [](double seconds) { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); };
  attn::harness::guarded("the probe's wait", [&] { // as the harness waits for a launch
    wait(std::atof(argv[1]));
    return 0;
  });
  wait(argc == 3 ? std::atof(argv[2]) : 0.0);
  std::printf("finished\n");
  return 0;
}
