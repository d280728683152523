//===- EmitCuda.h - Tile-level IR to readable CUDA --------------*- C++ -*-===//

#ifndef ATTNC_EMITCUDA_H
#define ATTNC_EMITCUDA_H

#include "attn/Spec.h"
#include "attn/params.cuh"

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace attn {

/// How the emitted kernels are launched (templates/attn/params.cuh).
using CudaLaunchShape = kernel::LaunchShape;

/// Prints the kernel of `module` (the final tile-level IR of `spec`, after
/// the whole attn pipeline) as one CUDA source that includes the attnc
/// templates. On failure returns false and says why in `error`.
bool emitCuda(mlir::ModuleOp module, const Spec &spec, std::string &source,
              CudaLaunchShape &shape, std::string &error);

/// The whole path from a spec: its textbook IR, the attn pipeline, then
/// emitCuda. On failure returns false and says why in `error`.
bool emitCudaForSpec(const Spec &spec, std::string &source, CudaLaunchShape &shape,
                     std::string &error);

/// Reads back the first two lines of an emitted kernel, the spec and the
/// launch shape (`// launch: threads=N shared_bytes=N [merge_threads=N] [cluster_merge=1]
/// [pair_shared_bytes=N]`),
/// so that a kernel edited by hand can be compiled and launched like the
/// emitted one. False with `error` set when they are missing or invalid.
bool readCudaHeader(const std::string &source, Spec &spec, CudaLaunchShape &shape,
                    std::string &error);

} // namespace attn

#endif // ATTNC_EMITCUDA_H
