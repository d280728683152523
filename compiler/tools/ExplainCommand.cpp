//===- ExplainCommand.cpp - attnc explain: where the memory goes ----------===//
//
// For one head of N queries and N keys: the HBM traffic and the scratch
// memory of textbook attention (the N x N score matrix is written, read,
// written again as probabilities and read once more) against the generated
// kernel (Q, K and V read once per query tile, O written once, scratch the
// size of a few tiles), from the model stated in the output. Then both are
// run on the CPU and their peak memory measured.
//
// For decode (one query token over N cached keys) the scores are only N
// floats per head; what the kernel saves is the GQA group's reads of K and
// V: one read per KV head instead of one per query head. So a decode spec
// gets that model, for one KV head and its group, and nothing measured.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "attnc/CpuBackend.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <fstream>
#include <random>
#include <sstream>
#include <type_traits>

namespace attn::cli {

namespace {

/// The process's resident and peak resident memory (VmRSS, VmHWM), bytes.
std::pair<int64_t, int64_t> residentMemory() {
  return {processMemory("VmRSS"), processMemory("VmHWM")};
}

/// Resets the peak to the current resident size (Linux: clear_refs 5).
bool resetPeak() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  return static_cast<bool>(clear.flush());
}

/// Runs `work` and returns the peak memory it added to the process, or -1.
template <typename F>
int64_t measurePeak(F &&work) {
  if (!resetPeak())
    return -1;
  auto [before, unused] = residentMemory();
  work();
  auto [after, peak] = residentMemory();
  return peak < 0 || before < 0 ? -1 : peak - before;
}

/// Textbook attention with the score matrix materialised (in T), the keys
/// the mask hides at -inf (a row that sees none is 0).
template <typename T>
void textbook(const std::vector<T> &q, const std::vector<T> &k, const std::vector<T> &v,
              std::vector<T> &o, int64_t n, int64_t d, T scale, const Mask &mask) {
  constexpr T inf = std::numeric_limits<T>::infinity();
  std::vector<T> s(n * n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      T dot = 0;
      for (int64_t x = 0; x < d; ++x)
        dot += q[i * d + x] * k[j * d + x];
      s[i * n + j] = isVisible(mask, i, j, n, n) ? dot * scale : -inf;
    }
  for (int64_t i = 0; i < n; ++i) {
    T max = -inf, sum = 0;
    for (int64_t j = 0; j < n; ++j)
      max = std::max(max, s[i * n + j]);
    for (int64_t j = 0; j < n; ++j)
      sum += s[i * n + j] = max == -inf ? T(0) : std::exp(s[i * n + j] - max);
    for (int64_t j = 0; j < n; ++j)
      s[i * n + j] = sum > 0 ? s[i * n + j] / sum : T(0);
  }
  // O = P V, a row of P at a time: each step adds a row of V, read in order.
  for (int64_t i = 0; i < n; ++i) {
    T *row = &o[i * d];
    std::fill(row, row + d, T(0));
    for (int64_t j = 0; j < n; ++j) {
      const T p = s[i * n + j];
      for (int64_t x = 0; x < d; ++x)
        row[x] += p * v[j * d + x];
    }
  }
}

std::string bytes(double b) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return llvm::formatv("{0:F1} {1}", b, units[u]).str();
}

/// The keys a kernel reads for one head: each query tile of `tileQ` rows
/// reads the KV tiles the mask leaves it (attn-mask-tiles: classify_tiles),
/// so a causal or sliding-window mask reads less than every key per tile.
double keysRead(const Spec &spec, int64_t tileQ, int64_t qLen, int64_t n) {
  double keys = 0;
  for (int64_t q0 = 0; q0 < qLen; q0 += tileQ) {
    const TileRange r = classifyTiles(spec.mask, q0, std::min(tileQ, qLen - q0), spec.tile_kv, qLen, n);
    if (r.hi > r.lo)
      keys += double(std::min(n, r.hi * spec.tile_kv) - r.lo * spec.tile_kv);
  }
  return keys;
}

/// The bytes of a score (and of the running state): f64 for an f64 spec,
/// whose CPU kernel computes in f64, else f32; and the type's name.
int64_t scoreBytes(const Spec &spec) { return spec.dtype == DType::F64 ? 8 : 4; }
std::string scoreType(const Spec &spec) { return scoreBytes(spec) == 8 ? "f64" : "fp32"; }

/// What the tables leave out of a paged cache, said under the model, and
/// that the CPU measurement (`measured`) reads contiguous K and V.
void pagingNote(const Spec &spec, bool measured) {
  if (!spec.isPaged())
    return;
  llvm::outs() << "  page_size = " << spec.page_size
               << ": the table counts K and V as if contiguous. It leaves out the kernel's "
                  "block-table reads (one 4-byte entry per page of "
               << counted(spec.page_size, "key")
               << ") and the textbook's gather of the pages into contiguous K and V (attn."
                  "gather_pages: 2Nd read and 2Nd written)"
               << (measured ? "; the measurement below reads contiguous K and V (page_size = 0)"
                            : "")
               << "\n";
}

/// The decode model: one KV head, its gqa query heads, tile_q query tokens
/// each (one, or a few under speculative decoding).
void explainDecode(const Spec &spec, const std::vector<int64_t> &lengths) {
  const int64_t d = spec.head_dim, b = bytesPerElement(spec.dtype), g = spec.gqa, t = spec.tile_q;
  const bool fixedSplits = spec.split_kv != kSplitKVAuto;
  const int64_t s = fixedSplits ? spec.split_kv : 1;
  const int64_t sb = scoreBytes(spec);
  const std::string st = scoreType(spec);
  const int64_t rows = t * g; // a block's (a split's) query rows: tokens x the group
  // GPU splits run side by side and write their partial states for the merge
  // (or merge in a cluster); the CPU kernel runs them in turn, each merged
  // into the running state (attn.merge) as it ends: nothing is written.
  const bool partials = spec.isGPU() && s > 1;
  // A GPU decode block takes its rows 16 at a time, one pass over its keys
  // each; the CPU kernel holds them all in one pass.
  const int64_t passes = spec.isGPU() ? (rows + 15) / 16 : 1;
  const std::string reads =
      passes == 1 ? "once for the group "
                  : std::to_string(passes) + " times for the group (the block takes its " +
                        std::to_string(rows) + " query rows 16 at a time, one pass over the keys each) ";
  // "q (d)" for one token, "q (t d)" with t = 3 tokens.
  const std::string tt = t == 1 ? "" : "t ", gd = t == 1 ? "gd" : "t g d", gN = t == 1 ? "gN" : "t g N";
  llvm::outs() << "spec " << spec.str() << "\n\n"
               << "Model, for one KV head and its g = " << g << (g == 1 ? " query head, " : " query heads, ")
               << (t == 1 ? std::string("one query token each") : "t = " + std::to_string(t) + " query tokens each")
               << ", N cached keys, head_dim d = " << d << ", " << b << "-byte elements, " << st
               << " scores:\n"
               << "  textbook HBM:  per query head: read q (" << tt << "d) + read K and V (2Nd) + write S, "
                  "read S, write P, read P (4 " << tt << "N " << st << ") + write o (" << tt << "d)\n"
               << "  kernel HBM:    read the group's queries (" << gd << ") + read K and V " << reads
               << (spec.mask.kind == MaskKind::None ? "(2Nd" : "(2Kd, K the keys of the tiles the mask leaves")
               << (passes == 1 ? ")" : " each)")
               << " + write O (" << gd << ")"
               << (partials ? " + write and read the splits' partial states (2 s " + tt + "g (d + 1) " + st + ")" : "")
               << "\n"
               << "  textbook peak scratch: S and P, " << tt << "N " << st << " per query head (in place: "
               << gN << ")\n";
  pagingNote(spec, /*measured=*/false); // decode measures nothing
  if (spec.isGPU())
    llvm::outs() << "  kernel peak scratch:   s thread blocks (one per split; s = " << s
                 << (fixedSplits ? "" : " in the table") << "), each the group's query rows + "
                 << counted(kvStages(spec), "stage") << " of K and V tiles of " << spec.tile_kv
                 << " keys (its shared memory, as `attnc spec` prints it)\n";
  else
    llvm::outs() << "  kernel peak scratch:   the group's " << counted(rows, "query row")
                 << " + a K and a V tile of " << spec.tile_kv << " keys ((" << rows
                 << " + 2 tile_kv) d elements) + the score tile and state (" << rows
                 << " tile_kv and " << rows << " (2d + 2) " << st
                 << ": m, l, acc and acc rescaled as a tile adds to it)"
                 << (spec.split_kv != 1
                         ? "; the " +
                               (fixedSplits ? "s = " + std::to_string(s) + " " : std::string()) +
                               "splits run in turn, each from a fresh state merged into the "
                               "running one as it ends (one more " +
                               std::to_string(rows) + " (d + 2) " + st +
                               "), so no partial state is written"
                         : std::string())
                 << "\n";
  if (spec.target == Target::SM90a && (s > 1 || !fixedSplits))
    llvm::outs() << "  sm_90a: a launch whose splits' thread blocks all fit on the GPU at once "
                    "merges 2 to 8 splits (16 on a GPU that allows such clusters) inside a "
                    "thread-block cluster, through distributed shared memory: no partial state "
                    "reaches HBM."
                 << (fixedSplits ? " The table counts the merge kernel's traffic, the most a "
                                   "split launch makes."
                                 : "")
                 << "\n";
  if (!fixedSplits)
    llvm::outs() << "  split_kv = auto: "
                 << (spec.isGPU() ? "the split count is chosen at launch from the batch, the KV "
                                    "heads and the GPU"
                                  : "on the CPU the caller gives the split count (attnc run "
                                    "--num-splits, 4 unless given)")
                 << (spec.isGPU() ? "; the table assumes one split (each split adds 2 " + tt +
                                        "g (d + 1) " + st + " of partial state)"
                                  : std::string("; the splits merge as they go, so the table holds "
                                                "for any count"))
                 << "\n";
  llvm::outs() << "\n"
               << llvm::format("%8s %14s %14s %8s %16s %16s\n", "N", "textbook HBM", "kernel HBM",
                               "ratio", "textbook scratch", "kernel scratch");
  for (int64_t n : lengths) {
    const double tbHBM = g * (2.0 * t * d * b + 2.0 * n * d * b + 4.0 * t * n * sb);
    const double kHBM = 2.0 * rows * d * b + 2.0 * passes * keysRead(spec, t, t, n) * d * b +
                        (partials ? 2.0 * s * rows * (d + 1) * sb : 0);
    // The GPU's s blocks each hold their shared memory; the CPU's one split
    // at a time, and the merged state wherever the spec may split (the split
    // loop is there for auto too).
    const double scratch =
        spec.isGPU() ? double(s) * double(sharedMemoryBytes(spec))
                     : double(rows + 2 * spec.tile_kv) * d * b +
                           double(rows) * (spec.tile_kv + 2 * d + 2) * sb +
                           (spec.split_kv != 1 ? double(rows) * (d + 2) * sb : 0.0);
    llvm::outs() << llvm::format("%8lld %14s %14s %7.1fx %16s %16s\n", (long long)n,
                                 bytes(tbHBM).c_str(), bytes(kHBM).c_str(), tbHBM / kHBM,
                                 bytes(double(rows) * n * sb).c_str(), bytes(scratch).c_str());
  }
  llvm::outs() << "(Decode is bound by reading K and V: as N grows the ratio approaches "
                  "g (1 + "
               << 2 * t * sb << " / (d b))" << (passes == 1 ? "" : " / " + std::to_string(passes))
               << " with b = " << b << " bytes per element, the group's "
               << (passes == 1 ? std::string("one read") : std::to_string(passes) + " reads")
               << " of K and V plus the textbook's score traffic"
               << (spec.mask.kind == MaskKind::SlidingWindow
                       ? "; with a sliding window the kernel reads only the window's tiles, so "
                         "here the ratio grows with N"
                       : "")
               << ". Nothing is measured on the CPU for decode: one query head's scores "
                  "are N floats either way.)\n";
}

/// Runs textbook attention and the spec's CPU kernel (one head, T) at each
/// length and prints the peak memory each added.
template <typename T>
int measure(const Spec &cpu, const std::vector<int64_t> &lengths) {
  const int64_t d = cpu.head_dim;
  const char *type = std::is_same_v<T, double> ? "f64" : "f32";
  // Both sides compute in T, summing over N keys in different orders.
  const double bound = std::is_same_v<T, double> ? 1e-9 : 1e-4;
  if (std::string why = cpuScratchFits(cpu); !why.empty()) {
    ErrorLine("attnc explain: ") << "not measured: " << why << " (--model-only: the model alone)\n";
    return 1;
  }
  auto kernel = CpuKernel::compile(cpu);
  if (!kernel) {
    ErrorLine("attnc explain: ") << llvm::toString(kernel.takeError()) << "\n";
    return 1;
  }
  llvm::outs() << "\nMeasured on this CPU (" << cpu.str() << "): peak memory added by one "
               << type << " run, inputs and output excluded\n"
               << llvm::format("%8s %18s %18s %10s\n", "N", "textbook (S in RAM)", "generated kernel",
                               "ratio");
  std::mt19937_64 rng(1);
  std::normal_distribution<T> normal(0, 1);
  {
    // A first run JIT-compiles the kernel's code; keep that out of the numbers.
    std::vector<T> one(d, T(1)), out(d);
    CpuArgs a;
    a.numQHeads = a.numKVHeads = 1;
    a.qLen = a.kvLen = 1;
    a.q = a.k = a.v = one.data();
    a.scale = 1.0;
    a.out = out.data();
    if (llvm::Error err = (*kernel)->run(a)) {
      ErrorLine("attnc explain: ") << llvm::toString(std::move(err)) << "\n";
      return 1;
    }
  }
  const MemoryLimit memory = usableMemory();
  // The textbook run holds the N x N scores (and the inputs): not past half of memory.
  auto textbookBytes = [&](int64_t n) { return (double(n) * n + 5.0 * n * d) * sizeof(T); };
  // Each length measured runs textbook attention and the kernel: 4 N^2 d
  // flops each, unmasked, on one core. A long measurement says so first.
  double flops = 0;
  for (int64_t n : lengths)
    if (textbookBytes(n) <= memory.bytes / 2)
      flops += 2 * 4.0 * double(n) * double(n) * double(d);
  // The textbook's loops run faster than a kernel run's checks: twice the
  // bound (the default lengths, 73 GFLOP, take about 20 s).
  if (flops > 2 * kLongRunFlops)
    llvm::outs() << "note: up to " << llvm::format("%.0f", flops / 1e9)
                 << " GFLOP on one CPU core: this may take minutes (--model-only measures "
                    "nothing; shorter --lengths run faster)\n";
  llvm::outs().flush();
  for (int64_t n : lengths) {
    const double need = textbookBytes(n);
    if (need > memory.bytes / 2) {
      llvm::outs() << llvm::format("%8lld   (not measured: textbook attention needs %s here, "
                                   "more than half of %s)\n",
                                   (long long)n, bytes(need).c_str(), memory.what.c_str());
      continue;
    }
    std::vector<T> q(n * d), k(n * d), v(n * d), o1(n * d), o2(n * d);
    for (auto *buf : {&q, &k, &v})
      for (T &x : *buf)
        x = normal(rng);
    const T scale = T(1) / std::sqrt(T(d));
    int64_t tb = measurePeak([&] { textbook<T>(q, k, v, o1, n, d, scale, cpu.mask); });
    CpuArgs a;
    a.numQHeads = a.numKVHeads = 1;
    a.qLen = a.kvLen = n;
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.scale = scale;
    a.out = o2.data();
    llvm::Error err = llvm::Error::success();
    int64_t gen = measurePeak([&] { err = (*kernel)->run(a); });
    if (err) {
      ErrorLine("attnc explain: ") << llvm::toString(std::move(err)) << "\n";
      return 1;
    }
    // The two outputs must agree (relative to the largest output element);
    // a table over outputs that differ would measure the wrong computation.
    double diff = 0, largest = 0;
    for (int64_t i = 0; i < n * d; ++i) {
      diff = std::max(diff, double(std::fabs(o1[i] - o2[i])));
      largest = std::max(largest, double(std::fabs(o1[i])));
    }
    const double rel = largest > 0 ? diff / largest : diff;
    if (!(rel <= bound)) {
      llvm::outs().flush();
      llvm::errs() << llvm::format("attnc explain: at N = %lld the kernel's output differs from "
                                   "textbook attention's by %.1e relative (bound %.0e)\n",
                                   (long long)n, rel, bound);
      return 1;
    }
    if (tb < 0 || gen < 0) {
      llvm::outs() << llvm::format("%8lld %18s\n", (long long)n,
                                   "(peak memory not measurable: no /proc/self/clear_refs)");
      continue;
    }
    // Memory is measured in 4 KiB pages: below a page there is no ratio to
    // give, and a kernel that added none is at least tb / 4 KiB better.
    constexpr int64_t kPage = 4096;
    const std::string ratio = tb < kPage    ? std::string("-")
                              : gen < kPage ? llvm::formatv(">= {0:F0}x", double(tb) / kPage).str()
                              : double(tb) >= 10.0 * gen
                                  ? llvm::formatv("{0:F0}x", double(tb) / gen).str()
                                  : llvm::formatv("{0:F2}x", double(tb) / gen).str();
    llvm::outs() << llvm::format("%8lld %18s %18s %10s   (outputs agree: %.1e relative)\n",
                                 (long long)n, bytes(tb).c_str(), bytes(gen).c_str(),
                                 ratio.c_str(), rel);
    llvm::outs().flush(); // each row as it is measured
  }
  llvm::outs() << "(resident memory grows in 4 KiB pages, and the allocator reuses freed "
                  "memory: tile-sized scratch can measure as 0; '-': too little to compare)\n";
  return 0;
}

} // namespace

int explain(const ExplainOptions &o) {
  SpecResult parsed = parseSpec(o.spec);
  if (!parsed) {
    ErrorLine("attnc explain: ") << parsed.error->message() << "\n";
    return 1;
  }
  const Spec spec = *parsed.spec;
  std::vector<int64_t> lengths;
  if (o.lengths.empty() || o.lengths.back() == ',') {
    ErrorLine("attnc explain: ") << "--lengths: '' is not a length in 1..1048576\n";
    return 1;
  }
  {
    std::istringstream in(o.lengths);
    std::string item;
    while (std::getline(in, item, ',')) {
      // Spaces around an item, as a spec takes them; then digits only
      // (strtoll would take a sign).
      item = llvm::StringRef(item).trim(" \t").str();
      const bool digits = !item.empty() && item.size() <= 8 &&
                          llvm::all_of(item, [](char c) { return llvm::isDigit(c); });
      const long long n = digits ? std::strtoll(item.c_str(), nullptr, 10) : 0;
      if (n < 1 || n > (1 << 20)) {
        ErrorLine("attnc explain: ")
            << "--lengths: '" << item << "' is not a length in 1..1048576\n";
        return 1;
      }
      lengths.push_back(n);
    }
  }
  if (spec.mode == Mode::Decode) {
    // A decode step's query tokens are among the sequence's keys (as attnc run and trace say).
    for (int64_t n : lengths)
      if (n < spec.tile_q) {
        ErrorLine("attnc explain: ") << "--lengths: " << counted(n, "key")
                                     << (n == 1 ? " is" : " are") << " fewer than the decode "
                                     << "spec's tile_q = " << spec.tile_q
                                     << " query tokens (each token is one of the keys)\n";
        return 1;
      }
    explainDecode(spec, lengths);
    return 0;
  }
  const int64_t d = spec.head_dim, b = bytesPerElement(spec.dtype);
  // GPU blocks keep kvStages K/V tiles in shared memory; the CPU kernel
  // loads one K and one V tile per step (it has no stages).
  const int64_t br = spec.tile_q, bc = spec.tile_kv, stages = spec.isGPU() ? kvStages(spec) : 1;
  // The CPU kernel's tiles hold the group's query heads: gqa x tile_q rows.
  const int64_t rows = spec.isGPU() ? br : br * spec.gqa;
  const std::string rowsText = rows == br ? "tile_q" : "gqa tile_q";
  const int64_t sb = scoreBytes(spec);
  const std::string st = scoreType(spec);
  llvm::outs() << "spec " << spec.str() << "\n\n"
               << "Model, for one head of N queries and N keys, head_dim d = " << d << ", "
               << b << "-byte elements, " << st << " scores:\n"
               << "  textbook HBM:  read Q, K, V (3Nd) + write S, read S, write P, read P "
                  "(4 N^2 " << st << ") + write O (Nd)\n"
               << "  kernel HBM:    read Q once (Nd) + read K and V once per query tile "
               << (spec.mask.kind == MaskKind::None
                       ? "(2Nd * ceil(N/tile_q))"
                       : "(2Kd, K the keys of the tiles the mask leaves each of the ceil(N/tile_q) "
                         "tiles)")
               << " + write O (Nd)\n"
               << "  textbook peak scratch: S and P, N^2 " << st << " each (in place: N^2)\n";
  if (spec.gqa > 1)
    llvm::outs() << "  gqa = " << spec.gqa << ": the table is one query head. "
                 << (spec.isGPU()
                         ? "A GPU prefill thread block serves one query head, so each head of "
                           "the group reads K and V itself, as counted"
                         : "The CPU kernel packs the group's query heads into its query tile "
                           "(gqa x tile_q rows) and reads each K and V tile once for them: per "
                           "query head, 1/gqa of the K and V traffic counted")
                 << (o.measure ? "; the measurement below runs one head (gqa = 1)" : "") << "\n";
  pagingNote(spec, o.measure);
  // A GPU block's scratch is its shared memory (the scores stay in
  // registers); the CPU kernel keeps its score tile in memory too.
  if (spec.isGPU())
    llvm::outs() << "  kernel peak scratch:   per thread block, its shared memory (as `attnc spec` "
                    "prints it): the Q tile + "
                 << counted(stages, "stage") << " of K and V tiles; the score tile stays in registers\n\n";
  else
    llvm::outs() << "  kernel peak scratch:   the Q tile + a K and a V tile, (" << rowsText
                 << " + 2 tile_kv) d elements, + the tiles of the step: one score tile ("
                 << rowsText << " tile_kv " << st
                 << ": S, then scaled, masked and turned into P in place, as the CPU "
                    "lowering writes them) and 1 to 3 tiles of "
                 << rowsText << " d " << st
                 << " (acc, acc_new, and at the end the normalised output)\n\n";
  llvm::outs() << llvm::format("%8s %14s %14s %16s %16s\n", "N", "textbook HBM", "kernel HBM",
                               "textbook scratch", "kernel scratch");
  // The CPU's scratch as a range: its tiles and one score tile, with the
  // fewest and the most tiles of the accumulator's shape live at once.
  const double tiles = double(rows + 2 * stages * bc) * d * b, score = double(rows) * bc * sb,
               accumulator = double(rows) * d * sb;
  const std::string kernelScratch =
      spec.isGPU() ? bytes(sharedMemoryBytes(spec))
                   : bytes(tiles + score + accumulator) + " - " +
                         bytes(tiles + score + 3 * accumulator);
  // The CPU kernel's K and V reads serve the group's query heads at once.
  const double kvShare = spec.isGPU() ? 1.0 : 1.0 / double(spec.gqa);
  for (int64_t n : lengths) {
    double tbHBM = 3.0 * n * d * b + 4.0 * n * n * sb + 1.0 * n * d * b;
    double kHBM = 1.0 * n * d * b + 2.0 * keysRead(spec, br, n, n) * d * b * kvShare +
                  1.0 * n * d * b;
    llvm::outs() << llvm::format("%8lld %14s %14s %16s %s\n", (long long)n,
                                 bytes(tbHBM).c_str(), bytes(kHBM).c_str(),
                                 bytes(double(n) * n * sb).c_str(), kernelScratch.c_str());
  }
  if (!o.measure)
    return 0;
  llvm::outs().flush(); // the model is there while the measuring runs

  // Measured: one head on this CPU, in f64 for an f64 spec, else in f32 (the
  // CPU's type nearest the spec's), inputs allocated before measuring.
  Spec cpu = spec;
  cpu.target = Target::CPU;
  cpu.dtype = spec.dtype == DType::F64 ? DType::F64 : DType::F32;
  cpu.page_size = 0;
  cpu.mode = Mode::Prefill;
  cpu.gqa = 1;
  cpu.return_lse = false;
  cpu.stages = kStagesAuto; // GPU-only fields
  cpu.mma = MmaKind::Auto;
  if (auto e = validateSpec(cpu)) {
    ErrorLine("attnc explain: ") << "cannot measure on the CPU: " << e->message() << "\n";
    return 1;
  }
  return cpu.dtype == DType::F64 ? measure<double>(cpu, lengths) : measure<float>(cpu, lengths);
}

} // namespace attn::cli
