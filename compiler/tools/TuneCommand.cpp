//===- TuneCommand.cpp - attnc tune: tiles and stages chosen by measurement ===//
//
// Times candidate tile sizes and pipeline depths (K/V stages) of a spec on
// the GPU on one benchmark shape,
// after checking each candidate's output against the built-in default's on
// the same inputs, and records the fastest in the tuning table
// (runtime/include/attnc/Tuning.h), from which a spec that leaves its tiles
// open then takes them.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "Npy.h"

#ifdef ATTNC_HAVE_NVRTC
#include "attnc/Runtime.h"
#include "attnc/Tuning.h"
#include "reference/GpuHarness.h"
#endif

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <sstream>
#include <vector>

namespace attn::cli {

namespace {
int fail(const std::string &message) { return commandError("tune", message); }
} // namespace

#ifdef ATTNC_HAVE_NVRTC
namespace {
struct Candidate {
  std::string fields; ///< "tile_q=..,tile_kv=.."
  Spec spec;
  std::string status; ///< "" while usable
  double ms = 0;
  int registers = -1;
};

/// ||out - ref|| / ||ref|| over two downloads of the same length.
double relative(const std::vector<uint16_t> &out, const std::vector<uint16_t> &ref, DType t) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double a = harness::fromBits(out[i], t), b = harness::fromBits(ref[i], t);
    num += (a - b) * (a - b);
    den += b * b;
  }
  return std::isfinite(num) && den > 0 ? std::sqrt(num / den) : INFINITY;
}

/// The timed shape: the flags, else the defaults of the spec's mode.
struct TuneShape {
  int64_t seqLen, batch, heads;
};
TuneShape tuneShape(const TuneOptions &o, const Spec &spec) {
  const bool decode = spec.mode == Mode::Decode;
  const int64_t seqLen = o.seqLen.value_or(4096);
  return {seqLen, o.batch.value_or(decode ? 64 : std::max<int64_t>(1, 16384 / seqLen)),
          o.heads.value_or(decode ? 32 : 2048 / spec.head_dim)};
}

/// Why the shape flags cannot be timed, or "".
std::string checkShape(const TuneOptions &o, const Spec &spec) {
  constexpr int64_t kMaxLen = int64_t(1) << 24, kMaxGrid = 65535;
  if (o.seqLen && (*o.seqLen < 1 || *o.seqLen > kMaxLen))
    return "--seq-len " + std::to_string(*o.seqLen) + " must be in 1.." + std::to_string(kMaxLen);
  if (o.batch && (*o.batch < 1 || *o.batch > kMaxGrid))
    return "--batch " + std::to_string(*o.batch) + " must be in 1.." + std::to_string(kMaxGrid);
  if (o.heads && (*o.heads < 1 || *o.heads > kMaxGrid))
    return "--heads " + std::to_string(*o.heads) + " must be in 1.." + std::to_string(kMaxGrid);
  const TuneShape shape = tuneShape(o, spec);
  if (shape.heads % spec.gqa != 0)
    return "--heads " + std::to_string(shape.heads) + " is not a multiple of gqa = " +
           std::to_string(spec.gqa);
  return "";
}

/// Splits --candidates into `given` and checks each: it sets only tile_q,
/// tile_kv and stages, and makes a valid spec with --spec. "" when all do.
std::string checkCandidates(const TuneOptions &o, std::vector<std::string> &given) {
  std::istringstream in(o.candidates);
  for (std::string c; std::getline(in, c, ';');) {
    if (c.find_first_not_of(' ') == std::string::npos)
      continue;
    std::istringstream fields(c);
    for (std::string f; std::getline(fields, f, ',');) {
      const llvm::StringRef field = llvm::StringRef(f).split('=').first.trim();
      if (field != "tile_q" && field != "tile_kv" && field != "stages")
        return "--candidates '" + c + "': '" + field.str() +
               "': a candidate sets tile_q, tile_kv and stages only";
    }
    if (SpecResult r = parseSpec(o.spec + (o.spec.empty() ? "" : ",") + c); !r)
      return "--candidates '" + c + "': " + r.error->message();
    given.push_back(c);
  }
  if (!o.candidates.empty() && given.empty())
    return "--candidates '" + o.candidates + "' lists no candidate";
  return "";
}
} // namespace

int tune(const TuneOptions &o) {
  // The built-in defaults are the baseline: parse without the table.
  TuningTable::install(nullptr);
  if (mentions(o.spec, "tile_q") || mentions(o.spec, "tile_kv") || mentions(o.spec, "stages"))
    return fail("tune chooses tile_q, tile_kv and stages: leave them out of --spec");
  // The spec, the shape, the candidates and the table are checked before the
  // GPU is looked for, so bad input is said on any machine (with the default
  // target while none is named).
  const SpecResult alone = parseSpec(o.spec);
  if (!alone)
    return fail(alone.error->message());
  if (!alone.spec->isGPU())
    return fail("the spec says target = cpu; tune measures GPU kernels");
  std::vector<std::string> given; // --candidates, split
  if (std::string why = checkCandidates(o, given); !why.empty())
    return fail(why);
  if (std::string why = checkShape(o, *alone.spec); !why.empty())
    return fail(why);
  std::string error;
  const std::string path = o.file.empty() ? TuningTable::defaultPath() : o.file;
  if (!o.dryRun && path.empty())
    return fail("no tuning file (no home directory): give --tuning-file, or set "
                "ATTNC_TUNING_FILE or ATTNC_CACHE_DIR");
  TuningTable table;
  if (!o.dryRun && !table.load(path, error))
    return fail(error + " (fix or remove the file; nothing written)");
  // The table must take the result: said before anything is measured.
  if (std::string why = o.dryRun ? "" : npy::writable(path); !why.empty())
    return fail("the tuning table " + path + ": " + why + "; nothing measured");
  std::unique_ptr<Runtime> rt = Runtime::create(error);
  if (!rt)
    return fail(error);
  std::string text = o.spec;
  if (!mentions(text, "target"))
    text += (text.empty() ? "" : ",") + std::string("target=") + name(rt->target());
  SpecResult parsed = parseSpec(text);
  if (!parsed)
    return fail(parsed.error->message());
  const Spec base = *parsed.spec;
  if (!base.isGPU())
    return fail("the spec says target = cpu; tune measures GPU kernels");
  const bool decode = base.mode == Mode::Decode;

  // Candidates: the built-in default first (the reference), then the list.
  std::vector<std::string> lists = given;
  if (lists.empty()) {
    // The tile grid (each with its measured pipeline depth), then the
    // built-in tiles at every depth the loop takes.
    const std::string tiles =
        "tile_q=" + std::to_string(base.tile_q) + ",tile_kv=" + std::to_string(base.tile_kv);
    if (decode) {
      for (int kv : {32, 64, 128})
        lists.push_back("tile_kv=" + std::to_string(kv));
      for (int st : {2, 3, 4})
        lists.push_back("tile_kv=" + std::to_string(base.tile_kv) + ",stages=" + std::to_string(st));
    } else {
      for (int q : {64, 128})
        for (int kv : {32, 64, 128})
          lists.push_back("tile_q=" + std::to_string(q) + ",tile_kv=" + std::to_string(kv));
      // sm_90a, head_dim 64: the warp-specialised block of three computing
      // warpgroups takes 192 query rows (faster on long sequences).
      if (base.target == Target::SM90a && base.head_dim == 64)
        for (int kv : {64, 128})
          lists.push_back("tile_q=" + std::to_string(kWsTileQ64) + ",tile_kv=" + std::to_string(kv));
      // The warp-specialised block's ring takes 2..8 stages (three of 128
      // keys fill the shared memory); the other blocks' loops one or two.
      const std::vector<int> depths =
          warpSpecialised(base) ? std::vector<int>{2, 3, 4} : std::vector<int>{1, 2};
      for (int st : depths)
        lists.push_back(tiles + ",stages=" + std::to_string(st));
    }
  }
  auto same = [](const Spec &a, const Spec &b) {
    return a.tile_q == b.tile_q && a.tile_kv == b.tile_kv && kvStages(a) == kvStages(b);
  };
  std::vector<Candidate> cands;
  cands.push_back({"tile_q=" + std::to_string(base.tile_q) + ",tile_kv=" +
                       std::to_string(base.tile_kv) + ",stages=" +
                       std::to_string(kvStages(base)) + " (built-in)",
                   base});
  for (const std::string &fields : lists) {
    SpecResult c = parseSpec(text + "," + fields);
    if (!c) {
      if (!o.candidates.empty())
        return fail("--candidates '" + fields + "': " + c.error->message());
      continue; // a default candidate these tiles cannot take (shared memory)
    }
    if (std::any_of(cands.begin(), cands.end(),
                    [&](const Candidate &k) { return same(k.spec, *c.spec); }))
      continue; // the same kernel as one already listed
    cands.push_back({fields, *c.spec});
  }

  // One shape for every candidate, the same inputs.
  const TuneShape shape = tuneShape(o, base);
  const int64_t seqLen = shape.seqLen;
  const int64_t qLen = decode ? base.tile_q : seqLen;
  const int batch = static_cast<int>(shape.batch), qHeads = static_cast<int>(shape.heads);
  const int kvHeads = static_cast<int>(qHeads / base.gqa);
  const CudaDriver *cu = CudaDriver::get(error);
  std::mt19937_64 rng(1);
  std::unique_ptr<harness::DeviceBatch> dev =
      harness::benchBatch(cu, base, batch, qLen, seqLen, kvHeads, rng);
  if (!dev->error.empty())
    return fail(dev->error);
  CUstream stream = nullptr;
  const size_t outElems = size_t(dev->args.total_q) * qHeads * base.head_dim;
  llvm::outs() << "tuning " << tuningKey(base) << "\n on " << rt->deviceName() << ": batch "
               << batch << ", " << qHeads << "/" << kvHeads << " heads, q_len " << qLen
               << ", kv_len " << seqLen << "\n";
  std::vector<uint16_t> reference;
  for (Candidate &c : cands) {
    KernelLookup k = rt->kernel(c.spec);
    if (!k) {
      c.status = "does not compile: " + k.error;
      continue;
    }
    c.registers = k.binary->registers;
    if (k.binary->spillStoreBytes > 0) {
      c.status = "spills " + std::to_string(k.binary->spillStoreBytes) + " bytes";
      continue;
    }
    AttentionArgs a = dev->args;
    a.workspace_bytes = k.kernel->workspaceBytes(a);
    if (a.workspace_bytes)
      a.workspace = dev->upload(nullptr, a.workspace_bytes);
    cu->cuMemsetD8(a.o, 0xff, outElems * 2);
    if (!k.kernel->launch(a, stream, error))
      return fail(c.spec.str() + ": " + error);
    std::vector<uint16_t> out(outElems);
    llvm::outs().flush(); // what was printed stays if the watchdog stops the process
    if (CUresult rc = harness::guarded(c.spec.str(), // the copy waits for the kernel
                                       [&] { return cu->cuMemcpyDtoH(out.data(), a.o, outElems * 2); });
        rc != CUDA_SUCCESS)
      return fail(cu->describe(rc, "copying the output back"));
    if (reference.empty()) {
      reference = out;
    } else if (double err = relative(out, reference, base.dtype); !(err < 1e-2)) {
      c.status = "output differs from the built-in's (" + std::to_string(err) + ")";
      continue;
    }
    c.ms = harness::medianMs(cu, stream, [&] { k.kernel->launch(a, stream, error); }, c.spec.str());
  }
  if (cands[0].ms <= 0)
    return compileError("tune", "the built-in configuration did not run: " + cands[0].status);

  const Candidate *best = &cands[0];
  llvm::outs() << llvm::format("%-36s %10s %9s %6s\n", "candidate", "ms", "vs built-in", "regs");
  for (const Candidate &c : cands) {
    if (c.status.empty()) {
      llvm::outs() << llvm::format("%-36s %10.3f %8.2fx %6d\n", c.fields.c_str(), c.ms,
                                   cands[0].ms / c.ms, c.registers);
      if (c.ms < best->ms)
        best = &c;
    } else {
      llvm::outs() << llvm::format("%-36s %s\n", c.fields.c_str(), c.status.c_str());
    }
  }
  char date[16];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::localtime(&now));
  const std::string note = llvm::formatv("{0:f2}x the built-in on {1}, {2}", cands[0].ms / best->ms,
                                         rt->deviceName(), date)
                               .str();
  const TunedTiles chosen = {best->spec.tile_q, best->spec.tile_kv, best->spec.stages};
  llvm::outs() << "best: tile_q=" << chosen.tile_q << ",tile_kv=" << chosen.tile_kv
               << (chosen.stages != kStagesAuto ? ",stages=" + std::to_string(chosen.stages) : "")
               << " (" << note << ")\n";
  if (o.dryRun)
    return 0;
  // Read again under a lock and saved with this entry: another tune may
  // have recorded its own since this one read the table.
  if (!TuningTable::record(path, base, chosen, note, error))
    return fail(error);
  llvm::outs() << "recorded in " << path << "\n";
  return 0;
}
#else
int tune(const TuneOptions &) {
  return fail("this build has no CUDA runtime (NVRTC was not found when it was configured)");
}
#endif

} // namespace attn::cli
