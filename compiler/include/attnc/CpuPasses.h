//===- CpuPasses.h - The CPU backend's passes -------------------*- C++ -*-===//

#ifndef ATTNC_CPUPASSES_H
#define ATTNC_CPUPASSES_H

#include "attnc/Passes.h"

namespace attn {

#define GEN_PASS_DECL
#include "attnc/CpuPasses.h.inc"

#define GEN_PASS_REGISTRATION
#include "attnc/CpuPasses.h.inc"

} // namespace attn

#endif // ATTNC_CPUPASSES_H
