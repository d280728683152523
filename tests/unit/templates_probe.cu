//===- templates_probe.cu - Every template, instantiated once ---*- CUDA -*-===//
//
// Not a kernel anyone runs: it instantiates each template header at the tile
// shapes of the default configurations, so that the NVRTC test sees every
// header compile (and ptxas report no spills) for sm_80 and sm_90a.
//
//===----------------------------------------------------------------------===//

#include "attn/mask.cuh"
#include "attn/state.cuh"
#include "attn/tile.cuh"
#include "attn/paged.cuh"
using namespace attn::kernel;
extern "C" __global__ void probe(const __nv_bfloat16* k, const int* bt, float* out, long long kv_len) {
  RowState<64, 128> st; st.init();
  float s[8][4];
  for (int b = 0; b < 8; ++b) for (int i = 0; i < 4; ++i) s[b][i] = threadIdx.x * 0.01f + b;
  st.update(s, 0.125f);
  float inv[2], lse[2]; st.finish(inv, lse);
  KVCache<__nv_bfloat16, 16, 128> c{k, k, bt, 10, (int)kv_len, 128, 16 * 128, 128};
  const int slot = c.slot(threadIdx.x);
  const long long at = slot < 0 ? -1 : c.at(slot, 0);
  __shared__ alignas(16) __nv_bfloat16 sm[64*128];
  cp_async_16(sm + SmemTile<64,128>::offset(threadIdx.x % 64, 0), at < 0 ? k : k + at, at >= 0);
  cp_async_commit(); cp_async_wait<0>(); __syncthreads();
  unsigned a[4], bb[2]; ldmatrix_x4(a, sm + threadIdx.x * 8); ldmatrix_x2(bb, sm);
  float d[4] = {0,0,0,0}; Mma<__nv_bfloat16>::run(d, a, bb);
  TileRange tr = classify_tiles(kMaskCausal, 0, 0, 64, 64, 100, 100);
  out[threadIdx.x] = st.acc[0][0] + inv[0] + lse[1] + d[0] + tr.hi + (is_visible<long long>(kMaskWindow, 4, 1, 2, 3, 4) ? 1 : 0);
}
