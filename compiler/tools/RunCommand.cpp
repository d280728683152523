//===- RunCommand.cpp - attnc run: run a spec and check it ----------------===//
//
// Random inputs (seed printed) or .npy files in, the generated kernel run on
// the CPU or the GPU, the outputs compared with the textbook reference, .npy
// files out. Exit status 1 for bad input or an error over tolerance.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "Npy.h"

#include "attnc/CpuBackend.h"
#include "reference/Harness.h"
#ifdef ATTNC_HAVE_NVRTC
#include "attnc/Runtime.h"
#include "reference/GpuHarness.h"
#endif

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unistd.h>

namespace attn::cli {

namespace {
double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int fail(const std::string &message) { return commandError("run", message); }

std::string gib(double bytes) {
  return llvm::formatv("{0:f1} GiB", bytes / double(1ull << 30)).str();
}

/// The bytes the .npy inputs may still take, all of them together: a
/// quarter of the memory, since each is copied into the kernel's element
/// type and q has an output of its size besides (the whole within half, as
/// inputsFit counts random inputs).
struct InputBudget {
  MemoryLimit memory = usableMemory();
  double left = memory.bytes / 4;
};

/// Reads an .npy input, checking its element type and rank, and its size
/// against what `budget` has left (before its data is read).
template <typename T>
bool readInput(const std::string &path, const char *what, size_t rank, npy::Kind kind,
               npy::Array &array, InputBudget &budget, std::string &error) {
  // numpy's way to the element type wanted, for a file that holds another.
  const std::string fix = std::string(" (numpy: a.astype(np.") + npy::kindName(kind) + "))";
  const double whole = budget.memory.bytes / 4;
  if (!npy::read(path, array, error, static_cast<int64_t>(budget.left),
                 ", more than " +
                     (budget.left < whole
                          ? "the " + std::to_string(int64_t(budget.left)) + " bytes left of the "
                          : std::string("the ")) +
                     gib(whole) + " all the inputs may take (a quarter of " + budget.memory.what +
                     "); use smaller inputs")) {
    const bool elementType = error.rfind(path + ": element type '", 0) == 0;
    error = std::string(what) + ": " + error;
    if (elementType)
      error += "; " + std::string(what) + " must be " + npy::kindName(kind) + fix;
    return false;
  }
  budget.left -= double(array.bytes.size());
  if (array.kind != kind) {
    error = std::string(what) + " (" + path + ") holds " + npy::kindName(array.kind) +
            ", expected " + npy::kindName(kind) + fix;
    return false;
  }
  if (array.shape.size() != rank) {
    error = std::string(what) + " (" + path + ") has shape " + array.shapeText() + ", expected " +
            counted(static_cast<int64_t>(rank), "dimension");
    return false;
  }
  return true;
}

template <typename T>
std::vector<T> values(const npy::Array &a) {
  std::vector<T> v(a.size());
  std::memcpy(v.data(), a.bytes.data(), a.bytes.size());
  return v;
}

/// Builds a one-sequence batch from --q, --k, --v (and --block-table).
template <typename T>
bool batchFromFiles(const Spec &spec, const RunOptions &o, harness::Batch<T> &batch,
                    std::string &error) {
  const npy::Kind kind = std::is_same_v<T, double> ? npy::Kind::F64 : npy::Kind::F32;
  const bool paged = spec.isPaged();
  if (o.k.empty() || o.v.empty())
    return error = "--q needs --k and --v as well", false;
  if (paged && (o.blockTable.empty() || !o.kvLen))
    return error = "page_size = " + std::to_string(spec.page_size) +
                   ": a paged cache needs --block-table and --kv-len",
           false;
  if (!paged && !o.blockTable.empty())
    return error = "--block-table: page_size = 0 reads a contiguous cache (give page_size in "
                   "the spec for a paged one)",
           false;
  npy::Array q, k, v;
  InputBudget budget;
  if (!readInput<T>(o.q, "q", 3, kind, q, budget, error) ||
      !readInput<T>(o.k, "k", paged ? 4 : 3, kind, k, budget, error) ||
      !readInput<T>(o.v, "v", paged ? 4 : 3, kind, v, budget, error))
    return false;
  if (k.shape != v.shape)
    return error = "k has shape " + k.shapeText() + " but v has " + v.shapeText(), false;
  const int64_t d = spec.head_dim;
  if (q.shape[2] != d || k.shape.back() != d)
    return error = "head_dim = " + std::to_string(d) + " but q is " + q.shapeText() +
                   " and k is " + k.shapeText(),
           false;
  const int64_t hkv = paged ? k.shape[2] : k.shape[0];
  if (hkv < 1 || q.shape[0] < 1)
    return error = "q has " + std::to_string(q.shape[0]) + " heads and k has " +
                   std::to_string(hkv) + ": both need at least one",
           false;
  if (q.shape[0] != hkv * spec.gqa)
    return error = "q has " + std::to_string(q.shape[0]) + " heads and k has " +
                   std::to_string(hkv) + ": gqa = " + std::to_string(spec.gqa) + " needs " +
                   std::to_string(hkv * spec.gqa) + " query heads",
           false;
  batch.spec = spec;
  batch.numKVHeads = hkv;
  harness::Sequence<T> s;
  s.qLen = q.shape[1];
  if (o.qLen && *o.qLen != s.qLen)
    return error = "--q-len " + std::to_string(*o.qLen) + " but q holds " +
                   std::to_string(s.qLen) + " tokens",
           false;
  s.q = values<T>(q);
  if (paged) {
    if (k.shape[0] < 1)
      return error = "k (" + o.k + ") holds 0 pages: a paged cache needs at least one", false;
    if (k.shape[1] != spec.page_size)
      return error = "k_cache has pages of " + std::to_string(k.shape[1]) +
                     " tokens, the spec says page_size = " + std::to_string(spec.page_size),
             false;
    npy::Array table;
    if (!readInput<int32_t>(o.blockTable, "block table", 1, npy::Kind::I32, table, budget, error))
      return false;
    s.kvLen = *o.kvLen;
    s.table = values<int32_t>(table);
    batch.numPages = k.shape[0];
    batch.kCache = values<T>(k);
    batch.vCache = values<T>(v);
  } else {
    if (o.kvLen && *o.kvLen != k.shape[1])
      return error = "--kv-len " + std::to_string(*o.kvLen) + " but k holds " +
                     std::to_string(k.shape[1]) + " tokens",
             false;
    s.kvLen = k.shape[1];
    s.k = values<T>(k);
    s.v = values<T>(v);
  }
  // Attention of a NaN or an infinity is not defined by the reference: such
  // inputs are refused, not reported as the kernel's errors. A paged cache's
  // slots that no token of the sequence maps to may hold anything.
  auto finite = [&](const std::vector<T> &x, size_t at, size_t count, const std::string &what,
                    const std::string &path) {
    for (size_t i = at; i < at + count && i < x.size(); ++i)
      if (!std::isfinite(x[i]))
        return error = what + " (" + path + ") holds " +
                       (std::isnan(x[i]) ? "NaN" : "an infinity") + " at element " +
                       std::to_string(i) + ": the inputs must be finite",
               false;
    return true;
  };
  if (!finite(s.q, 0, s.q.size(), "q", o.q))
    return false;
  if (!paged && !(finite(s.k, 0, s.k.size(), "k", o.k) && finite(s.v, 0, s.v.size(), "v", o.v)))
    return false;
  // (A table too short for kv_len, or with an entry outside the cache, is said
  // by the checks of the launch: then this one waits.)
  bool tableFits = false;
  if (paged) {
    const int64_t used = (s.kvLen + spec.page_size - 1) / spec.page_size;
    tableFits = int64_t(s.table.size()) >= used;
    for (int64_t i = 0; tableFits && i < used; ++i)
      tableFits = s.table[i] >= 0 && s.table[i] < batch.numPages;
  }
  if (tableFits) {
    const size_t row = static_cast<size_t>(hkv * d);
    for (int64_t t = 0; t < s.kvLen; ++t) {
      const int64_t page = s.table[t / spec.page_size];
      const size_t at = (page * spec.page_size + t % spec.page_size) * row;
      if (!finite(batch.kCache, at, row, "k", o.k) || !finite(batch.vCache, at, row, "v", o.v))
        return false;
    }
  }
  batch.sequences.push_back(std::move(s));
  return true;
}

/// "" when the random inputs and outputs of these sizes fit in half of the
/// machine's memory; else why not (sizes counted without overflow).
template <typename T>
std::string inputsFit(const Spec &spec, int64_t batch, int64_t kvHeads, int64_t qLen,
                      int64_t kvLen) {
  // Per sequence: q and out (query heads), k and v (KV heads), head_dim each;
  // a paged spec's cache besides, of whole pages and three spare ones (as
  // harness::randomBatch lays it out: a key in a page of 65536 takes it all).
  const double d = double(spec.head_dim), kvHeadsD = double(kvHeads),
               qHeads = kvHeadsD * double(spec.gqa);
  double elements = double(batch) * 2 * d * (qHeads * double(qLen) + kvHeadsD * double(kvLen));
  if (spec.isPaged()) {
    const double page = double(spec.page_size);
    const double pages = double(batch) * std::ceil(double(kvLen) / page) + 3;
    elements += 2 * pages * page * kvHeadsD * d;
  }
  // Besides: the reference's output for one sequence (long double), and on
  // the CPU the kernel's tiles (cpuScratchBytes), all within the one half.
  const double reference = qHeads * double(qLen) * d * double(sizeof(long double));
  const double tiles = spec.isGPU() ? 0 : cpuScratchBytes(spec);
  const double bytes = elements * double(sizeof(T)) + reference + tiles;
  const bool overflow = !(bytes < 0x1p63);
  const MemoryLimit memory = usableMemory();
  if (!overflow && bytes <= memory.bytes / 2)
    return "";
  return "--batch " + std::to_string(batch) + ", --num-kv-heads " + std::to_string(kvHeads) +
         ", --q-len " + std::to_string(qLen) + ", --kv-len " + std::to_string(kvLen) +
         ": the inputs and outputs need " +
         (overflow ? std::string("more than 2^63 bytes") : gib(double(bytes))) + " (" +
         (spec.isPaged() ? "the paged cache in whole pages of " +
                               std::to_string(spec.page_size) + " keys, "
                         : std::string()) +
         "with the reference's output" + (spec.isGPU() ? "" : " and the CPU kernel's tiles") +
         ")" +
         ", more than half of " + memory.what + "; use smaller sizes";
}

/// The file `path` names, so that two spellings of one file (a relative and
/// an absolute path, a symbolic link, one whose file does not exist yet)
/// compare equal: its real path, or where it does not exist yet, its
/// folder's real path and its name; "" for what is not a regular file
/// (/dev/stdout and /dev/stderr may both be one terminal, and are no file to
/// lose), which equals nothing.
std::string fileIdentity(std::string path) {
  llvm::SmallString<256> real;
  llvm::sys::fs::file_status status;
  if (!llvm::sys::fs::status(path, status)) // it exists (links followed)
    return status.type() == llvm::sys::fs::file_type::regular_file &&
                   !llvm::sys::fs::real_path(path, real)
               ? std::string(real)
               : std::string();
  path = npy::linkEnd(path); // a symbolic link to a file not made yet: where it leads
  const llvm::StringRef parent = llvm::sys::path::parent_path(path);
  if (llvm::sys::fs::real_path(parent.empty() ? "." : parent, real))
    return path; // no such folder either: as spelt
  llvm::sys::path::append(real, llvm::sys::path::filename(path));
  return std::string(real);
}

/// The random inputs' shape where the flags leave it open.
constexpr int64_t kBatch = 1, kKVHeads = 2;

/// Why the flags do not go together or with the spec, or an output cannot be
/// written, or "" (nothing is read or made yet: it is said before any input
/// is made, and on a machine without a GPU before its absence).
std::string checkFlags(const Spec &spec, const RunOptions &o) {
  const bool fromFiles = !o.q.empty();
  using Flag = std::pair<const char *, const std::string &>; // a flag and its file
  const Flag outputs[] = {{"--out", o.out}, {"--lse", o.lse}};
  const Flag inputs[] = {{"--q", o.q}, {"--k", o.k}, {"--v", o.v}, {"--block-table", o.blockTable}};
  for (auto [flag, path] : outputs)
    if (!path.empty())
      if (std::string why = npy::writable(path); !why.empty())
        return std::string(flag) + " " + path + ": " + why;
  if (o.numSplits && spec.mode != Mode::Decode)
    return "--num-splits: prefill has no KV splits (a decode spec's)";
  if (o.numSplits && spec.split_kv != kSplitKVAuto && *o.numSplits != spec.split_kv)
    return "--num-splits " + std::to_string(*o.numSplits) + " but the spec says split_kv = " +
           std::to_string(spec.split_kv) + " (--num-splits is for split_kv = auto)";
  if (o.numSplits && (*o.numSplits < 1 || *o.numSplits > kMaxSplitKV))
    return "--num-splits " + std::to_string(*o.numSplits) + " must be in 1.." +
           std::to_string(kMaxSplitKV);
  // An output must be a file of its own: not the other output, not an input
  // (which it would replace), however either is spelt.
  auto same = [](const std::string &a, const std::string &b) {
    const std::string file = fileIdentity(a);
    return !file.empty() && file == fileIdentity(b);
  };
  if (!o.out.empty() && !o.lse.empty() && same(o.out, o.lse))
    return "--out " + o.out + " and --lse " + o.lse + " name the same file";
  for (auto [flag, path] : outputs) {
    if (path.empty())
      continue;
    for (auto [input, inputPath] : inputs)
      if (!inputPath.empty() && same(path, inputPath))
        return std::string(flag) + " " + path + " is the " + input + " input " + inputPath +
               ": it would be replaced (write the output to another file)";
  }
  if (!fromFiles && (!o.k.empty() || !o.v.empty() || !o.blockTable.empty()))
    return "--k, --v and --block-table come with --q";
  if ((o.qLen && *o.qLen < 0) || (o.kvLen && *o.kvLen < 0))
    return "--q-len and --kv-len must be >= 0";
  if (fromFiles) {
    // The files give the shape and the values: a flag for random inputs
    // would be ignored, so it is refused.
    for (auto [given, flag] : {std::pair{o.batch.has_value(), "--batch"},
                               {o.numKVHeads.has_value(), "--num-kv-heads"},
                               {o.ragged, "--ragged"}, {o.seed.has_value(), "--seed"}})
      if (given)
        return std::string(flag) +
               " is for random inputs; with --q the .npy files give the shape and the values";
    return "";
  }
  if ((!o.out.empty() || !o.lse.empty()) && o.batch.value_or(kBatch) != 1)
    return "--out and --lse write one sequence: use --batch 1 (or --q inputs)";
  if (o.batch.value_or(kBatch) < 1 || o.numKVHeads.value_or(kKVHeads) < 1)
    return "--batch and --num-kv-heads must be >= 1";
  return "";
}

/// A decode step's query tokens are the sequence's last tokens, so each is one
/// of the keys: a step with more tokens than keys is refused. kv_len 0 stays
/// possible (an empty slot of a batch: its rows give 0).
bool decodeLengthsFit(const Spec &spec, int64_t qLen, int64_t kvLen, std::string &error) {
  if (spec.mode != Mode::Decode || kvLen == 0 || qLen <= kvLen)
    return true;
  error = "a decode step's " + counted(qLen, "query token") + " are more than its " +
          counted(kvLen, "key") + " (kv_len): each token is one of the keys";
  return false;
}

/// "sequence 0: q_len 8, kv_len 8, 1 query head, 1 KV head"
void printSequence(size_t i, int64_t qLen, int64_t kvLen, int64_t qHeads, int64_t kvHeads) {
  llvm::outs() << "sequence " << i << ": q_len " << qLen << ", kv_len " << kvLen << ", "
               << counted(qHeads, "query head") << ", " << counted(kvHeads, "KV head") << "\n";
}

/// The batch to run: the .npy inputs, or random ones (seed printed).
template <typename T>
bool prepareBatch(const Spec &spec, const RunOptions &o, std::mt19937_64 &rng,
                  harness::Batch<T> &batch, std::string &error) {
  if (error = checkFlags(spec, o); !error.empty())
    return false;
  if (!o.q.empty())
    return batchFromFiles<T>(spec, o, batch, error) &&
           decodeLengthsFit(spec, batch.sequences[0].qLen, batch.sequences[0].kvLen, error);
  const int64_t numSeqs = o.batch.value_or(kBatch), numKVHeads = o.numKVHeads.value_or(kKVHeads);
  // A decode spec's tile_q is its query tokens per sequence.
  const int64_t qLen = o.qLen.value_or(spec.mode == Mode::Decode ? spec.tile_q : 128);
  const int64_t kvLen = o.kvLen.value_or(spec.mode == Mode::Decode ? 512 : qLen);
  if (std::string why = inputsFit<T>(spec, numSeqs, numKVHeads, qLen, kvLen); !why.empty())
    return error = why, false;
  if (!decodeLengthsFit(spec, qLen, kvLen, error))
    return false;
  std::vector<std::pair<int64_t, int64_t>> lengths;
  for (int64_t i = 0; i < numSeqs; ++i) {
    if (!o.ragged) {
      lengths.push_back({qLen, kvLen});
      continue;
    }
    // Ragged: each sequence gets its own lengths, up to the ones given.
    // A length of 0 stays 0 (an empty sequence or cache is a case to test).
    auto draw = [&](int64_t n) {
      return n == 0 ? 0 : std::uniform_int_distribution<int64_t>(1, n)(rng);
    };
    // A decode step's tokens are among its keys: kv_len is drawn from
    // q_len..--kv-len (or is 0, an empty slot, where --kv-len is 0).
    int64_t kv = spec.mode == Mode::Decode && kvLen > 0
                     ? std::uniform_int_distribution<int64_t>(qLen, kvLen)(rng)
                     : draw(kvLen);
    int64_t q = spec.mode == Mode::Decode ? qLen : draw(qLen);
    lengths.push_back({q, kvLen == qLen && spec.mode == Mode::Prefill ? q : kv});
  }
  batch = harness::randomBatch<T>(spec, lengths, numKVHeads, rng);
  return true;
}

/// The reference is O(q_len * kv_len * head_dim) in long double: past a
/// billion steps, only a random sample of 64 distinct query rows is checked.
template <typename T>
std::vector<char> sampleRows(const harness::Batch<T> &batch, size_t i, std::mt19937_64 &rng) {
  const auto &s = batch.sequences[i];
  std::vector<char> sample;
  const double work = double(s.qLen) * s.kvLen * batch.spec.head_dim * batch.numQHeads();
  if (work > 1e9 && s.qLen > 64) {
    sample.assign(s.qLen, 0);
    for (int n = 0; n < 64;) { // qLen > 64: 64 distinct rows exist
      char &row = sample[std::uniform_int_distribution<int64_t>(0, s.qLen - 1)(rng)];
      n += !row;
      row = 1;
    }
  }
  return sample;
}

/// Writes --out and --lse for one sequence ([heads, q_len, head_dim], [heads, q_len]),
/// both or neither (npy::writeAll).
template <typename T>
bool saveOutputs(const RunOptions &o, const harness::Batch<T> &batch, size_t i,
                 const std::vector<T> &out, const std::vector<T> &lse, std::string &error) {
  const int64_t h = batch.numQHeads(), q = batch.sequences[i].qLen;
  std::vector<std::pair<std::string, npy::Array>> files;
  if (!o.out.empty())
    files.push_back({o.out, npy::arrayOf({h, q, batch.spec.head_dim}, out)});
  if (!o.lse.empty())
    files.push_back({o.lse, npy::arrayOf({h, q}, lse)});
  return npy::writeAll(files, error);
}

/// Why a --scale that an f32 kernel (every GPU kernel, and the CPU's below
/// f64) takes as a float cannot be one: 0 (the GPU reads 0 as 1/sqrt(d)) or
/// infinite there. Empty where it can.
std::string floatScaleProblem(const RunOptions &o) {
  if (!o.scale)
    return "";
  const float f = static_cast<float>(*o.scale);
  if (std::isfinite(f) && f > 0)
    return "";
  std::string text;
  llvm::raw_string_ostream(text) << llvm::format("%g", *o.scale);
  return "--scale " + text + (f == 0 ? " is 0 as an f32" : " does not fit in f32") +
         ", the type the kernel takes it in";
}

/// The summary and verdict: exit status 0 within `bound` (its "OK" is for the
/// caller to print, once the outputs are written), else 1. The outputs are
/// held to `bound` in their relative (RMS) error, or with maxAbsBound in their
/// largest error against their largest value where that is above 1 (f64: the
/// absolute error for values of a few units, the relative one for larger
/// ones); lse, when the spec returns it, always to the latter.
int verdict(const Spec &spec, const harness::Errors &errors, double runSeconds, bool maxAbsBound,
            double bound) {
  // A NaN output has no error to measure: the errors read NaN then, not those of the rest.
  auto orNan = [&](double x) { return errors.nan ? NAN : x; };
  const double measured = orNan(maxAbsBound ? errors.scaledOut() : errors.relative());
  const double lse = orNan(errors.scaledLse());
  const char *scaled = " x max(1, the largest |";
  llvm::outs() << "ran in "
               << (runSeconds < 0.1 ? llvm::format("%.3f ms", runSeconds * 1e3)
                                    : llvm::format("%.3f s", runSeconds))
               << "; checked "
               << errors.checked << " query rows against the textbook reference\n"
               << "max abs error " << llvm::format("%.3g", orNan(errors.maxAbsOut))
               << ", relative error " << llvm::format("%.3g", orNan(errors.relative()))
               << " (bound: "
               << (maxAbsBound ? "max abs " : "relative ") << llvm::format("%.2g", bound)
               << (maxAbsBound ? std::string(scaled) + "output|)" : std::string()) << ")\n";
  if (spec.return_lse)
    llvm::outs() << "lse: max abs error " << llvm::format("%.3g", orNan(errors.maxAbsLse))
                 << " (bound: " << llvm::format("%.2g", bound) << scaled << "lse|))\n";
  if (errors.fullyMaskedRows)
    llvm::outs() << errors.fullyMaskedRows << " query rows see no key: "
                 << errors.fullyMaskedRows - errors.fullyMaskedWrong
                 << " of them give 0" << (spec.return_lse ? " (and lse -inf)" : "") << "\n";
  const bool lseFailed = spec.return_lse && !(lse < bound);
  if (errors.nan || errors.fullyMaskedWrong || !(measured < bound) || lseFailed) {
    llvm::outs() << "FAILED: " << errors.nan << " NaN, " << errors.fullyMaskedWrong
                 << " fully masked rows wrong, output error " << llvm::format("%.3g", measured);
    if (spec.return_lse)
      llvm::outs() << ", lse error " << llvm::format("%.3g", lse);
    llvm::outs() << " against a bound of " << llvm::format("%.2g", bound) << "\n";
    return 1;
  }
  return 0;
}

/// `most` raised to the largest finite |x| of `count` values from `x`.
template <typename T>
void raiseToLargest(const T *x, size_t count, double &most) {
  for (size_t i = 0; i < count; ++i)
    if (std::isfinite(double(x[i])))
      most = std::max(most, std::fabs(double(x[i])));
}

/// The largest |x| of the keys (`values` false) or the values the kernel
/// reads: each sequence's own, or, paged, the cache's slots its table maps
/// (the others may hold anything).
template <typename T>
double largestRead(const harness::Batch<T> &batch, bool values) {
  double most = 0;
  auto take = [&](const T *x, size_t count) { raiseToLargest(x, count, most); };
  const int64_t page = batch.spec.page_size;
  const size_t row = size_t(batch.numKVHeads) * size_t(batch.spec.head_dim); // a token's
  const std::vector<T> &cache = values ? batch.vCache : batch.kCache;
  for (const auto &s : batch.sequences) {
    if (!page) {
      const std::vector<T> &own = values ? s.v : s.k;
      take(own.data(), own.size());
      continue;
    }
    for (int64_t t = 0; t < s.kvLen; ++t) {
      const size_t slot = size_t(s.table[t / page]) * size_t(page) + size_t(t % page);
      if ((slot + 1) * row <= cache.size())
        take(cache.data() + slot * row, row);
    }
  }
  return most;
}

/// Why NaN outputs can come from finite inputs: where the scores q.k x scale
/// may pass f32's largest value (every GPU kernel and the CPU's f32 ones
/// compute them in f32), a note that says so; else "".
template <typename T>
std::string scoreOverflowNote(const harness::Batch<T> &batch, double scale) {
  if (std::is_same_v<T, double> && !batch.spec.isGPU())
    return "";
  double q = 0;
  for (const auto &s : batch.sequences)
    raiseToLargest(s.q.data(), s.q.size(), q);
  const double k = largestRead(batch, /*values=*/false);
  const double most = std::fabs(scale) * q * k * double(batch.spec.head_dim);
  if (!(most > double(std::numeric_limits<float>::max())))
    return "";
  std::string text;
  llvm::raw_string_ostream(text) << llvm::format("%.3g", most);
  return "note: the scores q.k x scale can reach " + text +
         " here (largest |q| x largest |k| x head_dim x scale), past f32's largest, 3.4e38: "
         "they overflow to inf, and inf - inf is NaN";
}

/// Why inf outputs can come from finite values: a kernel sums p x v over a
/// row's keys (each p <= 1) before it divides by l, so where the largest |v|
/// times the most keys a row sees (the longest kv_len, or the window) passes
/// the accumulator's largest value (f32's, but f64's on a CPU f64 spec), a
/// note that says so; else "".
template <typename T>
std::string accumulatorOverflowNote(const harness::Batch<T> &batch) {
  const bool f64 = std::is_same_v<T, double> && !batch.spec.isGPU();
  const double limit = f64 ? std::numeric_limits<double>::max()
                           : double(std::numeric_limits<float>::max());
  int64_t keys = 0;
  for (const auto &s : batch.sequences)
    keys = std::max(keys, s.kvLen);
  const bool window = batch.spec.mask.kind == MaskKind::SlidingWindow;
  if (window)
    keys = std::min(keys, batch.spec.mask.window);
  const double v = largestRead(batch, /*values=*/true);
  if (!(v * double(keys) > limit))
    return "";
  std::string text;
  llvm::raw_string_ostream(text) << llvm::format("%.3g", v) << " x " << keys;
  return "note: the kernel sums p x v over the keys before it divides by l, and that sum can "
         "reach " + text + " here (largest |v| x " +
         (window ? "the window" : "the longest kv_len") + "), past " +
         (f64 ? "f64's largest, 1.8e308" : "f32's largest, 3.4e38") +
         ": it can overflow to inf where the answer is finite";
}

/// The verdict, then --out and --lse (the last sequence's outputs) only when
/// the run passed it: a failed run writes nothing; "OK" once they are written.
template <typename T>
int finish(const RunOptions &o, const harness::Batch<T> &batch, const harness::Errors &errors,
           double runSeconds, bool maxAbsBound, double bound, double scale,
           const std::vector<T> &out, const std::vector<T> &lse) {
  const bool saving = !o.out.empty() || !o.lse.empty();
  if (const int rc = verdict(batch.spec, errors, runSeconds, maxAbsBound, bound); rc != 0) {
    if (errors.nan)
      if (std::string note = scoreOverflowNote(batch, scale); !note.empty())
        llvm::outs() << note << "\n";
    if (std::isinf(errors.maxAbsOut)) // an output overflowed
      if (std::string note = accumulatorOverflowNote(batch); !note.empty())
        llvm::outs() << note << "\n";
    if (saving) {
      llvm::outs().flush(); // the verdict first, where both go to one place
      ErrorLine("attnc run: ") << "nothing written to --out / --lse: the run failed its check\n";
    }
    return rc;
  }
  std::string error;
  if (saving && !saveOutputs(o, batch, batch.sequences.size() - 1, out, lse, error))
    return fail(error);
  llvm::outs() << "OK\n";
  return 0;
}

template <typename T>
int runTyped(const Spec &spec, const RunOptions &o) {
  const uint64_t seed = o.seed ? *o.seed : std::random_device{}();
  std::mt19937_64 rng(seed);
  harness::Batch<T> batch;
  std::string error;
  if (std::string why = cpuScratchFits(spec); !why.empty())
    return fail(why);
  if (!prepareBatch<T>(spec, o, rng, batch, error))
    return fail(error);
  if (o.q.empty())
    llvm::outs() << "seed " << seed << " (--seed " << seed << " to replay)\n";
  const double scale = o.scale.value_or(1.0 / std::sqrt(double(spec.head_dim)));
  if (std::string bad = floatScaleProblem(o); !std::is_same_v<T, double> && !bad.empty())
    return fail(bad);

  auto t0 = std::chrono::steady_clock::now();
  auto kernel = CpuKernel::compile(spec);
  if (!kernel)
    return fail(llvm::toString(kernel.takeError()));
  llvm::outs() << "spec " << spec.str() << "\ncompiled for the CPU in "
               << llvm::format("%.3f", secondsSince(t0)) << " s\n";
  // A long run says so first (the kernel's 4 q_len kv_len d flops per query
  // head, unmasked, on one core), and its lines show as they come.
  double flops = 0;
  for (const auto &s : batch.sequences)
    flops += 4.0 * double(batch.numQHeads()) * double(s.qLen) * double(s.kvLen) * spec.head_dim;
  if (flops > kLongRunFlops)
    llvm::outs() << "note: up to " << llvm::format("%.0f", flops / 1e9)
                 << " GFLOP of attention on one CPU core, and the reference's checks: this "
                    "may take minutes (smaller --q-len / --kv-len run faster)\n";
  llvm::outs().flush();

  harness::Errors errors;
  double runSeconds = 0;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  // split_kv = auto: --num-splits, else 4 on the CPU (a fixed split_kv is the kernel's own).
  const int64_t splits = o.numSplits.value_or(4);
  if (spec.mode == Mode::Decode)
    llvm::outs() << "split-KV: "
                 << counted(spec.split_kv == kSplitKVAuto ? splits
                                                          : static_cast<int64_t>(spec.split_kv),
                            "split")
                 << "\n";
  std::vector<T> lastOut, lastLse; // what --out and --lse write (one sequence)
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const auto &s = batch.sequences[i];
    std::vector<T> out(batch.numQHeads() * s.qLen * spec.head_dim, nan);
    std::vector<T> lse(batch.numQHeads() * s.qLen, nan);
    auto t1 = std::chrono::steady_clock::now();
    if (llvm::Error err = (*kernel)->run(
            harness::argsFor(batch, i, scale, splits, out.data(), lse.data())))
      return fail(llvm::toString(std::move(err)));
    runSeconds += secondsSince(t1);
    printSequence(i, s.qLen, s.kvLen, batch.numQHeads(), batch.numKVHeads);
    llvm::outs().flush();
    const std::vector<char> sample = sampleRows(batch, i, rng);
    harness::compare(batch, i, scale, out, lse, errors, sample.empty() ? nullptr : &sample);
    lastOut = std::move(out);
    lastLse = std::move(lse);
  }
  const bool f64 = std::is_same_v<T, double>;
  // f32 sums over the keys (l and acc, tile after tile) gather roundings
  // that grow as the square root of their count: past 16384 keys the bound
  // grows so too with the longest kv_len (3.5e-5 at 200k keys, where 1.2e-5
  // was measured; 7.8e-5 at 1M), so that long contexts pass on f32's own
  // error; f64 is the exact check there.
  int64_t longest = 0;
  for (const auto &s : batch.sequences)
    longest = std::max(longest, s.kvLen);
  const double bound = f64 ? 1e-8 : 1e-5 * std::sqrt(std::max(1.0, double(longest) / 16384));
  return finish(o, batch, errors, runSeconds, f64, bound, scale, lastOut, lastLse);
}

#ifdef ATTNC_HAVE_NVRTC
/// The spec's kernel on the GPU: inputs rounded to its 16-bit type (the
/// reference sees the same values), one launch, outputs back as f32.
int runGpu(const RunOptions &o) {
  // The spec for a device's architecture, and the flags against it.
  auto specFor = [&](Target device) -> std::optional<Spec> {
    std::optional<Spec> spec = specOn(o.spec, device, !o.lse.empty(), "run");
    if (!spec)
      return std::nullopt;
    if (std::string why = checkFlags(*spec, o); !why.empty())
      return fail(why), std::nullopt;
    return spec;
  };
  std::string error;
  std::unique_ptr<Runtime> rt = Runtime::create(error);
  if (!rt) {
    // No GPU: bad input is still said first (as for sm_90a), then the GPU's absence.
    if (!specFor(Target::SM90a))
      return 1;
    return fail("--target gpu: " + error);
  }
  const std::optional<Spec> found = specFor(rt->target());
  if (!found)
    return 1;
  const Spec spec = *found;
  const uint64_t seed = o.seed ? *o.seed : std::random_device{}();
  std::mt19937_64 rng(seed);
  harness::Batch<float> batch;
  if (!prepareBatch<float>(spec, o, rng, batch, error))
    return fail(error);
  if (o.q.empty())
    llvm::outs() << "seed " << seed << " (--seed " << seed << " to replay)\n";
  harness::roundInputs(batch);
  const double scale = o.scale.value_or(1.0 / std::sqrt(double(spec.head_dim)));
  if (std::string bad = floatScaleProblem(o); !bad.empty())
    return fail(bad);

  KernelLookup k = rt->kernel(spec);
  if (!k)
    return compileError("run", k.error);
  llvm::outs() << "spec " << spec.str() << "\nkernel for " << rt->deviceName() << " (" << rt->arch()
               << ") from " << name(k.source) << " in " << llvm::format("%.3f", k.seconds)
               << " s\n";
  const CudaDriver *cu = CudaDriver::get(error);
  auto dev = harness::uploadBatch(cu, *k.kernel, batch, scale,
                                  static_cast<int>(o.numSplits.value_or(0)));
  if (!dev->error.empty())
    return fail(dev->error);
  if (spec.mode == Mode::Decode)
    llvm::outs() << "split-KV: " << counted(k.kernel->splits(dev->args), "split") << "\n";
  if (std::string bad = k.kernel->checkDeviceArguments(dev->args, nullptr); !bad.empty())
    return fail(bad);
  auto t0 = std::chrono::steady_clock::now();
  if (!k.kernel->launch(dev->args, nullptr, error))
    return fail(error);
  llvm::outs().flush(); // what was printed stays if the watchdog stops the process
  if (CUresult rc = harness::guarded(spec.symbol(), [&] { return cu->cuCtxSynchronize(); });
      rc != CUDA_SUCCESS)
    return fail(cu->describe(rc, "the kernel"));
  const double runSeconds = secondsSince(t0);
  auto outs = harness::downloadOutputs(*dev, batch, error);
  if (!error.empty())
    return fail(error);
  harness::Errors errors;
  for (size_t i = 0; i < outs.size(); ++i) {
    const auto &s = batch.sequences[i];
    printSequence(i, s.qLen, s.kvLen, batch.numQHeads(), batch.numKVHeads);
    const std::vector<char> sample = sampleRows(batch, i, rng);
    harness::compare(batch, i, scale, outs[i].out, outs[i].lse, errors,
                     sample.empty() ? nullptr : &sample);
  }
  return finish(o, batch, errors, runSeconds, false, 1e-2, scale, outs.back().out,
                outs.back().lse);
}
#endif

} // namespace

int run(const RunOptions &o) {
  // One rule on both targets: the GPU kernels read a scale of 0 as
  // 1/sqrt(head_dim) and take no negative one.
  if (o.scale && !(std::isfinite(*o.scale) && *o.scale > 0)) {
    std::string text;
    llvm::raw_string_ostream(text) << llvm::format("%g", *o.scale);
    return fail("--scale " + text + ": the softmax scale must be finite and > 0");
  }
  if (o.target == "gpu") {
#ifdef ATTNC_HAVE_NVRTC
    return runGpu(o);
#else
    return fail("--target gpu: this build has no CUDA runtime (NVRTC was not found when it was "
                "configured); use --target cpu");
#endif
  }
  if (o.target != "cpu")
    return fail("--target " + o.target + ": the targets are cpu and gpu" +
                (o.target == "sm_80" || o.target == "sm_90a"
                     ? " (an architecture goes in the spec: --target gpu --spec target=" +
                           o.target + ")"
                     : std::string()));
  std::optional<Spec> spec = cpuSpec(o.spec, "run", !o.lse.empty());
  if (!spec)
    return 1;
  return spec->dtype == DType::F64 ? runTyped<double>(*spec, o) : runTyped<float>(*spec, o);
}

} // namespace attn::cli
