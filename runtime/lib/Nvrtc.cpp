//===- Nvrtc.cpp - CUDA source to cubin, in the process -------------------===//

#include "attnc/Nvrtc.h"
#include "attnc/Templates.h"

#include <cuda.h> // CUDA_VERSION: the NVRTC soname to load
#include <dlfcn.h>
#include <nvrtc.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <regex>
#include <system_error>
#include <thread>
#include <type_traits>

namespace attn {

namespace {
bool exists(const std::string &path) { return std::ifstream(path).good(); }

/// Where a CUDA toolkit may be: $CUDA_HOME, $CUDA_PATH, /usr/local/cuda.
std::vector<std::string> cudaRoots() {
  std::vector<std::string> roots;
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *v = std::getenv(var))
      roots.push_back(v);
  roots.push_back("/usr/local/cuda");
  return roots;
}

/// NVRTC, loaded on first use (dlopen) rather than linked: an application
/// whose kernels all come from AOT bundles starts and runs on a machine
/// without it. nvrtc.h gives the prototypes.
struct Nvrtc {
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetErrorString) getErrorString = nullptr;
  decltype(&::nvrtcCreateProgram) createProgram = nullptr;
  decltype(&::nvrtcDestroyProgram) destroyProgram = nullptr;
  decltype(&::nvrtcCompileProgram) compileProgram = nullptr;
  decltype(&::nvrtcGetProgramLogSize) getProgramLogSize = nullptr;
  decltype(&::nvrtcGetProgramLog) getProgramLog = nullptr;
  decltype(&::nvrtcGetCUBINSize) getCUBINSize = nullptr;
  decltype(&::nvrtcGetCUBIN) getCUBIN = nullptr;
};

/// The loaded library, or null with `error` saying why there is none.
const Nvrtc *loadNvrtc(std::string &error) {
  static Nvrtc nvrtc;
  static std::string loadError;
  static std::once_flag once;
  std::call_once(once, [] {
    // The headers' major version (NVRTC keeps its ABI within one) where the
    // loader finds it, else in a toolkit's lib64/ or lib/ (as the include
    // folder is looked for), else any libnvrtc.so the loader finds.
    const std::string versioned = "libnvrtc.so." + std::to_string(CUDA_VERSION / 1000);
    // The loader's reason: for a file found that did not load, else for the
    // first name tried.
    std::string why;
    auto open = [&](const std::string &name, bool found) {
      void *h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h)
        if (const char *e = dlerror(); e && (found || why.empty()))
          why = e;
      return h;
    };
    void *lib = open(versioned, false);
    for (const std::string &root : cudaRoots())
      for (const char *dir : {"/lib64/", "/lib/"})
        if (!lib && exists(root + dir + versioned)) {
          // NVRTC opens its builtins library by name, which the loader would
          // not look for in this folder: load the one beside it first (the
          // later open by name finds it loaded, by its soname).
          const std::string builtins = root + dir + "libnvrtc-builtins.so";
          if (exists(builtins))
            dlopen(builtins.c_str(), RTLD_NOW | RTLD_GLOBAL);
          lib = open(root + dir + versioned, true);
        }
    if (!lib)
      lib = open("libnvrtc.so", false);
    if (!lib) {
      loadError = "no NVRTC (" + why +
                  "; looked for it where the loader looks and in $CUDA_HOME, $CUDA_PATH and "
                  "/usr/local/cuda): compiling kernels at run time needs the CUDA toolkit's "
                  "NVRTC (kernels from AOT bundles need none)";
      return;
    }
    bool ok = true;
    auto bind = [&](auto &fn, const char *name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn && ok) {
        loadError = std::string("the NVRTC library lacks ") + name;
        ok = false;
      }
    };
    bind(nvrtc.version, "nvrtcVersion");
    bind(nvrtc.getErrorString, "nvrtcGetErrorString");
    bind(nvrtc.createProgram, "nvrtcCreateProgram");
    bind(nvrtc.destroyProgram, "nvrtcDestroyProgram");
    bind(nvrtc.compileProgram, "nvrtcCompileProgram");
    bind(nvrtc.getProgramLogSize, "nvrtcGetProgramLogSize");
    bind(nvrtc.getProgramLog, "nvrtcGetProgramLog");
    bind(nvrtc.getCUBINSize, "nvrtcGetCUBINSize");
    bind(nvrtc.getCUBIN, "nvrtcGetCUBIN");
  });
  if (!loadError.empty()) {
    error = loadError;
    return nullptr;
  }
  return &nvrtc;
}

/// Owns an nvrtcProgram.
struct Program {
  const Nvrtc &nvrtc;
  nvrtcProgram handle = nullptr;
  ~Program() {
    if (handle)
      nvrtc.destroyProgram(&handle);
  }
};

} // namespace

std::string findCudaInclude() {
  for (const std::string &root : cudaRoots())
    if (exists(root + "/include/cuda_bf16.h"))
      return root + "/include";
  return "";
}

int nvrtcVersion() {
  std::string error;
  const Nvrtc *nvrtc = loadNvrtc(error);
  int major = 0, minor = 0;
  if (!nvrtc || nvrtc->version(&major, &minor) != NVRTC_SUCCESS)
    return -1;
  return major * 1000 + minor * 10;
}

namespace {
/// One NVRTC program: `source` with `define` (-D, if not empty) to one cubin.
CudaBinary compileProgram(const Nvrtc &nvrtc, const std::string &source, const std::string &name,
                          const CudaCompileOptions &options, const std::string &include,
                          const std::string &define) {
  CudaBinary out;
  std::vector<const char *> headerNames, headerContents;
  for (const TemplateHeader &h : templateHeaders()) {
    headerNames.push_back(h.name);
    headerContents.push_back(h.contents);
  }
  Program program{nvrtc};
  nvrtcResult rc = nvrtc.createProgram(&program.handle, source.c_str(), name.c_str(),
                                      static_cast<int>(headerNames.size()), headerContents.data(),
                                      headerNames.data());
  if (rc != NVRTC_SUCCESS) {
    out.error = std::string("nvrtcCreateProgram failed: ") + nvrtc.getErrorString(rc);
    return out;
  }
  std::vector<std::string> opts = {"--gpu-architecture=" + options.arch, "-std=c++17",
                                   "-I" + include, "-I" + include + "/cccl",
                                   "--ptxas-options=-v"};
  if (options.lineInfo)
    opts.push_back("-lineinfo");
  if (!define.empty())
    opts.push_back("-D" + define);
  opts.insert(opts.end(), options.extra.begin(), options.extra.end());
  std::vector<const char *> optPtrs;
  for (const std::string &o : opts)
    optPtrs.push_back(o.c_str());
  rc = nvrtc.compileProgram(program.handle, static_cast<int>(optPtrs.size()), optPtrs.data());

  size_t logSize = 0;
  nvrtc.getProgramLogSize(program.handle, &logSize);
  out.log.resize(logSize);
  if (logSize)
    nvrtc.getProgramLog(program.handle, out.log.data());
  while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n'))
    out.log.pop_back();
  if (rc != NVRTC_SUCCESS) {
    out.error = "NVRTC could not compile " + name + " for " + options.arch + " (" +
                nvrtc.getErrorString(rc) + "):\n" + out.log;
    return out;
  }
  size_t cubinSize = 0;
  if (nvrtc.getCUBINSize(program.handle, &cubinSize) != NVRTC_SUCCESS || cubinSize == 0) {
    out.error = "NVRTC produced no cubin of " + name + " for " + options.arch +
                " (a virtual architecture?)";
    return out;
  }
  out.cubin.resize(cubinSize);
  nvrtc.getCUBIN(program.handle, out.cubin.data());

  // ptxas -v: "Used 20 registers", "0 bytes spill stores, 0 bytes spill loads".
  static const std::regex regs("Used ([0-9]+) registers");
  for (auto it = std::sregex_iterator(out.log.begin(), out.log.end(), regs);
       it != std::sregex_iterator(); ++it)
    out.registers = std::max(out.registers, std::stoi((*it)[1]));
  static const std::regex spills("([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads");
  for (auto it = std::sregex_iterator(out.log.begin(), out.log.end(), spills);
       it != std::sregex_iterator(); ++it) {
    out.spillStoreBytes = std::max(out.spillStoreBytes, std::stoi((*it)[1]));
    out.spillLoadBytes = std::max(out.spillLoadBytes, std::stoi((*it)[2]));
  }
  return out;
}
} // namespace

CudaCompileOptions compileOptionsFor(const std::string &arch, const kernel::LaunchShape &shape) {
  CudaCompileOptions options;
  options.arch = arch;
  options.pairProgram = shape.pair_shared_bytes > 0;
  return options;
}

CudaBinary compileCuda(const std::string &source, const std::string &name,
                       const CudaCompileOptions &options) {
  auto t0 = std::chrono::steady_clock::now();
  std::string loadError;
  const Nvrtc *nvrtc = loadNvrtc(loadError);
  if (!nvrtc) {
    CudaBinary out;
    out.error = loadError;
    return out;
  }
  const std::string include = findCudaInclude();
  if (include.empty()) {
    CudaBinary out;
    out.error = "no CUDA include folder with cuda_bf16.h: set CUDA_HOME (looked in $CUDA_HOME, "
                "$CUDA_PATH, /usr/local/cuda)";
    return out;
  }
  // The pair kernel alone on a second thread (NVRTC compiles separate
  // programs concurrently), the others here. Each kernel's code comes out
  // as it would in a module of its own.
  CudaBinary pair;
  auto compilePair = [&]() noexcept {
    try {
      pair = compileProgram(*nvrtc, source, name + " (" + kernel::kPairProgramMacro + ")",
                            options, include, kernel::kPairProgramMacro);
    } catch (const std::exception &e) {
      pair.error = "compiling the pair kernel of " + name + " failed: " + e.what();
    }
  };
  std::thread pairThread;
  if (options.pairProgram) {
    try {
      pairThread = std::thread(compilePair);
    } catch (const std::system_error &) {
      // No second thread to be had: the pair kernel after the others.
    }
  }
  struct Joiner { // the pair thread ends before `pair` goes, whatever happens here
    std::thread &t;
    ~Joiner() {
      if (t.joinable())
        t.join();
    }
  } joiner{pairThread};
  CudaBinary out = compileProgram(*nvrtc, source, name, options, include, "");
  if (pairThread.joinable())
    pairThread.join();
  else if (options.pairProgram)
    compilePair();
  if (out && options.pairProgram) {
    if (!pair) {
      out.error = pair.error;
    } else {
      out.pairCubin = std::move(pair.cubin);
      out.log += "\n" + pair.log;
      out.registers = std::max(out.registers, pair.registers);
      out.spillStoreBytes = std::max(out.spillStoreBytes, pair.spillStoreBytes);
      out.spillLoadBytes = std::max(out.spillLoadBytes, pair.spillLoadBytes);
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

} // namespace attn
