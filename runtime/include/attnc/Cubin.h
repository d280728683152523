//===- Cubin.h - What a cubin says of its kernels, read without a GPU -*- C++ -*-===//
//
// A cubin is a CUDA ELF file. Its symbol table names the kernels a module
// lookup finds, each kernel's ".nv.info.<kernel>" section records its
// __launch_bounds__, and every module attnc emits defines
// "<kernel>_launch" (kernel::kLaunchShapeSuffix): the launch shape its
// kernels were emitted for. A bundle's line or entry, which says how to
// launch a cubin's kernels, is held to what the cubin says here, before a
// GPU ever sees them.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_CUBIN_H
#define ATTNC_CUBIN_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace attn {

/// The symbols of a cubin that a bundle's checks read.
struct CubinSymbols {
  /// The global functions it defines (defined STT_FUNC, STB_GLOBAL: the
  /// kernels a module lookup finds), each with the most threads a block of
  /// it may have where the cubin says (EIATTR_MAX_THREADS), else 0.
  std::vector<std::pair<std::string, uint64_t>> kernels;
  /// Its data objects that have bytes in the file (an initialised
  /// `__device__ const`), by name.
  std::vector<std::pair<std::string, std::vector<unsigned char>>> objects;
};

/// Reads the symbols of the cubin `bytes`; false with `why` ("is not an ELF
/// file (not a cubin)", ...) when they are not a 64-bit little-endian CUDA
/// ELF file with a symbol table that lies inside them.
bool readCubinSymbols(const unsigned char *bytes, size_t size, CubinSymbols &out,
                      std::string &why);

/// One kernel's launch as a bundle's manifest line or entry gives it.
struct BundledLaunch {
  std::string spec; ///< canonical, as the line or entry has it
  long long threads = 0, shared_bytes = 0, merge_threads = 0, cluster_merge = 0,
            pair_shared_bytes = 0;
  /// The launch shape's fields it gives, in that order: all five, or the
  /// first three (a manifest of format 1, which has no cluster_merge nor
  /// pair_shared_bytes column).
  int fields = 5;
};

/// A cubin of a bundled kernel: its bytes and how a message names it
/// ("cubins/x.cubin", "entry 2's cubin"). No bytes: none given.
struct NamedCubin {
  const unsigned char *bytes = nullptr;
  size_t size = 0;
  std::string name;
};

/// Why the cubins of a bundled kernel cannot be launched as `launch` says,
/// or "": each must be a cubin (readCubinSymbols) that defines the kernels
/// the spec names (Spec::symbol(); "<symbol>_merge" for decode, and the pair
/// cubin "<symbol>_pair"), whose __launch_bounds__ cover the launch
/// (merge_threads for the merge kernel, twice threads for the pair kernel),
/// and that says the launch shape `launch` gives
/// ("<symbol>" + kernel::kLaunchShapeSuffix: threads, shared_bytes,
/// merge_threads, cluster_merge, pair_shared_bytes). A pair cubin must be
/// given exactly where pair_shared_bytes > 0. Each wrong cubin is named.
std::string checkBundledCubins(const BundledLaunch &launch, const NamedCubin &cubin,
                               const NamedCubin &pairCubin);

} // namespace attn

#endif // ATTNC_CUBIN_H
