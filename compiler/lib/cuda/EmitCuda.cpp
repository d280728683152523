//===- EmitCuda.cpp - Tile-level IR to readable CUDA ----------------------===//
//
// Reads the structure the passes built (the heads and query-tile loops, the
// KV-tile loops by class, the block-table lookups, the lse) and prints one
// kernel whose body is the recurrence as a short list of named steps, each
// with a comment naming the pass that put it there. The arithmetic lives in
// templates/attn/*.cuh.
//
//===----------------------------------------------------------------------===//

#include "attnc/EmitCuda.h"
#include "EmitCudaParts.h"
#include "attnc/Passes.h"
#include "attnc/Pipeline.h"
#include "attnc/Textbook.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <cstdlib>
#include <sstream>

using namespace mlir;

namespace attn {

using namespace emit;

namespace {
/// The TileRange field a KV-loop bound comes from.
std::string tileField(Value bound) {
  auto cls = bound.getDefiningOp<ClassifyTilesOp>();
  if (!cls)
    return "";
  switch (cast<OpResult>(bound).getResultNumber()) {
  case 0:
    return "lo";
  case 1:
    return "full_lo";
  case 2:
    return "full_hi";
  default:
    return "hi";
  }
}

bool readPlan(func::FuncOp func, const Spec &spec, KernelPlan &plan, std::string &error) {
  plan.name = func.getName().str();
  scf::ForOp heads, qTiles;
  func.walk([&](scf::ForOp loop) {
    if (isLoopWithRole(loop, "heads"))
      heads = loop;
    if (isLoopWithRole(loop, "q_tiles"))
      qTiles = loop;
  });
  if (!heads || !qTiles) {
    error = "the IR has no heads / q_tiles loops: run the whole attn pipeline first";
    return false;
  }
  if (auto g = heads->getAttrOfType<IntegerAttr>("attn.gqa"))
    plan.group = g.getInt();
  else if (spec.gqa != 1) {
    error = "gqa = " + std::to_string(spec.gqa) + " but attn-share-kv-heads has not run";
    return false;
  }
  qTiles.walk([&](Operation *op) {
    plan.paged |= isa<BlockTableLookupOp>(op);
    plan.lse |= isa<LseOp>(op);
    if (auto loop = dyn_cast<scf::ForOp>(op); loop && isLoopWithRole(loop, "kv_splits"))
      plan.splits = true;
    if (auto loop = dyn_cast<scf::ForOp>(op); loop && isLoopWithRole(loop, "kv_tiles")) {
      KernelPlan::KVLoop kv;
      kv.lower = tileField(loop.getLowerBound());
      kv.upper = tileField(loop.getUpperBound());
      loop.walk([&](MaskOp) { kv.masked = true; });
      auto cls = loop->getAttrOfType<StringAttr>(kTilesAttr);
      kv.why = !cls ? "every KV tile" : cls.getValue() == "full" ? "fully visible tiles: no mask arithmetic"
               : kv.lower == "lo" ? "partial tiles before the fully visible ones (the window's edge)"
                                  : "partial tiles: the mask's edge and the tail past kv_len";
      plan.loops.push_back(kv);
    }
  });
  if (plan.loops.empty()) {
    error = "the query-tile loop holds no KV-tile loop";
    return false;
  }
  // Decode blocks walk their split's tiles in one loop; prefill prints one
  // loop per class, with the bounds attn-mask-tiles computed.
  for (const auto &kv : plan.loops)
    if (spec.mode == Mode::Prefill && (kv.lower.empty() || kv.upper.empty())) {
      error = "a KV-tile loop's bounds do not come from attn.classify_tiles: run attn-mask-tiles";
      return false;
    }
  return true;
}

const char *maskCode(const Mask &m) {
  switch (m.kind) {
  case MaskKind::None:
    return "kMaskNone";
  case MaskKind::Causal:
    return "kMaskCausal";
  case MaskKind::SlidingWindow:
    return "kMaskWindow";
  }
  return "kMaskNone";
}

BlockLayout prefillLayout(const Spec &spec) {
  const int64_t headDim = spec.head_dim, tileQ = spec.tile_q, tileKV = spec.tile_kv;
  // K/V stages: kvStages (Spec.cpp), where the shared memory is counted.
  // Measured on the H200 for mma.sync against one stage: two were 5-8 %
  // faster for head_dim 128, and 1-8 % for head_dim 64 (128-key tiles,
  // 80 KiB) since the lazy rescale freed registers (before it, one stage had
  // won on the long rows); wgmma's measured depths are there too.
  BlockLayout l{16, tileKV, kvStages(spec)};
  // wgmma: a warpgroup's 64 rows, 16 per warp, against the whole K/V tile
  // (one instruction's N).
  if (usesWgmma(spec)) {
    l.wgmma = true;
    return l;
  }
  // 32 query rows per warp halve the shared-memory reads per mma when two
  // 16-row blocks' accumulators (head_dim / 2 registers each) and scores
  // (step / 2 each) fit next to the rest in 255 registers: head_dim + step
  // <= 160, the step being the whole tile or 64 or 32 of its keys. Head
  // dims that are no multiple of 64 (unswizzled tiles) measured too close
  // to the limit (ptxas spilled for head_dim 96 with 32 keys).
  for (int64_t step : {tileKV, int64_t(64), int64_t(32)})
    if (step <= tileKV && tileKV % step == 0 && headDim + step <= 160) {
      l.stepKV = step;
      break;
    }
  if (tileQ % 32 == 0 && headDim % 64 == 0 && headDim + l.stepKV <= 160)
    l.warpRows = 32;
  else
    l.stepKV = tileKV;
  return l;
}

/// A decode block: 16 rows, 16 keys per warp, kvStages stages (three while
/// two blocks fit in an SM: two tiles load while one is computed). Measured
/// on the H200: three stages read the paged cache 3-13 % faster than two for
/// head_dim 128; four (one block per SM) were 30 % slower.
BlockLayout decodeLayout(const Spec &spec) {
  return BlockLayout{16, spec.tile_kv, kvStages(spec)};
}

/// The kernel's compile-time configuration: what the spec and the IR fix.
void printConfig(std::ostringstream &o, const Spec &spec, const KernelPlan &plan, int64_t tileQ,
                 const BlockLayout &layout, const CudaLaunchShape &shape) {
  const char *elem = spec.dtype == DType::BF16 ? "__nv_bfloat16" : "__half";
  const bool decode = spec.mode == Mode::Decode;
  const int threads = shape.threads;
  o << "// attnc " << ATTNC_VERSION << ": " << spec.str() << "\n"
    << "// launch: threads=" << shape.threads << " shared_bytes=" << shape.shared_bytes;
  if (decode)
    o << " merge_threads=" << shape.merge_threads;
  if (shape.cluster_merge)
    o << " cluster_merge=1";
  if (shape.pair_shared_bytes > 0)
    o << " pair_shared_bytes=" << shape.pair_shared_bytes;
  o << "\n"
    << "// Emitted from the tile-level IR of @" << plan.name
    << ". Each step names the attnc pass\n// that put it there; the arithmetic is in the "
       "attn/*.cuh templates.\n"
    << "#include \"attn/"
    << (decode ? "decode" : warpSpecialised(spec) ? "warpspec" : layout.wgmma ? "wgmma" : "block")
    << ".cuh\"\n\n"
    << "using namespace attn::kernel;\n\n"
    << "namespace {\nstruct Cfg {\n"
    << "  using Elem = " << elem << ";\n"
    << "  static constexpr int kHeadDim = " << spec.head_dim << ";\n"
    << "  static constexpr int kTileQ = " << tileQ
    << (decode ? ";   // rows per pass of a block over its keys, of the group's heads x query tokens\n"
               : ";   // query rows per thread block\n")
    << "  static constexpr int kTileKV = " << spec.tile_kv
    << (decode ? ";  // keys per KV tile, 16 per warp\n" : ";  // keys per KV tile\n")
    << "  static constexpr int kGroup = " << plan.group
    << ";   // attn-share-kv-heads: query heads per KV head\n"
    << "  static constexpr int kPageSize = " << (plan.paged ? spec.page_size : 0)
    << "; // attn-page-kv: tokens per page (0: contiguous)\n"
    << "  static constexpr int kMask = " << maskCode(spec.mask) << ";\n"
    << "  static constexpr long long kWindow = " << spec.mask.window << ";\n"
    << "  static constexpr int kThreads = " << (warpSpecialised(spec) ? wsComputingThreads(spec) : threads)
    << (warpSpecialised(spec) ? ";  // the computing warpgroups' (the block: kBlockThreads)\n"
                                "  static constexpr int kBlockThreads = " +
                                    std::to_string(threads) +
                                    ";  // and one more warpgroup that copies K and V\n"
                              : std::string(";\n"));
  if (!decode)
    o << "  static constexpr int kStepKV = " << layout.stepKV
      << ";  // keys per step of the recurrence (its scores stay in registers)\n"
      << "  static constexpr int kStages = " << layout.stages
      << (layout.stages > 1 ? ";  // K/V tiles in shared memory: the next loads during this one\n"
                            : ";  // K/V tiles in shared memory\n")
      << "  static constexpr int kWarpRows = " << layout.warpRows
      << ";  // query rows per warp: each K/V fragment serves them all\n"
      << "  static constexpr int kRowBlocks = kWarpRows / 16;\n";
  if (layout.wgmma)
    o << "  // Shared tiles in the 128-byte swizzle wgmma reads (attn/wgmma.cuh).\n"
      << "  template <int kRows>\n  using Tile = WgmmaTile<kRows, kHeadDim>;\n";
  if (decode)
    o << "  static constexpr int kStages = " << layout.stages
      << "; // K/V tiles in shared memory: kStages - 1 load ahead\n"
      << "  static constexpr int kTableAhead = "
      << (decodeCopiesPageRuns(spec, threads) ? kDecodeTableAhead : 1)
      << (spec.isPaged() ? "; // attn-page-kv: block-table entries read this many tiles before their copy\n"
                         : "; // (a contiguous cache has no table to read ahead)\n");
  o << "};\nusing Elem = Cfg::Elem;\n} // namespace\n\n";
  o << "// The launch line above, kept in the cubin (threads, shared_bytes, merge_threads,\n"
    << "// cluster_merge, pair_shared_bytes): a bundle's manifest line is held to it.\n"
    << "extern \"C\" __device__ const int " << plan.name << kernel::kLaunchShapeSuffix << "["
    << kernel::kLaunchShapeInts << "] = {" << shape.threads << ", " << shape.shared_bytes << ", "
    << shape.merge_threads << ", " << (shape.cluster_merge ? 1 : 0) << ", "
    << shape.pair_shared_bytes << "};\n\n";
}
} // namespace

namespace emit {
/// The sequence's keys and values: contiguous rows or pages through the table.
void printKVCache(std::ostringstream &o, bool paged) {
  if (paged)
    o << "  // attn-page-kv: this sequence's keys and values, through its block table.\n"
      << "  const i64 kv_len = pagedLength(reinterpret_cast<const int *>(p.seq_lens_k)[seq],\n"
      << "                                  p.block_table_stride, Cfg::kPageSize);\n"
      << "  const int *table = reinterpret_cast<const int *>(p.block_table) + seq * p.block_table_stride;\n"
      << "  using Cache = KVCache<Elem, Cfg::kPageSize, Cfg::kHeadDim>;\n"
      << "  const Cache kv = {reinterpret_cast<const Elem *>(p.k), reinterpret_cast<const Elem *>(p.v), table,\n"
      << "                    (int)p.num_pages, (int)kv_len, (int)p.kv_token_stride, (int)p.kv_page_stride,\n"
      << "                    p.kv_head_stride};\n";
  else
    o << "  const int *cu_k = reinterpret_cast<const int *>(p.cu_seqlens_k);\n"
      << "  const i64 kv_begin = cu_k[seq], kv_len = cu_k[seq + 1] - kv_begin;\n"
      << "  const i64 token = (i64)p.num_kv_heads * Cfg::kHeadDim;\n"
      << "  using Cache = KVCache<Elem, 0, Cfg::kHeadDim>;\n"
      << "  const Cache kv = {reinterpret_cast<const Elem *>(p.k) + kv_begin * token,\n"
      << "                    reinterpret_cast<const Elem *>(p.v) + kv_begin * token, nullptr, 0, (int)kv_len,\n"
      << "                    (int)token, 0, 0};\n";
}
} // namespace emit

bool emitCuda(ModuleOp module, const Spec &spec, std::string &source, CudaLaunchShape &shape,
              std::string &error) {
  if (!spec.isGPU()) {
    error = "CUDA is emitted for GPU targets (sm_80, sm_90a), not target = cpu";
    return false;
  }
  auto funcs = module.getOps<func::FuncOp>();
  if (funcs.empty()) {
    error = "the module holds no function";
    return false;
  }
  KernelPlan plan;
  if (!readPlan(*funcs.begin(), spec, plan, error))
    return false;
  const bool decode = spec.mode == Mode::Decode;
  // Prefill: 16 query rows per warp. Decode: 16 rows (the group's heads for
  // the query tokens) per block, 16 keys of each tile per warp (the spec
  // keeps tile_kv a multiple of 16 on GPU targets).
  const int64_t tileQ = decode ? 16 : spec.tile_q;
  if (tileQ % 16 != 0) {
    error = "tile_q = " + std::to_string(tileQ) + " is not a multiple of 16";
    return false;
  }
  shape.decode = decode;
  shape.tile_q = static_cast<int>(tileQ);
  const BlockLayout layout = decode ? decodeLayout(spec) : prefillLayout(spec);
  shape.threads = static_cast<int>((decode ? spec.tile_kv : tileQ) / layout.warpRows * 32);
  if (warpSpecialised(spec))
    shape.threads = wsComputingThreads(spec) + kWsProducerThreads; // and a copying warpgroup
  shape.shared_bytes = static_cast<int>(sharedMemoryBytes(spec));
  shape.merge_threads = decode ? 128 : 0;
  shape.cluster_merge = decode && spec.target == Target::SM90a;
  shape.pair_shared_bytes = decode ? static_cast<int>(decodePairSharedBytes(spec, shape.threads)) : 0;

  std::ostringstream o;
  printConfig(o, spec, plan, tileQ, layout, shape);
  if (decode)
    printDecode(o, spec, plan, shape.threads, shape.pair_shared_bytes > 0);
  else if (warpSpecialised(spec))
    printPrefillWarpSpecialised(o, spec, plan);
  else
    printPrefill(o, spec, plan, layout);
  source = o.str();
  return true;
}

bool readCudaHeader(const std::string &source, Spec &spec, CudaLaunchShape &shape,
                    std::string &error) {
  std::istringstream in(source);
  std::string specLine, launchLine;
  std::getline(in, specLine);
  std::getline(in, launchLine);
  const std::string specTag = "// attnc ", launchTag = "// launch: ";
  const size_t colon = specLine.find(": ");
  if (specLine.rfind(specTag, 0) != 0 || colon == std::string::npos ||
      launchLine.rfind(launchTag, 0) != 0) {
    error = "not an attnc kernel: the source does not start with the '// attnc VERSION: SPEC' "
            "and '// launch: ...' lines attnc emit prints";
    return false;
  }
  SpecResult parsed = parseSpec(specLine.substr(colon + 2));
  if (!parsed) {
    error = "the kernel's first line: " + parsed.error->message();
    return false;
  }
  spec = *parsed.spec;
  if (!spec.isGPU()) {
    error = "the kernel's spec has target = cpu";
    return false;
  }
  shape = CudaLaunchShape{};
  shape.decode = spec.mode == Mode::Decode;
  shape.tile_q = shape.decode ? 16 : static_cast<int>(spec.tile_q);
  std::istringstream fields(launchLine.substr(launchTag.size()));
  int clusterMerge = 0;
  for (std::string field; fields >> field;) {
    const size_t eq = field.find('=');
    const std::string key = field.substr(0, eq);
    int *slot = key == "threads"             ? &shape.threads
                : key == "shared_bytes"      ? &shape.shared_bytes
                : key == "merge_threads"     ? &shape.merge_threads
                : key == "cluster_merge"     ? &clusterMerge
                : key == "pair_shared_bytes" ? &shape.pair_shared_bytes
                                             : nullptr;
    char *end = nullptr;
    const long value = eq == std::string::npos ? -1 : std::strtol(field.c_str() + eq + 1, &end, 10);
    if (!slot || value < 0 || value > (1 << 20) || *end != '\0' ||
        (slot == &clusterMerge && value > 1)) {
      error = "the kernel's launch line: '" + field + "' is not threads=N, shared_bytes=N, "
              "merge_threads=N, cluster_merge=0|1 or pair_shared_bytes=N";
      return false;
    }
    *slot = static_cast<int>(value);
  }
  shape.cluster_merge = clusterMerge == 1;
  if (std::string why = launchShapeProblem(spec, shape.threads, shape.shared_bytes,
                                           shape.merge_threads, shape.cluster_merge,
                                           shape.pair_shared_bytes);
      !why.empty()) {
    error = "the kernel's launch line: " + why;
    return false;
  }
  return true;
}

bool emitCudaForSpec(const Spec &spec, std::string &source, CudaLaunchShape &shape,
                     std::string &error) {
  MLIRContext ctx;
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
    diagnostics += d.str() + "\n";
    return success();
  });
  OwningOpRef<ModuleOp> module = buildTextbook(ctx, spec);
  PassManager pm(&ctx);
  buildAttnPipeline(pm);
  if (failed(pm.run(*module))) {
    error = "the attn pipeline failed for " + spec.str() + ": " + diagnostics;
    return false;
  }
  return emitCuda(*module, spec, source, shape, error);
}

} // namespace attn