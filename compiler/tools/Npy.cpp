//===- Npy.cpp - Read and write .npy arrays -------------------------------===//

#include "Npy.h"

#include "attnc/NewFile.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Signals.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace attn::npy {

int64_t Array::size() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string Array::shapeText() const {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

const char *kindName(Kind k) {
  switch (k) {
  case Kind::F32:
    return "float32";
  case Kind::F64:
    return "float64";
  case Kind::I32:
    return "int32";
  }
  return "?";
}

static int64_t elementSize(Kind k) { return k == Kind::F64 ? 8 : 4; }

namespace {
/// The header's dict, read as numpy writes it and reads it back: a Python
/// literal `{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }`
/// with exactly those three keys, each once, and spaces (then a newline)
/// after it. Anything else is a malformed header, said with its column.
struct Header {
  std::string descr;    ///< the string's contents: <f8
  std::string order;    ///< True or False
  std::vector<int64_t> shape;
  bool hasDescr = false, hasOrder = false, hasShape = false;
};

class HeaderParser {
public:
  explicit HeaderParser(const std::string &text) : text_(text) {}

  bool parse(Header &h, std::string &error) {
    if (!expect('{', "the header's '{'", error))
      return false;
    while (skip() != '}') {
      std::string key;
      const size_t keyAt = at_;
      if (!string(key, "a key", error) || !expect(':', "':' after '" + key + "'", error))
        return false;
      bool *seen = key == "descr" ? &h.hasDescr : key == "fortran_order" ? &h.hasOrder
                   : key == "shape" ? &h.hasShape : nullptr;
      if (!seen || *seen)
        at_ = keyAt; // the column of the key
      if (!seen)
        return fail("unknown key '" + key + "' (a .npy header holds descr, fortran_order and shape)", error);
      if (*seen)
        return fail("key '" + key + "' given twice", error);
      *seen = true;
      const bool ok = key == "descr" ? string(h.descr, "descr's string", error)
                      : key == "shape" ? tuple(h.shape, error)
                                       : boolean(h.order, error);
      if (!ok)
        return false;
      if (skip() == ',')
        ++at_;
      else if (skip() != '}')
        return fail("',' or '}' expected", error);
    }
    ++at_;
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\n'))
      ++at_;
    if (at_ != text_.size())
      return fail("text after the header's '}'", error);
    return true;
  }

private:
  const std::string &text_;
  size_t at_ = 0;

  char skip() {
    while (at_ < text_.size() && text_[at_] == ' ')
      ++at_;
    return at_ < text_.size() ? text_[at_] : '\0';
  }
  bool fail(const std::string &what, std::string &error) const {
    error = "malformed .npy header at column " + std::to_string(at_ + 1) + ": " + what;
    return false;
  }
  bool expect(char c, const std::string &what, std::string &error) {
    if (skip() != c)
      return fail(what + " expected", error);
    ++at_;
    return true;
  }
  bool string(std::string &out, const std::string &what, std::string &error) {
    const char quote = skip();
    if (quote != '\'' && quote != '"')
      return fail(what + " expected (a quoted string)", error);
    const size_t end = text_.find(quote, at_ + 1);
    if (end == std::string::npos)
      return fail("a string without its closing quote", error);
    out = text_.substr(at_ + 1, end - at_ - 1);
    at_ = end + 1;
    return true;
  }
  bool boolean(std::string &out, std::string &error) {
    skip();
    for (const char *word : {"True", "False"})
      if (text_.compare(at_, std::strlen(word), word) == 0) {
        out = word;
        at_ += std::strlen(word);
        return true;
      }
    return fail("fortran_order's True or False expected", error);
  }
  bool tuple(std::vector<int64_t> &out, std::string &error) {
    if (!expect('(', "shape's '('", error))
      return false;
    out.clear();
    while (skip() != ')') {
      const size_t first = at_;
      int64_t v = 0;
      while (at_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[at_]))) {
        if (v > (int64_t(1) << 40))
          return fail("a dimension above 2^40", error);
        v = v * 10 + (text_[at_++] - '0');
      }
      if (at_ == first)
        return fail("a dimension (a non-negative integer) expected in the shape", error);
      out.push_back(v);
      if (skip() == ',')
        ++at_;
      else if (skip() != ')')
        return fail("',' or ')' expected in the shape", error);
    }
    ++at_;
    return true;
  }
};
} // namespace

bool read(const std::string &path, Array &out, std::string &error, int64_t mostBytes,
          const std::string &mostWhat) {
  struct stat st;
  const bool statted = ::stat(path.c_str(), &st) == 0;
  if (statted && S_ISDIR(st.st_mode)) {
    error = path + ": is a folder, not a .npy file";
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  char magic[8] = {};
  in.read(magic, 8);
  if (in.gcount() < 6 || std::memcmp(magic, "\x93NUMPY", 6) != 0) {
    error = path + ": not a .npy file (no \\x93NUMPY magic)";
    return false;
  }
  if (in.gcount() < 8) {
    error = path + ": a .npy file cut short (" + std::to_string(in.gcount()) +
            " bytes: its version and header are missing)";
    return false;
  }
  const int major = static_cast<unsigned char>(magic[6]);
  uint32_t headerLen = 0;
  if (major == 1) {
    unsigned char len[2];
    in.read(reinterpret_cast<char *>(len), 2);
    headerLen = len[0] | (len[1] << 8);
  } else if (major == 2 || major == 3) {
    unsigned char len[4];
    in.read(reinterpret_cast<char *>(len), 4);
    headerLen = len[0] | (len[1] << 8) | (len[2] << 16) | (uint32_t(len[3]) << 24);
  } else {
    error = path + ": unsupported .npy version " + std::to_string(major);
    return false;
  }
  if (!in || headerLen > (1u << 20)) {
    error = path + ": truncated or oversized .npy header";
    return false;
  }
  std::string header(headerLen, '\0');
  if (!in.read(header.data(), headerLen)) {
    error = path + ": truncated .npy header";
    return false;
  }
  Header h;
  std::string malformed;
  if (!HeaderParser(header).parse(h, malformed)) {
    error = path + ": " + malformed;
    return false;
  }
  if (!h.hasDescr || !h.hasOrder || !h.hasShape) {
    error = path + ": no " + std::string(!h.hasDescr ? "descr" : !h.hasOrder ? "fortran_order" : "shape") +
            " in the .npy header";
    return false;
  }
  if (h.descr == "<f4")
    out.kind = Kind::F32;
  else if (h.descr == "<f8")
    out.kind = Kind::F64;
  else if (h.descr == "<i4")
    out.kind = Kind::I32;
  else {
    error = path + ": element type '" + h.descr +
            "' is not supported (float32 '<f4', float64 '<f8' or int32 '<i4')";
    return false;
  }
  if (h.order != "False") {
    error = path + ": Fortran-ordered arrays are not supported; save a C-contiguous array";
    return false;
  }
  out.shape = h.shape;
  // The data the shape needs, counted without overflow, against what the file
  // holds after the header: a header never makes us allocate more than the file.
  // (A pipe, `-q <(...)` or /dev/stdin, has no size to ask: it is read in
  // pieces, and holds what it gave before it ended.)
  const bool regular = statted && S_ISREG(st.st_mode);
  int64_t available = INT64_MAX;
  if (regular) {
    const std::streamoff dataAt = in.tellg();
    in.seekg(0, std::ios::end);
    available = static_cast<int64_t>(in.tellg() - dataAt);
    in.seekg(dataAt);
  }
  int64_t bytes = elementSize(out.kind);
  bool overflow = false;
  if (std::find(out.shape.begin(), out.shape.end(), 0) != out.shape.end())
    bytes = 0; // a dimension of 0: no data at all
  else
    for (int64_t d : out.shape)
      overflow = __builtin_mul_overflow(bytes, d, &bytes) || overflow;
  if (overflow || bytes > available) {
    error = path + ": truncated: the shape " + out.shapeText() + " needs " +
            (overflow ? std::string("more than 2^63") : std::to_string(bytes)) + " bytes of data" +
            (regular ? ", the file holds " + std::to_string(available) : std::string());
    return false;
  }
  if (bytes > mostBytes) {
    error = path + ": the shape " + out.shapeText() + " holds " + std::to_string(bytes) +
            " bytes of data" + mostWhat;
    return false;
  }
  // In pieces: a pipe's data is only counted as it comes (a regular file's
  // was above, and is read in the same way, into room made at once).
  if (regular)
    out.bytes.reserve(static_cast<size_t>(bytes));
  int64_t got = 0;
  while (got < bytes) {
    const int64_t piece = std::min<int64_t>(bytes - got, int64_t(1) << 24);
    out.bytes.resize(static_cast<size_t>(got + piece));
    in.read(out.bytes.data() + got, piece);
    got += in.gcount();
    if (in.gcount() < piece)
      break;
  }
  if (got < bytes) {
    error = path + ": truncated: the shape " + out.shapeText() + " needs " +
            std::to_string(bytes) + " bytes of data, the " + (regular ? "file" : "stream") +
            " held " + std::to_string(got);
    out.bytes.clear();
    return false;
  }
  return true;
}

namespace {
/// The descriptor of this process that `path` names itself, links not
/// followed: a number in this process's folder of descriptors however it is
/// spelled (/proc/self/fd/N, /dev/fd/N, /proc/thread-self/fd/N,
/// /dev//fd/N...), or -1.
int openDescriptor(const std::string &path) {
  const llvm::StringRef name = llvm::sys::path::filename(path);
  if (name.empty() || name.size() > 6 || !llvm::all_of(name, llvm::isDigit))
    return -1;
  std::string folder = llvm::sys::path::parent_path(path).str();
  char real[PATH_MAX];
  if (folder.empty() || !::realpath(folder.c_str(), real))
    return -1;
  // /proc/self/fd is /proc/<pid>/fd; a thread's is /proc/<pid>/task/<tid>/fd.
  const std::string own = "/proc/" + std::to_string(::getpid());
  llvm::StringRef at(real);
  if (!at.consume_front(own) || !at.consume_back("/fd"))
    return -1;
  if (!at.empty() &&
      (!at.consume_front("/task/") || at.empty() || !llvm::all_of(at, llvm::isDigit)))
    return -1;
  return std::atoi(name.str().c_str());
}

/// Follows the chain of symbolic links from `path` (up to 40, each relative
/// one from its own folder) to its end; `descriptor`, when given, is set to
/// the open descriptor a step of it names (/dev/stdout leads to
/// /proc/self/fd/1), where following stops, or -1.
std::string follow(std::string path, int *descriptor) {
  char target[4096];
  for (int links = 0; links < 40; ++links) {
    if (descriptor && (*descriptor = openDescriptor(path)) >= 0)
      break;
    const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
    if (n <= 0)
      break;
    const std::string to(target, size_t(n)), from = llvm::sys::path::parent_path(path).str();
    path = llvm::sys::path::is_relative(to) && !from.empty() ? from + "/" + to : to;
  }
  return path;
}

/// The open descriptor that `path` or a step of its links names, or -1.
int descriptorOf(const std::string &path) {
  int descriptor = -1;
  follow(path, &descriptor);
  return descriptor;
}

/// Why `path` cannot be written through its links (a loop, or more links
/// than the system follows), or "".
std::string linkProblem(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 && errno == ELOOP)
    return std::string("cannot write: ") + std::strerror(ELOOP);
  return "";
}
} // namespace

std::string linkEnd(std::string path) { return follow(std::move(path), nullptr); }

bool writesThrough(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    return true; // a device, a pipe (or a folder, refused when opened)
  // An open descriptor on the way (/dev/stdout, /proc/self/fd/1): the
  // shell's file, which may be appended to, is written, not replaced.
  return descriptorOf(path) >= 0;
}

std::string writable(const std::string &path) {
  struct stat st;
  const bool exists = ::stat(path.c_str(), &st) == 0; // following a link
  if (exists && S_ISDIR(st.st_mode))
    return "is a folder";
  if (std::string why = linkProblem(path); !why.empty())
    return why;
  // What takes the write: an open descriptor is written as it is, so it
  // must have been opened for writing (whatever its file's permissions); a
  // device or a pipe is written in place, so the file itself; a regular
  // file (or none yet), a link's end included, is made beside itself and
  // renamed onto it, so its folder.
  if (const int descriptor = descriptorOf(path); descriptor >= 0) {
    const int flags = ::fcntl(descriptor, F_GETFL);
    if (flags < 0)
      return std::string("cannot write: ") + std::strerror(errno);
    return (flags & O_ACCMODE) != O_RDONLY
               ? ""
               : "cannot write: descriptor " + std::to_string(descriptor) +
                     " is open for reading only";
  }
  if (exists && !S_ISREG(st.st_mode)) // a device or a pipe (writesThrough, no descriptor)
    return ::access(path.c_str(), W_OK) == 0 ? "" : std::string("cannot write: ") + std::strerror(errno);
  const std::string file = linkEnd(path);
  // A write-protected file is not replaced through the rename either (as
  // `attnc emit -o` refuses it): its protection is the user's.
  if (exists && ::access(file.c_str(), W_OK) != 0)
    return std::string("cannot write: ") + std::strerror(errno);
  std::string folder = llvm::sys::path::parent_path(file).str();
  if (folder.empty())
    folder = ".";
  struct stat folderStat;
  if (::stat(folder.c_str(), &folderStat) != 0)
    return "cannot write in " + folder + ": " + std::strerror(errno);
  if (!S_ISDIR(folderStat.st_mode))
    return "cannot write in " + folder + ": " + std::strerror(ENOTDIR);
  if (::access(folder.c_str(), W_OK) != 0)
    return "cannot write in " + folder + ": " + std::strerror(errno);
  const long longestName = ::pathconf(folder.c_str(), _PC_NAME_MAX);
  if (longestName > 0 && llvm::sys::path::filename(file).size() > size_t(longestName))
    return std::string("cannot write: ") + std::strerror(ENAMETOOLONG);
  return "";
}

namespace {
/// The .npy file of `array`: the version 1.0 header, padded so that the data
/// starts on a 64-byte boundary, then the data.
std::string encode(const Array &array) {
  std::string descr = array.kind == Kind::F32 ? "<f4" : array.kind == Kind::F64 ? "<f8" : "<i4";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " +
                       array.shapeText() + ", }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string file("\x93NUMPY\x01\x00", 8);
  file += static_cast<char>(header.size() & 0xff);
  file += static_cast<char>(header.size() >> 8);
  file += header;
  file.append(array.bytes.data(), array.bytes.size());
  return file;
}

/// "<path>.<what>.<pid>.<n>": this process's n-th side file, for `path`, in
/// its folder (so that it can be renamed onto it). A name so long that the
/// suffix would pass the system's limit on a name is shortened first (the
/// count keeps two such side files apart).
std::string sideFile(const std::string &path, const char *what) {
  static std::atomic<unsigned> made{0};
  const std::string suffix =
      std::string(".") + what + "." + std::to_string(::getpid()) + "." + std::to_string(made++);
  const size_t slash = path.rfind('/'), start = slash == std::string::npos ? 0 : slash + 1;
  constexpr size_t kNameMax = 255; // NAME_MAX of Linux's file systems
  const size_t keep = std::min(path.size() - start, kNameMax - suffix.size());
  return path.substr(0, start + keep) + suffix;
}

/// The permission bits of the file `path` (links followed), or -1 where
/// there is none: a file replaced through a side file keeps them.
int modeOf(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? int(st.st_mode & 07777) : -1;
}

/// A finished side file, the file it replaces (a link's end) and the name
/// the user gave for it.
struct Move {
  std::string side, target, named;
};

/// Removes the side files `moves` names (a write that did not finish).
void removeSides(const std::vector<Move> &moves) {
  for (const Move &move : moves) {
    ::unlink(move.side.c_str());
    llvm::sys::DontRemoveFileOnSignal(move.side);
  }
}

/// Moves each side file onto its target, in order; on a failure the side
/// files not moved yet are removed and `error` names the target as given.
bool moveIntoPlace(const std::vector<Move> &moves, std::string &error) {
  for (size_t i = 0; i < moves.size(); ++i) {
    if (std::rename(moves[i].side.c_str(), moves[i].target.c_str()) != 0) {
      error = moves[i].named + ": cannot move the finished file into place: " +
              std::strerror(errno);
      removeSides({moves.begin() + static_cast<long>(i), moves.end()});
      return false;
    }
    llvm::sys::DontRemoveFileOnSignal(moves[i].side);
  }
  return true;
}

/// Writes `bytes` to the file `path`, made anew (O_EXCL, not through a link;
/// a file of that name left by a run that stopped is removed first) or, with
/// `inPlace`, to the file `path` is (a device, a pipe). A descriptor already
/// open (/dev/stdout) is written as it is, so that a shell's `>>` appends.
/// A `mode` of 0 or more gives a new file those permission bits. On failure
/// nothing made here is left, and `error` names `named` and the reason.
bool writeBytes(const std::string &path, const std::string &bytes, bool inPlace,
                const std::string &named, std::string &error, int mode = -1) {
  auto open = [&] {
    if (inPlace)
      if (const int descriptor = descriptorOf(path); descriptor >= 0)
        return ::fcntl(descriptor, F_DUPFD_CLOEXEC, 0);
    return inPlace ? ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666)
                   : ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                            0666);
  };
  int fd = open();
  if (fd < 0 && !inPlace && errno == EEXIST && ::unlink(path.c_str()) == 0)
    fd = open();
  if (fd < 0) {
    error = named + ": cannot write: " + std::strerror(errno);
    return false;
  }
  if (mode >= 0)
    ::fchmod(fd, static_cast<mode_t>(mode)); // (a side file's only: best effort)
  if (const int failure = writeAndClose(fd, {bytes})) {
    error = named + ": write failed: " + std::strerror(failure);
    if (!inPlace)
      ::unlink(path.c_str());
    return false;
  }
  return true;
}
} // namespace

namespace {
/// Writes `bytes` to a side file (`what`: "tmp", "pending") beside the file
/// `path` leads to (a link's end, which is replaced and the link kept), with
/// that file's permission bits, and notes it in `moves`. A loop of links or
/// a write-protected file is refused: its protection is the user's.
bool writeSide(const std::string &path, const std::string &bytes, const char *what,
               std::vector<Move> &moves, std::string &error) {
  if (std::string why = linkProblem(path); !why.empty()) {
    error = path + ": " + why;
    return false;
  }
  const std::string target = linkEnd(path);
  if (::access(target.c_str(), F_OK) == 0 && ::access(target.c_str(), W_OK) != 0) {
    error = path + ": cannot write: " + std::strerror(errno);
    return false;
  }
  const std::string side = sideFile(target, what);
  llvm::sys::RemoveFileOnSignal(side); // a signal (^C, kill) that stops the run removes it too
  moves.push_back({side, target, path});
  return writeBytes(side, bytes, /*inPlace=*/false, path, error, modeOf(target));
}
} // namespace

bool writeFile(const std::string &path, const std::string &bytes, std::string &error) {
  if (writesThrough(path))
    return writeBytes(path, bytes, /*inPlace=*/true, path, error);
  std::vector<Move> moves;
  if (!writeSide(path, bytes, "tmp", moves, error))
    return removeSides(moves), false;
  return moveIntoPlace(moves, error);
}

bool writeNew(const std::string &path, const std::string &bytes, std::string &error) {
  return writeBytes(path, bytes, /*inPlace=*/false, path, error);
}

bool write(const std::string &path, const Array &array, std::string &error) {
  return writeFile(path, encode(array), error);
}

bool writeAll(const std::vector<std::pair<std::string, Array>> &files, std::string &error) {
  // The side files first, then the targets written through.
  std::vector<Move> moves; // written so far
  std::vector<const std::pair<std::string, Array> *> inPlace;
  for (const auto &file : files) {
    if (writesThrough(file.first))
      inPlace.push_back(&file);
    else if (!writeSide(file.first, encode(file.second), "pending", moves, error))
      return removeSides(moves), false;
  }
  for (const auto *file : inPlace)
    if (!writeBytes(file->first, encode(file->second), /*inPlace=*/true, file->first, error))
      return removeSides(moves), false;
  return moveIntoPlace(moves, error);
}

} // namespace attn::npy
