//===- Commands.cpp - What the attnc commands share ------------------------===//
//
// The spec text's fields as the commands read them before parsing, the
// spec a command runs, and the one error line every command prints
// (Commands.h).
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "attn/Printable.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstring>

namespace attn::cli {

std::optional<std::string> fieldValue(const std::string &text, const std::string &field) {
  // Spaces as the spec parser trims them (std::isspace: tabs and newlines too).
  static const char kSpace[] = " \t\n\v\f\r";
  size_t at = 0;
  while ((at = text.find(field, at)) != std::string::npos) {
    const bool start =
        at == 0 || text[at - 1] == ',' || std::strchr(kSpace, text[at - 1]) != nullptr;
    size_t eq = text.find_first_not_of(kSpace, at + field.size());
    if (start && eq != std::string::npos && text[eq] == '=') {
      const size_t end = std::min(text.find(',', eq), text.size());
      const size_t first = text.find_first_not_of(kSpace, eq + 1);
      if (first == std::string::npos || first >= end)
        return std::string();
      return text.substr(first, text.find_last_not_of(kSpace, end - 1) + 1 - first);
    }
    at += field.size();
  }
  return std::nullopt;
}

ErrorLine::~ErrorLine() {
  llvm::outs().flush();
  llvm::errs() << prefix_ << printable(llvm::StringRef(text_).rtrim('\n'), /*keepUtf8=*/true)
               << "\n";
}

int commandError(const char *command, const std::string &message, const std::string &log) {
  ErrorLine(std::string("attnc ") + command + ": ") << message;
  if (!log.empty())
    llvm::errs() << log << "\n";
  return 1;
}

int compileError(const char *command, const std::string &message) {
  const size_t lineEnd = std::min(message.find('\n'), message.size());
  return commandError(command, message.substr(0, lineEnd),
                      lineEnd < message.size() ? message.substr(lineEnd + 1) : "");
}

bool mentions(const std::string &text, const std::string &field) {
  return fieldValue(text, field).has_value();
}

std::optional<Spec> specOn(const std::string &text, Target where, bool lse, const char *command) {
  std::string full = text;
  if (!mentions(text, "target"))
    full += (full.empty() ? "" : ",") + std::string("target=") + name(where);
  if (lse && !mentions(text, "return_lse"))
    full += ",return_lse=true";
  SpecResult result = parseSpec(full);
  if (!result)
    return commandError(command, result.error->message()), std::nullopt;
  const bool cpu = where == Target::CPU;
  if (result.spec->isGPU() == cpu)
    return commandError(command,
                        "the spec says target = " + std::string(name(result.spec->target)) +
                            (cpu ? ", but this runs on the CPU (target = cpu)"
                                 : ", but --target gpu runs on the GPU")),
           std::nullopt;
  if (lse && !result.spec->return_lse)
    return commandError(command, "--lse needs return_lse = true in the spec"), std::nullopt;
  return result.spec;
}

std::optional<Spec> cpuSpec(const std::string &text, const char *command, bool lse) {
  return specOn(text, Target::CPU, lse, command);
}

} // namespace attn::cli
