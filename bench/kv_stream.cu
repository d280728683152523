//===- kv_stream.cu - The memory ceiling of a decode kernel's K/V copy -----===//
//
// How fast can decode stream K and V through shared memory when it does
// nothing else? Each block is one (split, KV head, sequence), 128 threads,
// as in attnc's decode kernels and cuDNN's; it copies 64-key tiles (K and V,
// head_dim 128, bf16) through a pipeline of shared-memory stages and touches
// one 16-byte piece per tile, on the benchmark's five decode rows. Per row it
// times three cache layouts (contiguous [B][H][N][d]; pages of 16 tokens as
// [page][16][H][d], "nhd", bench.py's layout; and [page][H][16][d], "hnd")
// and four copy methods, each at several depths: cp.async from every
// thread, 16 bytes each (what the kernels use); cp.async.bulk, one 256-byte
// row per thread, completing on an mbarrier; TMA (cp.async.bulk.tensor,
// 2 KiB boxes of a page's rows for one head, one thread issuing); and plain
// 16-byte loads into registers (ld.global.nc, no shared memory). More nhd
// variants: the pages in order instead of shuffled; shuffled, but each
// sequence's visited in ascending order, or grouped by the sixteenth of the
// cache they lie in; and "all heads", where a block reads every head's row
// of its share of the sequence's tokens (whole 2 KiB token rows) instead of
// one head's row of every token, the same bytes and tiles per block; the
// shuffle confined to windows of 64 pages; cp.async with the L2 told to
// fetch 128 or 256 bytes around each piece (.L2::128B, .L2::256B); and the
// translations of a tile's pages warmed some tiles before its copy (one
// prefetch.global.L2 line per page of K and of V, this head's first row).
// And ("cmp ...", with `--only cmp` alone) how much of the shuffle's cost
// goes with the size of what a table entry keeps together: the pages
// shuffled in runs of 2 or 4, and K and V of a page side by side in one
// buffer ("kv side by side": [page][K, V][16][H][d], as some serving
// engines lay out their caches), shuffled and in order.
// GB/s of K + V read, median of 30 launches; the split count follows the
// runtime's rule (chooseSplits) at the occupancy each variant gets.
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a \
//        -o kv_stream bench/kv_stream.cu -lcuda && ./kv_stream
//
// The L2 is not flushed between launches (every row reads at least 256 MiB),
// unless `--flush` is given: then a 256 MiB buffer is zeroed before each
// launch, as triton's do_bench (bench/bench.py) and attn-gpu-check --bench
// do, and the launch starts with an L2 full of dirty lines to write back.
// `--only TEXT` runs only the variants whose name holds TEXT.
//
//===----------------------------------------------------------------------===//
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <cstring>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

enum { NHD = 0, HND = 1, CONTIG = 2, ALLH = 3, KVI = 4 };
enum { CPASYNC = 0, BULK = 1, TMA = 2, LDG = 3 };

__device__ __forceinline__ unsigned saddr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

struct Args {
  const char *k, *v; const int *table; int n, hkv, tiles_per_split; float *sink;
};

template <int kLayout>
__device__ __forceinline__ long long rowoff(const Args &a, int seq, int h, int t, int page) {
  // byte offset of token t's row (256 B) for head h
  if (kLayout == CONTIG) return ((long long)(seq * a.hkv + h) * a.n + t) * 256;
  if (kLayout == NHD) return (((long long)page * 16 + t % 16) * a.hkv + h) * 256;
  // K and V of a page side by side, [page][K, V][16][H][d] (v = k + one half-page)
  if (kLayout == KVI) return (((long long)page * 32 + t % 16) * a.hkv + h) * 256;
  return (((long long)page * a.hkv + h) * 16 + t % 16) * 256;
}

// One tile = 64 keys: K 16 KB + V 16 KB.
template <int kLayout, int kMethod, int kStages, int kHint = 0, int kWarmAhead = 0>
__global__ void __launch_bounds__(128, 1) probe(const Args a, const __grid_constant__ CUtensorMap tk,
                                                const __grid_constant__ CUtensorMap tv) {
  extern __shared__ __align__(1024) unsigned char smem[];
  constexpr int kRowStride = kMethod == BULK ? 272 : 256;
  constexpr int kStageBytes = 2 * 64 * kRowStride;
  __shared__ __align__(8) unsigned long long bar[kStages];
  const int split = blockIdx.x, h = blockIdx.y, seq = blockIdx.z, tid = threadIdx.x;
  const int tiles = a.n / 64, lo = split * a.tiles_per_split, hi = min(tiles, lo + a.tiles_per_split);
  const int *table = a.table + seq * (a.n / 16);
  if (kMethod != CPASYNC) {
    if (tid == 0)
      for (int s = 0; s < kStages; ++s)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(saddr(&bar[s])), "r"(kMethod == BULK ? 128 : 1));
    asm volatile("fence.mbarrier_init.release.cluster;");
    __syncthreads();
  }
  auto issue = [&](int j, int stage) {
    unsigned char *sk = smem + stage * kStageBytes, *sv = sk + 64 * kRowStride;
    if (kMethod == CPASYNC) {
#pragma unroll
      for (int step = 0; step < 8; ++step) {
        const int p = tid + step * 128, r = p / 16, c = p % 16;
        int t = j * 64 + r, hh = h;
        if (kLayout == ALLH) { // the block's share of the sequence's tokens, every head's row of each
          const int idx = j * 64 + r;
          t = h * (a.n / a.hkv) + idx / a.hkv;
          hh = idx % a.hkv;
        }
        const int page = kLayout == CONTIG ? 0 : __ldg(table + t / 16);
        const long long off = rowoff<kLayout == ALLH ? NHD : kLayout>(a, seq, hh, t, page) + c * 16;
        const int dst = r * 256 + ((c ^ (r % 8)) * 16);
        if (kHint == 1) {
          asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;" ::"r"(saddr(sk + dst)), "l"(a.k + off));
          asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;" ::"r"(saddr(sv + dst)), "l"(a.v + off));
        } else if (kHint == 2) {
          asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(saddr(sk + dst)), "l"(a.k + off));
          asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(saddr(sv + dst)), "l"(a.v + off));
        } else {
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(saddr(sk + dst)), "l"(a.k + off));
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(saddr(sv + dst)), "l"(a.v + off));
        }
      }
      if (kWarmAhead > 0 && tid < 8 && j + kWarmAhead < a.n / 64) {
        // warm the address translation of a tile kWarmAhead beyond this one: one
        // 128-byte line of this head's first row in each of its four pages, K and V
        const int t = (j + kWarmAhead) * 64 + (tid % 4) * 16;
        const int page = __ldg(table + t / 16);
        const char *base = tid < 4 ? a.k : a.v;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(base + rowoff<kLayout>(a, seq, h, t, page)));
      }
      asm volatile("cp.async.commit_group;");
    } else if (kMethod == BULK) {
      const int r = tid % 64, t = j * 64 + r;
      const int page = kLayout == CONTIG ? 0 : __ldg(table + t / 16);
      const long long off = rowoff<kLayout>(a, seq, h, t, page);
      const unsigned b = saddr(&bar[stage]);
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(256) : "memory");
      const char *src = (tid < 64 ? a.k : a.v) + off;
      unsigned char *dst = (tid < 64 ? sk : sv) + r * kRowStride;
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   ::"r"(saddr(dst)), "l"(src), "r"(256), "r"(b) : "memory");
    } else { // TMA, NHD: one thread, 4 pages x 2 halves x K,V
      if (tid == 0) {
        const unsigned b = saddr(&bar[stage]);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(32768) : "memory");
#pragma unroll
        for (int pg = 0; pg < 4; ++pg) {
          const int page = __ldg(table + j * 4 + pg);
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            // smem: [half][64 rows][128 B], page pg -> rows pg*16..
            const int dst = half * 64 * 128 + pg * 16 * 128;
            asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                         ::"r"(saddr(sk + dst)), "l"(&tk), "r"(half * 64), "r"(h), "r"(page * 16), "r"(b) : "memory");
            asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                         ::"r"(saddr(sv + dst)), "l"(&tv), "r"(half * 64), "r"(h), "r"(page * 16), "r"(b) : "memory");
          }
        }
      }
    }
  };
  unsigned phase = 0; // bit s: parity of stage s
  for (int i = 0; i < kStages - 1; ++i) {
    if (lo + i < hi) issue(lo + i, i);
    else if (kMethod == CPASYNC) asm volatile("cp.async.commit_group;");
  }
  uint4 accv = make_uint4(0, 0, 0, 0);
  for (int j = lo; j < hi; ++j) {
    const int stage = (j - lo) % kStages, ahead = j + kStages - 1;
    if (ahead < hi) issue(ahead, (ahead - lo) % kStages);
    else if (kMethod == CPASYNC) asm volatile("cp.async.commit_group;");
    if (kMethod == CPASYNC) {
      asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 1));
      __syncthreads();
    } else {
      const unsigned b = saddr(&bar[stage]), par = (phase >> stage) & 1;
      asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(b), "r"(par) : "memory");
      phase ^= 1u << stage;
    }
    const uint4 x = *reinterpret_cast<const uint4 *>(smem + stage * kStageBytes + tid * 16 * 8);
    accv.x ^= x.x; accv.y ^= x.y; accv.z ^= x.z; accv.w ^= x.w;
    __syncthreads();
  }
  if (kMethod == CPASYNC) asm volatile("cp.async.wait_group 0;");
  if ((accv.x ^ accv.y ^ accv.z ^ accv.w) == 0x12345678u) a.sink[0] = 1.f;
}

// No shared memory: every thread loads its 16 K and 16 V bytes-pieces of a tile straight into
// registers (ld.global.nc, 16 bytes each), kDepth tiles in flight, and touches them when the
// tile's turn comes.
template <int kLayout, int kDepth>
__global__ void __launch_bounds__(128, 2) probeLdg(const Args a, const __grid_constant__ CUtensorMap,
                                                   const __grid_constant__ CUtensorMap) {
  const int split = blockIdx.x, h = blockIdx.y, seq = blockIdx.z, tid = threadIdx.x;
  const int tiles = a.n / 64, lo = split * a.tiles_per_split, hi = min(tiles, lo + a.tiles_per_split);
  const int *table = a.table + seq * (a.n / 16);
  uint4 buf[kDepth][16];
  auto load = [&](int j, uint4 *dst) {
#pragma unroll
    for (int step = 0; step < 8; ++step) {
      const int p = tid + step * 128, r = p / 16, c = p % 16, t = j * 64 + r;
      const int page = kLayout == CONTIG ? 0 : __ldg(table + t / 16);
      const long long off = rowoff<kLayout>(a, seq, h, t, page) + c * 16;
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(dst[step].x), "=r"(dst[step].y), "=r"(dst[step].z), "=r"(dst[step].w) : "l"(a.k + off));
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(dst[8 + step].x), "=r"(dst[8 + step].y), "=r"(dst[8 + step].z), "=r"(dst[8 + step].w)
                   : "l"(a.v + off));
    }
  };
#pragma unroll
  for (int i = 0; i < kDepth; ++i)
    if (lo + i < hi) load(lo + i, buf[i]);
  uint4 accv = make_uint4(0, 0, 0, 0);
  for (int j = lo; j < hi; j += kDepth) {
#pragma unroll
    for (int s = 0; s < kDepth; ++s) {
      if (j + s < hi) {
#pragma unroll
        for (int q = 0; q < 16; ++q) {
          accv.x ^= buf[s][q].x; accv.y ^= buf[s][q].y; accv.z ^= buf[s][q].z; accv.w ^= buf[s][q].w;
        }
        if (j + s + kDepth < hi) load(j + s + kDepth, buf[s]);
      }
    }
  }
  if ((accv.x ^ accv.y ^ accv.z ^ accv.w) == 0x12345678u) a.sink[0] = 1.f;
}

typedef CUresult (*EncodeFn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                             const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                             CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

struct Shape { int b, hq, hkv, n; };

constexpr size_t kFlushBytes = size_t(256) << 20;

int chooseSplits(long long blocks, long long slots, long long tiles) {
  long long most = std::clamp<long long>(tiles / 2, 1, 64), best = 1, bestCost = 1LL << 62;
  for (long long s = 1; s <= most; ++s) {
    long long cost = ((blocks * s + slots - 1) / slots) * ((tiles + s - 1) / s + 1);
    if (cost < bestCost) { best = s; bestCost = cost; }
  }
  return (int)best;
}

/// One row's cache on the GPU: K and V, the shuffled block table.
struct Cache {
  Shape sh;
  char *k, *v;
  int *table;
  float *sink;
  EncodeFn enc;
  void *flush; ///< zeroed before each timed launch, or null
  const char *only; ///< run only the variants whose name holds this, or null
};

/// Whether `--only` leaves the variant `name` in.
bool wanted(const char *name, const Cache &c) { return !c.only || strstr(name, c.only); }

/// Times one layout (L), copy method (M), depth (S) and L2 prefetch size of
/// cp.async (H: 0 none, 1 128 B, 2 256 B) on a row.
template <int L, int M, int S, int H = 0, int W = 0>
void run(const char *name, const Cache &c) {
  if (!wanted(name, c))
    return;
  const Shape &sh = c.sh;
  void (*kern)(const Args, const CUtensorMap, const CUtensorMap);
  if constexpr (M == LDG) kern = probeLdg<L, S>;
  else kern = probe<L, M, S, H, W>;
  const int rowStride = M == BULK ? 272 : 256;
  const int smemBytes = M == LDG ? 0 : S * 2 * 64 * rowStride;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smemBytes));
  int perSM = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSM, kern, 128, smemBytes));
  const int tiles = sh.n / 64;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int splits = chooseSplits((long long)sh.b * sh.hkv, (long long)sms * perSM, tiles);
  const Args a{c.k, c.v, c.table, sh.n, sh.hkv, (tiles + splits - 1) / splits, c.sink};
  CUtensorMap tk{}, tv{};
  if (M == TMA) {
    const long long pages = (long long)sh.b * sh.n / 16;
    cuuint64_t dims[3] = {128, (cuuint64_t)sh.hkv, (cuuint64_t)(pages * 16)};
    cuuint64_t strides[2] = {256, (cuuint64_t)sh.hkv * 256};
    cuuint32_t box[3] = {64, 1, 16}, es[3] = {1, 1, 1};
    for (int i = 0; i < 2; ++i) {
      CUresult r = c.enc(i ? &tv : &tk, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, i ? c.v : c.k, dims, strides, box, es,
                       CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                       CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
      if (r != CUDA_SUCCESS) { printf("encode failed %d\n", r); exit(1); }
    }
  }
  dim3 grid(splits, sh.hkv, sh.b);
  for (int i = 0; i < 3; ++i) kern<<<grid, 128, smemBytes>>>(a, tk, tv);
  CK(cudaDeviceSynchronize());
  std::vector<float> ms;
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (int i = 0; i < 30; ++i) {
    if (c.flush)
      CK(cudaMemsetAsync(c.flush, 0, kFlushBytes));
    cudaEventRecord(e0);
    kern<<<grid, 128, smemBytes>>>(a, tk, tv);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float t; cudaEventElapsedTime(&t, e0, e1); ms.push_back(t);
  }
  CK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  const double bytes = 2.0 * sh.b * sh.hkv * (double)sh.n * 256;
  printf("B %3d kv %5d  %-22s stages %d  %d/SM splits %2d  %8.1f GB/s\n", sh.b, sh.n, name, S, perSM, splits,
         bytes / ms[15] / 1e6);
}

int main(int argc, char **argv) {
  void *flush = nullptr;
  const char *only = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--flush" && !flush)
      CK(cudaMalloc(&flush, kFlushBytes));
    else if (std::string(argv[i]) == "--only" && i + 1 < argc && !only)
      only = argv[++i];
    else {
      const bool help = std::string(argv[i]) == "-h" || std::string(argv[i]) == "--help";
      fprintf(help ? stdout : stderr,
              "usage: kv_stream [--flush] [--only TEXT]  (TEXT: run the variants whose name holds it)\n");
      return help ? 0 : 2;
    }
  }
  EncodeFn enc = nullptr;
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&enc, 12000, cudaEnableDefault, &q));
  Shape shapes[] = {{64, 32, 8, 1024}, {64, 32, 8, 4096}, {16, 32, 8, 16384}, {128, 32, 8, 4096}, {8, 64, 8, 32768}};
  float *sink; CK(cudaMalloc(&sink, 4));
  for (const Shape &sh : shapes) {
    const size_t bytes = (size_t)sh.b * sh.hkv * sh.n * 256;
    Cache c{sh, nullptr, nullptr, nullptr, sink, enc, flush, only};
    CK(cudaMalloc(&c.k, bytes));
    CK(cudaMalloc(&c.v, bytes));
    CK(cudaMemset(c.k, 1, bytes));
    CK(cudaMemset(c.v, 2, bytes));
    // Sequence s's page i lives at table[s][i], the pages shuffled.
    const int pages = sh.b * (sh.n / 16);
    std::vector<int> inOrder(pages);
    std::iota(inOrder.begin(), inOrder.end(), 0);
    std::vector<int> perm = inOrder;
    std::mt19937 rng(1);
    std::shuffle(perm.begin(), perm.end(), rng);
    CK(cudaMalloc(&c.table, pages * 4));
    CK(cudaMemcpy(c.table, perm.data(), pages * 4, cudaMemcpyHostToDevice));
    run<CONTIG, CPASYNC, 3>("contig cp.async", c);
    // What the shuffle costs against how much of the cache a table entry keeps
    // together ("cmp", all flushed alike): pages of 16 shuffled in runs of 2 and 4
    // consecutive pages (64 and 128 KiB of K at 8 heads), and K and V of each page
    // side by side ([page][K, V][16][H][d], 64 KiB a page), shuffled and in order.
    {
      auto inRuns = [&](int r) {
        std::vector<int> groups(pages / r), t(pages);
        std::iota(groups.begin(), groups.end(), 0);
        std::mt19937 rr(7);
        std::shuffle(groups.begin(), groups.end(), rr);
        for (int i = 0; i < pages; ++i) t[i] = groups[i / r] * r + i % r;
        return t;
      };
      run<CONTIG, CPASYNC, 3>("cmp contig", c);
      run<NHD, CPASYNC, 3>("cmp nhd shuffled", c);
      for (int r : {2, 4}) {
        const std::vector<int> t = inRuns(r);
        CK(cudaMemcpy(c.table, t.data(), pages * 4, cudaMemcpyHostToDevice));
        run<NHD, CPASYNC, 3>(r == 2 ? "cmp nhd runs of 2" : "cmp nhd runs of 4", c);
      }
      CK(cudaMemcpy(c.table, inOrder.data(), pages * 4, cudaMemcpyHostToDevice));
      run<NHD, CPASYNC, 3>("cmp nhd in order", c);
      if (wanted("cmp kv side by side", c) || wanted("cmp kv side by side in order", c)) {
        // its own buffer, only when one of its variants is timed
        Cache side = c; // one buffer: page p's K half, then its V half
        CK(cudaMalloc(&side.k, 2 * bytes));
        CK(cudaMemset(side.k, 3, 2 * bytes));
        side.v = side.k + (size_t)16 * sh.hkv * 256;
        run<KVI, CPASYNC, 3>("cmp kv side by side in order", side);
        CK(cudaMemcpy(c.table, perm.data(), pages * 4, cudaMemcpyHostToDevice));
        run<KVI, CPASYNC, 3>("cmp kv side by side", side);
        CK(cudaFree(side.k));
      }
      CK(cudaMemcpy(c.table, perm.data(), pages * 4, cudaMemcpyHostToDevice));
    }
    run<NHD, CPASYNC, 3>("nhd cp.async", c);
    run<ALLH, CPASYNC, 3>("nhd all heads cp.async", c);
    // The same pages in order: what the shuffle itself costs.
    CK(cudaMemcpy(c.table, inOrder.data(), pages * 4, cudaMemcpyHostToDevice));
    run<NHD, CPASYNC, 3>("nhd in order cp.async", c);
    // The shuffled pages, each sequence's in ascending order: every block then sweeps
    // the cache from its start to its end, as all the others do at the same time.
    std::vector<int> sorted = perm;
    for (int s = 0; s < sh.b; ++s)
      std::sort(sorted.begin() + s * (sh.n / 16), sorted.begin() + (s + 1) * (sh.n / 16));
    CK(cudaMemcpy(c.table, sorted.data(), pages * 4, cudaMemcpyHostToDevice));
    run<NHD, CPASYNC, 3>("nhd sorted cp.async", c);
    // Only roughly so: each sequence's pages grouped by which sixteenth of the cache
    // they lie in (as a kernel could do with one counting pass over its table row).
    std::vector<int> grouped = perm;
    for (int s = 0; s < sh.b; ++s)
      std::stable_sort(grouped.begin() + s * (sh.n / 16), grouped.begin() + (s + 1) * (sh.n / 16),
                       [&](int x, int y) { return x / ((pages + 15) / 16) < y / ((pages + 15) / 16); });
    CK(cudaMemcpy(c.table, grouped.data(), pages * 4, cudaMemcpyHostToDevice));
    run<NHD, CPASYNC, 3>("nhd by sixteenths", c);
    // Shuffled only within windows of 64 pages (2 MiB of K, 2 MiB of V at 8 heads): if this
    // copies as fast as the pages in order, what the shuffle costs is reach across the cache
    // (address translation, DRAM pages) rather than the order of the reads within it.
    std::vector<int> local = inOrder;
    for (int w = 0; w < pages; w += 64)
      std::shuffle(local.begin() + w, local.begin() + std::min(pages, w + 64), rng);
    CK(cudaMemcpy(c.table, local.data(), pages * 4, cudaMemcpyHostToDevice));
    run<NHD, CPASYNC, 3>("nhd shuffled in 2 MiB", c);
    CK(cudaMemcpy(c.table, perm.data(), pages * 4, cudaMemcpyHostToDevice));
    run<NHD, CPASYNC, 3, 1>("nhd cp.async L2::128B", c);
    run<NHD, CPASYNC, 3, 2>("nhd cp.async L2::256B", c);
    run<CONTIG, CPASYNC, 3, 2>("contig cp.async L2::256B", c);
    run<NHD, CPASYNC, 3, 0, 3>("nhd warm 3 ahead", c);
    run<NHD, CPASYNC, 3, 0, 5>("nhd warm 5 ahead", c);
    run<NHD, CPASYNC, 3, 0, 8>("nhd warm 8 ahead", c);
    CK(cudaMemcpy(c.table, perm.data(), pages * 4, cudaMemcpyHostToDevice));
    run<CONTIG, CPASYNC, 4>("contig cp.async", c);
    run<NHD, LDG, 1>("nhd ld.global", c);
    run<NHD, LDG, 2>("nhd ld.global", c);
    run<CONTIG, LDG, 2>("contig ld.global", c);
    run<NHD, CPASYNC, 2>("nhd cp.async", c);
    run<NHD, CPASYNC, 3>("nhd cp.async", c);
    run<NHD, CPASYNC, 4>("nhd cp.async", c);
    run<HND, CPASYNC, 3>("hnd cp.async", c);
    run<NHD, BULK, 3>("nhd bulk rows", c);
    run<NHD, BULK, 4>("nhd bulk rows", c);
    run<HND, BULK, 3>("hnd bulk rows", c);
    run<NHD, TMA, 3>("nhd tma", c);
    run<NHD, TMA, 4>("nhd tma", c);
    run<NHD, TMA, 6>("nhd tma", c);
    CK(cudaFree(c.k));
    CK(cudaFree(c.v));
    CK(cudaFree(c.table));
  }
  return 0;
}
