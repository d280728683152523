//===- CompileSources.cpp - Hand-edited kernels through NVRTC, no GPU -----===//
//
//   attn-compile-sources FILE...
//
// Compiles each kernel source as `attn-gpu-check --source` does before it
// runs one (readCudaHeader, compileOptionsFor, compileCuda with the
// templates embedded in the runtime), for the architecture its spec names,
// and says which do not compile. tests/bench/experiments.sh runs it on
// bench/experiments' variants, so a change of the emitter or the templates
// that breaks them shows without a GPU. Exit 0: all compiled; 1: one did not.
//
//===----------------------------------------------------------------------===//

#include "attnc/EmitCuda.h"
#include "attnc/Nvrtc.h"

#include <cstdio>
#include <fstream>
#include <sstream>

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: attn-compile-sources FILE...\n");
    return 2;
  }
  int failed = 0;
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    std::string error;
    attn::Spec spec;
    attn::CudaLaunchShape shape;
    if (!in) {
      error = "cannot read the file";
    } else if (attn::readCudaHeader(text.str(), spec, shape, error)) {
      const attn::CudaBinary binary = attn::compileCuda(
          text.str(), spec.symbol(), attn::compileOptionsFor(attn::name(spec.target), shape));
      error = binary.error;
    }
    if (!error.empty()) {
      std::fprintf(stderr, "%s: %s\n", argv[i], error.c_str());
      ++failed;
    }
  }
  if (failed) {
    std::fprintf(stderr, "%d of %d did not compile\n", failed, argc - 1);
    return 1;
  }
  std::printf("compiled %d with NVRTC\n", argc - 1);
  return 0;
}
