//===- config.cuh - What every attnc template header needs ------*- CUDA -*-===//
//
// The templates compile three ways: with nvcc, with NVRTC (no standard
// library), and as plain C++ for the host code that shares them (the spec's
// mask rules). ATTN_HD marks functions usable on both sides.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEMPLATES_CONFIG_CUH
#define ATTN_TEMPLATES_CONFIG_CUH

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ATTN_HD __host__ __device__ __forceinline__
#define ATTN_DEVICE __device__ __forceinline__
#else
#define ATTN_HD inline
#endif

namespace attn {
namespace kernel {
/// 64-bit lengths and offsets: a paged cache can exceed 2^31 elements.
typedef long long i64;
} // namespace kernel
} // namespace attn

#endif // ATTN_TEMPLATES_CONFIG_CUH
