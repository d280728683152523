//===- attnc.cpp - The attnc command line ---------------------------------===//
//
//   attnc emit [--spec TEXT] [--target T] [--stage STAGE] [--print-ir-after-all] [-o FILE]
//   attnc spec [--spec TEXT]
//
// `emit` builds the textbook IR of a spec and runs the pipeline up to a
// stage, like Toy's `toyc -emit=`: a reader can watch the textbook op
// become the FlashAttention recurrence one pass at a time.
//
//===----------------------------------------------------------------------===//

#include "attn/AttnDialect.h"
#include "attn/Printable.h"
#include "attnc/EmitCuda.h"
#ifdef ATTNC_HAVE_NVRTC
#include "attnc/Tuning.h"
#endif
#include "attnc/Pipeline.h"
#include "attnc/Textbook.h"
#include "Commands.h"
#include "Npy.h"
#include "OutputErrors.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Config/llvm-config.h"
#include <type_traits>

using namespace mlir;
using attn::cli::ErrorLine;
namespace cl = llvm::cl;

static cl::OptionCategory attncCategory("attnc options");

static cl::SubCommand emitCmd("emit", "Print the IR of a spec after a stage of the pipeline");
static cl::SubCommand specCmd("spec", "Check a spec; print its canonical form and symbol");
static cl::SubCommand runCmd("run", "Run a spec's kernel on random or .npy inputs and check it "
                                    "against textbook attention. On the CPU its spec's target "
                                    "defaults to cpu (and dtype to f32); on the GPU to the "
                                    "device's architecture");
static cl::SubCommand traceCmd("trace", "Follow one query row through the online-softmax "
                                        "recurrence, tile by tile, on the CPU in f64. Its spec's "
                                        "unset fields: target=cpu, dtype=f64, head_dim=32, "
                                        "tile_q=1, tile_kv=4 (small, so there are tiles to watch)");
static cl::SubCommand cacheCmd("cache", "List or empty the kernel cache: attnc cache list|clear");
static cl::opt<std::string> cacheAction(cl::Positional, cl::desc("list (the default) | clear"), cl::init("list"),
                                        cl::sub(cacheCmd), cl::cat(attncCategory));
static cl::SubCommand explainCmd("explain", "HBM traffic and scratch memory: textbook "
                                            "attention vs the generated kernel");
static cl::SubCommand aotCmd("aot", "Compile a file of specs for a list of architectures into a "
                                    "bundle an application links or loads (no NVRTC at run time); tiles a "
                                    "line leaves open take the built-in defaults, not the tuning "
                                    "table");
static cl::SubCommand tuneCmd("tune", "Time a spec's candidate tile sizes and pipeline depths on "
                                      "the GPU and record the fastest as the defaults for specs "
                                      "like it (the spec's target defaults to the GPU's "
                                      "architecture)");

static cl::opt<std::string>
    specText("spec", cl::desc("The attention spec, field=value pairs separated by commas; "
                              "unset fields take their defaults (see `attnc --help`)"),
             cl::value_desc("spec"), cl::init(""), cl::sub(emitCmd), cl::sub(specCmd),
             cl::sub(runCmd), cl::sub(traceCmd), cl::sub(explainCmd), cl::sub(tuneCmd),
             cl::cat(attncCategory));

/// LLVM's integer parsers take a radix prefix ('0x10' is 16, '0b11' is 3) and
/// read a leading 0 as octal ('010' is 8): attnc's numbers are decimal, as a
/// spec's are, so an optional '-' and digits are read in base 10 and
/// anything else is refused. (LLVM's parsers of long and unsigned long are
/// final, so the options hold long long.)
template <typename T> struct DecimalParser : cl::parser<T> {
  using cl::parser<T>::parser;
  bool parse(cl::Option &o, llvm::StringRef name, llvm::StringRef arg, T &value) {
    llvm::StringRef digits = arg;
    if (std::is_signed_v<T>)
      digits.consume_front("-");
    if (digits.empty() || !llvm::all_of(digits, llvm::isDigit))
      return o.error("'" + attn::printable(arg) + "' is not a decimal integer");
    if (arg.getAsInteger(10, value))
      return o.error("'" + arg + "' is out of range");
    return false;
  }
};
template <typename T> using Integer = cl::opt<T, false, DecimalParser<T>>;

/// LLVM's parser of flags (--ragged, --ragged=false), whose message would
/// quote a control character as it is.
struct FlagParser : cl::parser<bool> {
  using cl::parser<bool>::parser;
  bool parse(cl::Option &o, llvm::StringRef name, llvm::StringRef arg, bool &value) {
    if (llvm::any_of(arg, attn::isControl))
      return o.error("'" + attn::printable(arg) +
                     "' is invalid value for boolean argument! Try 0 or 1");
    return cl::parser<bool>::parse(o, name, arg, value);
  }
};
using Flag = cl::opt<bool, false, FlagParser>;

// attnc run
static cl::opt<std::string> runTarget("target",
                                      cl::desc("Where to run: cpu, or gpu (the first CUDA device; "
                                               "the spec's target defaults to its architecture)"),
                                      cl::init("cpu"),
                                      cl::sub(runCmd), cl::cat(attncCategory));
static Integer<long long> runBatch("batch",
                                   cl::desc("Sequences in the batch (random inputs; default 1)"),
                                   cl::sub(runCmd), cl::cat(attncCategory));
static Integer<long long> runKVHeads("num-kv-heads",
                                     cl::desc("KV heads (random inputs; default 2); query heads = "
                                              "gqa x this"),
                                     cl::sub(runCmd), cl::cat(attncCategory));
static Integer<long long> runQLen("q-len",
                                  cl::desc("Queries per sequence (default 128; decode: the spec's "
                                           "tile_q, its query tokens, 1 unless given)"),
                                  cl::sub(runCmd), cl::cat(attncCategory));
static Integer<long long> runKVLen("kv-len",
                                   cl::desc("Keys per sequence (default q-len; decode 512, at "
                                            "least q-len unless 0); with --q and a paged cache, "
                                            "the sequence's length"),
                                   cl::sub(runCmd), cl::cat(attncCategory));
static Flag runRagged("ragged",
                      cl::desc("Draw each sequence's lengths in 1..q-len / 1..kv-len "
                               "(a length of 0 stays 0; decode keeps q-len and draws "
                               "kv-len from q-len up; a prefill with kv-len = q-len "
                               "keeps them equal)"),
                      cl::init(false), cl::sub(runCmd), cl::cat(attncCategory));
static Integer<unsigned long long>
    runSeed("seed", cl::desc("Seed of the random inputs (default: fresh)"), cl::sub(runCmd),
            cl::sub(traceCmd), cl::cat(attncCategory));
/// LLVM's double parser, which reads '' (and spaces) as 0: refused here, as
/// the integer parsers refuse it.
struct NumberParser : cl::parser<double> {
  using cl::parser<double>::parser;
  bool parse(cl::Option &o, llvm::StringRef name, llvm::StringRef arg, double &value) {
    // (LLVM's message would quote a control character as it is.)
    if (arg.trim().empty() || llvm::any_of(arg, attn::isControl))
      return o.error("'" + attn::printable(arg) + "' value invalid for floating point argument!");
    return cl::parser<double>::parse(o, name, arg, value);
  }
};
static cl::opt<double, false, NumberParser>
    runScale("scale", cl::desc("Softmax scale, > 0 (default 1/sqrt(head_dim))"), cl::sub(runCmd),
             cl::cat(attncCategory));
static Integer<long long> runSplits("num-splits",
                                    cl::desc("Splits for a decode spec with split_kv=auto (CPU "
                                             "default 4; GPU default: chosen from the SM count)"),
                                    cl::sub(runCmd), cl::cat(attncCategory));
static cl::opt<std::string> runQ("q", cl::desc("Queries, .npy [num_q_heads, q_len, head_dim]"),
                                 cl::value_desc("file"), cl::sub(runCmd), cl::cat(attncCategory));
static cl::opt<std::string>
    runK("k", cl::desc("Keys, .npy [num_kv_heads, kv_len, head_dim]; paged: the cache "
                       "[num_pages, page_size, num_kv_heads, head_dim]"),
         cl::value_desc("file"), cl::sub(runCmd), cl::cat(attncCategory));
static cl::opt<std::string> runV("v", cl::desc("Values, .npy, the layout of --k"),
                                 cl::value_desc("file"), cl::sub(runCmd), cl::cat(attncCategory));
static cl::opt<std::string>
    runBlockTable("block-table",
                  cl::desc("Paged: the sequence's pages in order, .npy int32 [pages]"),
                  cl::value_desc("file"), cl::sub(runCmd), cl::cat(attncCategory));
static cl::opt<std::string> runOut("out", cl::desc("Write the output, .npy like --q"),
                                   cl::value_desc("file"), cl::sub(runCmd), cl::cat(attncCategory));
static cl::opt<std::string>
    runLse("lse", cl::desc("Write the natural-log lse, .npy [num_q_heads, q_len]"),
           cl::value_desc("file"), cl::sub(runCmd), cl::cat(attncCategory));

// attnc trace
static Integer<long long> traceKVLen("kv-len",
                                     cl::desc("Keys to trace through, 1..4096 (default 16; "
                                              "prefill: the queries too)"),
                                     cl::init(16), cl::sub(traceCmd), cl::cat(attncCategory));
static Integer<long long> traceRow("row",
                                   cl::desc("Query row to follow, from 0 (default -1: the last)"),
                                   cl::init(-1), cl::sub(traceCmd), cl::cat(attncCategory));
static cl::opt<std::string> traceSave("save-inputs",
                                      cl::desc("Write the traced head's inputs to <folder> (made "
                                               "if missing) as "
                                               "f64 .npy files (q.npy [q_len, d], k.npy and "
                                               "v.npy [kv_len, d] in key order) and the "
                                               "kernel's output row (o.npy [d]), to check "
                                               "the trace with numpy"),
                                      cl::value_desc("folder"), cl::sub(traceCmd),
                                      cl::cat(attncCategory));

// attnc explain
static cl::opt<std::string> explainLengths("lengths",
                                           cl::desc("Sequence lengths N, comma separated, each "
                                                    "1..1048576 (default 512,2048,8192; decode: "
                                                    "the cached keys)"),
                                           cl::init("512,2048,8192"), cl::sub(explainCmd),
                                           cl::cat(attncCategory));
static Flag explainNoMeasure("model-only",
                             cl::desc("Print the model without running on the CPU "
                                      "(decode specs are never run)"),
                             cl::init(false), cl::sub(explainCmd), cl::cat(attncCategory));

// attnc aot
static cl::opt<std::string> aotSpecs("specs",
                                     cl::desc("The specs, one per line, as --spec takes them "
                                              "('#' starts a comment); fields left out take "
                                              "each architecture's built-in defaults"),
                                     cl::value_desc("file"), cl::sub(aotCmd),
                                     cl::cat(attncCategory));
static cl::opt<std::string> aotArchs("arch",
                                     cl::desc("Architectures, comma separated (default: sm_80,sm_90a; a line that names "
                                              "its target is built for that one only)"),
                                     cl::init("sm_80,sm_90a"), cl::sub(aotCmd),
                                     cl::cat(attncCategory));
static cl::opt<std::string> aotOutput("o",
                                      cl::desc("The bundle folder to write (the folder it goes "
                                               "in must exist)"),
                                      cl::value_desc("dir"), cl::sub(aotCmd),
                                      cl::cat(attncCategory));
static cl::opt<std::string> aotName("name",
                                    cl::desc("The bundle's name, of letters, digits and '_': "
                                             "other characters become '_' (default: the "
                                             "folder's name)"),
                                    cl::value_desc("name"), cl::sub(aotCmd), cl::cat(attncCategory));
static Integer<unsigned> aotJobs("j",
                                 cl::desc("Specs compiled at once (default: hardware threads; a "
                                          "decode spec with a pair kernel compiles its two "
                                          "programs side by side)"),
                                 cl::init(0), cl::Prefix, cl::sub(aotCmd), cl::cat(attncCategory));
static Flag aotSkipBad("skip-bad",
                       cl::desc("Report bad lines and compile the others (default: "
                                "report them, the first 20 and a count, and stop)"),
                       cl::init(false), cl::sub(aotCmd), cl::cat(attncCategory));
static cl::opt<std::string> aotVerify("verify",
                                      cl::desc("Check a bundle folder: its manifest's lines pass "
                                               "the loader's checks, every cubin is there, "
                                               "intact, defines the kernels its spec names and "
                                               "says its line's launch shape, and bundle.cpp "
                                               "(if there is one) registers the same bundle and "
                                               "kernels with the same bytes and launch shapes (a "
                                               "shape other than this attnc gives a spec is a "
                                               "note, as are files attnc aot does not write, "
                                               "which keep --force from replacing the folder)"),
                                      cl::value_desc("dir"), cl::sub(aotCmd),
                                      cl::cat(attncCategory));
static Flag aotForce("force",
                     cl::desc("Replace an existing bundle folder (only a folder attnc "
                              "aot wrote, or an empty one)"),
                     cl::init(false), cl::sub(aotCmd), cl::cat(attncCategory));

// attnc tune
static cl::opt<std::string>
    tuneCandidates("candidates",
                   cl::desc("Tile sizes (and stages) to try, ';' between candidates (e.g. "
                            "\"tile_q=64,tile_kv=64;tile_kv=128,stages=1\"); default: tile_q 64 "
                            "and 128 x tile_kv 32, 64, 128 (decode: tile_kv only; sm_90a "
                            "head_dim 64: also tile_q 192 x tile_kv 64, 128), then the "
                            "built-in tiles at each pipeline depth (prefill 1-2, 2-4 in the warp-specialised block, "
                            "decode 2-4)"),
                   cl::sub(tuneCmd), cl::cat(attncCategory));
static Integer<long long> tuneSeqLen("seq-len",
                                     cl::desc("Keys per sequence of the timed shape (and queries, "
                                              "for prefill); default 4096"),
                                     cl::sub(tuneCmd), cl::cat(attncCategory));
static Integer<long long> tuneBatch("batch",
                                    cl::desc("Sequences (default: 16384 / seq-len for prefill, 64 "
                                             "for decode)"),
                                    cl::sub(tuneCmd), cl::cat(attncCategory));
static Integer<long long> tuneHeads("heads",
                                    cl::desc("Query heads (default: 2048 / head_dim for prefill, "
                                             "32 for decode)"),
                                    cl::sub(tuneCmd), cl::cat(attncCategory));
static cl::opt<std::string> tuneFile("tuning-file",
                                     cl::desc("The table to update (default: $ATTNC_TUNING_FILE, "
                                              "else tuning.txt in the kernel cache directory)"),
                                     cl::value_desc("file"), cl::sub(tuneCmd), cl::cat(attncCategory));
static Flag tuneDryRun("dry-run", cl::desc("Measure and print; write nothing"), cl::init(false),
                       cl::sub(tuneCmd), cl::cat(attncCategory));

static cl::opt<std::string>
    stage("stage",
          cl::desc("Where to stop: `textbook` (before any pass), a pass name "
                   "(attn-online-softmax, attn-safe-init, attn-mask-tiles, "
                   "attn-share-kv-heads, attn-page-kv, attn-split-kv: the IR after it), "
                   "`final` (the tile-level IR the backends consume) or `cuda` (the kernel "
                   "source for a GPU target). Default: `cuda` when a GPU target is named "
                   "(--target, or target= in --spec), else `final`"),
          cl::value_desc("stage"), cl::init("final"), cl::sub(emitCmd), cl::cat(attncCategory));

static cl::opt<std::string>
    emitTarget("target",
               cl::desc("sm_80 | sm_90a | cpu: the spec's target (instead of target= in --spec); "
                        "a GPU target named either way and no --stage prints the CUDA source"),
               cl::value_desc("target"), cl::sub(emitCmd), cl::cat(attncCategory));

static Flag printAfterAll("print-ir-after-all",
                          cl::desc("Print the IR after every pass, up to --stage"), cl::init(false),
                          cl::sub(emitCmd), cl::cat(attncCategory));

static Flag plainNames(
    "plain-names",
    cl::desc("Number the SSA values named after the algorithm "
             "(the textbook's %q, %k_cache, %k, the passes' %m_new, %alpha) "
             "as %arg0, %0, %1, ...; the attn ops "
             "that name their own results keep those names (standard_attention's "
             "%out, %lse; state_init's %m, %l, %acc (%m_split... in a split); accumulate's %l_new, "
             "%acc_new; classify_tiles', split_range's, merge's)"),
    cl::init(false), cl::sub(emitCmd), cl::cat(attncCategory));

static cl::opt<std::string> outputFile("o", cl::desc("Write what --stage selects (IR, or CUDA) to <file>"),
                                       cl::value_desc("file"), cl::init("-"), cl::sub(emitCmd),
                                       cl::cat(attncCategory));

static const char *kCommands = R"(attnc: a compiler for FlashAttention-family kernels

Commands:
  attnc emit      print the IR of a spec after a stage of the pipeline
  attnc spec      check a spec and print its canonical form
  attnc run       run a spec's kernel (CPU or GPU) and check it against textbook attention
  attnc trace     follow one query row through the recurrence, tile by tile
  attnc explain   memory traffic and scratch: textbook attention vs the kernel
  attnc cache     list or clear the kernel cache ($ATTNC_CACHE_DIR, else
                  $XDG_CACHE_HOME/attnc when absolute, else ~/.cache/attnc)
  attnc tune      time a spec's candidate tiles and pipeline depths on the GPU; the fastest become its defaults
  attnc aot       compile a file of specs into a bundle an application links or loads (no NVRTC at run time)
Run `attnc <command> --help` for a command's flags.

)";

static const char *kCommandNames = "emit, spec, run, trace, explain, cache, tune or aot";

static const char *kSpecHelp = R"(A spec is a comma-separated list of field=value pairs; unset fields take these
defaults, except those a command's description above sets (run and trace: target
cpu; tune: the GPU's architecture):
  mode        prefill | decode                                  (prefill)
  head_dim    32..256, a multiple of 16 on GPU targets          (128)
  dtype       f16 | bf16 on sm_80/sm_90a, f32 | f64 on cpu      (bf16; f32 on cpu)
  tile_q      query rows per tile: GPU prefill 16..256 in 16s,  (target default, or tuned)
              GPU decode 1..16 query tokens, cpu 1..4096
  tile_kv     keys per KV tile: GPU 16..256 in 16s, cpu 1..4096 (target default, or tuned)
              (GPU: the tiles must fit in shared memory; `attnc spec` prints it)
  mask        none | causal | sliding_window(W)                 (none)
              (bottom-right aligned: query i is at key p = i + kv_len - q_len;
              causal sees keys j <= p, sliding_window(W) p - W < j <= p;
              W in 1..999999999)
  page_size   0 = contiguous KV, else tokens per page, 1..65536 (0)
  gqa         num_q_heads / num_kv_heads, 1..256; GPU decode:   (1)
              tile_q x gqa <= 128 query rows per block
              (query head h reads KV head h / gqa, as repeat_interleave)
  return_lse  true | false                                      (false)
  target      sm_80 | sm_90a | cpu                              (sm_90a)
  split_kv    decode only: auto | number of splits, 1..1024     (auto)
  stages      K/V stages: auto | 1..2 prefill (2..8 warp-specialised), 2..4 decode
                                                                (auto: measured)
  mma         GPU prefill: auto | sync | wgmma | wgmma_ws       (auto, see below)
              wgmma:    sm_90a, head_dim 64/128, tiles 64/128
              wgmma_ws: sm_90a, one warpgroup copies K/V for those that compute:
                        head_dim 128 on tiles 128 x 64 or 128 x 128 (two),
                        head_dim 64 on 192 x 64 or 192 x 128 (three; default 192 x 128)
              auto:     on sm_90a wgmma_ws where its tiles fit (head_dim 128 with
                        tile_q 128, head_dim 64 with tile_q 192) and stages is not 1,
                        else wgmma where its tiles fit (so head_dim 64, or 128 with
                        tile_q 64 or stages=1, and that block's default tiles), else
                        sync (mma.sync); attnc's runtime takes head_dim 64's 192 x 128
                        for long prefills (see README)
Example:
  attnc emit --spec mode=prefill,mask=causal,page_size=16,gqa=4,head_dim=128 --print-ir-after-all
)";

/// "attnc <command>: ", the start of an error of the command the line named
/// (as the other commands' own files write theirs).
static std::string errorPrefix() {
  for (cl::SubCommand *sub : cl::getRegisteredSubcommands())
    if (*sub && !sub->getName().empty())
      return "attnc " + sub->getName().str() + ": ";
  return "attnc: ";
}

/// Reads --spec, printing the error and returning nothing when it is invalid.
static std::optional<attn::Spec> readSpec() {
  attn::SpecResult result = attn::parseSpec(specText);
  if (!result) {
    ErrorLine(errorPrefix()) << result.error->message() << "\n";
    return std::nullopt;
  }
  return result.spec;
}

static int runSpec() {
  std::optional<attn::Spec> spec = readSpec();
  if (!spec)
    return 1;
  llvm::outs() << "canonical: " << spec->str() << "\n"
               << "symbol:    " << spec->symbol() << "\n";
  if (spec->isGPU()) {
    llvm::outs() << "shared memory: " << attn::sharedMemoryBytes(*spec) << " of "
                 << attn::sharedMemoryLimit(spec->target) << " bytes per block\n";
    // The block the emitter prints for it (mma = auto resolved).
    const int64_t stages = attn::kvStages(*spec);
    const std::string block =
        spec->mode == attn::Mode::Decode ? "decode"
        : attn::warpSpecialised(*spec)
            ? std::string("warp-specialised wgmma (") +
                  (spec->tile_q == attn::kWsTileQ64 ? "three" : "two") +
                  " computing warpgroups, one copying K/V)"
        : attn::usesWgmma(*spec) ? "wgmma"
                                 : "mma.sync";
    llvm::outs() << "block:     " << block << ", " << attn::cli::counted(stages, "K/V stage")
                 << "\n";
  }
  return 0;
}

/// Keeps what emit wrote, or says why it could not be written (a full disk)
/// and leaves no partial file behind.
static int keepOutput(llvm::ToolOutputFile &output) {
  output.os().flush();
  if (std::error_code ec = output.os().error()) {
    ErrorLine(errorPrefix()) << "cannot write "
                             << (outputFile == "-" ? std::string("the standard output")
                                                   : outputFile.getValue())
                             << ": " << ec.message() << "\n";
    output.os().clear_error(); // reported here, not again when the stream closes
    return 1;
  }
  output.keep();
  return 0;
}

static int runEmit() {
  if (emitTarget.getNumOccurrences()) {
    // As the spec parser reads a value: trimmed.
    const std::string t = llvm::StringRef(emitTarget.getValue()).trim(" \t").str();
    // A spec that names its own target as well: say so (any other problem of
    // the spec with this target is the spec's own message, below).
    if (auto own = attn::cli::fieldValue(specText, "target");
        own && !own->empty() && *own != t) {
      ErrorLine(errorPrefix()) << "--target " << t << " and the spec's target = " << *own
                               << ": give the target once\n";
      return 1;
    }
    if (t != "sm_80" && t != "sm_90a" && t != "cpu") {
      ErrorLine(errorPrefix()) << "--target " << t << ": expected sm_80, sm_90a or cpu"
                               << (t == "gpu"
                                       ? " (emit names an architecture; `attnc run --target gpu` "
                                         "runs on the GPU found)"
                                       : "")
                               << "\n";
      return 1;
    }
    if (!attn::cli::mentions(specText, "target"))
      specText = specText.getValue() + (specText.empty() ? "" : ",") + "target=" + t;
  }
  std::optional<attn::Spec> spec = readSpec();
  if (!spec)
    return 1;
  // An output that cannot be written is said before anything is emitted.
  if (outputFile != "-")
    if (std::string why = attn::npy::writable(outputFile); !why.empty()) {
      ErrorLine(errorPrefix()) << outputFile << ": " << why << "\n";
      return 1;
    }
  // A GPU target named (`--target sm_90a` or target=sm_90a in the spec)
  // prints the kernel; a spec that leaves the target to its default, the
  // final IR.
  std::string stage = ::stage;
  const bool targetNamed =
      emitTarget.getNumOccurrences() || attn::cli::fieldValue(specText, "target").has_value();
  if (targetNamed && !::stage.getNumOccurrences() && spec->isGPU())
    stage = "cuda";
  if (stage == "cuda" && plainNames) {
    ErrorLine(errorPrefix()) << "--plain-names numbers the IR's values; --stage cuda prints CUDA, "
                                "which has none to number\n";
    return 1;
  }
  const auto &passes = attn::pipelinePassNames();
  const bool knownStage = stage == "textbook" || stage == "final" || stage == "cuda" ||
                          llvm::is_contained(passes, stage);
  if (!knownStage) {
    ErrorLine(errorPrefix()) << "unknown --stage '" << stage
                             << "': expected textbook, final, cuda or one of "
                             << llvm::join(passes, " ");
    return 1;
  }

  MLIRContext ctx;
  ctx.disableMultithreading(); // IR printing at module scope needs it.
  OwningOpRef<ModuleOp> module = attn::buildTextbook(ctx, *spec);
  OpPrintingFlags flags;
  if (!plainNames)
    flags.printNameLocAsPrefix();

  if (printAfterAll) {
    llvm::outs() << "// -----// textbook: " << spec->str() << " //----- //\n";
    module->print(llvm::outs(), flags);
    llvm::outs() << "\n";
  }
  if (stage != "textbook") {
    PassManager pm(&ctx);
    attn::buildAttnPipeline(pm, stage == "final" || stage == "cuda" ? "" : stage);
    if (printAfterAll)
      pm.enableIRPrinting([](Pass *, Operation *) { return false; },
                          [](Pass *, Operation *) { return true; },
                          /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false,
                          /*printAfterOnlyOnFailure=*/false, llvm::outs(), flags);
    if (failed(pm.run(*module))) {
      ErrorLine(errorPrefix()) << "the pipeline failed on " << spec->str() << "\n";
      return 1;
    }
  }
  // What -o gets, made before the file is opened: a failure leaves an
  // existing file as it was.
  std::string text;
  if (stage == "cuda") {
    std::string error;
    attn::CudaLaunchShape shape;
    if (!attn::emitCuda(*module, *spec, text, shape, error)) {
      ErrorLine(errorPrefix()) << "cannot emit CUDA for " << spec->str() << ": " << error << "\n";
      return 1;
    }
  } else if (!printAfterAll || outputFile != "-") {
    llvm::raw_string_ostream os(text);
    module->print(os, flags);
    os << "\n";
  }
  std::string error;
  if (outputFile != "-") {
    // Whole or not at all: a full disk or a stopped run leaves the old file.
    if (!attn::npy::writeFile(outputFile, text, error)) {
      ErrorLine(errorPrefix()) << error << "\n";
      return 1;
    }
    return 0;
  }
  auto output = openOutputFile(outputFile, &error);
  if (!output) {
    ErrorLine(errorPrefix()) << "cannot write " << outputFile << ": " << error << "\n";
    return 1;
  }
  output->os() << text;
  return keepOutput(*output);
}

/// A flag's value where the command line gave it, else nothing (the
/// command chooses the default, which may depend on other flags).
template <typename T, typename Parser>
static std::optional<T> given(const cl::opt<T, false, Parser> &flag) {
  return flag.getNumOccurrences() ? std::optional<T>(flag.getValue()) : std::nullopt;
}

/// A flag as it is written: -o, --spec.
static std::string flagName(llvm::StringRef name) {
  return (name.size() == 1 ? "-" : "--") + name.str();
}

/// Runs the command the command line names; its exit status.
static int runCommand() {
  // A file or folder flag given as '' names nothing: refused, not read as unset.
  for (cl::opt<std::string> *path : {&runQ, &runK, &runV, &runBlockTable, &runOut, &runLse,
                                     &outputFile, &aotSpecs, &aotOutput, &aotVerify, &aotName,
                                     &tuneFile, &tuneCandidates, &traceSave})
    if (path->getNumOccurrences() && path->empty()) {
      ErrorLine(errorPrefix()) << flagName(path->ArgStr) << " is empty: it needs a "
                               << (path->ValueStr.empty() ? "value" : path->ValueStr) << "\n";
      return 1;
    }
  if (emitCmd)
    return runEmit();
  if (specCmd)
    return runSpec();
  if (runCmd) {
    attn::cli::RunOptions o;
    o.spec = specText;
    o.target = runTarget;
    o.batch = given(runBatch);
    o.numKVHeads = given(runKVHeads);
    o.qLen = given(runQLen);
    o.kvLen = given(runKVLen);
    o.ragged = runRagged;
    o.seed = given(runSeed);
    o.scale = given(runScale);
    o.numSplits = given(runSplits);
    o.q = runQ;
    o.k = runK;
    o.v = runV;
    o.blockTable = runBlockTable;
    o.out = runOut;
    o.lse = runLse;
    return attn::cli::run(o);
  }
  if (traceCmd) {
    attn::cli::TraceOptions o;
    o.spec = specText;
    o.kvLen = traceKVLen;
    o.row = traceRow;
    o.seed = given(runSeed);
    o.saveInputs = traceSave;
    return attn::cli::trace(o);
  }
  if (explainCmd) {
    attn::cli::ExplainOptions o;
    o.spec = specText;
    o.lengths = explainLengths;
    o.measure = !explainNoMeasure;
    return attn::cli::explain(o);
  }
  if (cacheCmd)
    return attn::cli::cache(cacheAction);
  if (aotCmd) {
    // --verify checks a bundle; the flags that build one do not go with it.
    if (aotVerify.getNumOccurrences())
      for (const cl::Option *flag : std::initializer_list<const cl::Option *>{
               &aotSpecs, &aotArchs, &aotOutput, &aotName, &aotJobs, &aotSkipBad, &aotForce})
        if (flag->getNumOccurrences()) {
          ErrorLine("attnc aot: ")
              << flagName(flag->ArgStr)
              << " builds a bundle; --verify only checks one (give them apart)\n";
          return 1;
        }
    attn::cli::AotOptions o;
    o.specsFile = aotSpecs;
    o.archs = aotArchs;
    o.archsGiven = aotArchs.getNumOccurrences() > 0;
    o.output = aotOutput;
    o.name = aotName;
    if (aotJobs.getNumOccurrences() && aotJobs == 0) {
      ErrorLine("attnc aot: ") << "-j 0: give at least 1 (leave -j out for one per hardware "
                                  "thread)\n";
      return 1;
    }
    o.jobs = aotJobs;
    o.skipBad = aotSkipBad;
    o.force = aotForce;
    o.verify = aotVerify;
    return attn::cli::aot(o);
  }
  if (tuneCmd) {
    attn::cli::TuneOptions o;
    o.spec = specText;
    o.candidates = tuneCandidates;
    o.seqLen = given(tuneSeqLen);
    o.batch = given(tuneBatch);
    o.heads = given(tuneHeads);
    o.file = tuneFile;
    o.dryRun = tuneDryRun;
    return attn::cli::tune(o);
  }
  llvm::errs() << "attnc: expected a command (" << kCommandNames << "); see `attnc --help`\n";
  return 1;
}

int main(int argc, char **argv) {
  const attn::cli::CallerSignals caller; // (before InitLLVM handles them)
  llvm::InitLLVM init(argc, argv);
  attn::cli::installOutputErrorHandler("attnc",
                                       caller); // (`--help` and `--version` exit in the parser)
  cl::HideUnrelatedOptions(attncCategory);
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "attnc " << ATTNC_VERSION << " (MLIR " << LLVM_VERSION_STRING << ")\n";
  });
  // `attnc --help` lists the commands and the spec's fields; `attnc <command>
  // --help` says what the command does, its flags, then (for a command that
  // takes a spec) the spec's fields.
  std::string overview = std::string(kCommands) + kSpecHelp;
  std::unique_ptr<cl::extrahelp> specFields;
  cl::SubCommand *named = nullptr;
  if (argc > 1)
    for (cl::SubCommand *sub : cl::getRegisteredSubcommands())
      if (!sub->getName().empty() && sub->getName() == argv[1])
        named = sub;
  if (named) {
    overview = "attnc: a compiler for FlashAttention-family kernels\n";
    if (named != &cacheCmd)
      specFields = std::make_unique<cl::extrahelp>(kSpecHelp);
  } else if (argc > 1 && argv[1][0] != '-') {
    // A first word that is not a flag must be a command (LLVM would print
    // the overview and exit 0 for `attnc foo --help`).
    ErrorLine("attnc: ") << "unknown command '" << argv[1] << "' (the commands are "
                         << kCommandNames << "); see `attnc --help`\n";
    return 1;
  }
  {
    // LLVM's parse errors point at the top-level help ("Try: 'attnc --help'"),
    // which does not list a command's flags: point at the command's.
    // With --help or --version LLVM prints and exits inside the parse, so it
    // reports its errors itself there (they would be lost in the string).
    bool printsAndExits = false;
    for (int i = 1; i < argc; ++i) {
      const llvm::StringRef a = llvm::StringRef(argv[i]).ltrim('-');
      printsAndExits |= argv[i][0] == '-' && (a.starts_with("help") || a == "version");
    }
    std::string parseErrors;
    llvm::raw_string_ostream errorStream(parseErrors);
    if (printsAndExits)
      cl::ParseCommandLineOptions(argc, argv, overview);
    else if (!cl::ParseCommandLineOptions(argc, argv, overview, &errorStream)) {
      const std::string help = named ? "attnc " + named->getName().str() + " --help" : "attnc --help";
      for (size_t at = 0; (at = parseErrors.find("Try: '", at)) != std::string::npos;) {
        const size_t end = parseErrors.find('\'', at + 6);
        if (end == std::string::npos)
          break;
        parseErrors.replace(at + 6, end - (at + 6), help);
        at += 6 + help.size();
      }
      // "Too many positional arguments ... See: ARGV0 --help" likewise.
      for (size_t at = 0; (at = parseErrors.find("See: ", at)) != std::string::npos;) {
        const size_t end = std::min(parseErrors.find('\n', at), parseErrors.size());
        parseErrors.replace(at + 5, end - (at + 5), "'" + help + "'");
        at += 5 + help.size() + 2;
      }
      // LLVM quotes an argument, or a flag's value, as it is: one with a
      // control character is written as attnc's own messages write it, so
      // each error stays a line.
      auto quote = [&](llvm::StringRef raw) {
        const std::string shown = attn::printable(raw, /*keepUtf8=*/true);
        for (size_t at = 0; (at = parseErrors.find(raw.str(), at)) != std::string::npos;
             at += shown.size())
          parseErrors.replace(at, raw.size(), shown);
      };
      for (int i = 1; i < argc; ++i)
        if (const llvm::StringRef a(argv[i]); llvm::any_of(a, attn::isControl)) {
          quote(a);
          if (const size_t equals = a.find('='); equals != llvm::StringRef::npos)
            quote(a.substr(equals + 1)); // the value of --flag=value
        }
      llvm::errs() << parseErrors;
      return 1;
    }
  }
  // A flag given twice is a mistake to report, not a value to overwrite.
  for (cl::SubCommand *sub : cl::getRegisteredSubcommands())
    if (*sub && !sub->getName().empty())
      for (const auto &entry : sub->OptionsMap)
        if (entry.second->getNumOccurrences() > 1) {
          llvm::errs() << "attnc " << sub->getName() << ": " << flagName(entry.first) << " given "
                       << entry.second->getNumOccurrences() << " times: give it once\n";
          return 1;
        }
#ifdef ATTNC_HAVE_NVRTC
  // Tile sizes `attnc tune` recorded on this machine become the defaults of
  // the specs they were measured for (tune itself measures the built-ins).
  // A table that cannot be read is said once, on stderr, and ignored. Not
  // for tune (it measures the built-in defaults) nor for aot: a bundle is
  // looked up by the canonical spec an application derives, and
  // attn::attention derives the built-in tiles, not this machine's tuned ones
  // (a line that wants tuned tiles gives them).
  if (!tuneCmd && !aotCmd)
    attn::TuningTable::installDefault();
#endif
  const int status = runCommand();
  // Standard output that could not be written (a full disk) fails the
  // command with a message, not an LLVM fatal error at exit.
  llvm::outs().flush();
  if (std::error_code ec = llvm::outs().error()) {
    llvm::errs() << "attnc: cannot write the standard output: " << ec.message() << "\n";
    llvm::outs().clear_error();
    return 1;
  }
  return status;
}
