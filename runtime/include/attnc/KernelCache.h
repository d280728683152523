//===- KernelCache.h - Compiled kernels, in memory and on disk --*- C++ -*-===//
//
// A kernel is compiled once per key: the key hashes everything that changes
// the binary (the emitted source, the template headers it includes, attnc's
// version, NVRTC's version, the architecture, the compile options) and
// carries a readable prefix naming the spec. Lookups go to memory, then to
// disk, then to NVRTC.
//
// On disk ($ATTNC_CACHE_DIR, else $XDG_CACHE_HOME/attnc, else
// ~/.cache/attnc) each entry is one file (both cubins of a decode source
// with a pair kernel, CudaCompileOptions::pairProgram), written to a
// temporary file and renamed into place, with checksums; an entry that does
// not check out is rebuilt. Processes take a lock on the entry and look again before
// compiling, so many processes asking for one kernel compile it once. A
// directory that cannot be written leaves the cache in memory only, with one
// warning. Thread-safe; threads asking for one key wait for one compile.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_KERNELCACHE_H
#define ATTNC_KERNELCACHE_H

#include "attnc/Nvrtc.h"
#include "attnc/SingleFlight.h"
#include "attnc/Templates.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace attn {

/// Whether process `pid` is gone (kill(pid, 0) says ESRCH): the test for a
/// temporary file or folder whose writer was stopped before it finished.
/// A number that is no process id (0 or less, past pid_t) is never gone.
bool processGone(long pid);

/// Where a kernel came from: the memory or disk cache, NVRTC, or a linked
/// AOT bundle (attnc/Bundle.h).
enum class CacheSource { Memory, Disk, Compiled, Bundle };
const char *name(CacheSource s);

struct CacheLookup {
  std::shared_ptr<const CudaBinary> binary; ///< null on failure
  CacheSource source = CacheSource::Compiled;
  double seconds = 0; ///< the whole lookup
  std::string error;
  explicit operator bool() const { return binary != nullptr; }
};

struct CacheEntry {
  std::string file;
  long long bytes = 0;
};

class KernelCache {
public:
  /// `dir` empty: the default location.
  explicit KernelCache(std::string dir = "");

  /// The cubin of `source` for `options.arch`. `prefix` names the entry
  /// (e.g. the spec's symbol).
  CacheLookup get(const std::string &source, const std::string &prefix,
                  const CudaCompileOptions &options);

  /// The key of a source under these options: "<prefix>-<arch>-<32 hex
  /// digits>", with the embedded templates' digest.
  static std::string key(const std::string &source, const std::string &prefix,
                         const CudaCompileOptions &options);
  /// The same with a given templates digest (templatesDigest).
  static std::string key(const std::string &source, const std::string &prefix,
                         const CudaCompileOptions &options, uint64_t templates);

  /// The entries attnc wrote in the cache folder `dir`, by name (`attnc cache
  /// list` reads a folder without making a cache of it). A folder that
  /// cannot be read is said in `error`, as are files named like entries that
  /// cannot be read (whether attnc wrote them cannot be told: left out).
  static std::vector<CacheEntry> list(const std::string &dir, std::string *error = nullptr);
  std::vector<CacheEntry> list() const { return list(dir_); }
  /// Removes every entry of `dir`, and the files entries leave behind;
  /// returns how many entries went. Entries that could not be removed, and
  /// what list() says, are in `error` (how many, the first one's name and why).
  static int clear(const std::string &dir, std::string *error = nullptr);
  /// The same for this cache's folder; its memory is emptied too.
  int clear(std::string *error = nullptr);

  const std::string &directory() const { return dir_; }
  /// False when the directory cannot be written (memory only).
  bool onDisk() const { return onDisk_; }
  /// The one warning about the disk cache, or "". It is also written to
  /// stderr, once, when it arises (here, or at the first write that fails).
  std::string warning() const;

  /// $ATTNC_CACHE_DIR, else $XDG_CACHE_HOME/attnc (an absolute one), else
  /// ~/.cache/attnc ($HOME, else the password database's home); "" when
  /// there is no home.
  static std::string defaultDirectory();

private:
  std::string dir_, warning_;
  std::atomic<bool> onDisk_{false}; ///< read by every lookup, cleared by a failed write
  mutable std::mutex mutex_;         ///< guards the warning
  SingleFlight<CacheLookup> memory_;

  CacheLookup loadOrCompile(const std::string &source, const std::string &key,
                            const CudaCompileOptions &options);
  /// Keeps `text` as the warning and says it on stderr, unless there is one.
  void warn(const std::string &text);
  std::string path(const std::string &key) const;
  bool readEntry(const std::string &key, bool pairProgram, CudaBinary &out) const;
  void writeEntry(const std::string &key, const CudaBinary &binary);
};

} // namespace attn

#endif // ATTNC_KERNELCACHE_H
