//===- Watchdog.h - Stop a process whose kernel never finishes --*- C++ -*-===//
//
// A synchronising call on a kernel that never ends (a deadlocked kernel
// given to `attn-gpu-check --source`, say) waits forever, and the driver
// cannot cancel a running kernel; ending the process ends it. While a
// StuckGuard lives, a watchdog thread ends the process (exit status 1) with a
// line naming what was waited on, once the guard has lived longer than
// kernelTimeoutSeconds(): 120 s, or $ATTNC_KERNEL_TIMEOUT_S (0 or `off`: no
// limit, e.g. under a profiler that replays kernels). attn-gpu-check, `attnc
// run --target gpu` and `attnc tune` wait for each launch under one.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_TESTS_WATCHDOG_H
#define ATTNC_TESTS_WATCHDOG_H

#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace attn::harness {

/// Seconds a guarded wait may take: $ATTNC_KERNEL_TIMEOUT_S, else 120; 0
/// when there is no limit ($ATTNC_KERNEL_TIMEOUT_S = 0 or off). A value that
/// is none of these is said once, and 120 is used.
inline double kernelTimeoutSeconds() {
  static const double seconds = [] {
    constexpr double kDefault = 120;
    const char *env = std::getenv("ATTNC_KERNEL_TIMEOUT_S");
    std::string text = env ? env : "";
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
      text.pop_back();
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
      text.erase(text.begin());
    if (text.empty())
      return kDefault;
    if (text == "off")
      return 0.0;
    char *end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (*end != '\0' || std::isnan(v) || v < 0) {
      std::fprintf(stderr,
                   "ATTNC_KERNEL_TIMEOUT_S = '%s' is not a number of seconds (0 or off: no limit); using %g\n",
                   env, kDefault);
      return kDefault;
    }
    return v > 1e7 ? 0.0 : v; // beyond 115 days: no limit
  }();
  return seconds;
}

/// Arms the watchdog for what it names until it is destroyed. Guards are
/// not nested: while one lives, no other is made (a second would replace
/// it, and the first be unwatched once the second ends).
class StuckGuard {
public:
  explicit StuckGuard(std::string what) {
    if (kernelTimeoutSeconds() == 0)
      return; // no limit: nothing to watch
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
    if (generation_ == 0)
      return; // never armed
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.generation == generation_) {
      s.armed = false;
      s.changed.notify_all();
    }
  }
  StuckGuard(const StuckGuard &) = delete;
  StuckGuard &operator=(const StuckGuard &) = delete;

  /// Runs `cleanup` (say, removing a temporary folder) before the watchdog
  /// ends the process; the latest one given is run.
  static void atStop(std::function<void()> cleanup) {
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.cleanup = std::move(cleanup);
  }

private:
  struct State {
    std::mutex mutex;
    std::condition_variable changed;
    bool armed = false;
    unsigned long generation = 0;
    std::string what;
    std::chrono::steady_clock::time_point deadline;
    std::function<void()> cleanup;
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
      std::fflush(stdout); // what was printed before comes before the line
      std::fprintf(stderr,
                   "stopped: %s has not finished after %g s (a kernel that never ends? "
                   "$ATTNC_KERNEL_TIMEOUT_S sets the limit, 0 or off for none)\n",
                   s.what.c_str(), kernelTimeoutSeconds());
      std::fflush(stderr);
      if (s.cleanup)
        s.cleanup();
      std::_Exit(1);
    }
  }
  unsigned long generation_ = 0;
};

/// f() (a call that waits for a kernel) under a StuckGuard naming `what`.
template <class F>
auto guarded(std::string what, F f) {
  const StuckGuard guard(std::move(what));
  return f();
}

} // namespace attn::harness

#endif // ATTNC_TESTS_WATCHDOG_H
