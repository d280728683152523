//===- Npy.cpp - Read and write .npy arrays -------------------------------===//

#include "Npy.h"

#include "llvm/Support/Path.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
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

/// The value of `key` in the header dict, as written ('<f8', False, (2, 3)).
static std::string field(const std::string &header, const std::string &key) {
  size_t at = header.find("'" + key + "'");
  if (at == std::string::npos)
    return "";
  at = header.find(':', at);
  if (at == std::string::npos)
    return "";
  ++at;
  while (at < header.size() && header[at] == ' ')
    ++at;
  size_t end = at;
  if (at < header.size() && header[at] == '(') {
    end = header.find(')', at);
    return end == std::string::npos ? "" : header.substr(at, end - at + 1);
  }
  while (end < header.size() && header[end] != ',' && header[end] != '}')
    ++end;
  return header.substr(at, end - at);
}

bool read(const std::string &path, Array &out, std::string &error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) {
    error = path + ": not a .npy file (no \\x93NUMPY magic)";
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
  std::string descr = field(header, "descr"), order = field(header, "fortran_order"),
              shape = field(header, "shape");
  if (descr == "'<f4'")
    out.kind = Kind::F32;
  else if (descr == "'<f8'")
    out.kind = Kind::F64;
  else if (descr == "'<i4'")
    out.kind = Kind::I32;
  else {
    error = path + ": element type " + (descr.empty() ? "(none)" : descr) +
            " is not supported (float32 '<f4', float64 '<f8' or int32 '<i4')";
    return false;
  }
  if (order.empty()) {
    error = path + ": no fortran_order in the .npy header";
    return false;
  }
  if (order != "False") {
    error = path + ": Fortran-ordered arrays are not supported; save a C-contiguous array";
    return false;
  }
  if (shape.size() < 2 || shape.front() != '(') {
    error = path + ": no shape in the .npy header";
    return false;
  }
  out.shape.clear();
  std::string inner = shape.substr(1, shape.size() - 2);
  size_t pos = 0;
  while (pos < inner.size()) {
    size_t comma = inner.find(',', pos);
    std::string item = inner.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? inner.size() : comma + 1;
    if (item.find_first_not_of(' ') == std::string::npos)
      continue;
    char *end = nullptr;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (v < 0 || v > (1ll << 40)) {
      error = path + ": bad dimension '" + item + "' in the shape";
      return false;
    }
    out.shape.push_back(v);
  }
  // The data the shape needs, counted without overflow, against what the file
  // holds after the header: a header never makes us allocate more than the file.
  const std::streamoff dataAt = in.tellg();
  in.seekg(0, std::ios::end);
  const int64_t available = static_cast<int64_t>(in.tellg() - dataAt);
  in.seekg(dataAt);
  int64_t bytes = elementSize(out.kind);
  bool overflow = false;
  if (std::find(out.shape.begin(), out.shape.end(), 0) != out.shape.end())
    bytes = 0; // a dimension of 0: no data at all
  else
    for (int64_t d : out.shape)
      overflow = __builtin_mul_overflow(bytes, d, &bytes) || overflow;
  if (overflow || bytes > available) {
    error = path + ": truncated: the shape " + out.shapeText() + " needs " +
            (overflow ? std::string("more than 2^63") : std::to_string(bytes)) +
            " bytes of data, the file holds " + std::to_string(available);
    return false;
  }
  out.bytes.resize(bytes);
  if (bytes > 0 && !in.read(out.bytes.data(), bytes)) {
    error = path + ": cannot read " + std::to_string(bytes) + " bytes of data";
    return false;
  }
  return true;
}

bool writesThrough(const std::string &path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
}

std::string writable(const std::string &path) {
  struct stat st;
  const bool exists = ::stat(path.c_str(), &st) == 0; // following a link
  if (exists && S_ISDIR(st.st_mode))
    return "is a folder";
  // What takes the write: a regular file is made beside its target and renamed
  // onto it, so its folder; a device or a link is written in place, so the
  // file it names, or, for a link to a file not made yet, that file's folder.
  std::string file = path;
  bool inPlace = false;
  if (writesThrough(path)) {
    inPlace = exists;
    char target[4096];
    const ssize_t n = inPlace ? 0 : ::readlink(path.c_str(), target, sizeof target - 1);
    if (n > 0) {
      const std::string to(target, size_t(n)), from = llvm::sys::path::parent_path(path).str();
      file = llvm::sys::path::is_relative(to) && !from.empty() ? from + "/" + to : to;
    }
  }
  if (inPlace)
    return ::access(file.c_str(), W_OK) == 0 ? "" : std::string("cannot write: ") + std::strerror(errno);
  std::string folder = llvm::sys::path::parent_path(file).str();
  if (folder.empty())
    folder = ".";
  if (::access(folder.c_str(), W_OK) != 0)
    return "cannot write in " + folder + ": " + std::strerror(errno);
  return "";
}

bool write(const std::string &path, const Array &array, std::string &error) {
  std::string descr = array.kind == Kind::F32 ? "<f4" : array.kind == Kind::F64 ? "<f8" : "<i4";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " +
                       array.shapeText() + ", }";
  // Pad so that the data starts on a 64-byte boundary, ending with '\n'.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  const bool through = writesThrough(path);
  const std::string tmp = through ? path : path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      error = path + ": cannot write: " + std::strerror(errno);
      return false;
    }
    out.write("\x93NUMPY\x01\x00", 8);
    const unsigned char len[2] = {static_cast<unsigned char>(header.size() & 0xff),
                                  static_cast<unsigned char>(header.size() >> 8)};
    out.write(reinterpret_cast<const char *>(len), 2);
    out.write(header.data(), header.size());
    out.write(array.bytes.data(), array.bytes.size());
    if (!out.flush()) {
      error = path + ": write failed: " + std::strerror(errno);
      if (!through)
        std::remove(tmp.c_str());
      return false;
    }
  }
  if (!through && std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = path + ": cannot move the finished file into place: " + std::strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

} // namespace attn::npy
