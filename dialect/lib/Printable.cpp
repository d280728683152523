//===- Printable.cpp - Bytes a one-line message can quote -----------------===//

#include "attn/Printable.h"

namespace attn {

/// The length of the well-formed UTF-8 character at the start of `text`
/// that is not a C1 control (U+0080..U+009F, which a terminal may act on),
/// else 0.
static size_t utf8Printable(std::string_view text) {
  const auto at = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = at(0);
  const size_t length = lead >= 0xc2 && lead <= 0xdf ? 2
                        : lead >= 0xe0 && lead <= 0xef ? 3
                        : lead >= 0xf0 && lead <= 0xf4 ? 4
                                                       : 0;
  if (length == 0 || text.size() < length)
    return 0;
  for (size_t i = 1; i < length; ++i)
    if (at(i) < 0x80 || at(i) > 0xbf)
      return 0;
  // The second byte's range where the lead allows less: no overlong form, no
  // surrogate, nothing past U+10FFFF, no C1 control.
  const unsigned char second = at(1);
  if ((lead == 0xc2 && second < 0xa0) || (lead == 0xe0 && second < 0xa0) ||
      (lead == 0xed && second > 0x9f) || (lead == 0xf0 && second < 0x90) ||
      (lead == 0xf4 && second > 0x8f))
    return 0;
  return length;
}

std::string printable(std::string_view text, bool keepUtf8) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80 && !isControl(text[i])) {
      out += text[i++];
      continue;
    }
    if (const size_t n = keepUtf8 && byte >= 0x80 ? utf8Printable(text.substr(i)) : 0) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    out += "\\x";
    out += digits[byte >> 4];
    out += digits[byte & 0xf];
    ++i;
  }
  return out;
}

} // namespace attn
