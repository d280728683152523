//===- Npy.h - Read and write .npy arrays -----------------------*- C++ -*-===//
//
// NumPy's .npy format (versions 1.0 to 3.0), C order, little-endian float32,
// float64 and int32: enough for attnc's inputs and outputs. Errors name the
// file and what is wrong with it.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_TOOLS_NPY_H
#define ATTNC_TOOLS_NPY_H

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace attn::npy {

enum class Kind { F32, F64, I32 };

struct Array {
  Kind kind = Kind::F64;
  std::vector<int64_t> shape;
  std::vector<char> bytes; ///< C order, little-endian
  int64_t size() const;
  std::string shapeText() const; ///< e.g. (4, 77, 128)
};

const char *kindName(Kind k); ///< float32, float64, int32

/// Reads `path`; on failure returns false and sets `error`. Data of more
/// than `mostBytes` is refused before it is read, the error saying so and
/// ending in `mostWhat` (e.g. ", more than half of this machine's 23.5 GiB").
bool read(const std::string &path, Array &out, std::string &error,
          int64_t mostBytes = INT64_MAX, const std::string &mostWhat = "");
/// An f32 or f64 array of `shape` holding `values` (C order), for write().
template <typename T>
Array arrayOf(std::vector<int64_t> shape, const std::vector<T> &values) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  Array a;
  a.kind = std::is_same_v<T, double> ? Kind::F64 : Kind::F32;
  a.shape = std::move(shape);
  a.bytes.resize(values.size() * sizeof(T));
  if (!values.empty())
    std::memcpy(a.bytes.data(), values.data(), a.bytes.size());
  return a;
}

/// Writes `array` to `path`, whole or not at all (writeFile).
bool write(const std::string &path, const Array &array, std::string &error);

/// Writes several arrays, all or none as far as the system allows: each to a
/// side file of this process beside its target (a link's end) first, and
/// only once every one is written do they take their targets' names (a
/// failure, or a signal that stops the run, removes them and leaves every
/// target as it was). Targets that are not regular files (writesThrough)
/// are written in place, after the side files.
bool writeAll(const std::vector<std::pair<std::string, Array>> &files, std::string &error);

/// Writes `bytes` to `path`, whole or not at all: a regular file, or none
/// yet, through a side file of this process beside it (made anew: never an
/// existing file, nor through a link) renamed onto it, so that a full disk
/// or a stopped run leaves the old file as it was; the new file keeps the
/// old one's permission bits. Through a symbolic link, the file at the
/// link's end is so replaced and the link kept (a loop of links is
/// refused); what is not a regular file (writesThrough: a device, a pipe)
/// is written in place.
/// The error names `path` and the system's reason.
bool writeFile(const std::string &path, const std::string &bytes, std::string &error);

/// Writes `bytes` to a new file `path` (in a folder of the caller's own: a
/// file of that name is removed first, a link is not followed); on failure
/// nothing is left, and the error names `path` and the system's reason.
bool writeNew(const std::string &path, const std::string &bytes, std::string &error);

/// True when what `path` names (links followed) exists and is not a regular
/// file (a device, a pipe), or a step of its links names an open descriptor
/// (/dev/stdout, /dev/fd/N, /proc/self/fd/N: the shell's open file, perhaps
/// appended to): nothing can be renamed onto it, so it is written in place.
bool writesThrough(const std::string &path);

/// Where a chain of symbolic links ending at a file not made yet leads (up
/// to 40 links, each relative one from its own folder): the file a write
/// through `path` creates. `path` itself where it is no link.
std::string linkEnd(std::string path);

/// "" where write(path, ...) can be tried (its folder, or the file written
/// through, takes writes), else why not, e.g. "cannot write in /x: No such
/// file or directory": said before anything is computed.
std::string writable(const std::string &path);

} // namespace attn::npy

#endif // ATTNC_TOOLS_NPY_H
