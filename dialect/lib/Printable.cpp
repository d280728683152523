//===- Printable.cpp - Bytes a one-line message can quote -----------------===//

#include "attn/Printable.h"

namespace attn {

std::string printable(std::string_view text, bool keepUtf8) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (!isControl(c) && (byte < 0x80 || keepUtf8)) {
      out += c;
      continue;
    }
    out += "\\x";
    out += digits[byte >> 4];
    out += digits[byte & 0xf];
  }
  return out;
}

} // namespace attn
