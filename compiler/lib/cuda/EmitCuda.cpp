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
#include "attnc/Passes.h"
#include "attnc/Pipeline.h"
#include "attnc/Textbook.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <sstream>

using namespace mlir;

namespace attn {

namespace {
/// What the emitter needs to know from the IR.
struct KernelPlan {
  std::string name;
  bool paged = false, lse = false;
  int64_t group = 1;
  struct KVLoop {
    std::string lower, upper; ///< fields of the TileRange
    bool masked = false;
    std::string why;
  };
  std::vector<KVLoop> loops;
};

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
  if (spec.mode == Mode::Decode && spec.split_kv != 1) {
    error = "decode kernels with split-KV are not emitted yet; use split_kv=1";
    return false;
  }
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
  for (const auto &kv : plan.loops)
    if (kv.lower.empty() || kv.upper.empty()) {
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
} // namespace

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
  // Prefill: 16 query rows per warp. Decode: one warp of up to 16 rows.
  const int64_t tileQ = spec.mode == Mode::Decode ? 16 : spec.tile_q;
  if (tileQ % 16 != 0) {
    error = "tile_q = " + std::to_string(tileQ) + " is not a multiple of 16";
    return false;
  }
  shape.tileQ = static_cast<int>(tileQ);
  shape.threads = static_cast<int>(tileQ / 16 * 32);
  shape.sharedBytes = static_cast<int>((tileQ + 2 * spec.tile_kv) * spec.head_dim * 2);

  std::ostringstream o;
  const char *elem = spec.dtype == DType::BF16 ? "__nv_bfloat16" : "__half";
  o << "// attnc " << ATTNC_VERSION << ": " << spec.str() << "\n"
    << "// Emitted from the tile-level IR of @" << plan.name
    << ". Each step names the attnc pass\n// that put it there; the arithmetic is in the "
       "attn/*.cuh templates.\n"
    << "#include \"attn/block.cuh\"\n\n"
    << "using namespace attn::kernel;\n\n"
    << "namespace {\nstruct Cfg {\n"
    << "  using Elem = " << elem << ";\n"
    << "  static constexpr int kHeadDim = " << spec.head_dim << ";\n"
    << "  static constexpr int kTileQ = " << tileQ << ";   // query rows per thread block\n"
    << "  static constexpr int kTileKV = " << spec.tile_kv << ";  // keys per KV tile\n"
    << "  static constexpr int kGroup = " << plan.group
    << ";   // attn-share-kv-heads: query heads per KV head\n"
    << "  static constexpr int kPageSize = " << (plan.paged ? spec.page_size : 0)
    << "; // attn-page-kv: tokens per page (0: contiguous)\n"
    << "  static constexpr int kMask = " << maskCode(spec.mask) << ";\n"
    << "  static constexpr long long kWindow = " << spec.mask.window << ";\n"
    << "  static constexpr int kThreads = kTileQ / 16 * 32;\n"
    << "};\nusing Elem = Cfg::Elem;\n} // namespace\n\n";

  o << "extern \"C\" __global__ void __launch_bounds__(Cfg::kThreads) " << plan.name
    << "(const Params p) {\n"
    << "  // The heads and q_tiles loops are the grid: x = query tile, y = query head, z = sequence.\n"
    << "  const int head = blockIdx.y, seq = blockIdx.z, warp = threadIdx.x / 32;\n"
    << "  const int *cu_q = reinterpret_cast<const int *>(p.cu_seqlens_q);\n"
    << "  const i64 q_begin = cu_q[seq], q_len = cu_q[seq + 1] - q_begin;\n"
    << "  const i64 q_start = (i64)blockIdx.x * Cfg::kTileQ;\n"
    << "  if (q_start >= q_len)\n    return;\n"
    << "  // attn-share-kv-heads: query heads kGroup * h .. kGroup * h + kGroup - 1 read KV head h.\n"
    << "  const int kv_head = head / Cfg::kGroup;\n";
  if (plan.paged)
    o << "  // attn-page-kv: this sequence's keys and values, through its block table.\n"
      << "  const i64 kv_len = reinterpret_cast<const int *>(p.seq_lens_k)[seq];\n"
      << "  const int *table = reinterpret_cast<const int *>(p.block_table) + seq * p.block_table_stride;\n"
      << "  const i64 token = (i64)p.num_kv_heads * Cfg::kHeadDim;\n"
      << "  const KVCache<Elem, Cfg::kPageSize> keys = {reinterpret_cast<const Elem *>(p.k), table,\n"
      << "      p.num_pages, kv_len, token, Cfg::kHeadDim, Cfg::kPageSize * token};\n"
      << "  const KVCache<Elem, Cfg::kPageSize> values = {reinterpret_cast<const Elem *>(p.v), table,\n"
      << "      p.num_pages, kv_len, token, Cfg::kHeadDim, Cfg::kPageSize * token};\n";
  else
    o << "  const int *cu_k = reinterpret_cast<const int *>(p.cu_seqlens_k);\n"
      << "  const i64 kv_begin = cu_k[seq], kv_len = cu_k[seq + 1] - kv_begin;\n"
      << "  const i64 token = (i64)p.num_kv_heads * Cfg::kHeadDim;\n"
      << "  const KVCache<Elem, 0> keys = {reinterpret_cast<const Elem *>(p.k) + kv_begin * token,\n"
      << "      nullptr, 0, kv_len, token, Cfg::kHeadDim, 0};\n"
      << "  const KVCache<Elem, 0> values = {reinterpret_cast<const Elem *>(p.v) + kv_begin * token,\n"
      << "      nullptr, 0, kv_len, token, Cfg::kHeadDim, 0};\n";
  o << "  const i64 q_row = (i64)p.num_q_heads * Cfg::kHeadDim;\n"
    << "  const Elem *q = reinterpret_cast<const Elem *>(p.q) + q_begin * q_row + head * Cfg::kHeadDim;\n"
    << "  const Rows<Elem> out = {reinterpret_cast<Elem *>(p.o) + q_begin * q_row + head * Cfg::kHeadDim,\n"
    << "                          q_row, q_len};\n"
    << "  extern __shared__ __align__(16) unsigned char smem[];\n"
    << "  Elem *smem_q = reinterpret_cast<Elem *>(smem);\n"
    << "  Elem *smem_k = smem_q + Cfg::kTileQ * Cfg::kHeadDim;\n"
    << "  Elem *smem_v = smem_k + Cfg::kTileKV * Cfg::kHeadDim;\n\n"
    << "  // attn-online-softmax: the query tile is loaded once (rows past q_len read as zero).\n"
    << "  load_tile<Cfg, Cfg::kTileQ>(smem_q, [&](int r) -> const Elem * {\n"
    << "    return q_start + r < q_len ? q + (q_start + r) * q_row : nullptr; }, q);\n"
    << "  cp_async_commit();\n  cp_async_wait<0>();\n  __syncthreads();\n"

    << "  // attn-online-softmax: m = -inf, l = 0, acc = 0 for this warp's 16 rows.\n"
    << "  RowState<Cfg::kTileKV, Cfg::kHeadDim> state;\n  state.init();\n"
    << "  // attn-mask-tiles: which KV tiles some query of this block sees, by class.\n"
    << "  const TileRange tiles = classify_tiles(Cfg::kMask, Cfg::kWindow, q_start, Cfg::kTileQ,\n"
    << "                                         Cfg::kTileKV, q_len, kv_len);\n";
  for (const auto &kv : plan.loops) {
    o << "\n  // attn-mask-tiles: " << kv.why << ".\n"
      << "  for (i64 j = tiles." << kv.lower << "; j < tiles." << kv.upper << "; ++j) {\n"
      << "    // " << (plan.paged ? "attn-page-kv: every K and V row through the block table (KVCache::row)."
                                  : "The K and V rows of tile j; rows past kv_len read as zero.")
      << "\n"
      << "    load_tile<Cfg, Cfg::kTileKV>(smem_k, [&](int r) { return keys.row(j * Cfg::kTileKV + r, kv_head); }, keys.base);\n"
      << "    cp_async_commit();\n"
      << "    load_tile<Cfg, Cfg::kTileKV>(smem_v, [&](int r) { return values.row(j * Cfg::kTileKV + r, kv_head); }, values.base);\n"
      << "    cp_async_commit();\n"
      << "    cp_async_wait<1>(); // K has arrived; V keeps loading during QK^T and the softmax\n"
      << "    __syncthreads();\n"
      << "    float s[Cfg::kTileKV / 8][4];\n"
      << "    qk<Cfg>(s, smem_q, warp, smem_k, p.scale_log2); // S = Q K^T * scale, exp2 domain\n";
    if (kv.masked)
      o << "    // attn-mask-tiles: a partial tile: hide the keys this warp's rows may not see.\n"
        << "    apply_mask<Cfg>(s, q_start + warp * 16, j * Cfg::kTileKV, q_len, kv_len);\n";
    o << "    // attn-online-softmax: m_new = max(m, rowmax S); alpha = exp(m - m_new); P = exp(S - m_new);\n"
      << "    // l = alpha l + rowsum P; acc = alpha acc (attn-safe-init guards inside, see state.cuh).\n"
      << "    state.update(s);\n"
      << "    cp_async_wait<0>(); // V has arrived\n"
      << "    __syncthreads();\n"
      << "    accumulate_pv<Cfg>(state, s, smem_v); // acc += P V\n"
      << "    __syncthreads(); // the next tile overwrites K and V\n  }\n";
  }
  o << "\n  // attn-online-softmax: normalise once, at the end: out = acc / l"
    << (plan.lse ? ", lse = m + log l" : "") << ".\n"
    << "  store_output<Cfg>(state, out, "
    << (plan.lse ? "reinterpret_cast<float *>(p.lse) + q_begin * p.num_q_heads + head, p.num_q_heads"
                 : "nullptr, 0")
    << ", q_start + warp * 16);\n}\n";
  source = o.str();
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
