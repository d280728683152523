//===- Driver.cpp - The CUDA driver, loaded at run time -------------------===//

#include "attnc/Driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace attn {

namespace {
using GetProcAddress = CUresult (*)(const char *, void **, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult *);

#define ATTN_STRING(x) #x
#define ATTN_EXPANDED(x) ATTN_STRING(x)

/// The CUDA version whose ABI of `name` matches the prototype cuda.h gives.
/// cuda.h maps some names to a newer ABI (cuMemAlloc -> cuMemAlloc_v2): ask
/// for the headers' version. Names it leaves alone keep their first ABI,
/// even where the driver has a newer one (cuCtxSynchronize_v2 takes a
/// context): ask for CUDA 12.0's.
int abiVersion(const char *written, const char *expanded) {
  return std::string(written) == expanded ? 12000 : CUDA_VERSION;
}

/// Strips the _v2/_v3 suffix cuda.h's macros add to a function's name.
std::string baseName(const char *name) {
  std::string s = name;
  size_t v = s.rfind("_v");
  return v != std::string::npos && v + 2 < s.size() && isdigit(s[v + 2]) ? s.substr(0, v) : s;
}
} // namespace

const CudaDriver *CudaDriver::get(std::string &error) {
  static CudaDriver driver;
  static std::string loadError;
  static std::once_flag once;
  std::call_once(once, [] {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char *why = dlerror();
      loadError = std::string("no CUDA driver: ") + (why ? why : "libcuda.so.1 not found");
      return;
    }
    auto getProc = reinterpret_cast<GetProcAddress>(dlsym(lib, "cuGetProcAddress_v2"));
    if (!getProc) {
      loadError = "the CUDA driver is too old: no cuGetProcAddress_v2 (CUDA 12 or newer needed)";
      return;
    }
    bool ok = true;
#define ATTN_DRIVER_FUNCTION(name)                                                             \
  if (ok) {                                                                                    \
    void *fn = nullptr;                                                                        \
    CUdriverProcAddressQueryResult status;                                                     \
    if (getProc(baseName(#name).c_str(), &fn, abiVersion(#name, ATTN_EXPANDED(name)),         \
                CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS ||                       \
        !fn) {                                                                                 \
      loadError = "the CUDA driver lacks " + baseName(#name);                                  \
      ok = false;                                                                              \
    } else {                                                                                   \
      driver.name = reinterpret_cast<decltype(driver.name)>(fn);                               \
    }                                                                                          \
  }
#include "attnc/DriverFunctions.def"
    if (!ok)
      return;
    CUresult rc = driver.cuInit(0);
    if (rc != CUDA_SUCCESS) {
      loadError = driver.describe(rc, "cuInit");
      return;
    }
    int count = 0;
    driver.cuDeviceGetCount(&count);
    if (count == 0)
      loadError = "the CUDA driver found no GPU";
  });
  if (!loadError.empty()) {
    error = loadError;
    return nullptr;
  }
  return &driver;
}

bool CudaDriver::computeCacheOff() {
  const char *v = std::getenv("CUDA_CACHE_DISABLE");
  return v && std::strcmp(v, "1") == 0;
}

std::string CudaDriver::computeCacheNotice() {
  if (computeCacheOff())
    return "";
  return "(the driver's compute cache is on: kernels this machine compiled before come back from "
         "it; CUDA_CACHE_DISABLE=1 times full compiles)";
}

std::string CudaDriver::describe(CUresult rc, const char *what) const {
  const char *name = nullptr, *text = nullptr;
  if (cuGetErrorName)
    cuGetErrorName(rc, &name);
  if (cuGetErrorString)
    cuGetErrorString(rc, &text);
  return std::string(what) + " failed: " + (name ? name : "CUDA error " + std::to_string(rc)) +
         (text ? std::string(" (") + text + ")" : "");
}

} // namespace attn
