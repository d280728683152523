//===- Tuning.cpp - The tuning table file ----------------------------------===//

#include "attnc/Tuning.h"

#include "attnc/BundleFolder.h"
#include "attnc/KernelCache.h"

#include "attnc/NewFile.h"

#include "attn/Printable.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace attn {

namespace {
std::atomic<const TuningTable *> installed{nullptr}; // read by any thread parsing a spec

std::optional<TunedTiles> lookUp(const Spec &spec) {
  const TuningTable *table = installed.load(std::memory_order_acquire);
  if (!table)
    return std::nullopt;
  if (const TuningTable::Entry *e = table->find(spec))
    return e->tiles;
  return std::nullopt;
}

std::string trim(const std::string &s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos)
    return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

/// "tile_q=N,tile_kv=N[,stages=N]" (any order, each once) into `t`.
bool parseTiles(const std::string &text, TunedTiles &t) {
  std::istringstream in(text);
  std::string field;
  std::set<std::string> seen;
  while (std::getline(in, field, ',')) {
    field = trim(field);
    const size_t eq = field.find('=');
    if (eq == std::string::npos)
      return false;
    char *end = nullptr;
    const long long v = std::strtoll(field.c_str() + eq + 1, &end, 10);
    if (*end != '\0' || v <= 0 || v > 4096)
      return false;
    const std::string key = field.substr(0, eq);
    if (!seen.insert(key).second)
      return false; // given twice: which one is meant?
    if (key == "tile_q")
      t.tile_q = v;
    else if (key == "tile_kv")
      t.tile_kv = v;
    else if (key == "stages")
      t.stages = v;
    else
      return false;
  }
  return t.tile_q > 0 && t.tile_kv > 0;
}
} // namespace

std::string TuningTable::defaultPath() {
  if (const char *p = std::getenv("ATTNC_TUNING_FILE"); p && *p)
    return p;
  const std::string dir = KernelCache::defaultDirectory();
  return dir.empty() ? "" : dir + "/tuning.txt";
}

namespace {
/// The most of a tuning table that is read: one line per spec tuned, ~150
/// bytes each.
constexpr size_t kMaxTableBytes = size_t(16) << 20;

/// A line of the table as a message quotes it: whole up to 100 bytes, else
/// its first 30 and last 60 (a key is long, and the tiles at its end are
/// what is wrong), with what does not print (a binary file's bytes, a NUL)
/// as \xNN.
std::string shown(const std::string &line) {
  if (line.size() <= 100)
    return "'" + printable(line) + "'";
  return "'" + printable(line.substr(0, 30)) + "' ... '" + printable(line.substr(line.size() - 60)) +
         "' (" + std::to_string(line.size()) + " bytes)";
}
} // namespace

bool TuningTable::load(const std::string &path, std::string &error, bool given) {
  if (path.empty())
    return true; // no table anywhere: nothing tuned
  // Only a table that is not there reads as nothing tuned: one that cannot
  // be read must not, or the next `attnc tune` would save over its entries.
  // Read as a bundle's files are: a regular file only (a folder opens like
  // an empty file, a FIFO would block), of a size a table has.
  std::vector<unsigned char> bytes;
  int err = 0;
  if (!readRegularFile(path, kMaxTableBytes + 1, bytes, err)) {
    struct stat st;
    // Not there, or not to be seen: a folder on the way this user cannot
    // search holds no table of theirs at the default place, and none they
    // could write; a path they named is another matter.
    const bool unreachable = err == EACCES && ::lstat(path.c_str(), &st) != 0 && errno == EACCES;
    if (unreachable && given) {
      error = path + " cannot be reached (" + std::strerror(EACCES) +
              ": this user cannot search a folder on the way)";
      return false;
    }
    if (err == ENOENT || err == ENOTDIR || unreachable)
      return true; // no file (or a link to none yet): nothing tuned yet
    error = unreadableFile(path, err);
    return false;
  }
  if (bytes.size() > kMaxTableBytes) {
    error = path + " is over " + std::to_string(kMaxTableBytes >> 20) +
            " MiB: not a table attnc tune writes";
    return false;
  }
  std::istringstream in(std::string(bytes.begin(), bytes.end()));
  std::map<std::string, Entry> read;
  std::map<std::string, int> lineOf; // each spec's line
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::string note;
    if (size_t hash = line.find('#'); hash != std::string::npos) {
      note = trim(line.substr(hash + 1));
      line = line.substr(0, hash);
    }
    line = trim(line);
    if (line.empty())
      continue;
    const size_t colon = line.rfind(':');
    Entry e;
    e.note = note;
    if (colon == std::string::npos || !parseTiles(line.substr(colon + 1), e.tiles)) {
      error = path + ":" + std::to_string(number) +
              ": expected 'SPEC: tile_q=N,tile_kv=N[,stages=N]' (each field once), got " +
              shown(line);
      return false;
    }
    // The key names tile_q=0,tile_kv=0: parse it with the recorded tiles.
    std::string text = trim(line.substr(0, colon));
    for (auto [field, value] : {std::pair<std::string, int64_t>{"tile_q=", e.tiles.tile_q},
                                {"tile_kv=", e.tiles.tile_kv}}) {
      const size_t at = text.find(field + "0");
      if (at != std::string::npos && (at + field.size() + 1 == text.size() ||
                                      text[at + field.size() + 1] == ','))
        text.replace(at, field.size() + 1, field + std::to_string(value));
    }
    if (e.tiles.stages != kStagesAuto)
      text += ",stages=" + std::to_string(e.tiles.stages);
    SpecResult spec = parseSpec(text); // the recorded tiles and stages must make a valid spec
    if (!spec) {
      error = path + ":" + std::to_string(number) + ": " + spec.error->message();
      return false;
    }
    // A key that does not name tile_q=0 or tile_kv=0 parsed with the
    // defaults: the recorded values are checked on the spec all the same, as
    // the key's zeros, replaced above, are.
    Spec tuned = *spec.spec;
    tuned.tile_q = e.tiles.tile_q;
    tuned.tile_kv = e.tiles.tile_kv;
    tuned.stages = e.tiles.stages;
    if (std::optional<SpecError> bad = validateSpec(tuned)) {
      error = path + ":" + std::to_string(number) + ": " + bad->message();
      return false;
    }
    const std::string key = tuningKey(*spec.spec);
    if (auto [it, added] = lineOf.emplace(key, number); !added) {
      error = path + ":" + std::to_string(number) + ": the spec of line " +
              std::to_string(it->second) + " again (one line per spec: which tiles are meant?)";
      return false;
    }
    read[key] = e;
  }
  entries_ = std::move(read);
  return true;
}

bool TuningTable::save(const std::string &given, std::string &error) const {
  if (given.empty()) {
    error = "no tuning file (no home directory): set ATTNC_TUNING_FILE or ATTNC_CACHE_DIR";
    return false;
  }
  // A link to the table stays a link: the file it names is replaced (or
  // made, for a link to a file not written yet).
  std::string path = given;
  for (int hops = 0;; ++hops) {
    struct stat st;
    char target[4096];
    if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode))
      break;
    const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
    if (n <= 0 || hops == 40) { // (the kernel's own limit on links followed is 40)
      error = "cannot write the tuning table " + given + " (" +
              std::strerror(n <= 0 ? errno : ELOOP) + ")";
      return false;
    }
    const std::string to(target, n);
    const size_t slash = path.rfind('/');
    path = to[0] == '/' || slash == std::string::npos ? to : path.substr(0, slash + 1) + to;
  }
  std::ostringstream out;
  out << "# attnc tuning table: tile sizes (and pipeline depths) `attnc tune` measured best\n"
         "# on this machine. A spec that leaves tile_q and tile_kv open takes them from here.\n";
  for (const auto &[key, e] : entries_)
    out << key << ": tile_q=" << e.tiles.tile_q << ",tile_kv=" << e.tiles.tile_kv
        << (e.tiles.stages != kStagesAuto ? ",stages=" + std::to_string(e.tiles.stages) : "")
        << (e.note.empty() ? "" : "  # " + e.note) << "\n";
  // A file of our own (writeNewFile), renamed onto the table once whole.
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  if (const int failure = writeNewFile(tmp, {out.str()})) {
    error = "cannot write the tuning table " + path + " (" + std::strerror(failure) + ")";
    return false;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = "cannot write the tuning table " + path + " (renaming " + tmp + ": " +
            std::strerror(errno) + ")";
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

bool TuningTable::record(const std::string &path, const Spec &spec, TunedTiles tiles,
                         const std::string &note, std::string &error) {
  const std::string lockPath = path + ".lock";
  const int lock = ::open(lockPath.c_str(), O_CREAT | O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (lock < 0) {
    error = "cannot lock the tuning table " + path + " (" + lockPath + ": " +
            std::strerror(errno) + ")";
    return false;
  }
  while (::flock(lock, LOCK_EX) != 0 && errno == EINTR) {
  }
  TuningTable now;
  const bool ok = now.load(path, error) && (now.set(spec, tiles, note), now.save(path, error));
  ::close(lock); // releases the lock
  return ok;
}

const TuningTable::Entry *TuningTable::find(const Spec &spec) const {
  auto it = entries_.find(tuningKey(spec));
  return it == entries_.end() ? nullptr : &it->second;
}

void TuningTable::set(const Spec &spec, TunedTiles tiles, const std::string &note) {
  entries_[tuningKey(spec)] = Entry{tiles, note};
}

void TuningTable::install(const TuningTable *table) {
  installed.store(table, std::memory_order_release);
  setTileTuner(table ? &lookUp : nullptr);
}

std::string TuningTable::installDefault() {
  // Once per process: every runtime the C API creates calls this, possibly
  // from several threads, and an installed table must not change under a
  // thread that is parsing a spec.
  static TuningTable table;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    const char *named = std::getenv("ATTNC_TUNING_FILE");
    if (table.load(defaultPath(), error, named && *named))
      install(&table);
    else // said once, whoever asked: the CLI, the C API, Python
      std::fprintf(stderr, "attnc: warning: the tuning table is ignored: %s\n", error.c_str());
  });
  return error;
}

} // namespace attn
