//===- FakeCubin.h - Made-up cubins for the bundle tests ---------*- C++ -*-===//
//
// ELF files with the symbols a bundle's checks read (attnc/Cubin.h) and no
// code: the kernels as global functions, and the launch shape a module says
// its kernels were emitted for ("<kernel>_launch", five ints in a section
// of data).
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_TESTS_FAKECUBIN_H
#define ATTNC_TESTS_FAKECUBIN_H

#include "attn/Spec.h"
#include "attn/params.cuh"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace attn::test {

/// Writes `value` little-endian into `size` bytes of `bytes` at `at`.
inline void put(std::string &bytes, size_t at, uint64_t value, int size) {
  for (int i = 0; i < size; ++i)
    bytes[at + i] = static_cast<char>(value >> (8 * i) & 0xff);
}

/// The launch shape a fake cubin says: the object `symbol`'s ints.
struct FakeLaunch {
  std::string symbol; ///< "" for none
  std::vector<int32_t> shape;
};

/// The launch a module of `spec`'s kernels says (threads, shared_bytes,
/// merge_threads, cluster_merge, pair_shared_bytes).
inline FakeLaunch launchOf(const std::string &spec, std::vector<int32_t> shape) {
  return {parseSpec(spec).spec->symbol() + kernel::kLaunchShapeSuffix, std::move(shape)};
}

/// A made-up cubin: a 64-bit little-endian ELF file of machine `machine`
/// (190: CUDA) whose symbol table defines `kernels` as global functions and
/// `launch`'s object (a local one, as NVRTC leaves it) in a data section,
/// and whose bytes hold `text` (so that two of the same kernels differ).
inline std::string fakeCubin(const std::string &text, std::initializer_list<std::string> kernels,
                             int machine = 190, const FakeLaunch &launch = {}) {
  std::string strtab(1, '\0'), symtab(24, '\0'), data;
  for (const std::string &kernel : kernels) {
    std::string sym(24, '\0');
    put(sym, 0, strtab.size(), 4); // st_name
    put(sym, 4, 1 << 4 | 2, 1);    // STB_GLOBAL, STT_FUNC
    put(sym, 6, 1, 2);             // defined (in some section)
    symtab += sym;
    strtab += kernel + std::string(1, '\0');
  }
  if (!launch.symbol.empty()) {
    data.assign(4 * launch.shape.size(), '\0');
    for (size_t i = 0; i < launch.shape.size(); ++i)
      put(data, 4 * i, static_cast<uint32_t>(launch.shape[i]), 4);
    std::string sym(24, '\0');
    put(sym, 0, strtab.size(), 4); // st_name
    put(sym, 4, 1, 1);             // STB_LOCAL, STT_OBJECT
    put(sym, 6, 3, 2);             // in the data section
    put(sym, 16, data.size(), 8);  // st_size (st_value 0: the section's start)
    symtab += sym;
    strtab += launch.symbol + std::string(1, '\0');
  }
  std::string elf(64, '\0');
  elf.replace(0, 6, "\x7f" "ELF\x02\x01");
  put(elf, 18, machine, 2);
  const size_t strAt = elf.size(), symAt = strAt + strtab.size(), dataAt = symAt + symtab.size();
  elf += strtab + symtab + data + text;
  // Section headers: none, .strtab, .symtab (linked to .strtab), the data.
  std::string headers(4 * 64, '\0');
  put(headers, 64 + 4, 3, 4);
  put(headers, 64 + 24, strAt, 8);
  put(headers, 64 + 32, strtab.size(), 8);
  put(headers, 128 + 4, 2, 4);
  put(headers, 128 + 24, symAt, 8);
  put(headers, 128 + 32, symtab.size(), 8);
  put(headers, 128 + 40, 1, 4);
  put(headers, 128 + 56, 24, 8);
  put(headers, 192 + 4, 1, 4); // SHT_PROGBITS
  put(headers, 192 + 24, dataAt, 8);
  put(headers, 192 + 32, data.size(), 8);
  put(elf, 40, elf.size(), 8); // e_shoff
  put(elf, 58, 64, 2);         // e_shentsize
  put(elf, 60, 4, 2);          // e_shnum
  return elf + headers;
}

} // namespace attn::test

#endif // ATTNC_TESTS_FAKECUBIN_H
