//===- SpecTestUtil.h - Helpers shared by the spec library's tests -*- C++ -*-===//

#ifndef ATTN_TESTS_SPECTESTUTIL_H
#define ATTN_TESTS_SPECTESTUTIL_H

#include "attn/Spec.h"

#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

namespace attn::spectest {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// Parses a spec that must be valid.
inline Spec parseValid(const std::string &text) {
  INFO("spec text: \"" << text << "\"");
  SpecResult result = parseSpec(text);
  INFO("error: " << (result.error ? result.error->message() : "(none)"));
  REQUIRE(result);
  REQUIRE(result.spec.has_value());
  REQUIRE_FALSE(result.error.has_value());
  return *result.spec;
}

/// Parses a spec that must be rejected and returns the message.
inline std::string parseError(const std::string &text) {
  INFO("spec text: \"" << text << "\"");
  SpecResult result = parseSpec(text);
  INFO("parsed as: " << (result.spec ? result.spec->str() : "(nothing)"));
  REQUIRE_FALSE(result);
  REQUIRE_FALSE(result.spec.has_value());
  REQUIRE(result.error.has_value());
  return result.error->message();
}

/// One rejected spec and the message it must produce.
struct ErrorCase {
  const char *text;
  const char *message;
};

/// Checks that every case is rejected with exactly its message.
inline void checkErrors(const std::vector<ErrorCase> &cases) {
  for (const ErrorCase &c : cases) {
    INFO("spec text: \"" << c.text << "\"");
    REQUIRE(parseError(c.text) == c.message);
  }
}

/// Whether `s` is a valid C identifier.
inline bool isCIdentifier(const std::string &s) {
  if (s.empty())
    return false;
  auto alpha = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  };
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (!alpha(s[0]))
    return false;
  for (char c : s)
    if (!alpha(c) && !digit(c))
      return false;
  return true;
}

/// Splits `s` at every `sep`.
inline std::vector<std::string> split(const std::string &s, char sep) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  return parts;
}

/// The canonical text with spaces around every token.
inline std::string spaced(const std::string &canonical) {
  std::string out = "  ";
  for (char c : canonical) {
    if (c == ',' || c == '=')
      out += std::string(" ") + c + "  ";
    else
      out += c;
  }
  return out + " ";
}

/// The canonical text with its fields in reverse order.
inline std::string reversedFields(const std::string &canonical) {
  std::vector<std::string> parts = split(canonical, ',');
  std::string out;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it)
    out += (out.empty() ? "" : ",") + *it;
  return out;
}

/// The spec texts of a grid over every field; all of them are valid.
inline std::vector<std::string> specGrid() {
  struct DTypeTarget {
    const char *dtype, *target;
  };
  const DTypeTarget dtypeTargets[] = {{"f16", "sm_80"},  {"bf16", "sm_80"},
                                      {"f16", "sm_90a"}, {"bf16", "sm_90a"},
                                      {"f32", "cpu"},    {"f64", "cpu"}};
  const char *masks[] = {"none", "causal", "sliding_window(1)",
                         "sliding_window(128)", "sliding_window(4096)"};
  const int headDims[] = {32, 64, 128, 256};
  const int pageSizes[] = {0, 16, 256};
  const int gqas[] = {1, 4, 8};
  const char *splits[] = {"", "auto", "1", "8"};

  std::vector<std::string> grid;
  for (const char *mode : {"prefill", "decode"}) {
    for (const DTypeTarget &dt : dtypeTargets) {
      bool cpu = std::string(dt.target) == "cpu";
      for (int hd : headDims) {
        for (const char *mask : masks) {
          for (int page : pageSizes) {
            if (std::string(mode) == "decode" && page == 0)
              continue;
            for (int gqa : gqas) {
              for (bool lse : {false, true}) {
                for (int tiles = 0; tiles < 2; ++tiles) {
                  for (const char *split : splits) {
                    bool decode = std::string(mode) == "decode";
                    // split_kv only for decode, where leaving it out is
                    // covered by "auto".
                    if (decode == (*split == '\0'))
                      continue;
                    std::ostringstream os;
                    os << "mode=" << mode << ",head_dim=" << hd
                       << ",dtype=" << dt.dtype << ",target=" << dt.target
                       << ",mask=" << mask << ",page_size=" << page
                       << ",gqa=" << gqa
                       << ",return_lse=" << (lse ? "true" : "false");
                    if (tiles == 1)
                      os << (cpu ? ",tile_q=3,tile_kv=5"
                                 : ",tile_q=16,tile_kv=32");
                    if (decode)
                      os << ",split_kv=" << split;
                    grid.push_back(os.str());
                  }
                }
              }
            }
          }
        }
      }
      // A head_dim that is no multiple of 16 works on the CPU only.
      if (cpu)
        grid.push_back(std::string("mode=") + mode + ",head_dim=40,dtype=" +
                       dt.dtype + ",target=cpu,page_size=16");
    }
  }
  return grid;
}

} // namespace attn::spectest

#endif // ATTN_TESTS_SPECTESTUTIL_H
