//===- OutputErrors.h - An output the tools cannot write: one line, exit 1 -===//
//
// LLVM's streams report a write that failed (a full disk, /dev/full) as a
// fatal error when the stream is destroyed: "LLVM ERROR: IO failure on
// output stream", even after `--help`, which LLVM's parser prints and exits
// on. attnc and attn-opt install this handler first thing: the failure is
// said in one line that names the tool, files being written are removed,
// and the tool exits 1.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_TOOLS_OUTPUTERRORS_H
#define ATTNC_TOOLS_OUTPUTERRORS_H

#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/Signals.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace attn::cli {

inline void installOutputErrorHandler(const char *tool) {
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
