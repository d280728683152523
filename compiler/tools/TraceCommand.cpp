//===- TraceCommand.cpp - attnc trace: the recurrence, tile by tile -------===//
//
// Follows one query row through the KV tiles in the order the compiled loops
// visit them, printing the running max m, the rescale factor alpha, the
// running sum l, the rescales so far (in this split) and how far acc / l is from the
// exact answer. The generated kernel then runs on the same input, and its
// output must equal the last row of the table.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "Npy.h"

#include "attnc/CpuBackend.h"
#include "reference/Harness.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

namespace attn::cli {

int trace(const TraceOptions &o) {
  // A spec that names a GPU target is refused as such, before the defaults
  // below (f64 among them) make it fail for a field the user did not write.
  const std::optional<std::string> target = fieldValue(o.spec, "target");
  if (target && !target->empty() && *target != "cpu") {
    ErrorLine("attnc trace: ") << "the spec says target = " << *target
                               << ", but traces run on the CPU (target = cpu)\n";
    return 1;
  }
  // --save-inputs: a folder, made at the end if it is not there yet (its
  // parent must be), whose files can be written, said before anything runs.
  const char *const saved[] = {"q.npy", "k.npy", "v.npy", "o.npy"};
  bool makeFolder = false;
  std::string folder = o.saveInputs; // "dir/" names dir
  while (folder.size() > 1 && folder.back() == '/')
    folder.pop_back();
  if (!folder.empty()) {
    auto refuse = [&](const std::string &what) {
      ErrorLine("attnc trace: ") << "--save-inputs " << what << "\n";
      return 1;
    };
    llvm::sys::fs::file_status status;
    if (llvm::sys::fs::status(folder, status, /*Follow=*/false)) { // nothing there, not even a link
      llvm::StringRef parent = llvm::sys::path::parent_path(folder);
      if (!parent.empty() && !llvm::sys::fs::is_directory(parent))
        return refuse(folder + ": its folder " + parent.str() +
                      (llvm::sys::fs::exists(parent) ? " is not a folder" : " does not exist"));
      if (std::string why = npy::writable(folder); !why.empty())
        return refuse(folder + ": " + why);
      makeFolder = true;
    } else if (!llvm::sys::fs::is_directory(folder)) { // (through a link)
      return refuse(folder + (status.type() == llvm::sys::fs::file_type::symlink_file
                                  ? " is a link to no folder"
                                  : " is not a folder"));
    } else {
      for (const char *name : saved)
        if (std::string why = npy::writable(folder + "/" + name); !why.empty())
          return refuse(folder + "/" + name + ": " + why);
    }
  }
  if (o.row < -1) {
    ErrorLine("attnc trace: ")
        << "--row " << o.row
        << " is not a query row (rows count from 0; -1, the default, is the last)\n";
    return 1;
  }
  // Traces run in f64: a spec that names another dtype is told so first (the
  // CPU target's own dtype check would name f32 as well).
  if (std::optional<std::string> dtype = fieldValue(o.spec, "dtype");
      dtype && (*dtype == "f16" || *dtype == "bf16" || *dtype == "f32")) {
    ErrorLine("attnc trace: ") << "dtype = " << *dtype
                               << ": traces run in f64 (leave dtype out, or dtype=f64)\n";
    return 1;
  }
  // Small tiles by default, so that there are tiles to watch.
  std::string text = o.spec;
  auto add = [&](const char *field, const char *value) {
    if (!mentions(text, field)) // as the spec parser reads it: "tile_kv = 8" names tile_kv
      text += (text.empty() ? "" : ",") + std::string(field) + "=" + value;
  };
  add("tile_kv", "4");
  add("tile_q", "1");
  add("head_dim", "32");
  add("dtype", "f64");
  std::optional<Spec> spec = cpuSpec(text, "trace");
  if (!spec)
    return 1;
  if (spec->dtype != DType::F64) {
    ErrorLine("attnc trace: ") << "traces run in f64 (dtype=f64)\n";
    return 1;
  }
  if (o.kvLen < 1 || o.kvLen > 4096) {
    ErrorLine("attnc trace: ") << "--kv-len must be in 1..4096\n";
    return 1;
  }
  if (std::string why = cpuScratchFits(*spec); !why.empty()) {
    ErrorLine("attnc trace: ") << why << "\n";
    return 1;
  }
  const int64_t n = o.kvLen, d = spec->head_dim, bc = spec->tile_kv;
  // A decode spec's tile_q is its query tokens per sequence (a speculative
  // step's draft tokens): the last tile_q positions of the sequence.
  const int64_t qLen = spec->mode == Mode::Decode ? spec->tile_q : n;
  if (qLen > n) {
    ErrorLine("attnc trace: ") << "the decode spec's tile_q = " << qLen << " query tokens are "
                               << "more than --kv-len " << n
                               << " keys (each token is one of the keys)\n";
    return 1;
  }
  const int64_t row = o.row < 0 ? qLen - 1 : o.row;
  if (row >= qLen) {
    ErrorLine("attnc trace: ") << "--row " << row << " is past the " << counted(qLen, "query row")
                               << "\n";
    return 1;
  }
  const uint64_t seed = o.seed ? *o.seed : std::random_device{}();
  std::mt19937_64 rng(seed);
  auto batch = harness::randomBatch<double>(*spec, {{qLen, n}}, /*numKVHeads=*/1, rng);
  const auto &s = batch.sequences[0];
  const double scale = 1.0 / std::sqrt(double(d));

  // The exact answer for the traced row, from the textbook reference.
  std::vector<double> out(batch.numQHeads() * qLen * d), lse(batch.numQHeads() * qLen);
  auto key = [&](int64_t t, int64_t x) {
    return spec->isPaged() ? batch.kCache[((s.table[t / spec->page_size] * spec->page_size +
                                            t % spec->page_size)) * d + x]
                           : s.k[t * d + x];
  };
  auto value = [&](int64_t t, int64_t x) {
    return spec->isPaged() ? batch.vCache[((s.table[t / spec->page_size] * spec->page_size +
                                            t % spec->page_size)) * d + x]
                           : s.v[t * d + x];
  };
  std::vector<double> exact(d, 0.0);
  {
    ref::Problem p{1, 1, qLen, n, d, harness::refMask(spec->mask), spec->mask.window, scale, {}, {}, {}};
    p.query = [&](int64_t, int64_t i, int64_t x) -> long double { return s.q[i * d + x]; };
    p.key = [&](int64_t, int64_t t, int64_t x) -> long double { return key(t, x); };
    p.value = [&](int64_t, int64_t t, int64_t x) -> long double { return value(t, x); };
    std::vector<long double> refOut, refLse;
    std::vector<char> only(qLen, 0); // the traced row alone (4096 rows took 20 s)
    only[row] = 1;
    ref::attention(p, refOut, refLse, &only);
    for (int64_t x = 0; x < d; ++x)
      exact[x] = double(refOut[row * d + x]);
  }

  // The tile ranges of the query tile that holds the row, as attn-mask-tiles
  // computes them for all of its rows: a tile some other row of it sees is
  // loaded, and this row may see none of its keys (attn-safe-init's case).
  const int64_t tileQ = spec->mode == Mode::Decode ? qLen : spec->tile_q;
  const int64_t qStart = row / tileQ * tileQ;
  const TileRange r = classifyTiles(spec->mask, qStart, std::min(tileQ, qLen - qStart), bc, qLen, n);
  // attn-split-kv: a decode kernel's splits each run the recurrence over their
  // share of the tiles (split_range) from m = -inf, l = 0, acc = 0, and are
  // merged at the end. The CPU kernel takes 2 splits where the count is auto.
  const int64_t splits = spec->mode != Mode::Decode       ? 1
                         : spec->split_kv == kSplitKVAuto ? 2
                                                          : spec->split_kv;
  // Split sp's first tile (split_range's rule), and the split a tile is in.
  auto splitLo = [&](int64_t sp) { return r.lo + sp * (r.hi - r.lo) / splits; };
  auto splitOf = [&](int64_t j) {
    int64_t sp = 0;
    while (sp + 1 < splits && j >= splitLo(sp + 1))
      ++sp;
    return sp;
  };

  llvm::outs() << "spec " << spec->str() << "\nseed " << seed << "; query row " << row
               << " of " << qLen << ", " << counted(n, "key") << ", tiles of " << counted(bc, "key");
  if (spec->mode == Mode::Decode && qLen > 1)
    llvm::outs() << "; the step's " << qLen << " query tokens are keys " << n - qLen << ".."
                 << n - 1 << " (row " << row << ": key " << n - qLen + row << ")";
  else if (tileQ > 1)
    llvm::outs() << "; the row's query tile is rows " << qStart << ".."
                 << std::min(qStart + tileQ, qLen) - 1;
  if (splits > 1)
    llvm::outs() << "; " << splits << " KV splits"
                 << (spec->split_kv == kSplitKVAuto ? " (split_kv = auto: trace takes 2)" : "");
  if (spec->gqa > 1)
    llvm::outs() << "; one query head and its KV head (every head of a GQA group runs this "
                    "recurrence on its own row)";
  llvm::outs() << "\n\n";
  llvm::outs() << llvm::format("%5s %-11s %-8s %12s %12s %12s %9s %12s\n", "tile", "keys",
                               "class", "m", "alpha", "l", "rescales", "max err");
  const double inf = std::numeric_limits<double>::infinity();
  double m = -inf, l = 0;
  std::vector<double> acc(d, 0.0);
  int rescales = 0;
  // Each split's final state, for the merge.
  struct Part {
    int64_t split;
    double m, l;
    std::vector<double> acc;
  };
  int64_t split = 0; // the split whose tiles the table shows now
  std::vector<Part> parts;
  int64_t nextSplit = 0; // the first split not yet said
  auto sayEmptySplits = [&](int64_t upTo) { // a run of them in one line
    if (nextSplit >= upTo)
      return;
    if (upTo - nextSplit == 1)
      llvm::outs() << "  split " << nextSplit;
    else
      llvm::outs() << "  splits " << nextSplit << ".." << upTo - 1;
    llvm::outs() << ": no tiles (m stays -inf: " << (upTo - nextSplit == 1 ? "it weighs" : "they weigh")
                 << " 0 in the merge)\n";
    nextSplit = upTo;
  };
  auto maxErr = [&](double ml, const std::vector<double> &a) {
    double err = 0;
    for (int64_t x = 0; x < d; ++x)
      err = std::max(err, std::fabs((ml > 0 ? a[x] / ml : 0.0) - exact[x]));
    return err;
  };
  const int64_t numTiles = (n + bc - 1) / bc;
  for (int64_t j = 0; j < numTiles; ++j) {
    const int64_t k0 = j * bc, k1 = std::min(n, k0 + bc);
    const bool full = j >= r.fullLo && j < r.fullHi;
    const bool partial = (j >= r.lo && j < r.fullLo) || (j >= r.fullHi && j < r.hi);
    std::string keys = std::to_string(k0) + ".." + std::to_string(k1 - 1);
    if (!full && !partial) {
      llvm::outs() << llvm::format("%5lld %-11s %-8s %12s\n", (long long)j, keys.c_str(),
                                   "skipped", "(fully masked: never loaded)");
      continue;
    }
    if (splits > 1 && (j == r.lo || splitOf(j) != splitOf(j - 1))) {
      if (j != r.lo)
        parts.push_back({split, m, l, acc});
      const int64_t sp = split = splitOf(j);
      sayEmptySplits(sp);
      nextSplit = sp + 1;
      llvm::outs() << "  split " << sp << ": tiles " << splitLo(sp) << ".." << splitLo(sp + 1) - 1
                   << ", from m = -inf, l = 0, acc = 0\n";
      m = -inf;
      l = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      rescales = 0; // counted per split, as its state is
    }
    // One step of the recurrence, as the kernel does it.
    std::vector<double> sc(k1 - k0);
    double tileMax = -inf;
    for (int64_t t = k0; t < k1; ++t) {
      double dot = 0;
      for (int64_t x = 0; x < d; ++x)
        dot += s.q[row * d + x] * key(t, x);
      sc[t - k0] = isVisible(spec->mask, row, t, qLen, n) ? dot * scale : -inf;
      tileMax = std::max(tileMax, sc[t - k0]);
    }
    const double mNew = std::max(m, tileMax);
    // attn-safe-init: while m_new is -inf nothing has been seen: alpha = 1.
    const double alpha = mNew == -inf ? 1.0 : std::exp(m - mNew);
    if (m != -inf && mNew > m)
      ++rescales;
    l *= alpha;
    for (double &a : acc)
      a *= alpha;
    for (int64_t t = k0; t < k1; ++t) {
      const double p = mNew == -inf ? 0.0 : std::exp(sc[t - k0] - mNew);
      l += p;
      for (int64_t x = 0; x < d; ++x)
        acc[x] += p * value(t, x);
    }
    m = mNew;
    llvm::outs() << llvm::format("%5lld %-11s %-8s %12.6g %12.6g %12.6g %9d %12.3g\n", (long long)j,
                                 keys.c_str(), full ? "full" : "partial", m, alpha, l, rescales,
                                 maxErr(l, acc));
  }
  if (splits > 1 && r.hi > r.lo) {
    sayEmptySplits(splits);
    // attn-split-kv's merge (the rescale rule over the parts): m = max m_s,
    // w_s = exp(m_s - m), l = sum w_s l_s, acc = sum w_s acc_s; attn-safe-init:
    // a split that saw no visible key (or no tile) has m_s = -inf and weighs 0.
    parts.push_back({split, m, l, acc});
    double mAll = -inf;
    for (const Part &part : parts)
      mAll = std::max(mAll, part.m);
    l = 0;
    std::fill(acc.begin(), acc.end(), 0.0);
    llvm::outs() << "  merge: m = max m_s; split s weighs w_s = exp(m_s - m) (alpha column); "
                    "l = sum w_s l_s, acc = sum w_s acc_s (l column: w_s l_s)\n";
    for (const Part &part : parts) {
      const double w = mAll == -inf ? 0.0 : std::exp(part.m - mAll);
      l += w * part.l;
      for (int64_t x = 0; x < d; ++x)
        acc[x] += w * part.acc[x];
      llvm::outs() << llvm::format("%5s %-11s %-8s %12.6g %12.6g %12.6g\n", "",
                                   ("split " + std::to_string(part.split)).c_str(), "", part.m, w,
                                   w * part.l);
    }
    m = mAll;
    llvm::outs() << llvm::format("%5s %-11s %-8s %12.6g %12s %12.6g %9s %12.3g\n", "merge",
                                 ("splits 0.." + std::to_string(splits - 1)).c_str(), "",
                                 m, "", l, "", maxErr(l, acc));
  }

  // The generated kernel on the same input must give the table's last row.
  auto kernel = CpuKernel::compile(*spec);
  if (!kernel) {
    ErrorLine("attnc trace: ") << llvm::toString(kernel.takeError()) << "\n";
    return 1;
  }
  if (llvm::Error err = (*kernel)->run(harness::argsFor(batch, 0, scale, splits, out.data(), lse.data()))) {
    ErrorLine("attnc trace: ") << llvm::toString(std::move(err)) << "\n";
    return 1;
  }
  double diff = 0;
  for (int64_t x = 0; x < d; ++x)
    diff = std::max(diff, std::fabs(out[row * d + x] - (l > 0 ? acc[x] / l : 0.0)));
  llvm::outs() << "\nthe generated kernel's output for this row differs from acc / l above by "
               << llvm::format("%.3g", diff) << "\n";
  if (!folder.empty()) {
    // The traced head's inputs in key order (through the block table when
    // paged), and the kernel's output for the row.
    std::vector<double> q(s.q.begin(), s.q.begin() + qLen * d), k(n * d), v(n * d),
        rowOut(out.begin() + row * d, out.begin() + (row + 1) * d);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t x = 0; x < d; ++x) {
        k[t * d + x] = key(t, x);
        v[t * d + x] = value(t, x);
      }
    const npy::Array arrays[] = {npy::arrayOf({qLen, d}, q), npy::arrayOf({n, d}, k),
                                 npy::arrayOf({n, d}, v), npy::arrayOf({d}, rowOut)};
    std::vector<std::pair<std::string, npy::Array>> files;
    for (size_t i = 0; i < 4; ++i)
      files.push_back({folder + "/" + saved[i], arrays[i]});
    std::string error;
    if (makeFolder)
      // As mkdir makes one: the umask decides (LLVM's default leaves others out).
      if (std::error_code ec = llvm::sys::fs::create_directory(folder, /*IgnoreExisting=*/false,
                                                               llvm::sys::fs::all_all)) {
        ErrorLine("attnc trace: ") << "cannot make " << folder << ": " << ec.message() << "\n";
        return 1;
      }
    // The four files together or none of them (a set from two traces would not agree).
    if (!npy::writeAll(files, error)) {
      if (makeFolder)
        llvm::sys::fs::remove(folder); // made here, and empty again
      ErrorLine("attnc trace: ") << error << " (nothing written)\n";
      return 1;
    }
    llvm::outs() << "inputs written to " << folder << ": q.npy [" << qLen << ", " << d
                 << "] (the traced row is q[" << row << "]), k.npy and v.npy [" << n << ", " << d
                 << "], o.npy [" << d << "] (the kernel's output for the row); scale 1/sqrt(d) = "
                 << llvm::format("%.17g", scale) << "\n";
  }
  if (spec->return_lse) {
    // lse = log sum_j exp(s_j) = m + log l: -inf for a row that saw no key.
    const double lseTrace = l > 0 ? m + std::log(l) : -inf;
    const double lseKernel = lse[row];
    const double lseDiff = lseTrace == lseKernel ? 0.0 : std::fabs(lseTrace - lseKernel);
    llvm::outs() << "lse = m + log(l) = " << llvm::format("%.9g", lseTrace)
                 << "; the kernel's lse differs by " << llvm::format("%.3g", lseDiff) << "\n";
    diff = std::max(diff, lseDiff);
  }
  if (!(diff < 1e-9)) {
    llvm::outs() << "FAILED: the kernel and the trace disagree\n";
    return 1;
  }
  return 0;
}

} // namespace attn::cli
