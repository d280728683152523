//===- Nvrtc.cpp - CUDA source to cubin, in the process -------------------===//

#include "attnc/Nvrtc.h"
#include "attnc/Templates.h"

#include <nvrtc.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <regex>
#include <system_error>
#include <thread>

namespace attn {

namespace {
/// Owns an nvrtcProgram.
struct Program {
  nvrtcProgram handle = nullptr;
  ~Program() {
    if (handle)
      nvrtcDestroyProgram(&handle);
  }
};

bool exists(const std::string &path) { return std::ifstream(path).good(); }
} // namespace

std::string findCudaInclude() {
  std::vector<std::string> roots;
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *v = std::getenv(var))
      roots.push_back(v);
  roots.push_back("/usr/local/cuda");
  for (const std::string &root : roots)
    if (exists(root + "/include/cuda_bf16.h"))
      return root + "/include";
  return "";
}

int nvrtcVersion() {
  int major = 0, minor = 0;
  if (::nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
    return -1;
  return major * 1000 + minor * 10;
}

namespace {
/// One NVRTC program: `source` with `define` (-D, if not empty) to one cubin.
CudaBinary compileProgram(const std::string &source, const std::string &name,
                          const CudaCompileOptions &options, const std::string &include,
                          const std::string &define) {
  CudaBinary out;
  std::vector<const char *> headerNames, headerContents;
  for (const TemplateHeader &h : templateHeaders()) {
    headerNames.push_back(h.name);
    headerContents.push_back(h.contents);
  }
  Program program;
  nvrtcResult rc = nvrtcCreateProgram(&program.handle, source.c_str(), name.c_str(),
                                      static_cast<int>(headerNames.size()), headerContents.data(),
                                      headerNames.data());
  if (rc != NVRTC_SUCCESS) {
    out.error = std::string("nvrtcCreateProgram failed: ") + nvrtcGetErrorString(rc);
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
  rc = nvrtcCompileProgram(program.handle, static_cast<int>(optPtrs.size()), optPtrs.data());

  size_t logSize = 0;
  nvrtcGetProgramLogSize(program.handle, &logSize);
  out.log.resize(logSize);
  if (logSize)
    nvrtcGetProgramLog(program.handle, out.log.data());
  while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n'))
    out.log.pop_back();
  if (rc != NVRTC_SUCCESS) {
    out.error = "NVRTC could not compile " + name + " for " + options.arch + " (" +
                nvrtcGetErrorString(rc) + "):\n" + out.log;
    return out;
  }
  size_t cubinSize = 0;
  if (nvrtcGetCUBINSize(program.handle, &cubinSize) != NVRTC_SUCCESS || cubinSize == 0) {
    out.error = "NVRTC produced no cubin of " + name + " for " + options.arch +
                " (a virtual architecture?)";
    return out;
  }
  out.cubin.resize(cubinSize);
  nvrtcGetCUBIN(program.handle, out.cubin.data());

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
      pair = compileProgram(source, name + " (" + kernel::kPairProgramMacro + ")", options,
                            include, kernel::kPairProgramMacro);
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
  CudaBinary out = compileProgram(source, name, options, include, "");
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
