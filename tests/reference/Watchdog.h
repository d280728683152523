//===- Watchdog.h - Stop a process whose kernel never finishes --*- C++ -*-===//
//
// A synchronising call on a kernel that never ends (a deadlocked kernel
// given to `attn-gpu-check --source`, say) waits forever, and the driver
// cannot cancel a running kernel; ending the process ends it. While a
// StuckGuard lives, a watchdog thread ends the process (exit status 1) with a
// line naming what was waited on, once the guard has lived longer than
// kernelTimeoutSeconds(): 120 s, or $ATTNC_KERNEL_TIMEOUT_S. The timed and
// checked launches of attn-gpu-check, `attnc run --target gpu` and `attnc
// tune` wait under one.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_TESTS_WATCHDOG_H
#define ATTNC_TESTS_WATCHDOG_H

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace attn::harness {

/// Seconds a guarded wait may take: $ATTNC_KERNEL_TIMEOUT_S (a number above
/// 0), else 120. A value that is not one is said once, and 120 is used.
inline double kernelTimeoutSeconds() {
  static const double seconds = [] {
    constexpr double kDefault = 120;
    const char *env = std::getenv("ATTNC_KERNEL_TIMEOUT_S");
    if (!env || !*env)
      return kDefault;
    char *end = nullptr;
    const double v = std::strtod(env, &end);
    if (*end != '\0' || !(v > 0) || v > 1e6) {
      std::fprintf(stderr, "ATTNC_KERNEL_TIMEOUT_S = '%s' is not a number of seconds above 0; using %g\n", env,
                   kDefault);
      return kDefault;
    }
    return v;
  }();
  return seconds;
}

/// Arms the watchdog for what it names until it is destroyed (guards do not
/// nest: the latest one is watched).
class StuckGuard {
public:
  explicit StuckGuard(std::string what) {
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    generation_ = ++s.generation;
    s.what = std::move(what);
    s.deadline = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(kernelTimeoutSeconds()));
    s.armed = true;
    s.changed.notify_all();
  }
  ~StuckGuard() {
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.generation == generation_) {
      s.armed = false;
      s.changed.notify_all();
    }
  }
  StuckGuard(const StuckGuard &) = delete;
  StuckGuard &operator=(const StuckGuard &) = delete;

private:
  struct State {
    std::mutex mutex;
    std::condition_variable changed;
    bool armed = false;
    unsigned long generation = 0;
    std::string what;
    std::chrono::steady_clock::time_point deadline;
  };
  /// Never destroyed (the watchdog thread may still wait on it at exit), and
  /// its thread started with it.
  static State &state() {
    static State *s = [] {
      auto *fresh = new State;
      std::thread([fresh] { watch(*fresh); }).detach();
      return fresh;
    }();
    return *s;
  }
  static void watch(State &s) {
    std::unique_lock<std::mutex> lock(s.mutex);
    for (;;) {
      s.changed.wait(lock, [&] { return s.armed; });
      const unsigned long generation = s.generation;
      if (s.changed.wait_until(lock, s.deadline, [&] { return !s.armed || s.generation != generation; }))
        continue; // disarmed, or a newer guard with its own deadline
      std::fprintf(stderr,
                   "stopped: %s has not finished after %g s (a kernel that never ends? "
                   "$ATTNC_KERNEL_TIMEOUT_S sets the limit)\n",
                   s.what.c_str(), kernelTimeoutSeconds());
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
  unsigned long generation_ = 0;
};

} // namespace attn::harness

#endif // ATTNC_TESTS_WATCHDOG_H
