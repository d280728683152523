//===- Spec.cpp - Parsing, printing and validating attention specs --------===//
//
// The rules live here and only here: the CLI, the `#attn.spec` attribute and
// the C++ API all go through parseSpec/validateSpec, so an invalid spec gets
// the same message wherever it was written.
//
//===----------------------------------------------------------------------===//

#include "attn/Spec.h"
#include "attn/Printable.h"
#include "attn/mask.cuh"

#include <algorithm>
#include <atomic>
#include <cctype>

namespace attn {

//===----------------------------------------------------------------------===//
// Names
//===----------------------------------------------------------------------===//

const char *name(Mode m) { return m == Mode::Prefill ? "prefill" : "decode"; }

const char *name(DType d) {
  switch (d) {
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::F32:
    return "f32";
  case DType::F64:
    return "f64";
  }
  return "?";
}

const char *name(MmaKind m) {
  switch (m) {
  case MmaKind::Auto:
    return "auto";
  case MmaKind::Sync:
    return "sync";
  case MmaKind::Wgmma:
    return "wgmma";
  case MmaKind::WgmmaWs:
    return "wgmma_ws";
  }
  return "?";
}

const char *name(Target t) {
  switch (t) {
  case Target::SM80:
    return "sm_80";
  case Target::SM90a:
    return "sm_90a";
  case Target::CPU:
    return "cpu";
  }
  return "?";
}

int64_t bytesPerElement(DType d) {
  switch (d) {
  case DType::F16:
  case DType::BF16:
    return 2;
  case DType::F32:
    return 4;
  case DType::F64:
    return 8;
  }
  return 0;
}

const std::vector<std::string> &specFieldNames() {
  static const std::vector<std::string> names = {
      "mode", "head_dim", "dtype",      "tile_q", "tile_kv", "mask",
      "page_size", "gqa", "return_lse", "target", "split_kv", "stages", "mma"};
  return names;
}

std::string Mask::str() const {
  switch (kind) {
  case MaskKind::None:
    return "none";
  case MaskKind::Causal:
    return "causal";
  case MaskKind::SlidingWindow:
    return "sliding_window(" + std::to_string(window) + ")";
  }
  return "?";
}

std::string SpecError::message() const {
  return "invalid spec: " + field + " = " + value + ": " + rule;
}

bool Spec::operator==(const Spec &o) const {
  return mode == o.mode && head_dim == o.head_dim && dtype == o.dtype &&
         tile_q == o.tile_q && tile_kv == o.tile_kv && mask == o.mask &&
         page_size == o.page_size && gqa == o.gqa &&
         return_lse == o.return_lse && target == o.target &&
         (mode == Mode::Prefill || split_kv == o.split_kv) && stages == o.stages &&
         mma == o.mma;
}

static std::string splitKVText(int64_t splits) {
  return splits == kSplitKVAuto ? "auto" : std::to_string(splits);
}

std::string Spec::str() const {
  std::string s = "mode=" + std::string(name(mode)) +
                  ",head_dim=" + std::to_string(head_dim) +
                  ",dtype=" + name(dtype) + ",tile_q=" + std::to_string(tile_q) +
                  ",tile_kv=" + std::to_string(tile_kv) + ",mask=" + mask.str() +
                  ",page_size=" + std::to_string(page_size) +
                  ",gqa=" + std::to_string(gqa) +
                  ",return_lse=" + (return_lse ? "true" : "false") +
                  ",target=" + name(target);
  if (mode == Mode::Decode)
    s += ",split_kv=" + splitKVText(split_kv);
  if (stages != kStagesAuto)
    s += ",stages=" + std::to_string(stages);
  if (mma != MmaKind::Auto)
    s += ",mma=" + std::string(name(mma));
  return s;
}

std::string Spec::symbol() const {
  std::string s = "attn_" + std::string(name(mode)) + "_hd" +
                  std::to_string(head_dim) + "_" + name(dtype) + "_q" +
                  std::to_string(tile_q) + "_kv" + std::to_string(tile_kv);
  switch (mask.kind) {
  case MaskKind::None:
    s += "_nomask";
    break;
  case MaskKind::Causal:
    s += "_causal";
    break;
  case MaskKind::SlidingWindow:
    s += "_sw" + std::to_string(mask.window);
    break;
  }
  s += "_p" + std::to_string(page_size) + "_g" + std::to_string(gqa);
  if (return_lse)
    s += "_lse";
  s += target == Target::SM80 ? "_sm80" : target == Target::SM90a ? "_sm90a" : "_cpu";
  if (mode == Mode::Decode)
    s += "_s" + splitKVText(split_kv);
  if (stages != kStagesAuto)
    s += "_st" + std::to_string(stages);
  if (mma != MmaKind::Auto)
    s += mma == MmaKind::Wgmma ? "_wg" : mma == MmaKind::WgmmaWs ? "_ws" : "_sync";
  return s;
}

//===----------------------------------------------------------------------===//
// Defaults and validation
//===----------------------------------------------------------------------===//

int64_t sharedMemoryLimit(Target target) {
  switch (target) {
  case Target::SM80:
    return 163 * 1024; // A100: 164 KB per SM, 163 KB per block.
  case Target::SM90a:
    return 227 * 1024; // H100/H200: 228 KB per SM, 227 KB per block.
  case Target::CPU:
    return 0;
  }
  return 0;
}

std::string launchShapeProblem(const Spec &spec, int64_t threads, int64_t sharedBytes,
                               int64_t mergeThreads, bool clusterMerge, int64_t pairSharedBytes) {
  const bool decode = spec.mode == Mode::Decode, sm90a = spec.target == Target::SM90a;
  const int64_t limit = sharedMemoryLimit(spec.target);
  auto outside = [&](const char *column, int64_t bytes) {
    return std::string(column) + " = " + std::to_string(bytes) + ": not in 0.." +
           std::to_string(limit) + " (the most a thread block of " + name(spec.target) + " gets)";
  };
  if (threads < 32 || threads > 1024 || threads % 32 != 0)
    return "threads = " + std::to_string(threads) + ": not a multiple of 32 in 32..1024";
  if (sharedBytes < 0 || sharedBytes > limit)
    return outside("shared_bytes", sharedBytes);
  if (mergeThreads < (decode ? 1 : 0) || mergeThreads > 1024)
    return "merge_threads = " + std::to_string(mergeThreads) +
           (decode ? ": a decode kernel's merge takes 1..1024 threads" : ": not in 0..1024");
  if (clusterMerge && !(decode && sm90a))
    return "cluster_merge = 1 is for decode kernels of target sm_90a";
  if (pairSharedBytes != 0 && !(decode && sm90a))
    return "pair_shared_bytes = " + std::to_string(pairSharedBytes) +
           " is for decode kernels of target sm_90a";
  if (pairSharedBytes < 0 || pairSharedBytes > limit)
    return outside("pair_shared_bytes", pairSharedBytes);
  return "";
}

/// The query rows a block keeps in shared memory: prefill's tile, or the 16
/// rows of one mma tile that decode blocks take at a time (a GQA group's
/// heads for the step's tokens, in passes of 16).
static int64_t sharedQRows(const Spec &spec) {
  return spec.mode == Mode::Decode ? 16 : spec.tile_q;
}

/// Bytes of a block's Q rows and `stages` stages of K and V tiles (and, in
/// a warp-specialised block, each stage's two mbarriers: filled and freed).
static int64_t stagedBytes(const Spec &spec, int64_t stages) {
  return (sharedQRows(spec) + 2 * stages * spec.tile_kv) * spec.head_dim *
             bytesPerElement(spec.dtype) +
         (warpSpecialised(spec) ? 16 * stages : 0);
}

int64_t kvStages(const Spec &spec) {
  if (spec.stages != kStagesAuto)
    return spec.stages;
  // As many as leave room for two blocks per SM (112 KiB each on sm_90a),
  // measured on the H200 (tests/gpu/RESULTS.md): prefill two (the next tile
  // loads while this one is computed; one for head dims under 64, which
  // measured no gain), decode three (two tiles loading ahead). Else the
  // fewest the loop takes: one for prefill, two for decode.
  constexpr int64_t twoBlocks = 112 * 1024;
  if (spec.mode == Mode::Decode)
    return stagedBytes(spec, 3) <= twoBlocks ? 3 : 2;
  // Warp-specialised (one block per SM), measured on the H200 with 128 x
  // 128 tiles (tests/gpu/RESULTS.md): three stages of 128 keys, four of 64.
  if (warpSpecialised(spec))
    return spec.tile_kv >= 128 ? 3 : 4;
  // wgmma, measured on the H200 with 64 x 64 tiles (tests/gpu/RESULTS.md):
  // head_dim 64 two stages (1-9 % faster than one); head_dim 128 one stage
  // (48 KiB: three blocks per SM instead of two; 5-12 % faster than two).
  if (usesWgmma(spec))
    return spec.head_dim <= 64 && stagedBytes(spec, 2) <= twoBlocks ? 2 : 1;
  return spec.head_dim >= 64 && stagedBytes(spec, 2) <= twoBlocks ? 2 : 1;
}

/// The shapes the wgmma kernels take: warpgroups of 64 query rows, K/V
/// tiles of 64 or 128 keys (one wgmma's N), head_dim 64 or 128.
static bool wgmmaShape(const Spec &spec) {
  return (spec.tile_q == 64 || spec.tile_q == 128) &&
         (spec.tile_kv == 64 || spec.tile_kv == 128) &&
         (spec.head_dim == 64 || spec.head_dim == 128);
}

bool usesWgmma(const Spec &spec) {
  if (spec.mode != Mode::Prefill || spec.target != Target::SM90a)
    return false;
  if (spec.mma != MmaKind::Auto)
    return spec.mma == MmaKind::Wgmma || spec.mma == MmaKind::WgmmaWs;
  // Measured on the H200 (tests/gpu/RESULTS.md): wgmma beat mma.sync on
  // every prefill row of head_dim 64 and 128 with its best tiles; the
  // warp-specialised block (auto's choice where it takes the tiles) is wgmma too.
  return wgmmaShape(spec) || warpSpecialised(spec);
}

/// The shapes the warp-specialised block takes: K/V tiles of 64 or 128
/// keys, and either head_dim 128 with two warpgroups of 64 query rows
/// (tile_q 128) or head_dim 64 with three (tile_q kWsTileQ64). The
/// registers set the limit: 384 threads get 168 each, 512 get 128, and what
/// the copying warpgroup gives back leaves the computing ones 224 at
/// head_dim 128 and 160 at head_dim 64 (WsRegisters in attn/warpspec.cuh).
static bool warpSpecialisedShape(const Spec &spec) {
  const bool tiles = spec.tile_kv == 64 || spec.tile_kv == 128;
  return tiles && ((spec.head_dim == 128 && spec.tile_q == 128) ||
                   (spec.head_dim == 64 && spec.tile_q == kWsTileQ64));
}

bool warpSpecialised(const Spec &spec) {
  if (spec.mode != Mode::Prefill || spec.target != Target::SM90a)
    return false;
  if (spec.mma != MmaKind::Auto)
    return spec.mma == MmaKind::WgmmaWs;
  // auto: measured on the H200 (tests/gpu/RESULTS.md), 128 x 128 tiles in
  // the warp-specialised block beat the wgmma block's best tiles (64 x 64)
  // on every head_dim 128 row, 1-24 %; it takes the tiles and a ring of two
  // stages at least.
  return warpSpecialisedShape(spec) && (spec.stages == kStagesAuto || spec.stages >= 2);
}

int64_t sharedMemoryBytes(const Spec &spec) { return stagedBytes(spec, kvStages(spec)); }

// Set once (the tuning table's installation) and read by any thread that
// parses a spec: an atomic, so readers see the table the setter published.
static std::atomic<TileTuner> tileTuner{nullptr};

void setTileTuner(TileTuner tuner) { tileTuner.store(tuner, std::memory_order_release); }

bool hasTunedTiles(const Spec &spec) {
  const TileTuner tuner = tileTuner.load(std::memory_order_acquire);
  return tuner && tuner(spec).has_value();
}

std::string tuningKey(const Spec &spec) {
  Spec key = spec;
  key.tile_q = key.tile_kv = 0;
  key.stages = kStagesAuto;
  return key.str();
}

static void applyBuiltInTiles(Spec &spec);

/// The tuner's tiles for `spec`, whose tiles are left open (a decode spec's
/// tile_q aside), as a valid spec; nullopt where there is none.
static std::optional<Spec> tunedSpec(const Spec &spec, TileTuner tuner) {
  // A decode spec's tile_q is its query tokens per sequence, a size of the
  // call (attn::attention and the C API set it), not a tuned one: its tuned
  // tile_kv (and depth) applies whatever tile_q it gives.
  const bool decode = spec.mode == Mode::Decode;
  if (!tuner || spec.tile_kv != 0 || (spec.tile_q != 0 && !decode))
    return std::nullopt;
  std::optional<TunedTiles> tuned = tuner(spec);
  if (!tuned)
    return std::nullopt;
  Spec t = spec;
  // (A decode spec that leaves it open takes one token, the default, not
  // the table's tile_q, which a hand-written line may set.)
  t.tile_q = decode ? (spec.tile_q ? spec.tile_q : 1) : tuned->tile_q;
  t.tile_kv = tuned->tile_kv;
  if (t.stages == kStagesAuto)
    t.stages = tuned->stages; // measured with those tiles
  if (validateSpec(t))
    return std::nullopt;
  return t;
}

void applyDefaultTiles(Spec &spec) {
  // A tuning table's choice first (`attnc tune`), when the tiles are left
  // open and the choice is a valid spec; else the built-in defaults.
  if (std::optional<Spec> tuned = tunedSpec(spec, tileTuner.load(std::memory_order_acquire)))
    spec = *tuned;
  else
    applyBuiltInTiles(spec);
}

std::optional<Spec> untunedSpec(const Spec &spec) {
  const TileTuner tuner = tileTuner.load(std::memory_order_acquire);
  std::optional<TunedTiles> tuned = tuner ? tuner(spec) : std::nullopt;
  if (!tuned)
    return std::nullopt;
  // The spec with its tiles open again (and its depth, where the table set
  // it): if the table fills them as they are, they are the table's.
  Spec open = spec;
  open.tile_kv = 0;
  if (spec.mode != Mode::Decode)
    open.tile_q = 0;
  if (tuned->stages != kStagesAuto && spec.stages == tuned->stages)
    open.stages = kStagesAuto;
  std::optional<Spec> byTable = tunedSpec(open, tuner);
  if (!byTable || !(*byTable == spec))
    return std::nullopt;
  Spec builtIn = open;
  applyBuiltInTiles(builtIn);
  if (builtIn == spec || validateSpec(builtIn))
    return std::nullopt;
  return builtIn;
}

/// The target's own tiles for those left at 0 (no tuning table).
static void applyBuiltInTiles(Spec &spec) {
  int64_t q = 64, kv = 64;
  if (spec.mode == Mode::Decode) {
    q = 1; // One query token per sequence; GQA packs the group's heads.
    kv = 64;
  } else if (spec.isGPU()) {
    // Measured on the H200 (tests/gpu/RESULTS.md): head_dim 64 runs fastest
    // with 128-key tiles taken 64 keys per step; head_dim 128 with two tiles
    // in flight (the emitter picks the step and the stages, see
    // prefillLayout in EmitCuda.cpp): 32-key tiles without a mask, 64-key tiles (taken 32
    // keys per step) under a causal or window mask, 2 % faster there and
    // 0.2-1 % slower without one.
    const bool hd128 = spec.head_dim > 96 && spec.head_dim <= 128;
    q = spec.head_dim <= 128 ? 128 : 64;
    // head_dim 240 (no multiple of 64: unswizzled tiles): 64-key tiles
    // spilled at 255 registers in ptxas (20-44 bytes); 32-key tiles do not.
    const bool hd240 = spec.head_dim > 224 && spec.head_dim % 64 != 0;
    kv = spec.head_dim <= 64                                   ? 128
         : (hd128 && spec.mask.kind == MaskKind::None) || hd240 ? 32
                                                               : 64;
    // sm_90a, head_dim 128: the warp-specialised block (warpSpecialised) on
    // 128 x 128 tiles, one block per SM; 1-24 % faster on the H200 than the
    // wgmma block's best tiles, with and without a causal mask.
    // sm_90a, head_dim 64 (and 128 under mma = wgmma): wgmma (usesWgmma) on
    // 64 x 64 tiles, two or three blocks per SM; the fastest of the wgmma
    // block's tiles on the H200 for both head dims, with and without a
    // causal mask (128 x 128 was up to 4 % faster on the longest head_dim
    // 128 rows, 5-7 % slower at N = 1024). Since then, head_dim 64 without
    // a mask measured faster on 64 x 128 (two stages, three blocks per SM):
    // 3.5 % at 1024 query rows, 1.8 % at 4096, 1.5 % slower at 16384 (where
    // the runtime takes the warp-specialised block); under a causal mask
    // 64 x 128 was 2.9 % slower at 1024, so masks keep 64 x 64.
    // sm_90a, head_dim 64 under mma = wgmma_ws, or with tile_q 192 given:
    // the warp-specialised block of three computing warpgroups on 192 x 128
    // tiles (on the H200 13-20 % faster than the wgmma block on the longer
    // rows, 7-25 % slower at 1024 query rows, tests/gpu/RESULTS.md; the
    // runtime takes it by the call's length, attn::longPrefillTiles).
    // A tile the spec gives keeps these only if the block takes the pair.
    Spec ws = spec, wg = spec;
    ws.tile_q = spec.tile_q ? spec.tile_q
                : spec.head_dim == 64 && spec.mma == MmaKind::WgmmaWs ? kWsTileQ64
                                                                       : 128;
    ws.tile_kv = spec.tile_kv ? spec.tile_kv : 128;
    wg.tile_q = spec.tile_q ? spec.tile_q : 64;
    wg.tile_kv = spec.tile_kv ? spec.tile_kv : 64;
    if (warpSpecialised(ws)) {
      q = ws.tile_q;
      kv = ws.tile_kv;
    }
    else if (spec.target == Target::SM90a && spec.mma != MmaKind::Sync && wgmmaShape(wg)) {
      q = 64;
      kv = spec.head_dim == 64 && wg.tile_q == 64 && spec.mask.kind == MaskKind::None ? 128 : 64;
    }
  }
  if (spec.tile_q == 0)
    spec.tile_q = q;
  if (spec.tile_kv == 0)
    spec.tile_kv = kv;
}

static SpecError err(const std::string &field, int64_t value,
                     const std::string &rule) {
  return {field, std::to_string(value), rule};
}

/// mma = wgmma_ws on a shape the warp-specialised block does not take.
static SpecError wgmmaWsShapeError(const Spec &s) {
  return {"mma", "wgmma_ws",
          "takes head_dim 128 with tile_q 128, or head_dim 64 with tile_q 192, and tile_kv 64 "
          "or 128 (here " +
              std::to_string(s.head_dim) + ", " + std::to_string(s.tile_q) + " x " +
              std::to_string(s.tile_kv) + ")"};
}

std::optional<SpecError> validateSpec(const Spec &s) {
  const bool gpu = s.isGPU();
  if (s.head_dim < 32 || s.head_dim > 256)
    return err("head_dim", s.head_dim, "must be in 32..256");
  if (gpu && s.head_dim % 16 != 0)
    return err("head_dim", s.head_dim,
               std::string("must be a multiple of 16 on target = ") + name(s.target));
  if (gpu && (s.dtype == DType::F32 || s.dtype == DType::F64))
    return SpecError{"dtype", name(s.dtype),
                     std::string("target = ") + name(s.target) +
                         " supports f16 and bf16 (f32 and f64 run on target = cpu)"};
  if (!gpu && (s.dtype == DType::F16 || s.dtype == DType::BF16))
    return SpecError{"dtype", name(s.dtype),
                     "target = cpu supports f32 and f64 (f16 and bf16 run on sm_80 and sm_90a)"};
  if (s.gqa < 1 || s.gqa > 256)
    return err("gqa", s.gqa, "must be in 1..256 (num_q_heads / num_kv_heads)");
  if (s.page_size < 0 || s.page_size > 65536)
    return err("page_size", s.page_size,
               "must be 0 (contiguous KV) or a number of tokens per page in 1..65536");
  if (s.mask.kind == MaskKind::SlidingWindow && s.mask.window < 1)
    return SpecError{"mask", s.mask.str(), "the window must be >= 1 key"};

  // Tiles.
  if (!gpu) {
    if (s.tile_q < 1 || s.tile_q > 4096)
      return err("tile_q", s.tile_q, "must be in 1..4096 on target = cpu");
    if (s.tile_kv < 1 || s.tile_kv > 4096)
      return err("tile_kv", s.tile_kv, "must be in 1..4096 on target = cpu");
  } else {
    if (s.mode == Mode::Prefill &&
        (s.tile_q < 16 || s.tile_q > 256 || s.tile_q % 16 != 0))
      return err("tile_q", s.tile_q,
                 "must be a multiple of 16 in 16..256 for mode = prefill on a GPU target");
    if (s.mode == Mode::Decode && (s.tile_q < 1 || s.tile_q > 16))
      return err("tile_q", s.tile_q,
                 "must be in 1..16 query tokens for mode = decode on a GPU target");
    if (s.tile_kv < 16 || s.tile_kv > 256 || s.tile_kv % 16 != 0)
      return err("tile_kv", s.tile_kv,
                 "must be a multiple of 16 in 16..256 on a GPU target");
    if (s.mode == Mode::Decode && s.tile_q * s.gqa > 128)
      return err("gqa", s.gqa,
                 "tile_q * gqa = " + std::to_string(s.tile_q * s.gqa) +
                     " query rows exceed 128 per thread block in mode = decode");
    // The loops the emitter prints: prefill's keeps the next tile loading
    // (2) or none (1); decode's keeps stages - 1 tiles loading ahead.
    if (s.mode == Mode::Prefill && !warpSpecialised(s) && (s.stages < 0 || s.stages > 2))
      return err("stages", s.stages, "must be auto, 1 or 2 for mode = prefill");
    // A warp-specialised block's ring: the copy of a stage waits for the
    // consumers to free it, so it needs two at least (said once the block
    // can take the spec's shape at all).
    if (s.mma == MmaKind::WgmmaWs && s.target == Target::SM90a && s.mode == Mode::Prefill &&
        !warpSpecialisedShape(s))
      return wgmmaWsShapeError(s);
    if (warpSpecialised(s) && s.stages != kStagesAuto && (s.stages < 2 || s.stages > 8))
      return err("stages", s.stages,
                 "must be auto or 2..8 in the warp-specialised block (sm_90a prefill: head_dim "
                 "128 on tiles 128 x 64 or 128 x 128, head_dim 64 on 192 x 64 or 192 x 128)");
    if (s.mode == Mode::Decode && s.stages != kStagesAuto && (s.stages < 2 || s.stages > 4))
      return err("stages", s.stages, "must be auto or 2..4 for mode = decode");
    int64_t bytes = sharedMemoryBytes(s), limit = sharedMemoryLimit(s.target);
    if (bytes > limit) {
      const std::string why =
          "tiles do not fit: the Q tile and " + std::to_string(kvStages(s)) +
          (kvStages(s) == 1 ? " stage" : " stages") + " of K and V tiles of " +
          std::to_string(s.tile_kv) + " keys need " + std::to_string(bytes) +
          " bytes of shared memory, target = " + name(s.target) + " has " +
          std::to_string(limit) + " per block";
      // A depth given by hand that the automatic one would not exceed is what to change.
      Spec automatic = s;
      automatic.stages = kStagesAuto;
      if (s.stages != kStagesAuto && sharedMemoryBytes(automatic) <= limit)
        return err("stages", s.stages, why);
      return err("tile_kv", s.tile_kv, why);
    }
  }
  if (!gpu && s.stages != kStagesAuto)
    return err("stages", s.stages, "applies to GPU targets only (the CPU has no shared memory)");
  if (s.mma != MmaKind::Auto && (!gpu || s.mode != Mode::Prefill))
    return SpecError{"mma", name(s.mma), "applies to GPU prefill kernels only"};
  if ((s.mma == MmaKind::Wgmma || s.mma == MmaKind::WgmmaWs) && s.target != Target::SM90a)
    return SpecError{"mma", name(s.mma), std::string("needs target = sm_90a, not ") + name(s.target)};
  if (s.mma == MmaKind::WgmmaWs && !warpSpecialisedShape(s))
    return wgmmaWsShapeError(s);
  if (s.mma == MmaKind::Wgmma && !wgmmaShape(s))
    return SpecError{"mma", "wgmma",
                     "takes head_dim 64 or 128 with tile_q and tile_kv of 64 or 128 (here " +
                         std::to_string(s.head_dim) + ", " + std::to_string(s.tile_q) + " x " +
                         std::to_string(s.tile_kv) + ")"};
  if (s.mode == Mode::Decode && (s.split_kv < 0 || s.split_kv > kMaxSplitKV))
    return err("split_kv", s.split_kv,
               "must be auto or a number of splits in 1.." + std::to_string(kMaxSplitKV));
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

static std::string trim(const std::string &s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b])))
    ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1])))
    --e;
  return s.substr(b, e - b);
}

/// A non-negative decimal integer of at most 9 digits, nothing else.
static std::optional<int64_t> parseCount(const std::string &s) {
  if (s.empty() || s.size() > 9)
    return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

/// Prints a value for an error message, cut short if it is long, with the
/// bytes that do not print (a line end, a non-ASCII byte) as \xNN.
static std::string quoted(const std::string &s) {
  return "'" + printable(std::string_view(s).substr(0, 40)) + (s.size() > 40 ? "...'" : "'");
}

namespace {
/// Reads one `field=value` pair into a spec under construction.
struct Reader {
  Spec spec;
  bool dtypeSet = false;
  std::vector<std::string> seen;

  std::optional<SpecError> bad(const std::string &field, const std::string &value,
                               const std::string &rule) {
    return SpecError{field, quoted(value), rule};
  }

  /// `rule` for a value parseCount refused, unless the value is a whole
  /// number too long for it: then that is what is wrong with it (with
  /// `subject` naming the number when the value holds more than it).
  static std::string numberRule(const std::string &digits, const std::string &rule,
                                const std::string &subject = "") {
    const bool allDigits = !digits.empty() &&
        digits.find_first_not_of("0123456789") == std::string::npos;
    if (!allDigits || digits.size() <= 9)
      return rule;
    return (subject.empty() ? "" : subject + " has ") +
           "more than 9 digits (numbers in a spec stop below 10^9)";
  }

  std::optional<SpecError> count(const std::string &field, const std::string &value,
                                 int64_t &out) {
    auto v = parseCount(value);
    if (!v)
      return bad(field, value, numberRule(value, "expected a non-negative integer"));
    out = *v;
    return std::nullopt;
  }

  std::optional<SpecError> read(const std::string &field, const std::string &value) {
    if (field == "mode") {
      if (value == "prefill")
        spec.mode = Mode::Prefill;
      else if (value == "decode")
        spec.mode = Mode::Decode;
      else
        return bad(field, value, "expected prefill or decode");
    } else if (field == "head_dim") {
      return count(field, value, spec.head_dim);
    } else if (field == "dtype") {
      dtypeSet = true;
      if (value == "f16")
        spec.dtype = DType::F16;
      else if (value == "bf16")
        spec.dtype = DType::BF16;
      else if (value == "f32")
        spec.dtype = DType::F32;
      else if (value == "f64")
        spec.dtype = DType::F64;
      else
        return bad(field, value, "expected f16, bf16, f32 or f64");
    } else if (field == "tile_q") {
      if (auto e = count(field, value, spec.tile_q))
        return e;
      if (spec.tile_q == 0)
        return bad(field, value, "must be >= 1 (leave it out for the target's default)");
    } else if (field == "tile_kv") {
      if (auto e = count(field, value, spec.tile_kv))
        return e;
      if (spec.tile_kv == 0)
        return bad(field, value, "must be >= 1 (leave it out for the target's default)");
    } else if (field == "mask") {
      return readMask(value);
    } else if (field == "page_size") {
      return count(field, value, spec.page_size);
    } else if (field == "gqa") {
      return count(field, value, spec.gqa);
    } else if (field == "return_lse") {
      if (value == "true")
        spec.return_lse = true;
      else if (value == "false")
        spec.return_lse = false;
      else
        return bad(field, value, "expected true or false");
    } else if (field == "target") {
      if (value == "sm_80")
        spec.target = Target::SM80;
      else if (value == "sm_90a")
        spec.target = Target::SM90a;
      else if (value == "cpu")
        spec.target = Target::CPU;
      else
        return bad(field, value, "expected sm_80, sm_90a or cpu");
    } else if (field == "split_kv") {
      if (value == "auto") {
        spec.split_kv = kSplitKVAuto;
        return std::nullopt;
      }
      if (auto e = count(field, value, spec.split_kv))
        return bad(field, value, numberRule(value, "expected auto or a number of splits >= 1"));
      if (spec.split_kv == 0)
        return bad(field, value, "expected auto or a number of splits >= 1");
    } else if (field == "stages") {
      if (value == "auto") {
        spec.stages = kStagesAuto;
        return std::nullopt;
      }
      if (count(field, value, spec.stages) || spec.stages == 0)
        return bad(field, value,
                   numberRule(value, "expected auto or a number of K/V stages >= 1"));
    } else if (field == "mma") {
      if (value == "auto")
        spec.mma = MmaKind::Auto;
      else if (value == "sync")
        spec.mma = MmaKind::Sync;
      else if (value == "wgmma")
        spec.mma = MmaKind::Wgmma;
      else if (value == "wgmma_ws")
        spec.mma = MmaKind::WgmmaWs;
      else
        return bad(field, value, "expected auto, sync, wgmma or wgmma_ws");
    }
    return std::nullopt;
  }

  std::optional<SpecError> readMask(const std::string &value) {
    if (value == "none") {
      spec.mask = {MaskKind::None, 0};
      return std::nullopt;
    }
    if (value == "causal") {
      spec.mask = {MaskKind::Causal, 0};
      return std::nullopt;
    }
    const std::string prefix = "sliding_window(";
    if (value.compare(0, prefix.size(), prefix) == 0 && value.back() == ')') {
      std::string w = trim(value.substr(prefix.size(), value.size() - prefix.size() - 1));
      auto v = parseCount(w);
      if (!v)
        return bad("mask", value,
                   numberRule(w, "the window of sliding_window(W) must be an integer >= 1",
                              "the window of sliding_window(W)"));
      spec.mask = {MaskKind::SlidingWindow, *v};
      return std::nullopt;
    }
    return bad("mask", value, "expected none, causal or sliding_window(W)");
  }
};
} // namespace

SpecResult parseSpec(const std::string &text) {
  Reader r;
  size_t pos = 0;
  const std::string body = trim(text);
  while (!body.empty() && pos <= body.size()) {
    size_t comma = body.find(',', pos);
    std::string item = trim(body.substr(pos, comma == std::string::npos ? std::string::npos
                                                                         : comma - pos));
    pos = comma == std::string::npos ? body.size() + 1 : comma + 1;
    size_t eq = item.find('=');
    if (item.empty())
      return {std::nullopt, SpecError{"spec", quoted(item),
                                      "an empty field=value between commas (a stray comma?)"}};
    if (eq == std::string::npos) {
      SpecError e{"spec", quoted(item), "expected field=value"};
      return {std::nullopt, e};
    }
    std::string field = trim(item.substr(0, eq)), value = trim(item.substr(eq + 1));
    const auto &known = specFieldNames();
    if (std::find(known.begin(), known.end(), field) == known.end()) {
      std::string list;
      for (const auto &k : known)
        list += (list.empty() ? "" : ", ") + k;
      return {std::nullopt, SpecError{quoted(field), quoted(value),
                                      "unknown field (known fields: " + list + ")"}};
    }
    if (std::find(r.seen.begin(), r.seen.end(), field) != r.seen.end())
      return {std::nullopt, SpecError{field, quoted(value), "field given twice"}};
    r.seen.push_back(field);
    if (value.empty())
      return {std::nullopt, SpecError{field, "''", "missing value"}};
    if (auto e = r.read(field, value))
      return {std::nullopt, e};
  }

  Spec spec = r.spec;
  bool splitSet = std::find(r.seen.begin(), r.seen.end(), "split_kv") != r.seen.end();
  if (spec.mode == Mode::Prefill && splitSet)
    return {std::nullopt, SpecError{"split_kv", splitKVText(spec.split_kv),
                                    "applies to mode = decode only"}};
  if (!r.dtypeSet)
    spec.dtype = spec.isGPU() ? DType::BF16 : DType::F32;
  applyDefaultTiles(spec);
  if (auto e = validateSpec(spec))
    return {std::nullopt, e};
  return {spec, std::nullopt};
}

//===----------------------------------------------------------------------===//
// Masks and tile classification
//===----------------------------------------------------------------------===//

/// The mask's code in the templates shared with the GPU kernels.
static int maskCode(const Mask &mask) {
  switch (mask.kind) {
  case MaskKind::None:
    return kernel::kMaskNone;
  case MaskKind::Causal:
    return kernel::kMaskCausal;
  case MaskKind::SlidingWindow:
    return kernel::kMaskWindow;
  }
  return kernel::kMaskNone;
}

// The rules live in templates/attn/mask.cuh, so that the host (this library,
// the runtime's checks, the tests) and the CUDA kernels share one copy.
bool isVisible(const Mask &mask, int64_t row, int64_t col, int64_t qLen, int64_t kvLen) {
  return kernel::is_visible<int64_t>(maskCode(mask), mask.window, row, col, qLen, kvLen);
}

TileRange classifyTiles(const Mask &mask, int64_t qStart, int64_t tileQ, int64_t tileKV,
                        int64_t qLen, int64_t kvLen) {
  kernel::TileRange r =
      kernel::classify_tiles(maskCode(mask), mask.window, qStart, tileQ, tileKV, qLen, kvLen);
  return {r.lo, r.full_lo, r.full_hi, r.hi};
}

} // namespace attn
