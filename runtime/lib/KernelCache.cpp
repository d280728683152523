//===- KernelCache.cpp - Compiled kernels, in memory and on disk ----------===//

#include "attnc/KernelCache.h"

#include "attnc/NewFile.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <limits>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <pwd.h>
#include <sstream>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace attn {

namespace {
constexpr const char *kMagic = "attnc-cubin 1";

/// FNV-1a, 64 bits, from a given offset basis.
uint64_t fnv1a(const std::string &data, uint64_t h) {
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string checksum(const std::vector<char> &bytes) {
  return hex(fnv1a(std::string(bytes.begin(), bytes.end()), 14695981039346656037ull));
}

/// mkdir -p.
bool makeDirectories(const std::string &dir) {
  std::string partial;
  std::stringstream parts(dir);
  std::string item;
  if (!dir.empty() && dir[0] == '/')
    partial = "/";
  while (std::getline(parts, item, '/')) {
    if (item.empty())
      continue;
    partial += item + "/";
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
      return false;
  }
  struct stat st;
  return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
} // namespace

const char *name(CacheSource s) {
  switch (s) {
  case CacheSource::Memory:
    return "memory";
  case CacheSource::Disk:
    return "disk";
  case CacheSource::Compiled:
    return "compiled";
  case CacheSource::Bundle:
    return "an AOT bundle";
  }
  return "?";
}

bool processGone(long pid) {
  if (pid <= 0 || pid > std::numeric_limits<pid_t>::max())
    return false; // no process's id (kill would probe a process group)
  return kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

std::string KernelCache::defaultDirectory() {
  if (const char *d = std::getenv("ATTNC_CACHE_DIR"); d && *d)
    return d;
  // The XDG rule: a relative XDG_CACHE_HOME is ignored.
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x == '/')
    return std::string(x) + "/attnc";
  // A relative HOME would put the cache under whatever the current folder is.
  if (const char *home = std::getenv("HOME"); home && *home == '/')
    return std::string(home) + "/.cache/attnc";
  // No HOME, or a relative one (a service, a container): the user's home from
  // the password database; never a shared folder such as /tmp, whose cubins anyone could
  // have put there.
  if (const passwd *pw = getpwuid(getuid()); pw && pw->pw_dir && *pw->pw_dir == '/')
    return std::string(pw->pw_dir) + "/.cache/attnc";
  return "";
}

KernelCache::KernelCache(std::string dir) : dir_(dir.empty() ? defaultDirectory() : dir) {
  if (dir_.empty()) {
    warn("attnc: no kernel cache directory (no home directory; set ATTNC_CACHE_DIR): "
         "compiled kernels stay in memory only");
    return;
  }
  // Writable is what counts: create and remove a probe file (made anew,
  // never through a link planted at its name).
  errno = 0;
  int failure = makeDirectories(dir_) ? 0 : (errno ? errno : ENOTDIR);
  if (!failure) {
    const std::string probe = dir_ + "/.probe." + std::to_string(getpid());
    failure = writeNewFile(probe, {});
    if (!failure) {
      unlink(probe.c_str());
      onDisk_ = true;
      return;
    }
  }
  warn("attnc: the kernel cache directory " + dir_ + " cannot be written (" +
       std::strerror(failure) + "): compiled kernels stay in memory only");
}

std::string KernelCache::warning() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return warning_;
}

void KernelCache::warn(const std::string &text) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!warning_.empty())
    return;
  warning_ = text;
  std::fprintf(stderr, "%s\n", text.c_str());
}

uint64_t templatesDigest(const std::vector<TemplateHeader> &headers) {
  uint64_t h = 14695981039346656037ull;
  for (const TemplateHeader &header : headers) {
    // Each name and contents with its terminating NUL: no two lists of
    // headers read alike.
    h = fnv1a(std::string(header.name, std::strlen(header.name) + 1), h);
    h = fnv1a(std::string(header.contents, std::strlen(header.contents) + 1), h);
  }
  return h;
}

std::string KernelCache::key(const std::string &source, const std::string &prefix,
                             const CudaCompileOptions &options) {
  static const uint64_t embedded = templatesDigest(templateHeaders());
  return key(source, prefix, options, embedded);
}

std::string KernelCache::key(const std::string &source, const std::string &prefix,
                             const CudaCompileOptions &options, uint64_t templates) {
  std::string material = source;
  for (const std::string &part :
       {hex(templates), std::string(ATTNC_VERSION), std::to_string(nvrtcVersion()), options.arch,
        std::string(options.lineInfo ? "lineinfo" : "")})
    material += '\0' + part;
  if (options.pairProgram)
    material += std::string(1, '\0') + "pair program";
  for (const std::string &extra : options.extra)
    material += '\0' + extra;
  return prefix + "-" + options.arch + "-" + hex(fnv1a(material, 14695981039346656037ull)) +
         hex(fnv1a(material, 0x84222325cbf29ce4ull));
}

std::string KernelCache::path(const std::string &key) const { return dir_ + "/" + key + ".cubin"; }

bool KernelCache::readEntry(const std::string &key, bool pairProgram, CudaBinary &out) const {
  // Only a regular file, not through a link: a pipe planted in the folder
  // would block the open, and /dev/zero would be read without end. Read whole
  // (an entry is a header and at most two cubins of up to 1 GiB each).
  const int fd = open(path(key).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0)
    return false;
  std::string contents;
  struct stat st;
  bool readable = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
                  st.st_size <= (2ll << 30) + (1 << 16);
  if (readable) {
    contents.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < contents.size()) {
      const ssize_t n = ::read(fd, contents.data() + done, contents.size() - done);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      done += static_cast<size_t>(n);
    }
    readable = done == contents.size();
  }
  close(fd);
  if (!readable)
    return false;
  std::istringstream in(std::move(contents));
  std::string magic, keyLine, sum, pairSum;
  long long bytes = -1, pairBytes = 0;
  int registers = -1, spillStores = -1, spillLoads = -1;
  std::string line;
  if (!std::getline(in, magic) || magic != kMagic)
    return false;
  while (std::getline(in, line) && !line.empty()) {
    std::istringstream fields(line);
    std::string field;
    fields >> field;
    if (field == "key")
      fields >> keyLine;
    else if (field == "bytes")
      fields >> bytes;
    else if (field == "checksum")
      fields >> sum;
    else if (field == "pair_bytes")
      fields >> pairBytes;
    else if (field == "pair_checksum")
      fields >> pairSum;
    else if (field == "ptxas")
      fields >> registers >> spillStores >> spillLoads;
  }
  // A pair program's entry holds both cubins, any other one cubin.
  if (keyLine != key || bytes <= 0 || bytes > (1ll << 30) || (pairBytes > 0) != pairProgram ||
      pairBytes < 0 || pairBytes > (1ll << 30))
    return false;
  // The cubin, then the pair kernel's (CudaCompileOptions::pairProgram), if
  // any: exactly the rest of the file (checked before the cubins are copied
  // out: a damaged header may claim a gigabyte).
  const std::streampos body = in.tellg();
  in.seekg(0, std::ios::end);
  const std::streampos end = in.tellg();
  if (body < 0 || end < 0 || static_cast<long long>(end - body) != bytes + pairBytes)
    return false; // truncated, or longer than it says
  in.seekg(body);
  std::vector<char> cubin(bytes), pairCubin(pairBytes);
  if (!in.read(cubin.data(), bytes) || !in.read(pairCubin.data(), pairBytes))
    return false;
  if (checksum(cubin) != sum || (pairBytes > 0 && checksum(pairCubin) != pairSum))
    return false; // corrupted
  out.cubin = std::move(cubin);
  out.pairCubin = std::move(pairCubin);
  out.registers = registers;
  out.spillStoreBytes = spillStores;
  out.spillLoadBytes = spillLoads;
  return true;
}

void KernelCache::writeEntry(const std::string &key, const CudaBinary &b) {
  std::ostringstream tmpName;
  tmpName << dir_ << "/." << key << ".tmp." << getpid() << "."
          << std::hash<std::thread::id>()(std::this_thread::get_id());
  const std::string tmp = tmpName.str();
  std::ostringstream header;
  header << kMagic << "\nkey " << key << "\nbytes " << b.cubin.size() << "\nchecksum "
         << checksum(b.cubin);
  if (!b.pairCubin.empty())
    header << "\npair_bytes " << b.pairCubin.size() << "\npair_checksum " << checksum(b.pairCubin);
  header << "\nptxas " << b.registers << " " << b.spillStoreBytes << " " << b.spillLoadBytes
         << "\n\n";
  // A file of our own (writeNewFile), renamed onto the entry once whole.
  const std::string head = header.str();
  if (const int failure = writeNewFile(
          tmp, {head, std::string_view(b.cubin.data(), b.cubin.size()),
                std::string_view(b.pairCubin.data(), b.pairCubin.size())})) {
    warn("attnc: cannot write the kernel cache entry " + path(key) + " (" +
         std::strerror(failure) + "): compiled kernels stay in memory only");
    onDisk_ = false;
    return;
  }
  // Readers see the old entry or the new one, never half of one.
  if (std::rename(tmp.c_str(), path(key).c_str()) != 0)
    std::remove(tmp.c_str());
}

CacheLookup KernelCache::loadOrCompile(const std::string &source, const std::string &key,
                                       const CudaCompileOptions &options) {
  CacheLookup r;
  auto bin = std::make_shared<CudaBinary>();
  if (onDisk_ && readEntry(key, options.pairProgram, *bin)) {
    r.binary = bin;
    r.source = CacheSource::Disk;
    return r;
  }
  int lockFd = -1;
  if (onDisk_) {
    // One compile across processes: lock the entry, then look again.
    lockFd = open((path(key) + ".lock").c_str(), O_CREAT | O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (lockFd >= 0)
      flock(lockFd, LOCK_EX);
    if (readEntry(key, options.pairProgram, *bin)) {
      if (lockFd >= 0)
        close(lockFd);
      r.binary = bin;
      r.source = CacheSource::Disk;
      return r;
    }
  }
  *bin = compileCuda(source, key + ".cu", options);
  if (*bin) {
    if (onDisk_)
      writeEntry(key, *bin);
    r.binary = bin;
  } else {
    r.error = bin->error;
  }
  if (lockFd >= 0)
    close(lockFd); // releases the lock
  r.source = CacheSource::Compiled;
  return r;
}

CacheLookup KernelCache::get(const std::string &source, const std::string &prefix,
                             const CudaCompileOptions &options) {
  auto t0 = std::chrono::steady_clock::now();
  const std::string k = key(source, prefix, options);
  // In memory, or being compiled by another thread: wait for that one.
  bool shared = false;
  CacheLookup r = memory_.get(k, [&] { return loadOrCompile(source, k, options); }, shared);
  if (shared)
    r.source = CacheSource::Memory;
  r.seconds = since(t0);
  return r;
}

namespace {
/// "<prefix>-<arch>-<32 hex digits>": a name KernelCache::key makes.
bool looksLikeKey(const std::string &s) {
  if (s.size() < 34 || s[s.size() - 33] != '-')
    return false;
  return std::all_of(s.end() - 32, s.end(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}

bool endsWith(const std::string &s, const std::string &tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// Whether `file` starts with an entry's magic line: what attnc wrote.
bool writtenByAttnc(const std::string &file) {
  const std::string want = std::string(kMagic) + "\n";
  std::string first(want.size(), '\0');
  std::ifstream in(file, std::ios::binary);
  return in.read(first.data(), static_cast<std::streamsize>(first.size())) && first == want;
}
} // namespace

std::vector<CacheEntry> KernelCache::list(const std::string &dir, std::string *error) {
  std::vector<CacheEntry> entries;
  DIR *d = opendir(dir.c_str());
  if (!d) {
    if (error)
      *error = dir + " cannot be read: " + std::strerror(errno);
    return entries;
  }
  int unreadable = 0;
  std::string firstUnreadable;
  while (dirent *e = readdir(d)) {
    std::string n = e->d_name;
    if (n[0] != '.' && endsWith(n, ".cubin")) {
      // Only what attnc wrote: a regular file that starts with the entry's
      // magic line (a folder pointed at a bundle's or anyone's cubins lists
      // none of them, and clear removes none).
      const std::string file = dir + "/" + n;
      struct stat st;
      if (lstat(file.c_str(), &st) != 0) {
        // A folder this user may list but not search: its entries cannot
        // be looked at, which is said rather than taken for none.
        if (errno == EACCES && looksLikeKey(n.substr(0, n.size() - 6)) && unreadable++ == 0)
          firstUnreadable = n + ": " + std::strerror(EACCES);
        continue;
      }
      if (!S_ISREG(st.st_mode))
        continue;
      if (!writtenByAttnc(file)) {
        // An entry's name that cannot be read is said, not passed over:
        // whether attnc wrote it cannot be told.
        if (looksLikeKey(n.substr(0, n.size() - 6)) && access(file.c_str(), R_OK) != 0 &&
            unreadable++ == 0)
          firstUnreadable = n + ": " + std::strerror(errno);
        continue;
      }
      entries.push_back({n, static_cast<long long>(st.st_size)});
    }
  }
  closedir(d);
  if (unreadable && error)
    *error = std::to_string(unreadable) + (unreadable == 1 ? " file" : " files") +
             " named like an entry cannot be read, and " + (unreadable == 1 ? "is" : "are") +
             " left out (" + firstUnreadable + ")";
  std::sort(entries.begin(), entries.end(),
            [](const CacheEntry &a, const CacheEntry &b) { return a.file < b.file; });
  return entries;
}

int KernelCache::clear(std::string *error) {
  const int removed = clear(dir_, error);
  memory_.clear();
  return removed;
}

int KernelCache::clear(const std::string &dir, std::string *error) {
  std::string listed;
  const std::vector<CacheEntry> entries = list(dir, &listed);
  int removed = 0;
  std::string firstFailure;
  for (const CacheEntry &e : entries) {
    if (std::remove((dir + "/" + e.file).c_str()) == 0)
      ++removed;
    else if (firstFailure.empty())
      firstFailure = e.file + ": " + std::strerror(errno);
  }
  if (error && removed < static_cast<int>(entries.size()))
    *error = std::to_string(entries.size() - removed) + " of " + std::to_string(entries.size()) +
             " entries could not be removed (" + firstFailure + ")";
  if (error && !listed.empty())
    *error += (error->empty() ? "" : "; ") + listed;
  // What entries leave behind: the lock files of every entry ever compiled
  // here (empty, "<key>.cubin.lock"), and the temporary files of writers that
  // died before their rename (".<key>.tmp.<pid>.<thread>", attnc's magic
  // line first, their process gone). Nothing else in the folder is touched.
  if (DIR *d = opendir(dir.c_str())) {
    std::vector<std::string> leftovers;
    while (dirent *e = readdir(d)) {
      const std::string n = e->d_name, file = dir + "/" + n;
      struct stat st;
      if (lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
        continue;
      if (n[0] != '.' && endsWith(n, ".cubin.lock") && st.st_size == 0 &&
          looksLikeKey(n.substr(0, n.size() - 11))) {
        leftovers.push_back(file);
        continue;
      }
      const size_t tmp = n.find(".tmp.");
      if (n[0] != '.' || tmp == std::string::npos || !looksLikeKey(n.substr(1, tmp - 1)))
        continue;
      const long pid = std::strtol(n.c_str() + tmp + 5, nullptr, 10);
      if (!processGone(pid))
        continue; // a writer that may still be writing
      if (writtenByAttnc(file))
        leftovers.push_back(file);
    }
    closedir(d);
    for (const std::string &file : leftovers)
      std::remove(file.c_str());
  }
  return removed;
}

} // namespace attn
