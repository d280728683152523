//===- SingleFlight.h - One computation per key, however many ask -*- C++ -*-===//
//
// The memory of the kernel cache and of the runtime: the first caller for a
// key computes the result while later callers for that key wait for it; a
// result that converts to true is remembered, a failure is forgotten so the
// next call tries again. Thread-safe.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_SINGLEFLIGHT_H
#define ATTNC_SINGLEFLIGHT_H

#include <future>
#include <map>
#include <mutex>
#include <string>

namespace attn {

template <typename Result>
class SingleFlight {
public:
  /// The result for `key`: compute() when no call for it has succeeded or
  /// is under way, else the other call's result. `shared` says which.
  template <typename Compute>
  Result get(const std::string &key, Compute compute, bool &shared) {
    std::promise<Result> promise;
    std::shared_future<Result> future;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = results_.find(key);
      shared = it != results_.end();
      if (shared)
        future = it->second;
      else
        results_.emplace(key, promise.get_future().share());
    }
    if (shared)
      return future.get();
#if defined(__cpp_exceptions)
    // A computation that throws (an allocation that fails) is forgotten like
    // a failure, and its waiters get the exception: a promise left unset in
    // the map would fail every later call for the key.
    Result r;
    try {
      r = compute();
    } catch (...) {
      promise.set_exception(std::current_exception());
      std::lock_guard<std::mutex> lock(mutex_);
      results_.erase(key);
      throw;
    }
#else
    Result r = compute();
#endif
    promise.set_value(r);
    if (!r) {
      std::lock_guard<std::mutex> lock(mutex_);
      results_.erase(key);
    }
    return r;
  }

  /// Forgets every remembered result.
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    results_.clear();
  }

private:
  std::mutex mutex_;
  std::map<std::string, std::shared_future<Result>> results_;
};

} // namespace attn

#endif // ATTNC_SINGLEFLIGHT_H
