//===- CacheCommand.cpp - attnc cache: list or empty the kernel cache -----===//
//
// The disk cache of compiled kernels ($ATTNC_CACHE_DIR, else
// $XDG_CACHE_HOME/attnc, else ~/.cache/attnc): `list` shows attnc's entries
// and their sizes, `clear` removes them and nothing else. Neither creates the
// folder. Names are shown as a line shows them (control characters quoted).
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "attn/Printable.h"
#ifdef ATTNC_HAVE_NVRTC
#include "attnc/KernelCache.h"
#endif

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

namespace attn::cli {

int cache(const std::string &action) {
#ifndef ATTNC_HAVE_NVRTC
  ErrorLine("attnc cache: ") << "this attnc was built without NVRTC (no CUDA toolkit found)\n";
  return 1;
#else
  if (action != "list" && action != "clear") {
    ErrorLine("attnc cache: ") << "unknown action '" << action << "': expected list or clear\n";
    return 1;
  }
  // Listing or clearing creates nothing: a missing folder holds no kernels.
  const std::string dir = attn::KernelCache::defaultDirectory();
  // The folder and file names as a line shows them (a name may hold a line end).
  const std::string shownDir = attn::printable(dir, /*keepUtf8=*/true);
  if (dir.empty()) {
    ErrorLine("attnc cache: ") << "no cache directory (no home directory): set ATTNC_CACHE_DIR\n";
    return 1;
  }
  llvm::sys::fs::file_status st;
  if (std::error_code ec = llvm::sys::fs::status(dir, st)) {
    if (ec != std::errc::no_such_file_or_directory) { // a folder on the way cannot be searched
      ErrorLine("attnc cache: ") << dir << " cannot be read: " << ec.message() << "\n";
      return 1;
    }
    llvm::outs() << (action == "clear" ? "removed 0 kernels: " : "0 kernels: ") << shownDir
                 << " does not exist\n";
    return 0;
  }
  if (st.type() != llvm::sys::fs::file_type::directory_file) {
    ErrorLine("attnc cache: ") << dir << " is not a folder (set ATTNC_CACHE_DIR to one)\n";
    return 1;
  }
  std::error_code unreadable;
  llvm::sys::fs::directory_iterator probe(dir, unreadable);
  if (unreadable) {
    ErrorLine("attnc cache: ") << dir << " cannot be read: " << unreadable.message() << "\n";
    return 1;
  }
  // The folder is read (and cleared) as it is: no cache is made of it, so
  // nothing is created and no warning about writing kernels there is said.
  std::string error;
  if (action == "clear") {
    const int removed = attn::KernelCache::clear(dir, &error);
    llvm::outs() << "removed " << attn::cli::counted(removed, "kernel") << " from " << shownDir
                 << "\n";
    if (!error.empty()) {
      ErrorLine("attnc cache clear: ") << error;
      return 1;
    }
    return 0;
  }
  long long total = 0;
  auto entries = attn::KernelCache::list(dir, &error);
  for (const attn::CacheEntry &e : entries) {
    llvm::outs() << llvm::format("%10lld  ", e.bytes) << attn::printable(e.file, /*keepUtf8=*/true)
                 << "\n";
    total += e.bytes;
  }
  llvm::outs() << attn::cli::counted(int64_t(entries.size()), "kernel") << ", " << total
               << " bytes in " << shownDir << "\n";
  if (!error.empty()) {
    llvm::outs().flush();
    ErrorLine("attnc cache list: ") << error;
    return 1;
  }
  return 0;
#endif
}

} // namespace attn::cli
