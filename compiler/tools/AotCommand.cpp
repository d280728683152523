//===- AotCommand.cpp - attnc aot: a bundle of kernels compiled ahead of time -===//
//
// Reads a file of specs (one per line), compiles each for each architecture
// in parallel (pipeline, emitter, NVRTC: no GPU needed), and writes a bundle
// folder: the cubins, a manifest, and bundle.cpp, a C++ source that embeds
// the cubins and registers them with the runtime (attnc/Bundle.h). The
// folder is written under a temporary name and renamed when complete.
// `--verify` checks such a folder (AotVerify.cpp).
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#ifdef ATTNC_HAVE_NVRTC
#include "attnc/BundleFolder.h"
#include "attnc/EmitCuda.h"
#include "attnc/KernelCache.h"
#include "attnc/Nvrtc.h"
#include "attn/params.cuh"
#endif

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <unistd.h>
#include <vector>

namespace attn::cli {

namespace {
int fail(const std::string &message) { return commandError("aot", message); }
} // namespace

#ifdef ATTNC_HAVE_NVRTC
namespace {
struct Job {
  Spec spec;
  std::string arch;
  int line = 0;
  // Results.
  CudaBinary binary;
  CudaLaunchShape shape;
  std::string error;
};

std::string trim(const std::string &s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::string identifier(std::string name) {
  for (char &c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)))
      c = '_';
  return name;
}

bool writeFile(const std::string &path, const std::string &bytes, std::string &error) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.flush()) {
    error = "cannot write " + path;
    return false;
  }
  return true;
}

/// Whether `dir` holds nothing but what attnc aot writes there:
/// manifest.txt, bundle.cpp and cubins/ of .cubin files.
bool holdsOnlyBundleFiles(const std::string &dir, std::string &why) {
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec)) {
    const std::string name = llvm::sys::path::filename(it->path()).str();
    if (name != "manifest.txt" && name != "bundle.cpp" && name != "cubins") {
      why = "it holds " + name + ", which attnc aot does not write";
      return false;
    }
  }
  if (ec) {
    why = "it cannot be listed (" + ec.message() + ")";
    return false;
  }
  const std::string cubins = dir + "/cubins";
  if (!llvm::sys::fs::exists(cubins))
    return true;
  if (!llvm::sys::fs::is_directory(cubins)) {
    why = "its cubins is not a folder";
    return false;
  }
  for (llvm::sys::fs::directory_iterator it(cubins, ec), end; it != end && !ec; it.increment(ec)) {
    const std::string name = llvm::sys::path::filename(it->path()).str();
    if (!llvm::StringRef(name).ends_with(".cubin") || !llvm::sys::fs::is_regular_file(it->path())) {
      why = "its cubins/ holds " + name + ", which attnc aot does not write";
      return false;
    }
  }
  if (ec) {
    why = "its cubins/ cannot be listed (" + ec.message() + ")";
    return false;
  }
  return true;
}

/// Whether `dir` is a folder `attnc aot` wrote (its manifest's first line is
/// ours, and it holds only the bundle's files) or an empty one (as a build
/// system makes for its outputs). Only such a folder is replaced by --force;
/// anything else is the user's.
bool isBundleFolder(const std::string &dir, std::string &why) {
  if (!llvm::sys::fs::is_directory(dir)) {
    why = "it is not a folder";
    return false;
  }
  std::error_code listed;
  if (llvm::sys::fs::directory_iterator(dir, listed) == llvm::sys::fs::directory_iterator() &&
      !listed)
    return true; // empty
  std::ifstream manifest(dir + "/manifest.txt");
  std::string first;
  if (!manifest || !std::getline(manifest, first) || first.rfind("# attnc ", 0) != 0 ||
      first.find(" AOT bundle '") == std::string::npos) {
    why = "it has no manifest.txt written by attnc aot";
    return false;
  }
  return holdsOnlyBundleFiles(dir, why);
}

/// A run stopped while it compiled (Ctrl-C, a killed build) leaves its
/// temporary folder "<output>.tmp.<pid>" beside the output. Such folders of
/// processes that are gone, holding only the bundle's files, are removed.
void removeStoppedRunsFolders(const std::string &output) {
  llvm::StringRef parent = llvm::sys::path::parent_path(output);
  const std::string folder = parent.empty() ? "." : parent.str();
  const std::string prefix = llvm::sys::path::filename(output).str() + ".tmp.";
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(folder, ec), end; it != end && !ec; it.increment(ec)) {
    const std::string name = llvm::sys::path::filename(it->path()).str();
    if (name.rfind(prefix, 0) != 0)
      continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.empty() || digits.size() > 9 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    std::string why;
    if (pid == getpid() || !processGone(pid) ||
        !llvm::sys::fs::is_directory(it->path()) || !holdsOnlyBundleFiles(it->path(), why))
      continue; // its writer may still run, or it is not ours
    if (!llvm::sys::fs::remove_directories(it->path()))
      llvm::errs() << "attnc aot: removed " << it->path() << ", left by a run that was stopped\n";
  }
}

/// bundle.cpp: the cubins as byte arrays and one registration.
std::string bundleSource(const std::string &name, const std::vector<Job> &jobs) {
  std::ostringstream o;
  o << "// Generated by `attnc aot` (attnc " << ATTNC_VERSION << "): bundle '" << name << "', "
    << counted(int64_t(jobs.size()), "kernel") << ".\n"
    << "// Compile it into the application (an object file, not a static library: its\n"
    << "// registration runs at start-up and nothing else refers to it) and link the attnc\n"
    << "// runtime; attn::Runtime then launches these kernels with no NVRTC compile.\n"
    << "#include \"attnc/Bundle.h\"\n\nnamespace {\n";
  auto array = [&](const std::string &name, const std::vector<char> &c) {
    o << "alignas(16) const unsigned char " << name << "[] = {";
    for (size_t b = 0; b < c.size(); ++b)
      o << (b % 24 == 0 ? "\n  " : "") << static_cast<int>(static_cast<unsigned char>(c[b]))
        << ",";
    o << "\n};\n";
  };
  for (size_t i = 0; i < jobs.size(); ++i) {
    o << "// " << jobs[i].arch << " " << jobs[i].spec.str() << "\n";
    array("cubin" + std::to_string(i), jobs[i].binary.cubin);
    if (!jobs[i].binary.pairCubin.empty())
      array("pair_cubin" + std::to_string(i), jobs[i].binary.pairCubin);
  }
  o << "\nconst attn::BundleEntry entries[] = {\n";
  for (size_t i = 0; i < jobs.size(); ++i) {
    const std::string pair = "pair_cubin" + std::to_string(i);
    o << "    {\"" << jobs[i].spec.str() << "\", \"" << jobs[i].arch << "\", cubin" << i
      << ", sizeof cubin" << i << ", " << jobs[i].shape.threads << ", "
      << jobs[i].shape.shared_bytes << ", " << jobs[i].shape.merge_threads << ", "
      << (jobs[i].shape.cluster_merge ? 1 : 0) << ", " << jobs[i].shape.pair_shared_bytes << ", "
      << (jobs[i].binary.pairCubin.empty() ? "nullptr, 0" : pair + ", sizeof " + pair)
      << ", " << sizeof(attn::kernel::Params) << "},\n";
  }
  o << "};\n\nconst attn::BundleRegistration registration(\"" << name
    << "\", entries, sizeof entries / sizeof entries[0]);\n} // namespace\n";
  return o.str();
}
} // namespace

int aot(const AotOptions &o) {
  if (!o.verify.empty())
    return verifyBundle(o.verify);
  if (o.output.size() > 1 && o.output.back() == '/') {
    // "dir/" is "dir": the temporary and the set-aside names go beside it, not in it.
    AotOptions trimmed = o;
    while (trimmed.output.size() > 1 && trimmed.output.back() == '/')
      trimmed.output.pop_back();
    return aot(trimmed);
  }
  if (o.specsFile.empty() || o.output.empty())
    return fail("--specs FILE and -o DIR are required");
  // The bundle folder is made; the folder it goes in must be there, as for
  // every other output of attnc (a mistyped path makes no folders).
  if (llvm::StringRef parent = llvm::sys::path::parent_path(o.output);
      !parent.empty() && !llvm::sys::fs::is_directory(parent))
    return fail("cannot write " + o.output + ": " + parent.str() +
                (llvm::sys::fs::exists(parent) ? " is not a folder" : " does not exist") +
                "; nothing compiled");
  std::vector<std::string> archs;
  {
    std::istringstream in(o.archs);
    const std::string emptyName =
        "--arch '" + o.archs + "': an empty name in the list (write sm_80,sm_90a)";
    for (std::string a; std::getline(in, a, ',');) {
      if ((a = trim(a)).empty())
        return fail(emptyName);
      if (a != "sm_80" && a != "sm_90a")
        return fail("--arch " + a + ": the architectures are sm_80 and sm_90a");
      if (std::find(archs.begin(), archs.end(), a) == archs.end())
        archs.push_back(a);
    }
    const std::string all = trim(o.archs);
    if (!all.empty() && all.back() == ',') // getline drops a last empty name
      return fail(emptyName);
  }
  if (archs.empty())
    return fail("--arch names no architecture");
  if (llvm::sys::fs::is_directory(o.specsFile))
    return fail("--specs " + o.specsFile + " is a folder: it takes a file of specs, one per line");
  std::ifstream in(o.specsFile);
  if (!in)
    return fail(o.specsFile + ": cannot open: " + std::strerror(errno));

  // Every line checked first; bad lines are listed with their numbers.
  std::vector<Job> jobs;
  std::vector<std::string> bad; // one message per bad build
  int badLines = 0;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (size_t hash = line.find('#'); hash != std::string::npos)
      line = line.substr(0, hash);
    line = trim(line);
    if (line.empty())
      continue;
    const bool named = mentions(line, "target");
    const std::string where = o.specsFile + ":" + std::to_string(number) + ": ";
    // A line may be bad for one architecture only (mma=wgmma on sm_80): each
    // such build is reported with its architecture, and --skip-bad keeps the
    // others; a line bad for all of them alike is reported once.
    std::vector<std::pair<std::string, std::string>> failed; // arch, message
    std::vector<std::pair<std::string, int>> again; // arch, the earlier line building it
    for (const std::string &arch : archs) {
      SpecResult r = parseSpec(named ? line : line + ",target=" + arch);
      if (!r) {
        failed.push_back({arch, r.error->message()});
        if (named)
          break;
        continue;
      }
      if (!r.spec->isGPU()) {
        failed.push_back({arch, "target = cpu: a bundle holds GPU kernels"});
        break;
      }
      Job job;
      job.spec = *r.spec;
      job.arch = name(r.spec->target);
      job.line = number;
      if (named && o.archsGiven && std::find(archs.begin(), archs.end(), job.arch) == archs.end())
        llvm::errs() << "attnc aot: " << where << "note: the line names target = " << job.arch
                     << ", not in --arch " << o.archs << ": built for " << job.arch
                     << ", as the line says\n";
      const auto earlier = std::find_if(jobs.begin(), jobs.end(), [&](const Job &j) {
        return j.spec == job.spec && j.arch == job.arch;
      });
      const bool dup = earlier != jobs.end();
      if (dup)
        again.push_back({job.arch, earlier->line});
      // Decode kernels of another tile_q are the same code (the runtime serves
      // every token count from one): said, and built as the line asks.
      for (const Job &j : jobs) {
        Spec other = j.spec;
        other.tile_q = job.spec.tile_q;
        if (!dup && job.spec.mode == Mode::Decode && j.arch == job.arch && other == job.spec) {
          llvm::errs() << "attnc aot: " << where << "note: for " << job.arch << ", line "
                       << j.line << "'s decode kernel with tile_q = " << job.spec.tile_q
                       << ": the same code, which the runtime serves for every tile_q from "
                       << "either (one line suffices)\n";
          break;
        }
      }
      if (!dup)
        jobs.push_back(std::move(job));
      if (named)
        break; // the line chose its architecture
    }
    // The same kernel as an earlier line, however it is spelt: built once.
    if (!again.empty()) {
      const bool oneLine = std::all_of(again.begin(), again.end(), [&](const auto &a) {
        return a.second == again.front().second;
      });
      llvm::errs() << "attnc aot: " << where << "note: the spec of ";
      if (oneLine)
        llvm::errs() << "line " << again.front().second << " again (for ";
      else
        llvm::errs() << "earlier lines again (";
      for (size_t i = 0; i < again.size(); ++i)
        llvm::errs() << (i ? ", " : "")
                     << (oneLine ? "" : "line " + std::to_string(again[i].second) + " for ")
                     << again[i].first;
      llvm::errs() << "): built once\n";
    }
    const bool alike = std::all_of(failed.begin(), failed.end(), [&](const auto &f) {
      return f.second == failed.front().second;
    });
    badLines += !failed.empty();
    if (!failed.empty() && alike && (named || failed.size() == archs.size()))
      bad.push_back(where + failed.front().second);
    else
      for (const auto &[arch, message] : failed)
        bad.push_back(where + "for " + arch + ": " + message);
  }
  for (const std::string &b : bad)
    llvm::errs() << (o.skipBad ? "attnc aot: skipped: " : "attnc aot: ") << b << "\n";
  if (!bad.empty() && !o.skipBad)
    return fail(counted(badLines, "bad line") + "; nothing compiled or written (--skip-bad compiles the others)");
  if (jobs.empty())
    return fail(o.specsFile + " holds no spec");
  // Lines copied from `attnc spec` name their target (and --skip-bad may drop
  // lines): an architecture of --arch that gets no kernel at all is said.
  for (const std::string &arch : archs)
    if (std::none_of(jobs.begin(), jobs.end(), [&](const Job &j) { return j.arch == arch; }))
      llvm::errs() << "attnc aot: note: no kernel for " << arch << " (of --arch " << o.archs
                   << "): no line builds one"
                   << (bad.empty() ? " (a line that names its target is built for that one "
                                     "only; leave target out to build for each of --arch)"
                                   : " (lines were skipped)")
                   << "\n";
  if (llvm::sys::fs::exists(o.output)) {
    if (!o.force)
      return fail(o.output + " exists (--force replaces it)");
    std::string why;
    if (!isBundleFolder(o.output, why))
      return fail(o.output + " exists and is not a bundle folder (" + why +
                  "): --force replaces only a bundle folder; nothing written");
  }
  // Everything is written under a temporary name, then renamed: made now, so
  // that an output that cannot be written is said before any compile.
  removeStoppedRunsFolders(o.output);
  const std::string tmp = o.output + ".tmp." + std::to_string(getpid());
  llvm::sys::fs::remove_directories(tmp);
  // Folders readable by all (the umask still applies), as the files in them
  // are: a server running as another user loads them.
  const auto perms = static_cast<llvm::sys::fs::perms>(
      llvm::sys::fs::owner_all | llvm::sys::fs::all_read | llvm::sys::fs::all_exe);
  if (std::error_code ec = llvm::sys::fs::create_directories(tmp + "/cubins", true, perms))
    return fail("cannot write " + o.output + " (" + ec.message() + " for " + tmp +
                "); nothing compiled");

  // Compile in parallel: one job at a time per worker, progress as they end.
  const unsigned workers = std::max(1u, std::min<unsigned>(
      o.jobs > 0 ? o.jobs : std::max(1u, std::thread::hardware_concurrency()), jobs.size()));
  std::atomic<size_t> next{0};
  std::atomic<int> done{0};
  std::mutex printing;
  auto t0 = std::chrono::steady_clock::now();
  auto work = [&] {
    for (size_t i; (i = next++) < jobs.size();) {
      Job &j = jobs[i];
      std::string source;
      if (emitCudaForSpec(j.spec, source, j.shape, j.error)) {
        CudaCompileOptions options = compileOptionsFor(j.arch, j.shape);
        options.lineInfo = false; // shipped code: no source-line tables
        j.binary = compileCuda(source, j.spec.symbol() + ".cu", options);
        if (!j.binary)
          j.error = j.binary.error;
      }
      std::lock_guard<std::mutex> lock(printing);
      llvm::outs() << llvm::format("[%2d/%zu] %-7s ", ++done, jobs.size(), j.arch.c_str())
                   << j.spec.symbol();
      if (j.error.empty())
        llvm::outs() << llvm::format("  %.2f s, %d registers, %d spill bytes\n",
                                     j.binary.seconds, j.binary.registers,
                                     j.binary.spillStoreBytes);
      else
        llvm::outs() << "  FAILED\n";
      llvm::outs().flush();
    }
  };
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < workers; ++w)
    pool.emplace_back(work);
  for (std::thread &t : pool)
    t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int failed = 0;
  for (const Job &j : jobs)
    if (!j.error.empty()) {
      llvm::errs() << "attnc aot: " << o.specsFile << ":" << j.line << " (" << j.arch
                   << "): " << j.error << "\n";
      ++failed;
    }
  if (failed) {
    llvm::sys::fs::remove_directories(tmp);
    return fail(counted(failed, "kernel") + " failed; nothing written");
  }

  // Write everything under a temporary name, then rename.
  std::string bundleName = o.name;
  if (bundleName.empty()) {
    std::string base = o.output;
    while (!base.empty() && base.back() == '/')
      base.pop_back();
    bundleName = base.substr(base.find_last_of('/') + 1);
  }
  bundleName = identifier(bundleName);
  std::string error;
  std::ostringstream manifest;
  manifest << "# attnc " << ATTNC_VERSION << " AOT bundle '" << bundleName << "': "
           << counted(int64_t(jobs.size()), "kernel") << "\n# manifest " << kManifestFormat
           << ": " << manifestColumns() << "\n";
  bool ok = true;
  for (const Job &j : jobs) {
    ManifestLine m;
    m.arch = j.arch;
    m.spec = j.spec.str();
    m.cubin = "cubins/" + j.spec.symbol() + ".cubin";
    m.threads = j.shape.threads;
    m.shared_bytes = j.shape.shared_bytes;
    m.merge_threads = j.shape.merge_threads;
    m.cluster_merge = j.shape.cluster_merge ? 1 : 0;
    m.pair_shared_bytes = j.shape.pair_shared_bytes;
    m.params_bytes = sizeof(attn::kernel::Params);
    m.registers = j.binary.registers;
    m.spill_bytes = j.binary.spillStoreBytes;
    m.bytes = static_cast<long long>(j.binary.cubin.size());
    m.fnv1a = fnv1aHex(j.binary.cubin.data(), j.binary.cubin.size());
    ok = ok && writeFile(tmp + "/" + m.cubin,
                         std::string(j.binary.cubin.begin(), j.binary.cubin.end()), error);
    if (!j.binary.pairCubin.empty()) {
      m.pair_cubin = "cubins/" + j.spec.symbol() + "_pair.cubin";
      m.pair_bytes = static_cast<long long>(j.binary.pairCubin.size());
      m.pair_fnv1a = fnv1aHex(j.binary.pairCubin.data(), j.binary.pairCubin.size());
      ok = ok && writeFile(tmp + "/" + m.pair_cubin,
                           std::string(j.binary.pairCubin.begin(), j.binary.pairCubin.end()),
                           error);
    }
    manifest << formatManifestLine(m) << "\n";
  }
  ok = ok && writeFile(tmp + "/manifest.txt", manifest.str(), error) &&
       writeFile(tmp + "/bundle.cpp", bundleSource(bundleName, jobs), error);
  // An old bundle (checked above) steps aside first and is removed only once
  // the new one is in place; if the rename fails it comes back.
  const std::string old = o.output + ".old." + std::to_string(getpid());
  const bool replacing = ok && llvm::sys::fs::exists(o.output);
  if (replacing && llvm::sys::fs::rename(o.output, old)) {
    error = "cannot move the old bundle " + o.output + " aside";
    ok = false;
  }
  if (ok && llvm::sys::fs::rename(tmp, o.output)) {
    error = "cannot rename " + tmp + " to " + o.output;
    ok = false;
    if (replacing)
      llvm::sys::fs::rename(old, o.output);
  }
  if (!ok) {
    llvm::sys::fs::remove_directories(tmp);
    return fail(error + "; nothing written");
  }
  if (replacing)
    llvm::sys::fs::remove_directories(old);
  llvm::outs() << "bundle '" << bundleName << "': " << counted(int64_t(jobs.size()), "kernel")
               << " compiled in " << llvm::format("%.1f", seconds) << " s with "
               << counted(workers, "worker") << " -> "
               << o.output << "/{bundle.cpp,manifest.txt,cubins/}\n";
  return 0;
}
#else
int aot(const AotOptions &) {
  return fail("this build has no NVRTC (it was not found when it was configured)");
}
#endif

} // namespace attn::cli
