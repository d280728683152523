//===- Templates.h - The CUDA template headers, embedded --------*- C++ -*-===//

#ifndef ATTNC_TEMPLATES_H
#define ATTNC_TEMPLATES_H

#include <cstdint>
#include <vector>

namespace attn {

/// One header of templates/, as NVRTC sees it: `#include "attn/state.cuh"`.
struct TemplateHeader {
  const char *name;     ///< e.g. "attn/state.cuh"
  const char *contents; ///< the file, NUL-terminated
};

/// Every header of templates/attn, embedded at build time.
const std::vector<TemplateHeader> &templateHeaders();

/// A digest (FNV-1a, 64 bits) of the headers' names and contents, in order.
/// The kernel cache's key holds that of the embedded headers: a build of
/// attnc whose templates differ, even under the same version number, does
/// not take the cubins another one compiled.
uint64_t templatesDigest(const std::vector<TemplateHeader> &headers);

} // namespace attn

#endif // ATTNC_TEMPLATES_H
