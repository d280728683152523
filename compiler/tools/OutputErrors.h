//===- OutputErrors.h - An output the tools cannot write: one line, exit 1 -===//
//
// LLVM's streams report a write that failed (a full disk, /dev/full) as a
// fatal error when the stream is destroyed: "LLVM ERROR: IO failure on
// output stream", even after `--help`, which LLVM's parser prints and exits
// on. attnc and attn-opt install this handler first thing after InitLLVM:
// the failure is said in one line that names the tool, files being written
// are removed, and the tool exits 1.
//
// A write past the file-size limit (`ulimit -f`) is such a failure too. Its
// signal, SIGXFSZ, would otherwise kill the tool, leaving its temporary files
// behind, or, once ignored by the shell, reach LLVM's crash handler (which
// InitLLVM installs over the shell's choice) and print a stack dump. So the
// handler ignores SIGXFSZ: the write fails with EFBIG and the tool's own
// error path reports it and removes what it made.
//
// The CPU-time limit's SIGXCPU ends the tool as it would without LLVM (the
// files being written removed first), not in a crash report. And a signal
// the caller ignored (`nohup` ignores SIGHUP, a background job SIGINT and
// SIGQUIT) stays ignored: LLVM's handler would remove the files being
// written and let the run go on to fail at its end (or, for SIGQUIT, end it
// with a crash report).
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_TOOLS_OUTPUTERRORS_H
#define ATTNC_TOOLS_OUTPUTERRORS_H

#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/Signals.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace attn::cli {

/// The stopping signals the caller ignored, read before llvm::InitLLVM
/// installs its handlers over them.
class CallerSignals {
public:
  CallerSignals() {
    for (int i = 0; i < kCount; ++i) {
      struct sigaction now {};
      ignored[i] = ::sigaction(kSignals[i], nullptr, &now) == 0 && now.sa_handler == SIG_IGN;
    }
  }
  /// Ignores again those the caller ignored.
  void restore() const {
    for (int i = 0; i < kCount; ++i)
      if (ignored[i])
        std::signal(kSignals[i], SIG_IGN);
  }

private:
  static constexpr int kSignals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGUSR2};
  static constexpr int kCount = sizeof(kSignals) / sizeof(kSignals[0]);
  bool ignored[kCount] = {};
};

/// Call after llvm::InitLLVM, whose signal handlers would replace the
/// choices made here; `caller` was made before it.
inline void installOutputErrorHandler(const char *tool, const CallerSignals &caller) {
  caller.restore();
  std::signal(SIGXFSZ, SIG_IGN);
  std::signal(SIGXCPU, [](int signal) {
    llvm::sys::RunInterruptHandlers(); // removes the files being written
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  });
  llvm::install_fatal_error_handler(
      [](void *data, const char *reason, bool) {
        llvm::sys::RunInterruptHandlers(); // removes the files being written
        static const char kIo[] = "IO failure on output stream: ";
        if (std::strncmp(reason, kIo, sizeof(kIo) - 1) == 0)
          std::fprintf(stderr, "%s: cannot write the output: %s\n", static_cast<const char *>(data),
                       reason + sizeof(kIo) - 1);
        else
          std::fprintf(stderr, "%s: %s\n", static_cast<const char *>(data), reason);
        std::_Exit(1);
      },
      const_cast<char *>(tool));
}

} // namespace attn::cli

#endif // ATTNC_TOOLS_OUTPUTERRORS_H
