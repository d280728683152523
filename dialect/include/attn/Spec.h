//===- Spec.h - The attention spec a user writes ----------------*- C++ -*-===//
//
// A spec names everything that changes the generated kernel: mode, head_dim,
// dtype, tile sizes, mask, KV paging, GQA ratio, lse output, target and, for
// decode, split-KV. Everything else (batch, heads, lengths, block table,
// strides, softmax scale) is a run-time argument.
//
// The spec has one canonical text form, printed by `Spec::str()`, that names
// cache entries; `Spec::symbol()` derives a C identifier from it for AOT
// symbols. `parseSpec` reads the CLI form (any subset of `field=value` pairs,
// comma separated) and fills the rest with the target's defaults. This file
// depends on the C++ standard library only, so the parser can be fuzzed alone.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_SPEC_H
#define ATTN_SPEC_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attn {

enum class Mode { Prefill, Decode };
enum class DType { F16, BF16, F32, F64 };
enum class MaskKind { None, Causal, SlidingWindow };
enum class Target { SM80, SM90a, CPU };
/// The target a GPU of compute capability `major`.x builds for: sm_90a on
/// Hopper, sm_80 on every other (8.x and later).
inline Target gpuTarget(int major) { return major == 9 ? Target::SM90a : Target::SM80; }
/// The tensor-core instructions of a GPU prefill kernel: `auto` (the
/// measured choice, usesWgmma), `sync` (mma.sync, sm_80 and up), `wgmma`
/// (Hopper's warpgroup MMA reading shared memory directly; sm_90a) or
/// `wgmma_ws` (wgmma in a warp-specialised block: a third warpgroup copies
/// K and V into a ring of stages for two warpgroups that compute; sm_90a).
enum class MmaKind { Auto, Sync, Wgmma, WgmmaWs };

/// A mask: none, causal, or a causal sliding window of `window` keys.
/// Queries and keys are aligned at the bottom right: with q_len queries and
/// kv_len keys, query i sits at key position i + (kv_len - q_len).
struct Mask {
  MaskKind kind = MaskKind::None;
  int64_t window = 0; ///< Keys visible to a query, itself included (W >= 1).

  bool operator==(const Mask &o) const {
    return kind == o.kind && window == o.window;
  }
  /// `none`, `causal` or `sliding_window(W)`.
  std::string str() const;
};

/// Split-KV for decode: `auto` (0, chosen at run time from the grid and the
/// number of SMs) or a fixed number of splits.
constexpr int64_t kSplitKVAuto = 0;
/// The most KV splits a decode kernel takes (split_kv, or num_splits at launch).
constexpr int64_t kMaxSplitKV = 1024;
/// K/V stages in shared memory (the pipeline depth): `auto` (0, the measured
/// choice of kvStages) or a fixed number.
constexpr int64_t kStagesAuto = 0;

struct Spec {
  Mode mode = Mode::Prefill;
  int64_t head_dim = 128;
  DType dtype = DType::BF16;
  int64_t tile_q = 0;  ///< Query rows per tile (per query head).
  int64_t tile_kv = 0; ///< Keys per KV tile.
  Mask mask;
  int64_t page_size = 0; ///< 0: contiguous KV; else tokens per page.
  int64_t gqa = 1;       ///< num_q_heads / num_kv_heads.
  bool return_lse = false;
  Target target = Target::SM90a;
  int64_t split_kv = kSplitKVAuto; ///< Decode only.
  int64_t stages = kStagesAuto;    ///< GPU only: K/V tiles in shared memory.
  MmaKind mma = MmaKind::Auto;     ///< GPU prefill only: the tensor-core instructions.

  bool operator==(const Spec &o) const;
  bool operator!=(const Spec &o) const { return !(*this == o); }

  bool isGPU() const { return target != Target::CPU; }
  bool isPaged() const { return page_size > 0; }

  /// The canonical text form: every field, fixed order, `field=value`
  /// joined by commas (split_kv only for decode, stages and mma only when
  /// not auto).
  /// parseSpec(s.str()) == s.
  std::string str() const;
  /// A C identifier naming this spec, for AOT symbols and kernel names,
  /// e.g. `attn_prefill_hd128_bf16_q128_kv64_causal_p16_g4_sm90a`.
  std::string symbol() const;
};

/// An invalid spec: the field, the value as written and the rule it breaks.
struct SpecError {
  std::string field;
  std::string value;
  std::string rule;
  /// `invalid spec: <field> = <value>: <rule>`.
  std::string message() const;
};

/// Either a valid spec or the first error found.
struct SpecResult {
  std::optional<Spec> spec;
  std::optional<SpecError> error;
  explicit operator bool() const { return spec.has_value(); }
};

/// Parses `field=value,field=value,...` (spaces around tokens allowed, the
/// canonical form included), fills unset tile sizes and dtype with the
/// target's defaults and validates the result.
SpecResult parseSpec(const std::string &text);

/// Checks every rule of a fully filled spec; returns the first violation.
std::optional<SpecError> validateSpec(const Spec &spec);

/// Fills tile_q/tile_kv left at 0 with the target's defaults: a tuning
/// table's choice when one is installed (setTileTuner) and both are open,
/// else the built-in ones.
void applyDefaultTiles(Spec &spec);

/// Tile sizes `attnc tune` measured best for a kind of spec.
struct TunedTiles {
  int64_t tile_q = 0, tile_kv = 0;
  int64_t stages = kStagesAuto; ///< the pipeline depth measured with them (auto: not tuned)
};
/// Looks a spec up in a tuning table (by tuningKey); nullopt: not tuned.
using TileTuner = std::optional<TunedTiles> (*)(const Spec &);
/// Installs the process-wide tuner applyDefaultTiles consults (nullptr:
/// none, the built-in defaults only). Not thread-safe: install it at start.
void setTileTuner(TileTuner tuner);
/// The canonical form with tile_q = tile_kv = 0 and stages = auto: what a
/// tuning table is keyed by.
std::string tuningKey(const Spec &spec);
/// Whether the installed tuner (if any) has tiles for this kind of spec.
bool hasTunedTiles(const Spec &spec);
/// For a spec whose tiles (and pipeline depth) are those the installed
/// tuner gives its kind of spec: the same spec with the target's built-in
/// tiles instead, as parseSpec gives it with no tuning table. nullopt where
/// there is no tuner or no entry, where the spec's tiles are others, or
/// where the built-in ones are the same.
std::optional<Spec> untunedSpec(const Spec &spec);

/// Stages of K and V tiles a GPU kernel of this spec keeps in shared memory
/// (the pipeline depth): the spec's `stages` when set; else, measured on the
/// H200: decode 3 while two blocks fit in an SM, else 2; the warp-specialised
/// prefill block 3 with 128-key tiles, else 4; wgmma prefill 2 for head_dim
/// 64 (while two blocks fit), else 1; mma.sync prefill 2 for head_dim >= 64
/// while two blocks fit, else 1.
int64_t kvStages(const Spec &spec);
/// Shared memory a GPU kernel of this spec needs: the Q rows (prefill's
/// tile; 16 rows in decode) plus kvStages(spec) stages of K and V tiles.
int64_t sharedMemoryBytes(const Spec &spec);
/// Whether a GPU kernel of this spec runs on wgmma (a prefill spec's
/// `mma`; auto: the measured choice for the target and tiles).
bool usesWgmma(const Spec &spec);
/// Whether a GPU kernel of this spec is warp-specialised (`mma = wgmma_ws`,
/// and `auto`'s choice for sm_90a prefill where its tiles are given or
/// default: head_dim 128 on 128 x 64 or 128 x 128, head_dim 64 on 192 x 64
/// or 192 x 128): tile_q / 64 warpgroups compute 64 query rows each
/// (wsComputingThreads), one more copies the K/V tiles (kWsProducerThreads
/// threads).
bool warpSpecialised(const Spec &spec);
constexpr int kWsProducerThreads = 128;
/// tile_q of the warp-specialised block at head_dim 64: three computing warpgroups.
constexpr int64_t kWsTileQ64 = 192;
/// The computing threads of a warp-specialised block: a warpgroup of 128
/// per 64 query rows.
inline int wsComputingThreads(const Spec &spec) { return static_cast<int>(spec.tile_q / 64 * 128); }
/// Largest dynamic shared memory per block of a GPU target.
int64_t sharedMemoryLimit(Target target);

/// Why a GPU kernel of `spec` cannot be launched with this shape (the one
/// the emitter gives it, as a bundle's manifest or an edited kernel's launch
/// line says it), or "": threads a multiple of 32 in 32..1024; shared memory
/// within the target's limit; a decode kernel's merge kernel of 1..1024
/// threads (0..1024 for prefill, which has none); a cluster merge and a pair
/// kernel only for decode kernels of target sm_90a.
std::string launchShapeProblem(const Spec &spec, int64_t threads, int64_t sharedBytes,
                               int64_t mergeThreads, bool clusterMerge, int64_t pairSharedBytes);

/// The names and spellings used everywhere (CLI, attribute, C++).
const char *name(Mode m);
const char *name(DType d);
const char *name(Target t);
const char *name(MmaKind m);
int64_t bytesPerElement(DType d);

/// The field names in canonical order, for `--help` and error messages.
const std::vector<std::string> &specFieldNames();

/// Which KV tiles of one query tile a mask lets through. KV tiles are
/// [0, ceil(kv_len / tile_kv)); the ones in [lo, fullLo) and [fullHi, hi) are
/// partial (some keys masked, the tail tile past kv_len included), the ones
/// in [fullLo, fullHi) fully visible, the rest fully masked.
/// lo <= fullLo <= fullHi <= hi always holds.
struct TileRange {
  int64_t lo = 0, fullLo = 0, fullHi = 0, hi = 0;
  bool operator==(const TileRange &o) const {
    return lo == o.lo && fullLo == o.fullLo && fullHi == o.fullHi && hi == o.hi;
  }
};

/// Whether query `row` (0-based, < q_len) may see key `col` (< kv_len).
bool isVisible(const Mask &mask, int64_t row, int64_t col, int64_t qLen,
               int64_t kvLen);

/// Classifies the KV tiles seen by query rows [qStart, qStart + tileQ).
TileRange classifyTiles(const Mask &mask, int64_t qStart, int64_t tileQ,
                        int64_t tileKV, int64_t qLen, int64_t kvLen);

} // namespace attn

#endif // ATTN_SPEC_H
