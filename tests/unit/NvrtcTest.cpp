//===- NvrtcTest.cpp - The templates compile under NVRTC, without a GPU ---===//

#include "attnc/Nvrtc.h"
#include "attnc/Templates.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

using namespace attn;

static std::string readFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_CASE("every template header is embedded", "[nvrtc]") {
  std::vector<std::string> names;
  for (const TemplateHeader &h : templateHeaders()) {
    names.push_back(h.name);
    CHECK(std::string(h.contents).find("#ifndef ATTN_TEMPLATES_") != std::string::npos);
  }
  for (const char *expected : {"attn/config.cuh", "attn/mask.cuh", "attn/math.cuh", "attn/mma.cuh",
                               "attn/paged.cuh", "attn/state.cuh", "attn/tile.cuh"})
    CHECK(std::find(names.begin(), names.end(), expected) != names.end());
}

TEST_CASE("the templates compile with NVRTC for sm_80 and sm_90a without spills", "[nvrtc]") {
  REQUIRE_FALSE(findCudaInclude().empty());
  const std::string source = readFile(ATTNC_TEST_DIR "/templates_probe.cu");
  REQUIRE_FALSE(source.empty());
  for (const char *arch : {"sm_80", "sm_90a"}) {
    CudaCompileOptions options;
    options.arch = arch;
    CudaBinary binary = compileCuda(source, "templates_probe.cu", options);
    INFO(arch << ": " << binary.error << "\n" << binary.log);
    REQUIRE(binary);
    CHECK(binary.cubin.size() > 1000);
    CHECK(binary.registers > 0);
    CHECK(binary.spillStoreBytes == 0);
    CHECK(binary.spillLoadBytes == 0);
    std::printf("NVRTC %d, %s: %.3f s, %d registers, %d/%d spill bytes, %zu-byte cubin\n",
                nvrtcVersion(), arch, binary.seconds, binary.registers, binary.spillStoreBytes,
                binary.spillLoadBytes, binary.cubin.size());
  }
}

TEST_CASE("a CUDA error comes back with NVRTC's log, naming the line", "[nvrtc]") {
  CudaCompileOptions options;
  options.arch = "sm_90a";
  CudaBinary binary = compileCuda("#include \"attn/state.cuh\"\n__global__ void k() { undefined_thing(); }\n",
                                  "broken.cu", options);
  CHECK_FALSE(binary);
  CHECK(binary.error.find("NVRTC could not compile broken.cu for sm_90a") != std::string::npos);
  CHECK(binary.error.find("broken.cu(2)") != std::string::npos);
  CHECK(binary.error.find("undefined_thing") != std::string::npos);
}
