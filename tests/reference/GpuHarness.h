//===- GpuHarness.h - A harness batch through a GPU kernel ------*- C++ -*-===//
//
// What `attnc run --target gpu` and the GPU check share: a harness batch
// (Harness.h) rounded to the kernel's 16-bit type, uploaded in the GPU
// layouts of templates/attn/params.cuh (outputs poisoned with NaN, so every
// element must be written), one launch through Kernel::launch on a stream,
// and the outputs brought back in the harness' layout for harness::compare.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_TESTS_GPUHARNESS_H
#define ATTNC_TESTS_GPUHARNESS_H

#include "Harness.h"
#include "Watchdog.h"
#include "attnc/Kernel.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace attn::harness {

/// float -> bf16 / f16 bits, round to nearest even.
inline uint16_t toBits(float x, DType t) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (t == DType::BF16) {
    if (std::isnan(x))
      return 0x7fc0;
    u += 0x7fff + ((u >> 16) & 1);
    return static_cast<uint16_t>(u >> 16);
  }
  if (std::isnan(x))
    return 0x7e00;
  const uint32_t sign = (u >> 16) & 0x8000;
  int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  uint32_t mant = u & 0x7fffff;
  if (exp >= 31)
    return static_cast<uint16_t>(sign | 0x7c00);
  if (exp <= 0) { // subnormal half
    if (exp < -10)
      return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    const int shift = 14 - exp;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1)))
      ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
    ++half;
  return static_cast<uint16_t>(sign | half);
}

inline float fromBits(uint16_t b, DType t) {
  if (t == DType::BF16) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const int exp = (b >> 10) & 0x1f, mant = b & 0x3ff;
  const float sign = b & 0x8000 ? -1.f : 1.f;
  if (exp == 31)
    return mant ? NAN : sign * INFINITY;
  if (exp == 0)
    return sign * std::ldexp(float(mant), -24);
  return sign * std::ldexp(float(1024 + mant), exp - 25);
}

/// Rounds every input of `batch` to the spec's 16-bit type, so that the
/// reference sees exactly what the kernel reads.
inline void roundInputs(Batch<float> &batch) {
  const DType t = batch.spec.dtype;
  auto round = [t](std::vector<float> &v) {
    for (float &x : v)
      x = fromBits(toBits(x, t), t);
  };
  round(batch.kCache);
  round(batch.vCache);
  for (Sequence<float> &s : batch.sequences) {
    round(s.q);
    round(s.k);
    round(s.v);
  }
}

/// Device memory freed at scope end.
struct DeviceBuffer {
  const CudaDriver *cu = nullptr;
  CUdeviceptr ptr = 0;
  CUresult rc = CUDA_SUCCESS;
  DeviceBuffer(const CudaDriver *cu, const void *host, size_t bytes) : cu(cu) {
    rc = cu->cuMemAlloc(&ptr, bytes ? bytes : 16);
    if (rc == CUDA_SUCCESS && host && bytes)
      rc = cu->cuMemcpyHtoD(ptr, host, bytes);
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  ~DeviceBuffer() {
    if (ptr)
      cu->cuMemFree(ptr);
  }
};

/// A batch on the device, in the kernels' layouts, with its launch arguments.
struct DeviceBatch {
  const CudaDriver *cu;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  AttentionArgs args;
  std::vector<int32_t> cuQ;
  std::string error;

  CUdeviceptr upload(const void *host, size_t bytes) {
    buffers.push_back(std::make_unique<DeviceBuffer>(cu, host, bytes));
    if (buffers.back()->rc != CUDA_SUCCESS && error.empty())
      error = cu->describe(buffers.back()->rc, "copying the inputs to the GPU");
    return buffers.back()->ptr;
  }
};

/// Where a paged cache's rows lie (AttentionArgs::kv_page_stride and the
/// others): the packed [pages, page_size, heads, head_dim] through the
/// default strides; heads before tokens ([pages, heads, page_size,
/// head_dim]); a pool of pages per KV head, the pools apart by a gap of 64
/// elements; K and V pages side by side in one allocation ([pages, 2,
/// page_size, heads, head_dim]).
enum class KVLayout { Packed, HeadsFirst, HeadPools, SideBySide };
inline const char *name(KVLayout l) {
  switch (l) {
  case KVLayout::Packed:
    return "packed";
  case KVLayout::HeadsFirst:
    return "heads first";
  case KVLayout::HeadPools:
    return "a pool per head";
  case KVLayout::SideBySide:
    return "K and V side by side";
  }
  return "?";
}

/// Uploads `batch` (inputs already rounded, see roundInputs) for `kernel`.
/// `numSplits` 0: the kernel's choice; a paged cache in `layout`, its
/// elements between rows NaN. The outputs hold NaN until written.
inline std::unique_ptr<DeviceBatch> uploadBatch(const CudaDriver *cu, const Kernel &kernel,
                                                const Batch<float> &batch, double scale,
                                                int numSplits, KVLayout layout = KVLayout::Packed) {
  auto d = std::make_unique<DeviceBatch>();
  d->cu = cu;
  const Spec &spec = batch.spec;
  const DType t = spec.dtype;
  const int64_t dh = spec.head_dim, hq = batch.numQHeads(), hkv = batch.numKVHeads;
  const int64_t page = spec.page_size, n = static_cast<int64_t>(batch.sequences.size());
  AttentionArgs &a = d->args;
  a.batch = static_cast<int>(n);
  a.num_q_heads = static_cast<int>(hq);
  a.num_kv_heads = static_cast<int>(hkv);
  a.scale = scale;
  a.num_splits = numSplits;
  std::vector<int32_t> cuK = {0}, lens;
  d->cuQ = {0};
  for (const auto &s : batch.sequences) {
    d->cuQ.push_back(d->cuQ.back() + static_cast<int32_t>(s.qLen));
    cuK.push_back(cuK.back() + static_cast<int32_t>(s.kvLen));
    lens.push_back(static_cast<int32_t>(s.kvLen));
    a.max_q_len = std::max(a.max_q_len, s.qLen);
    a.max_kv_len = std::max(a.max_kv_len, s.kvLen);
    a.block_table_stride = std::max<int64_t>(a.block_table_stride, s.table.size());
  }
  a.total_q = d->cuQ.back();
  a.total_kv = cuK.back();
  // [total_q, heads, head_dim] from the harness' per-sequence [heads, len, head_dim].
  std::vector<uint16_t> q(size_t(a.total_q * hq * dh)), k, v;
  if (!page) {
    k.resize(size_t(a.total_kv * hkv * dh));
    v.resize(k.size());
  }
  for (int64_t b = 0; b < n; ++b) {
    const auto &s = batch.sequences[b];
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < s.qLen; ++i)
        for (int64_t x = 0; x < dh; ++x)
          q[((d->cuQ[b] + i) * hq + h) * dh + x] = toBits(s.q[(h * s.qLen + i) * dh + x], t);
    if (!page)
      for (int64_t h = 0; h < hkv; ++h)
        for (int64_t i = 0; i < s.kvLen; ++i)
          for (int64_t x = 0; x < dh; ++x) {
            k[((cuK[b] + i) * hkv + h) * dh + x] = toBits(s.k[(h * s.kvLen + i) * dh + x], t);
            v[((cuK[b] + i) * hkv + h) * dh + x] = toBits(s.v[(h * s.kvLen + i) * dh + x], t);
          }
  }
  int64_t vOffset = -1; // KVLayout::SideBySide: V's elements from K's, in k's buffer
  if (page) {
    const int64_t pages = batch.numPages;
    int64_t ps = page * hkv * dh, ts = hkv * dh, hs = dh; // packed
    if (layout == KVLayout::HeadsFirst) {
      ps = hkv * page * dh;
      ts = dh;
      hs = page * dh;
    } else if (layout == KVLayout::HeadPools) {
      ps = page * dh;
      ts = dh;
      hs = pages * page * dh + 64;
    } else if (layout == KVLayout::SideBySide) {
      ps = 2 * page * hkv * dh;
      vOffset = page * hkv * dh;
    }
    if (layout != KVLayout::Packed) {
      a.kv_page_stride = ps;
      a.kv_token_stride = ts;
      a.kv_head_stride = hs;
    }
    const size_t span = size_t((pages - 1) * ps + (page - 1) * ts + (hkv - 1) * hs + dh);
    const uint16_t nanBits = toBits(std::numeric_limits<float>::quiet_NaN(), t);
    k.assign(span + size_t(std::max<int64_t>(vOffset, 0)), nanBits);
    if (vOffset < 0)
      v.assign(span, nanBits);
    for (int64_t p = 0; p < pages; ++p)
      for (int64_t i = 0; i < page; ++i)
        for (int64_t h = 0; h < hkv; ++h)
          for (int64_t x = 0; x < dh; ++x) {
            const size_t from = size_t(((p * page + i) * hkv + h) * dh + x);
            const size_t to = size_t(p * ps + i * ts + h * hs + x);
            k[to] = toBits(batch.kCache[from], t);
            (vOffset < 0 ? v[to] : k[to + size_t(vOffset)]) = toBits(batch.vCache[from], t);
          }
    a.num_pages = batch.numPages;
    a.block_table_stride = std::max<int64_t>(a.block_table_stride, 1);
    std::vector<int32_t> table(size_t(n * a.block_table_stride), -1);
    for (int64_t b = 0; b < n; ++b)
      std::copy(batch.sequences[b].table.begin(), batch.sequences[b].table.end(),
                table.begin() + b * a.block_table_stride);
    a.seq_lens_k = d->upload(lens.data(), lens.size() * 4);
    a.block_table = d->upload(table.data(), table.size() * 4);
  } else {
    a.cu_seqlens_k = d->upload(cuK.data(), cuK.size() * 4);
  }
  a.q = d->upload(q.data(), q.size() * 2);
  a.k = d->upload(k.data(), k.size() * 2);
  a.v = vOffset < 0 ? d->upload(v.data(), v.size() * 2) : a.k + CUdeviceptr(vOffset) * 2;
  a.o = d->upload(nullptr, q.size() * 2);
  a.lse = d->upload(nullptr, size_t(a.total_q * hq) * 4);
  a.cu_seqlens_q = d->upload(d->cuQ.data(), d->cuQ.size() * 4);
  a.workspace_bytes = kernel.workspaceBytes(a);
  if (a.workspace_bytes)
    a.workspace = d->upload(nullptr, a.workspace_bytes);
  if (d->error.empty()) {
    // NaN everywhere: an element the kernel does not write shows up.
    cu->cuMemsetD8(a.o, 0xff, q.size() * 2);
    cu->cuMemsetD8(a.lse, 0xff, size_t(a.total_q * hq) * 4);
  }
  return d;
}

/// Sequence i's outputs in the harness layout: out [heads, q_len, head_dim],
/// lse [heads, q_len].
struct SequenceOutputs {
  std::vector<float> out, lse;
};

/// Copies the outputs back (after the caller synchronised).
inline std::vector<SequenceOutputs> downloadOutputs(const DeviceBatch &d, const Batch<float> &batch,
                                                    std::string &error) {
  const Spec &spec = batch.spec;
  const int64_t dh = spec.head_dim, hq = batch.numQHeads();
  std::vector<uint16_t> o(size_t(d.args.total_q * hq * dh));
  std::vector<float> lse(size_t(d.args.total_q * hq));
  CUresult rc = d.cu->cuMemcpyDtoH(o.data(), d.args.o, o.size() * 2);
  if (rc == CUDA_SUCCESS)
    rc = d.cu->cuMemcpyDtoH(lse.data(), d.args.lse, lse.size() * 4);
  if (rc != CUDA_SUCCESS) {
    error = d.cu->describe(rc, "copying the outputs back");
    return {};
  }
  std::vector<SequenceOutputs> outs(batch.sequences.size());
  for (size_t b = 0; b < outs.size(); ++b) {
    const int64_t qLen = batch.sequences[b].qLen;
    outs[b].out.resize(size_t(hq * qLen * dh));
    outs[b].lse.resize(size_t(hq * qLen));
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < qLen; ++i) {
        const int64_t row = (d.cuQ[b] + i) * hq + h;
        outs[b].lse[h * qLen + i] = lse[row];
        for (int64_t x = 0; x < dh; ++x)
          outs[b].out[(h * qLen + i) * dh + x] = fromBits(o[row * dh + x], spec.dtype);
      }
  }
  return outs;
}

/// Random inputs of a benchmark shape on the device, in the spec's dtype:
/// `batch` sequences of q_len queries against kv_len keys, contiguous or,
/// for a paged spec, through a block table over shuffled pages; the output
/// (and lse) allocated. The workspace is the caller's (it depends on the
/// kernel's split count).
inline std::unique_ptr<DeviceBatch> benchBatch(const CudaDriver *cu, const Spec &spec, int batch,
                                               int64_t qLen, int64_t kvLen, int numKVHeads,
                                               std::mt19937_64 &rng) {
  auto d = std::make_unique<DeviceBatch>();
  d->cu = cu;
  AttentionArgs &a = d->args;
  const int hq = numKVHeads * static_cast<int>(spec.gqa);
  a.batch = batch;
  a.num_q_heads = hq;
  a.num_kv_heads = numKVHeads;
  a.total_q = batch * qLen;
  a.max_q_len = qLen;
  a.max_kv_len = kvLen;
  std::normal_distribution<float> normal(0.f, 1.f);
  auto random = [&](size_t n) {
    std::vector<uint16_t> v(n);
    for (uint16_t &x : v)
      x = toBits(normal(rng), spec.dtype);
    return v;
  };
  const size_t dh = size_t(spec.head_dim);
  int64_t kvRows = batch * kvLen;
  for (int b = 0; b <= batch; ++b)
    d->cuQ.push_back(static_cast<int32_t>(b * qLen));
  if (spec.isPaged()) {
    const int64_t perSeq = (kvLen + spec.page_size - 1) / spec.page_size;
    std::vector<int32_t> table(static_cast<size_t>(batch * perSeq));
    std::vector<int32_t> lens(static_cast<size_t>(batch), static_cast<int32_t>(kvLen));
    for (size_t i = 0; i < table.size(); ++i)
      table[i] = static_cast<int32_t>(i);
    std::shuffle(table.begin(), table.end(), rng);
    a.num_pages = batch * perSeq;
    a.block_table_stride = perSeq;
    a.block_table = d->upload(table.data(), table.size() * 4);
    a.seq_lens_k = d->upload(lens.data(), lens.size() * 4);
    kvRows = a.num_pages * spec.page_size;
  } else {
    std::vector<int32_t> cuK;
    for (int b = 0; b <= batch; ++b)
      cuK.push_back(static_cast<int32_t>(b * kvLen));
    a.total_kv = kvRows;
    a.cu_seqlens_k = d->upload(cuK.data(), cuK.size() * 4);
  }
  const size_t qElems = size_t(a.total_q) * hq * dh, kvElems = size_t(kvRows) * numKVHeads * dh;
  a.q = d->upload(random(qElems).data(), qElems * 2);
  a.k = d->upload(random(kvElems).data(), kvElems * 2);
  a.v = d->upload(random(kvElems).data(), kvElems * 2);
  a.o = d->upload(nullptr, qElems * 2);
  if (spec.return_lse)
    a.lse = d->upload(nullptr, size_t(a.total_q) * hq * 4);
  a.cu_seqlens_q = d->upload(d->cuQ.data(), d->cuQ.size() * 4);
  return d;
}

/// Median milliseconds of `launch` (CUDA events on `stream`) over 10 timed
/// runs after 3 warm-ups. Before each run a 256 MiB buffer is zeroed on the
/// stream, as triton's do_bench does for bench/bench.py's anchors: every run
/// starts with an L2 that holds none of its inputs and is full of another
/// kernel's dirty lines, so the two harnesses time kernels alike (without
/// it, a decode kernel reading 256 MiB measured 5-10 % faster here than
/// through bench.py). A launch that does not finish ends the process with a
/// line naming `what` (Watchdog.h).
template <typename Launch>
double medianMs(const CudaDriver *cu, CUstream stream, Launch launch,
                const std::string &what = "a timed launch") {
  constexpr size_t kFlushBytes = size_t(256) << 20;
  CUdeviceptr flush = 0;
  if (cu->cuMemAlloc(&flush, kFlushBytes) != CUDA_SUCCESS)
    flush = 0; // timed without the flush rather than not at all
  CUevent start, stop;
  cu->cuEventCreate(&start, 0);
  cu->cuEventCreate(&stop, 0);
  std::vector<float> times;
  for (int it = 0; it < 13; ++it) {
    if (flush)
      cu->cuMemsetD8Async(flush, 0, kFlushBytes, stream);
    cu->cuEventRecord(start, stream);
    launch();
    cu->cuEventRecord(stop, stream);
    guarded(what, [&] { return cu->cuEventSynchronize(stop); }); // each launch has the whole limit
    float ms = 0;
    cu->cuEventElapsedTime(&ms, start, stop);
    if (it >= 3)
      times.push_back(ms);
  }
  cu->cuEventDestroy(start);
  cu->cuEventDestroy(stop);
  if (flush)
    cu->cuMemFree(flush);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

} // namespace attn::harness

#endif // ATTNC_TESTS_GPUHARNESS_H
