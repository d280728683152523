//===- Printable.h - Bytes a one-line message can quote ---------*- C++ -*-===//
//
// Messages quote what a user gave: a spec's value, a tuning table's line, a
// bundle's name. Quoted as they are, a line end would split the message and
// an escape sequence would reach the terminal, so the bytes that do not
// print are written as \xNN instead.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_PRINTABLE_H
#define ATTN_PRINTABLE_H

#include <string>
#include <string_view>

namespace attn {

/// What a message should not carry as it is: a control character (below
/// 0x20, or DEL).
inline bool isControl(char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }

/// `text` with each control character written as \xNN, and each byte from
/// 0x80 too, except with `keepUtf8` those of well-formed UTF-8 characters
/// other than the C1 controls (a name may be UTF-8; a spec or a table line is
/// ASCII, so such a byte there is worth showing as what it is).
std::string printable(std::string_view text, bool keepUtf8 = false);

} // namespace attn

#endif // ATTN_PRINTABLE_H
