//===- Templates.h - The CUDA template headers, embedded --------*- C++ -*-===//

#ifndef ATTNC_TEMPLATES_H
#define ATTNC_TEMPLATES_H

#include <vector>

namespace attn {

/// One header of templates/, as NVRTC sees it: `#include "attn/state.cuh"`.
struct TemplateHeader {
  const char *name;     ///< e.g. "attn/state.cuh"
  const char *contents; ///< the file, NUL-terminated
};

/// Every header of templates/attn, embedded at build time.
const std::vector<TemplateHeader> &templateHeaders();

} // namespace attn

#endif // ATTNC_TEMPLATES_H
