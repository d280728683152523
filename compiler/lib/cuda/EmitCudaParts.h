//===- EmitCudaParts.h - What the CUDA emitter's files share -----*- C++ -*-===//
//
// The emitter prints a kernel in three files: EmitCuda.cpp reads the IR into
// a KernelPlan, prints the configuration both modes share and the launch
// line; EmitPrefill.cpp prints the prefill blocks (mma.sync, wgmma and the
// warp-specialised one); EmitDecode.cpp the decode block and its split
// merge. Internal to the emitter.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_LIB_CUDA_EMITCUDAPARTS_H
#define ATTNC_LIB_CUDA_EMITCUDAPARTS_H

#include "attn/Spec.h"

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace attn {
namespace emit {

/// Decode: how many tiles before its copy a tile's block-table entries are
/// read. Under ncu on the H200 the kernel's largest stall was the first use
/// of entries read one tile ahead: while the K/V copies keep the memory
/// system full a read comes back after about (bytes in flight per SM) /
/// (bandwidth per SM), longer than one tile's work. With PageRuns a tile's
/// entries are a few registers; KVTile holds one per piece, so it keeps one
/// tile's worth.
constexpr int kDecodeTableAhead = 2;

/// What the emitter needs to know from the IR.
struct KernelPlan {
  std::string name;
  bool paged = false, lse = false;
  bool splits = false; ///< attn-split-kv ran: a kv_splits loop
  int64_t group = 1;
  struct KVLoop {
    std::string lower, upper; ///< fields of the TileRange
    bool masked = false;
    std::string why;
  };
  std::vector<KVLoop> loops;
  /// Whether some KV loop masks its tiles (a mask's edge, or the tail past kv_len).
  bool masked() const {
    for (const KVLoop &kv : loops)
      if (kv.masked)
        return true;
    return false;
  }
};

/// How a block spreads its work: query rows per warp, keys per step of the
/// recurrence (the scores of a step stay in registers) and K/V stages in
/// shared memory. prefillLayout and decodeLayout choose them.
struct BlockLayout {
  int64_t warpRows, stepKV, stages;
  bool wgmma = false; ///< sm_90a warpgroup MMA (attn/wgmma.cuh)
};

/// The sequence's keys and values: contiguous rows or pages through the table.
void printKVCache(std::ostringstream &o, bool paged);

/// A prefill kernel of the mma.sync or wgmma block (attn/block.cuh, attn/wgmma.cuh).
void printPrefill(std::ostringstream &o, const Spec &spec, const KernelPlan &plan,
                  const BlockLayout &layout);
/// A warp-specialised prefill block (attn/warpspec.cuh).
void printPrefillWarpSpecialised(std::ostringstream &o, const Spec &spec, const KernelPlan &plan);

/// Whether a decode kernel's K/V tiles come in runs of one page (PageRuns).
bool decodeCopiesPageRuns(const Spec &spec, int threads);
/// The shared memory of the decode pair kernel, or 0 where there is none.
int64_t decodePairSharedBytes(const Spec &spec, int threads);
/// A decode kernel, its split merge, and where it has one its pair kernel.
void printDecode(std::ostringstream &o, const Spec &spec, const KernelPlan &plan, int threads,
                 bool pairs);

} // namespace emit
} // namespace attn

#endif // ATTNC_LIB_CUDA_EMITCUDAPARTS_H
