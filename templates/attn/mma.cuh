//===- mma.cuh - Tensor-core fragments: ldmatrix and mma.sync m16n8k16 -*- CUDA -*-===//
//
// sm_80 ISA (it runs on sm_90 too): one warp multiplies a 16x16 A fragment
// by a 16x8 B fragment into a 16x8 fp32 accumulator. Registers hold pairs
// of 16-bit elements.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEMPLATES_MMA_CUH
#define ATTN_TEMPLATES_MMA_CUH

#include "attn/config.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace attn {
namespace kernel {

/// The element types the tensor cores take, and their mma instruction.
template <typename T>
struct Mma;

template <>
struct Mma<__nv_bfloat16> {
  ATTN_DEVICE static void run(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  /// Two floats as a register of two elements (low half first).
  ATTN_DEVICE static unsigned pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned *>(&v);
  }
  ATTN_DEVICE static float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  ATTN_DEVICE static __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
};

template <>
struct Mma<__half> {
  ATTN_DEVICE static void run(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  ATTN_DEVICE static unsigned pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned *>(&v);
  }
  ATTN_DEVICE static float to_float(__half x) { return __half2float(x); }
  ATTN_DEVICE static __half from_float(float x) { return __float2half_rn(x); }
};

/// Shared-memory address for ldmatrix.
ATTN_DEVICE unsigned smem_addr(const void *p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

/// Four 8x8 matrices: each lane passes the row address it is responsible for
/// (lanes 8i..8i+7 address the rows of matrix i).
ATTN_DEVICE void ldmatrix_x4(unsigned (&r)[4], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}

/// The same, from a shared-memory address (see SmemTile::step).
ATTN_DEVICE void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/// Four 8x8 matrices, transposed on the way in (V, whose rows are keys).
ATTN_DEVICE void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/// Two 8x8 matrices (K, whose rows are keys: already the col layout B wants).
ATTN_DEVICE void ldmatrix_x2(unsigned (&r)[2], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(row)));
}

} // namespace kernel
} // namespace attn

#endif // ATTN_TEMPLATES_MMA_CUH
