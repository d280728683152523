//===- Driver.h - The CUDA driver, loaded at run time -----------*- C++ -*-===//
//
// attnc links no CUDA driver: libcuda.so.1 is opened with dlopen on first
// use, so the library loads on any machine and a machine without a GPU gets
// a clear "no CUDA driver" error instead of a loader failure. Functions are
// resolved with cuGetProcAddress for the CUDA version the headers describe.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_DRIVER_H
#define ATTNC_DRIVER_H

#include <cuda.h>

#include <string>

namespace attn {

struct CudaDriver {
#define ATTN_DRIVER_FUNCTION(name) decltype(&::name) name = nullptr;
#include "attnc/DriverFunctions.def"

  /// The loaded driver, or null with `error` saying why (no libcuda, no
  /// device, an initialisation failure).
  static const CudaDriver *get(std::string &error);

  /// "cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE (invalid argument)".
  std::string describe(CUresult rc, const char *what) const;

  /// Whether the driver's compute cache is off (CUDA_CACHE_DISABLE=1). With
  /// a driver installed, NVRTC's cubins go through that cache too
  /// (~/.nv/ComputeCache, or CUDA_CACHE_PATH): a kernel this machine
  /// compiled before, in any process, comes back from it in a fraction of a
  /// compile, so a "cold" compile time means a full compile only with it off.
  static bool computeCacheOff();
  /// The line a tool that times cold compiles prints while that cache is on
  /// (it says so and how to turn it off); empty when it is off.
  static std::string computeCacheNotice();
};

} // namespace attn

#endif // ATTNC_DRIVER_H
