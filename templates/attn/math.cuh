//===- math.cuh - exp2-domain softmax arithmetic ---------------*- CUDA -*-===//
//
// The kernels compute the softmax in base 2: scores are scaled by
// scale * log2(e) once, so every exponential is one ex2.approx instruction.
// lse is converted back to the natural log when it is stored.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEMPLATES_MATH_CUH
#define ATTN_TEMPLATES_MATH_CUH

#include "attn/config.cuh"

namespace attn {
namespace kernel {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
/// -inf as a float constant (NVRTC has no <limits>).
#define ATTN_NEG_INF (-__int_as_float(0x7f800000))

ATTN_DEVICE float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

ATTN_DEVICE float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/// The maximum over the four threads of a quad (the threads that hold one
/// row of an mma accumulator).
ATTN_DEVICE float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

ATTN_DEVICE float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

} // namespace kernel
} // namespace attn

#endif // ATTN_TEMPLATES_MATH_CUH
