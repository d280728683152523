//===- spec_fuzzer.cpp - libFuzzer target for the spec parser -------------===//
//
// Feeds arbitrary bytes to parseSpec and traps when a spec it accepts breaks
// an invariant: the canonical form must parse back to the same spec, the spec
// must pass validateSpec on its own, and its symbol must be a C identifier.
// A rejected spec must carry a message. The same bytes also drive
// classifyTiles over small ranges, which must keep lo <= fullLo <= fullHi <= hi.
//
// Built by run.sh with clang++-14 -fsanitize=fuzzer,address,undefined.
//
//===----------------------------------------------------------------------===//

#include "attn/Spec.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

using namespace attn;

/// Traps unless `cond` holds; a trap is a crash libFuzzer reports.
static void require(bool cond) {
  if (!cond)
    __builtin_trap();
}

/// Whether `s` contains only [A-Za-z0-9_] and is not empty.
static bool onlyIdentifierChars(const std::string &s) {
  if (s.empty())
    return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_';
    if (!ok)
      return false;
  }
  return true;
}

/// Checks the parser's invariants on one input.
static void checkParser(const std::string &text) {
  SpecResult result = parseSpec(text);
  // Exactly one of spec and error.
  require(result.spec.has_value() != result.error.has_value());
  require(static_cast<bool>(result) == result.spec.has_value());

  if (!result) {
    std::string msg = result.error->message();
    static const std::string prefix = "invalid spec: ";
    require(!msg.empty());
    require(msg.compare(0, prefix.size(), prefix) == 0);
    require(!result.error->field.empty());
    require(!result.error->rule.empty());
    return;
  }

  const Spec &spec = *result.spec;
  require(!validateSpec(spec).has_value());

  // The canonical form parses back to the same spec and prints the same.
  const std::string canonical = spec.str();
  SpecResult again = parseSpec(canonical);
  require(static_cast<bool>(again));
  require(*again.spec == spec);
  require(again.spec->str() == canonical);

  const std::string symbol = spec.symbol();
  require(onlyIdentifierChars(symbol));
  require(!(symbol[0] >= '0' && symbol[0] <= '9'));
}

/// Reads one byte from the front of the input, or 0 when it is used up.
static unsigned takeByte(const uint8_t *&data, size_t &size) {
  if (size == 0)
    return 0;
  --size;
  return *data++;
}

/// Reads a 16-bit value, high byte first.
static unsigned takeShort(const uint8_t *&data, size_t &size) {
  unsigned hi = takeByte(data, size);
  return hi << 8 | takeByte(data, size);
}

/// Checks classifyTiles on values read from the first bytes of the input.
static void checkTiles(const uint8_t *data, size_t size) {
  // None, causal or a sliding window (the order of MaskKind).
  Mask mask{static_cast<MaskKind>(takeByte(data, size) % 3), 0};
  if (mask.kind == MaskKind::SlidingWindow)
    mask.window = 1 + takeByte(data, size) % 300;
  const int64_t tileQ = 1 + takeByte(data, size) % 128;
  const int64_t tileKV = 1 + takeByte(data, size) % 128;
  const int64_t qLen = 1 + takeShort(data, size) % 4096;
  const int64_t kvLen = takeShort(data, size) % 4097;
  // A query tile that starts inside the queries, on a tile boundary.
  const int64_t numQTiles = (qLen + tileQ - 1) / tileQ;
  const int64_t qStart = (takeByte(data, size) % numQTiles) * tileQ;

  TileRange r = classifyTiles(mask, qStart, tileQ, tileKV, qLen, kvLen);
  const int64_t numKVTiles = (kvLen + tileKV - 1) / tileKV;
  require(0 <= r.lo);
  require(r.lo <= r.fullLo);
  require(r.fullLo <= r.fullHi);
  require(r.fullHi <= r.hi);
  require(r.hi <= numKVTiles);
  // Spot checks: the first and last key of a full tile are visible to the
  // tile's first and last query row.
  if (r.fullLo < r.fullHi) {
    const int64_t lastRow = std::min(qStart + tileQ, qLen) - 1;
    for (int64_t row : {qStart, lastRow})
      for (int64_t col : {r.fullLo * tileKV, r.fullHi * tileKV - 1})
        require(isVisible(mask, row, col, qLen, kvLen));
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  checkParser(std::string(reinterpret_cast<const char *>(data), size));
  checkTiles(data, size);
  return 0;
}
