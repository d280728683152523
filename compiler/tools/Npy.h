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

/// Reads `path`; on failure returns false and sets `error`.
bool read(const std::string &path, Array &out, std::string &error);
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

/// Writes `array` to `path`: through a temporary file renamed into place, or
/// straight into `path` where it is not a regular file (writesThrough).
bool write(const std::string &path, const Array &array, std::string &error);

/// True when `path` exists and is not a regular file (a link, a device such
/// as /dev/stdout, a pipe): a file renamed onto it would replace it, so it is
/// written in place.
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
