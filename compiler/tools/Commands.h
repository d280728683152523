//===- Commands.h - The attnc commands beyond emit ------------*- C++ -*-===//

#ifndef ATTNC_TOOLS_COMMANDS_H
#define ATTNC_TOOLS_COMMANDS_H

#include "attn/Spec.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace attn::cli {

/// `attnc run`: what the flags asked for.
struct RunOptions {
  std::string spec, target;
  /// What shapes the random inputs (unset: 1 sequence, 2 KV heads, a fresh
  /// seed); .npy inputs give their own, and these are refused with them.
  std::optional<int64_t> batch, numKVHeads;
  std::optional<int64_t> qLen, kvLen;
  bool ragged = false;
  std::optional<uint64_t> seed;
  std::optional<double> scale;
  std::optional<int64_t> numSplits; ///< CPU: 4 when unset; GPU: the kernel's choice
  std::string q, k, v, blockTable, out, lse;
};
int run(const RunOptions &options);

/// attnc cache list|clear (`action`): the disk cache of compiled kernels.
int cache(const std::string &action);

/// `attnc trace`: one query row through the recurrence, tile by tile.
struct TraceOptions {
  std::string spec;
  int64_t kvLen = 16, row = -1;
  std::optional<uint64_t> seed;
  std::string saveInputs; ///< a folder for q.npy, k.npy, v.npy and the row's o.npy; "": none
};
int trace(const TraceOptions &options);

/// `attnc explain`: memory of textbook attention vs the generated kernel.
struct ExplainOptions {
  std::string spec;
  std::string lengths = "512,2048,8192";
  int64_t numHeads = 1;
  bool measure = true;
};
int explain(const ExplainOptions &options);

/// `attnc tune`: tile sizes of a spec timed on the GPU, the best recorded.
struct TuneOptions {
  std::string spec;
  std::string candidates; ///< "tile_q=64,tile_kv=64;tile_kv=128"; "": a default list
  std::optional<int64_t> seqLen, batch, heads; ///< unset: the defaults of the shape
  std::string file;                         ///< "": TuningTable::defaultPath()
  bool dryRun = false;
};
int tune(const TuneOptions &options);

/// `attnc aot`: a bundle of kernels compiled ahead of time.
struct AotOptions {
  std::string specsFile, archs = "sm_80,sm_90a", output, name;
  bool archsGiven = false; ///< --arch given: a line that names another target is said
  std::string verify;    ///< a bundle folder to check against its manifest
  unsigned jobs = 0;     ///< 0: one per hardware thread
  bool skipBad = false;  ///< compile the good lines when some are bad
  bool force = false;    ///< replace an existing output folder
};
int aot(const AotOptions &options);
/// `attnc aot --verify DIR` (AotVerify.cpp; built with NVRTC, as aot is).
int verifyBundle(const std::string &dir);
/// Whether `dir` holds nothing but what attnc aot writes there, as it writes
/// it (the folders `aot --force` replaces); else `why` names what else.
/// Not `complete` (a run stopped as it wrote them), files may be cut short.
bool holdsOnlyBundleFiles(const std::string &dir, std::string &why, bool complete);

/// One error line: `ErrorLine("attnc trace: ") << "cannot make " << folder;`
/// prints the prefix and the text on stderr when the statement ends (after
/// what the command printed on stdout so far), the control characters of
/// the names it quotes written as \xNN: a path's line end would split the
/// line, an escape sequence reach the terminal.
class ErrorLine {
public:
  explicit ErrorLine(std::string prefix) : prefix_(std::move(prefix)) {}
  ErrorLine(const ErrorLine &) = delete;
  ErrorLine &operator=(const ErrorLine &) = delete;
  template <typename T> ErrorLine &operator<<(const T &value) {
    os_ << value;
    return *this;
  }
  ~ErrorLine();

private:
  std::string prefix_, text_;
  llvm::raw_string_ostream os_{text_};
};

/// Prints "attnc COMMAND: MESSAGE" on stderr, after what the command printed
/// on stdout so far (so that the two read in order when both go to one
/// file), and returns the exit status 1. The message is one line whatever
/// the names it quotes hold: control characters are written as \xNN. A
/// compiler's `log`, if any, follows on the lines after it as it is.
int commandError(const char *command, const std::string &message, const std::string &log = "");

/// commandError for a kernel lookup's error, whose lines after the first,
/// where a compile failed, are NVRTC's log.
int compileError(const char *command, const std::string &message);

/// The attention work past which a CPU run (attnc run, explain's
/// measurement) notes that it may take minutes (about 20 s on one core of
/// the build machine).
constexpr double kLongRunFlops = 50e9;

/// "1 kernel", "3 kernels": a count and its noun, with an s past one.
inline std::string counted(int64_t n, const std::string &noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

/// True when a spec's text sets `field` (as `field=`).
bool mentions(const std::string &text, const std::string &field);

/// The value a spec's text gives `field` (trimmed), or nothing when it does
/// not set it.
std::optional<std::string> fieldValue(const std::string &text, const std::string &field);

/// The memory the commands keep their host-side buffers well below: this
/// machine's physical memory, or less where a control group's limit or an
/// address-space limit (ulimit -v) leaves less; `what` says which, with the
/// size ("this machine's 23.5 GiB").
struct MemoryLimit {
  double bytes = 0;
  std::string what;
};
MemoryLimit usableMemory();

/// The most scratch the spec's CPU kernel holds while it runs, whatever the
/// lengths (explain's model at its top): the group's query tile (gqa x tile_q
/// rows), a K and a V tile, one score tile and three tiles of the
/// accumulator's shape. Its tiles are whole even for one key.
double cpuScratchBytes(const Spec &spec);
/// "" when that scratch fits in half of usableMemory(), else why not (the
/// compiled kernel would find no memory for its tiles).
std::string cpuScratchFits(const Spec &spec);

/// A memory field of /proc/self/status ("VmRSS", "VmHWM", "VmSize") in
/// bytes, or -1 where the file or the field is absent.
int64_t processMemory(const std::string &field);

/// Parses a spec to run on `where` (cpu, or a GPU's target): adds that
/// target unless the text names one (which must then be of the same kind)
/// and, with `lse`, return_lse=true unless the text says return_lse=false
/// (an error then). Prints the error ("attnc COMMAND: ...") and returns
/// nothing when the spec is invalid.
std::optional<Spec> specOn(const std::string &text, Target where, bool lse, const char *command);
/// specOn for the CPU.
std::optional<Spec> cpuSpec(const std::string &text, const char *command, bool lse = false);

} // namespace attn::cli

#endif // ATTNC_TOOLS_COMMANDS_H
