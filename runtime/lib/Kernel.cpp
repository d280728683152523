//===- Kernel.cpp - Argument checks and launches ---------------------------===//

#include "attnc/Kernel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

namespace attn {

namespace {
constexpr int64_t kGridLimit = 65535; ///< grid y and z
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr double kLog2e = 1.4426950408889634; ///< log2(e): exp(x) = exp2(x * log2 e)

std::string str(int64_t v) { return std::to_string(v); }

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// "q is not 16-byte aligned (0x...)" or "".
std::string misaligned(const char *what, CUdeviceptr p, unsigned align) {
  if (p % align == 0)
    return "";
  char hex[32];
  std::snprintf(hex, sizeof(hex), "%#llx", static_cast<unsigned long long>(p));
  return std::string(what) + " = " + hex + " is not " + std::to_string(align) +
         "-byte aligned";
}
} // namespace

int chooseSplits(const Spec &spec, const AttentionArgs &args, int sm_count, int blocks_per_sm,
                 const std::function<bool(int splits)> &merges_in_cluster) {
  if (spec.mode != Mode::Decode)
    return 1;
  if (args.num_splits > 0)
    return args.num_splits;
  if (spec.split_kv != kSplitKVAuto)
    return static_cast<int>(spec.split_kv);
  const int64_t blocks = std::max<int64_t>(1, int64_t(args.batch) * std::max(1, args.num_kv_heads));
  const int64_t sms = std::max(1, sm_count);
  const int64_t slots = sms * std::max(1, blocks_per_sm);
  // A wave of `n` blocks, in waves of `slots`: HBM is busy once every SM has a
  // block, so fewer take as long as `sms` of them; an SM with a lone block
  // streams slower than one with more, the more so with one tile in flight.
  const double lone = kvStages(spec) > 2 ? kLoneBlockSlowdown : kLoneBlockSlowdownOneTile;
  auto waveTime = [&](int64_t n) {
    const int64_t perSm = n / sms, rest = n % sms;
    const int64_t lonely = perSm == 0 ? rest : perSm == 1 ? sms - rest : 0;
    return double(std::max(n, sms)) / double(slots) * (1.0 + lone * double(lonely) / double(sms));
  };
  const double fullWave = waveTime(slots);
  const int64_t tiles = ceilDiv(std::max<int64_t>(args.max_kv_len, 1), spec.tile_kv);
  // Splits of at least two tiles, at most 64 of them.
  const int64_t most = std::clamp<int64_t>(tiles / 2, 1, 64);
  int64_t best = 1;
  double bestCost = std::numeric_limits<double>::infinity();
  for (int64_t s = 1; s <= most; ++s) {
    const bool mergeKernel = s > 1 && !(merges_in_cluster && merges_in_cluster(static_cast<int>(s)));
    // Each block works through its share of the tiles plus one, in full waves
    // and a last one; in tiles of a full wave's time.
    const int64_t perBlock = ceilDiv(tiles, s) + 1, full = blocks * s / slots, rest = blocks * s % slots;
    const double cost = double(perBlock) * (double(full) * fullWave + (rest ? waveTime(rest) : 0.0)) +
                        (mergeKernel ? kMergeKernelTiles : 0.0);
    if (cost < bestCost) {
      best = s;
      bestCost = cost;
    }
  }
  return static_cast<int>(best);
}

size_t workspaceBytes(const Spec &spec, const AttentionArgs &args, int splits) {
  if (spec.mode != Mode::Decode || splits <= 1 || args.total_q <= 0 || args.num_q_heads <= 0)
    return 0;
  // SIZE_MAX where the product would not fit (arguments validateArgs refuses).
  size_t bytes = sizeof(float);
  for (size_t factor : {size_t(splits), size_t(args.total_q), size_t(args.num_q_heads),
                        size_t(spec.head_dim + 1)})
    if (__builtin_mul_overflow(bytes, factor, &bytes))
      return SIZE_MAX;
  return bytes;
}

std::string validateSizes(const Spec &spec, const AttentionArgs &a, int splits,
                          bool without_workspace) {
  if (!spec.isGPU())
    return "the spec's target is cpu: GPU launches need target = sm_80 or sm_90a";
  if (a.batch < 0)
    return "batch = " + str(a.batch) + " is negative";
  if (a.batch > kGridLimit)
    return "batch = " + str(a.batch) + " is over the grid limit of " + str(kGridLimit);
  if (a.num_kv_heads < 1)
    return "num_kv_heads = " + str(a.num_kv_heads) + " must be >= 1";
  if (int64_t(a.num_q_heads) != spec.gqa * a.num_kv_heads)
    return "num_q_heads = " + str(a.num_q_heads) + " but the spec's gqa = " + str(spec.gqa) +
           " with num_kv_heads = " + str(a.num_kv_heads) + " needs " +
           str(spec.gqa * a.num_kv_heads);
  if (a.num_q_heads > kGridLimit)
    return "num_q_heads = " + str(a.num_q_heads) + " is over the grid limit of " + str(kGridLimit);
  if (a.total_q < 0 || a.total_kv < 0 || a.max_q_len < 0 || a.max_kv_len < 0)
    return "total_q, total_kv, max_q_len and max_kv_len must be >= 0";
  // The offsets are int32: no total past them.
  if (a.total_q > kInt32Max || a.total_kv > kInt32Max)
    return "total_q = " + str(a.total_q) + ", total_kv = " + str(a.total_kv) +
           ": the int32 offsets (cu_seqlens) take totals below 2^31";
  if (a.max_q_len > a.total_q)
    return "max_q_len = " + str(a.max_q_len) + " is more than total_q = " + str(a.total_q);
  // Queries with no longest sequence: a forgotten max_q_len would launch nothing.
  if (a.max_q_len == 0 && a.total_q > 0 && a.batch > 0)
    return "max_q_len = 0 but total_q = " + str(a.total_q) +
           ": max_q_len is the longest sequence's query tokens";
  if (a.num_splits < 0)
    return "num_splits = " + str(a.num_splits) + " is negative (0: the spec's split_kv)";
  if (a.max_q_len > kInt32Max || a.max_kv_len > kInt32Max)
    return "sequences longer than 2^31 - 1 tokens are not supported";
  if (spec.mode == Mode::Decode) {
    // A decode block's rows are a sequence's tokens times the group's heads, an int.
    if (a.max_q_len * spec.gqa > kInt32Max)
      return "max_q_len = " + str(a.max_q_len) + " query tokens of gqa = " + str(spec.gqa) +
             " heads each make more than 2^31 - 1 rows for a decode block";
    if (splits < 1 || splits > kMaxSplitKV)
      return "num_splits = " + str(splits) + " must be in 1.." + str(kMaxSplitKV);
    // A size past int64 would read negative where it is returned as one
    // (attn::attentionWorkspaceBytes, the launch's messages).
    if (!without_workspace &&
        workspaceBytes(spec, a, splits) > size_t(std::numeric_limits<int64_t>::max()))
      return str(splits) + " KV splits of total_q = " + str(a.total_q) +
             " queries would need a workspace of 2^63 bytes or more";
  } else if (a.num_splits > 1) {
    return "num_splits = " + str(a.num_splits) + ": prefill kernels do not split the KV range";
  }
  return "";
}

std::string validateArgs(const Spec &spec, const AttentionArgs &a, int splits,
                         bool without_workspace) {
  if (std::string bad = validateSizes(spec, a, splits, without_workspace); !bad.empty())
    return bad;
  if (!std::isfinite(a.scale) || a.scale < 0)
    return "scale = " + std::to_string(a.scale) + " must be finite and >= 0 (0: 1/sqrt(head_dim))";
  // The kernel takes scale * log2(e) as an f32 (its exponent is in base 2).
  if (a.scale * kLog2e > std::numeric_limits<float>::max()) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", a.scale);
    return "scale = " + std::string(text) +
           " is too large: scale x log2(e) must fit in f32, the type the scores are computed in";
  }
  // A positive scale below f32's normal range would be a factor of 0 there, and
  // a masked score's -inf x 0 a NaN.
  if (a.scale > 0 && a.scale * kLog2e < std::numeric_limits<float>::min()) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", a.scale);
    return "scale = " + std::string(text) +
           " is too small: scale x log2(e) must be a normal f32 (>= 1.18e-38), the type the "
           "scores are computed in (0: 1/sqrt(head_dim))";
  }
  // 16 bytes: the tiles are copied in 16-byte pieces; 4: int32 arrays.
  struct Pointer {
    const char *what;
    CUdeviceptr p;
    unsigned align;
  };
  for (Pointer x : {Pointer{"q", a.q, 16}, Pointer{"k", a.k, 16}, Pointer{"v", a.v, 16},
                    Pointer{"o", a.o, 16}, Pointer{"cu_seqlens_q", a.cu_seqlens_q, 4}}) {
    if (!x.p)
      return std::string(x.what) + " is a null pointer";
    if (std::string m = misaligned(x.what, x.p, x.align); !m.empty())
      return m;
  }
  if (spec.return_lse) {
    if (!a.lse)
      return "lse is a null pointer, and the spec has return_lse = true";
    if (std::string m = misaligned("lse", a.lse, 4); !m.empty())
      return m;
  }
  if (spec.isPaged()) {
    if (!a.seq_lens_k || !a.block_table)
      return std::string(!a.seq_lens_k ? "seq_lens_k" : "block_table") +
             " is a null pointer, and the spec pages the KV cache (page_size = " +
             str(spec.page_size) + ")";
    for (auto [what, p] : {std::pair<const char *, CUdeviceptr>{"seq_lens_k", a.seq_lens_k},
                           {"block_table", a.block_table}})
      if (std::string m = misaligned(what, p, 4); !m.empty())
        return m;
    if (a.num_pages < 1 || a.num_pages > kInt32Max / spec.page_size)
      return "num_pages = " + str(a.num_pages) + ": a paged cache of " + str(spec.page_size) +
             "-token pages needs 1.." + str(kInt32Max / spec.page_size) +
             " pages (the kernels index its tokens with 32 bits)";
    const KVStrides st = kvStrides(spec, a);
    for (auto [what, v] : {std::pair<const char *, int64_t>{"kv_page_stride", a.kv_page_stride},
                           {"kv_token_stride", a.kv_token_stride}, {"kv_head_stride", a.kv_head_stride}}) {
      if (v < 0)
        return std::string(what) + " = " + str(v) + " is negative (0 takes the default layout's)";
      if (v % 8 != 0)
        return std::string(what) + " = " + str(v) +
               " elements is not a multiple of 8: the kernels copy rows in 16-byte pieces";
    }
    if (st.page > kInt32Max || st.token > kInt32Max / spec.page_size)
      return "kv_page_stride = " + str(st.page) + ", kv_token_stride = " + str(st.token) +
             ": the kernels need the page stride and page_size (" + str(spec.page_size) +
             ") times the token stride below 2^31 elements";
    const int64_t pages = ceilDiv(a.max_kv_len, spec.page_size);
    // A row longer than a sequence can need (2^31 - 1 tokens) is no row.
    const int64_t mostPages = ceilDiv(kInt32Max, spec.page_size);
    if (a.block_table_stride > mostPages)
      return "block_table_stride = " + str(a.block_table_stride) + " is more than the " +
             str(mostPages) + " pages of " + str(spec.page_size) +
             " tokens a sequence of at most 2^31 - 1 tokens can use";
    if (a.block_table_stride < pages)
      return "max_kv_len = " + str(a.max_kv_len) + " needs " + str(pages) + " pages of " +
             str(spec.page_size) + " tokens, but block_table_stride = " +
             str(a.block_table_stride);
  } else {
    if (a.kv_page_stride || a.kv_token_stride || a.kv_head_stride)
      return "kv_page_stride, kv_token_stride and kv_head_stride are for paged caches; a contiguous "
             "one is [total_kv, num_kv_heads, head_dim] (leave them 0)";
    if (!a.cu_seqlens_k)
      return "cu_seqlens_k is a null pointer (a contiguous KV cache needs it)";
    if (std::string m = misaligned("cu_seqlens_k", a.cu_seqlens_k, 4); !m.empty())
      return m;
    if (a.max_kv_len > a.total_kv)
      return "max_kv_len = " + str(a.max_kv_len) + " is more than total_kv = " + str(a.total_kv);
  }
  if (spec.mode == Mode::Decode) {
    const size_t need = without_workspace ? 0 : workspaceBytes(spec, a, splits);
    if (need && !a.workspace)
      return "workspace is a null pointer: " + str(splits) + " KV splits need " +
             str(int64_t(need)) + " bytes";
    if (need && a.workspace_bytes < need)
      return "workspace_bytes = " + str(int64_t(a.workspace_bytes)) + " but " + str(splits) +
             " KV splits need " + str(int64_t(need));
    if (std::string m = misaligned("workspace", a.workspace, 16); need && !m.empty())
      return m;
  }
  return "";
}

std::string checkSequenceArrays(const Spec &spec, const AttentionArgs &a,
                                const std::vector<int32_t> &cu_q, const std::vector<int32_t> &cu_k,
                                const std::vector<int32_t> &seq_lens,
                                const std::vector<int32_t> &table) {
  auto offsets = [&](const char *what, const std::vector<int32_t> &cu, int64_t total,
                     int64_t maxLen) -> std::string {
    if (cu.size() != size_t(a.batch) + 1)
      return std::string(what) + " holds " + str(int64_t(cu.size())) + " entries, expected batch + 1 = " +
             str(a.batch + 1);
    if (cu[0] < 0)
      return std::string(what) + "[0] = " + str(cu[0]) + " is negative";
    for (int b = 0; b < a.batch; ++b) {
      const int64_t len = int64_t(cu[b + 1]) - cu[b];
      if (len < 0)
        return std::string(what) + " is not ascending: [" + str(b) + "] = " + str(cu[b]) + ", [" +
               str(b + 1) + "] = " + str(cu[b + 1]);
      if (len > maxLen)
        return "sequence " + str(b) + " has " + str(len) + " tokens by " + what +
               ", more than the max given (" + str(maxLen) + ")";
    }
    if (cu[a.batch] > total)
      return std::string(what) + "[batch] = " + str(cu[a.batch]) + " is past the " + str(total) +
             " rows given";
    return "";
  };
  if (std::string e = offsets("cu_seqlens_q", cu_q, a.total_q, a.max_q_len); !e.empty())
    return e;
  if (!spec.isPaged())
    return offsets("cu_seqlens_k", cu_k, a.total_kv, a.max_kv_len);
  if (seq_lens.size() != size_t(a.batch) ||
      table.size() != size_t(a.batch) * size_t(a.block_table_stride))
    return "seq_lens_k / block_table do not hold batch (x block_table_stride) entries";
  for (int b = 0; b < a.batch; ++b) {
    if (seq_lens[b] < 0 || seq_lens[b] > a.max_kv_len)
      return "seq_lens_k[" + str(b) + "] = " + str(seq_lens[b]) + " is outside 0.." +
             str(a.max_kv_len) + " (max_kv_len)";
    const int64_t pages = ceilDiv(seq_lens[b], spec.page_size);
    for (int64_t i = 0; i < pages; ++i) {
      const int32_t page = table[size_t(b) * a.block_table_stride + i];
      if (page < 0 || page >= a.num_pages)
        return "block_table[" + str(b) + "][" + str(i) + "] = " + str(page) +
               " is outside the cache's " + str(a.num_pages) + " pages";
    }
  }
  return "";
}

KVStrides kvStrides(const Spec &spec, const AttentionArgs &a) {
  if (!spec.isPaged())
    return {};
  const int64_t head = a.kv_head_stride ? a.kv_head_stride : spec.head_dim;
  const int64_t token = a.kv_token_stride ? a.kv_token_stride : int64_t(a.num_kv_heads) * spec.head_dim;
  const int64_t page = a.kv_page_stride ? a.kv_page_stride
                                        : spec.page_size * int64_t(a.num_kv_heads) * spec.head_dim;
  return {page, token, head};
}

kernel::Params makeParams(const Spec &spec, const AttentionArgs &a, int splits) {
  kernel::Params p{};
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.o = a.o;
  p.lse = a.lse;
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.cu_seqlens_k = a.cu_seqlens_k;
  p.seq_lens_k = a.seq_lens_k;
  p.block_table = a.block_table;
  p.workspace = a.workspace;
  p.block_table_stride = a.block_table_stride;
  p.num_pages = a.num_pages;
  const KVStrides st = kvStrides(spec, a);
  p.kv_page_stride = st.page;
  p.kv_token_stride = st.token;
  p.kv_head_stride = st.head;
  p.batch = a.batch;
  p.num_q_heads = a.num_q_heads;
  p.num_kv_heads = a.num_kv_heads;
  p.num_splits = splits;
  const double scale = a.scale > 0 ? a.scale : 1.0 / std::sqrt(double(spec.head_dim));
  p.scale_log2 = static_cast<float>(scale * kLog2e);
  return p;
}

std::unique_ptr<Kernel> Kernel::load(const Spec &spec, const std::vector<char> &cubin,
                                     const std::vector<char> &pair_cubin,
                                     const kernel::LaunchShape &shape, std::string &error) {
  const CudaDriver *cu = CudaDriver::get(error);
  if (!cu)
    return nullptr;
  std::unique_ptr<Kernel> k(new Kernel);
  k->cu_ = cu;
  k->spec_ = spec;
  k->shape_ = shape;
  CUresult rc = cu->cuModuleLoadData(&k->module_, cubin.data());
  if (rc != CUDA_SUCCESS) {
    error = cu->describe(rc, ("loading the kernel of " + spec.str()).c_str());
    return nullptr;
  }
  const std::string name = spec.symbol();
  rc = cu->cuModuleGetFunction(&k->main_, k->module_, name.c_str());
  if (rc == CUDA_SUCCESS && shape.decode)
    rc = cu->cuModuleGetFunction(&k->merge_, k->module_, (name + "_merge").c_str());
  if (rc == CUDA_SUCCESS)
    rc = cu->cuFuncSetAttribute(k->main_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                shape.shared_bytes);
  if (rc == CUDA_SUCCESS && shape.decode && shape.pair_shared_bytes > 0) {
    // Its own module; in a bundle generated before it had one (no pair
    // cubin), in the main module.
    if (!pair_cubin.empty())
      rc = cu->cuModuleLoadData(&k->pairModule_, pair_cubin.data());
    if (rc == CUDA_SUCCESS)
      rc = cu->cuModuleGetFunction(&k->pair_, k->pairModule_ ? k->pairModule_ : k->module_,
                                   (name + "_pair").c_str());
    if (rc == CUDA_SUCCESS)
      rc = cu->cuFuncSetAttribute(k->pair_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  shape.pair_shared_bytes);
  }
  CUdevice dev;
  if (rc == CUDA_SUCCESS)
    rc = cu->cuCtxGetDevice(&dev);
  if (rc == CUDA_SUCCESS)
    rc = cu->cuDeviceGetAttribute(&k->smCount_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  if (rc == CUDA_SUCCESS)
    rc = cu->cuOccupancyMaxActiveBlocksPerMultiprocessor(&k->blocksPerSm_, k->main_, shape.threads,
                                                         shape.shared_bytes);
  if (rc != CUDA_SUCCESS) {
    error = cu->describe(rc, ("looking up the kernels of " + spec.str()).c_str());
    return nullptr;
  }
  // Clusters of more than 8 splits, where the device takes them; otherwise
  // the launch keeps to 8 (maxActiveClusters).
  if (shape.cluster_merge && spec.target == Target::SM90a)
    k->nonPortableClusters_ =
        cu->cuFuncSetAttribute(k->main_, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1) ==
        CUDA_SUCCESS;
  return k;
}

Kernel::~Kernel() {
  if (module_)
    cu_->cuModuleUnload(module_);
  if (pairModule_)
    cu_->cuModuleUnload(pairModule_);
}

namespace {
/// The decode grid (blocks, y, z) launched as clusters of its `blocks` (of
/// `threads` threads and `shared_bytes` each); `cluster` holds the attribute
/// the configuration points to.
CUlaunchConfig splitClusters(int blocks, int threads, int shared_bytes, int64_t y, int64_t z,
                             CUstream stream, CUlaunchAttribute &cluster) {
  cluster = CUlaunchAttribute{};
  cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster.value.clusterDim.x = static_cast<unsigned>(blocks);
  cluster.value.clusterDim.y = cluster.value.clusterDim.z = 1;
  CUlaunchConfig config{};
  config.gridDimX = static_cast<unsigned>(blocks);
  config.gridDimY = static_cast<unsigned>(y);
  config.gridDimZ = static_cast<unsigned>(z);
  config.blockDimX = static_cast<unsigned>(threads);
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = static_cast<unsigned>(shared_bytes);
  config.hStream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  return config;
}
} // namespace

int Kernel::activeClusters(std::atomic<int> &known, CUfunction fn, int blocks, int threads,
                           int shared_bytes) const {
  int answer = known.load(std::memory_order_relaxed);
  if (answer == 0) {
    CUlaunchAttribute cluster;
    const CUlaunchConfig config = splitClusters(blocks, threads, shared_bytes, 1, 1, nullptr, cluster);
    int clusters = 0;
    if (cu_->cuOccupancyMaxActiveClusters(&clusters, fn, &config) != CUDA_SUCCESS)
      return 0; // not cached: asked again at the next launch
    answer = std::max(clusters, 0) + 1;
    known.store(answer, std::memory_order_relaxed);
  }
  return answer - 1;
}

int Kernel::maxActiveClusters(int splits) const {
  if (!shape_.cluster_merge || spec_.target != Target::SM90a || splits < 2 ||
      splits > (nonPortableClusters_ ? kMaxClusterSplits : kMaxPortableClusterSplits))
    return 0;
  return activeClusters(maxClusters_[splits], main_, splits, shape_.threads, shape_.shared_bytes);
}

bool Kernel::mergesInCluster(const AttentionArgs &args) const {
  return mergesInCluster(args, splits(args));
}

bool Kernel::mergesInCluster(const AttentionArgs &args, int splits) const {
  if (!shape_.decode)
    return false;
  // Only when every cluster of the grid is resident at once: clusters are
  // placed whole, within one GPC, so a second wave of them leaves SMs idle
  // that single blocks would have filled (measured: 4 splits of 64 sequences
  // and KV heads took 26 % longer as clusters than through the merge kernel).
  const int64_t clusters = int64_t(args.batch) * args.num_kv_heads;
  // Clusters of more than 8 splits only where clusters of 8 would keep at most
  // a quarter of the device's block slots busy (measured on the H200: one
  // sequence of 8192 keys with 8 KV heads ran 13 % faster as 16 splits in
  // clusters than as 8; two sequences of 4096 keys, 3 % slower as 11 than as 8).
  if (splits > kMaxPortableClusterSplits &&
      clusters * kMaxPortableClusterSplits * 4 > int64_t(smCount_) * blocksPerSm_)
    return false;
  return clusters >= 1 && clusters <= maxActiveClusters(splits);
}

bool Kernel::pairsSplits(const AttentionArgs &args) const {
  return pairsSplits(args, splits(args));
}

int Kernel::maxActivePairClusters() const {
  if (!pair_)
    return 0;
  return activeClusters(maxPairClusters_, pair_, 2, 2 * shape_.threads, shape_.pair_shared_bytes);
}

bool Kernel::pairsSplits(const AttentionArgs &args, int splits) const {
  if (!pair_)
    return false; // (a module holds "<name>_pair" only for sm_90a: decodePairSharedBytes)
  // Two splits: one block instead of a cluster of two (measured on the H200:
  // 0.9-1.1 % faster, tests/gpu/RESULTS.md).
  if (splits == 2)
    return mergesInCluster(args, splits);
  // Four splits that would go through the merge kernel because their clusters
  // of four do not all fit: two blocks of two pipelines in clusters of two,
  // where those all fit (measured on the H200: 1.2 % faster on 8 sequences of
  // 32768 keys with 8 KV heads, tests/gpu/RESULTS.md).
  const int64_t clusters = int64_t(args.batch) * args.num_kv_heads;
  return splits == 4 && !mergesInCluster(args, splits) && clusters >= 1 &&
         clusters <= maxActivePairClusters();
}

bool Kernel::launch(const AttentionArgs &args, CUstream stream, std::string &error) const {
  const int splits = this->splits(args);
  const bool clustered = mergesInCluster(args, splits), paired = pairsSplits(args, splits);
  error = validateArgs(spec_, args, splits, clustered || paired);
  if (!error.empty())
    return false;
  if (args.batch == 0 || args.max_q_len == 0)
    return true; // nothing to compute
  kernel::Params p = makeParams(spec_, args, splits);
  void *params[] = {&p};
  CUresult rc;
  if (paired) {
    // attn-split-kv: the splits as the two pipelines of a block, which merges
    // them in its own shared memory (decode_block<2>), and with four splits
    // the two blocks of a (sequence, KV head) as one cluster that merges them
    // (decode_store_rows): no merge kernel, nothing written to the workspace.
    const int blocks = splits / 2;
    if (blocks == 1) {
      rc = cu_->cuLaunchKernel(pair_, 1, args.num_kv_heads, args.batch, 2 * shape_.threads, 1, 1,
                               shape_.pair_shared_bytes, stream, params, nullptr);
    } else {
      CUlaunchAttribute cluster;
      const CUlaunchConfig config = splitClusters(blocks, 2 * shape_.threads, shape_.pair_shared_bytes,
                                                  args.num_kv_heads, args.batch, stream, cluster);
      rc = cu_->cuLaunchKernelEx(&config, pair_, params, nullptr);
    }
  } else if (clustered) {
    // attn-split-kv on sm_90a: the splits of each (sequence, KV head) run as
    // one thread-block cluster and merge their results through distributed
    // shared memory (decode_store_rows): no merge kernel, nothing written
    // to the workspace.
    CUlaunchAttribute cluster;
    const CUlaunchConfig config =
        splitClusters(splits, shape_.threads, shape_.shared_bytes, args.num_kv_heads, args.batch,
                      stream, cluster);
    rc = cu_->cuLaunchKernelEx(&config, main_, params, nullptr);
  } else if (shape_.decode) {
    rc = cu_->cuLaunchKernel(main_, splits, args.num_kv_heads, args.batch, shape_.threads, 1, 1,
                             shape_.shared_bytes, stream, params, nullptr);
    if (rc == CUDA_SUCCESS && splits > 1) {
      // attn-split-kv's merge. On sm_90a it is a programmatic dependent launch:
      // its blocks may start while the main kernel's last blocks still run (each
      // main block allows it once its KV loop is done) and wait in
      // griddepcontrol.wait until the main kernel has finished and its partial
      // results are visible, so the launch gap between the two is hidden. The
      // sm_80 kernels have no such wait: an ordinary launch after the first.
      CUlaunchAttribute dependent{};
      dependent.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      dependent.value.programmaticStreamSerializationAllowed = 1;
      CUlaunchConfig merge{};
      merge.gridDimX = static_cast<unsigned>(args.max_q_len);
      merge.gridDimY = static_cast<unsigned>(args.num_q_heads);
      merge.gridDimZ = static_cast<unsigned>(args.batch);
      merge.blockDimX = static_cast<unsigned>(shape_.merge_threads);
      merge.blockDimY = merge.blockDimZ = 1;
      merge.hStream = stream;
      merge.attrs = &dependent;
      merge.numAttrs = spec_.target == Target::SM90a ? 1 : 0;
      rc = cu_->cuLaunchKernelEx(&merge, merge_, params, nullptr);
    }
  } else {
    const int64_t tiles = ceilDiv(args.max_q_len, shape_.tile_q);
    rc = cu_->cuLaunchKernel(main_, static_cast<unsigned>(tiles), args.num_q_heads, args.batch,
                             shape_.threads, 1, 1, shape_.shared_bytes, stream, params, nullptr);
  }
  if (rc != CUDA_SUCCESS) {
    error = cu_->describe(rc, ("launching " + spec_.symbol()).c_str());
    return false;
  }
  return true;
}

std::string Kernel::checkDeviceArguments(const AttentionArgs &args, CUstream stream) const {
  const int splits = this->splits(args);
  std::string error = validateArgs(spec_, args, splits, mergesWithoutWorkspace(args, splits));
  if (!error.empty())
    return error;
  CUresult rc = cu_->cuStreamSynchronize(stream);
  auto fetch = [&](CUdeviceptr p, size_t n) {
    std::vector<int32_t> v(n);
    if (rc == CUDA_SUCCESS && n)
      rc = cu_->cuMemcpyDtoH(v.data(), p, n * sizeof(int32_t));
    return v;
  };
  std::vector<int32_t> cuQ = fetch(args.cu_seqlens_q, size_t(args.batch) + 1), cuK, lens, table;
  if (spec_.isPaged()) {
    lens = fetch(args.seq_lens_k, size_t(args.batch));
    table = fetch(args.block_table, size_t(args.batch) * size_t(args.block_table_stride));
  } else {
    cuK = fetch(args.cu_seqlens_k, size_t(args.batch) + 1);
  }
  if (rc != CUDA_SUCCESS)
    return cu_->describe(rc, "reading the index arrays back");
  return checkSequenceArrays(spec_, args, cuQ, cuK, lens, table);
}

} // namespace attn
