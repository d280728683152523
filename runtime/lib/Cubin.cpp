//===- Cubin.cpp - What a cubin says of its kernels, read without a GPU ---===//

#include "attnc/Cubin.h"

#include "attn/Spec.h"
#include "attn/params.cuh"

#include <algorithm>
#include <cstring>
#include <map>

namespace attn {

namespace {
/// A little-endian unsigned field of `size` bytes at `at`.
uint64_t field(const unsigned char *b, size_t at, int size) {
  uint64_t v = 0;
  for (int i = size - 1; i >= 0; --i)
    v = v << 8 | b[at + i];
  return v;
}
} // namespace

bool readCubinSymbols(const unsigned char *b, size_t n, CubinSymbols &out, std::string &why) {
  constexpr size_t kEhdr = 64, kShdr = 64, kSym = 24;
  // No kernel attnc names comes near this; a longer name (a damaged or made-up
  // string table) is passed over rather than copied.
  constexpr size_t kLongestName = 512;
  const std::string launchSuffix = kernel::kLaunchShapeSuffix;
  const uint64_t launchBytes = 4 * uint64_t(kernel::kLaunchShapeInts);
  constexpr int kMachineCuda = 190, kSymtab = 2, kNoBits = 8, kObject = 1, kFunc = 2,
                kGlobal = 1;
  out = CubinSymbols();
  if (!b || n < kEhdr || b[0] != 0x7f || b[1] != 'E' || b[2] != 'L' || b[3] != 'F') {
    why = "is not an ELF file (not a cubin)";
    return false;
  }
  if (b[4] != 2 || b[5] != 1) {
    why = "is not a 64-bit little-endian ELF file (not a cubin)";
    return false;
  }
  if (field(b, 18, 2) != kMachineCuda) {
    why = "is an ELF file for machine " + std::to_string(field(b, 18, 2)) +
          ", not a CUDA cubin (" + std::to_string(kMachineCuda) + ")";
    return false;
  }
  const uint64_t shoff = field(b, 40, 8), shentsize = field(b, 58, 2), shnum = field(b, 60, 2);
  auto inside = [&](uint64_t offset, uint64_t size) { return offset <= n && size <= n - offset; };
  if (shentsize < kShdr || !inside(shoff, shnum * shentsize)) {
    why = "has section headers outside the file (a damaged cubin)";
    return false;
  }
  auto section = [&](uint64_t i, size_t at, int size) {
    return field(b, shoff + i * shentsize + at, size);
  };
  // What the driver reads when it loads the cubin lies in the bytes given:
  // the program headers and their segments, and every section's contents.
  constexpr size_t kPhdr = 56;
  const uint64_t phoff = field(b, 32, 8), phentsize = field(b, 54, 2), phnum = field(b, 56, 2);
  if (phnum && (phentsize < kPhdr || !inside(phoff, phnum * phentsize))) {
    why = "has program headers outside the file (a damaged cubin)";
    return false;
  }
  for (uint64_t i = 0; i < phnum; ++i) {
    const uint64_t at = phoff + i * phentsize;
    if (!inside(field(b, at + 8, 8), field(b, at + 32, 8))) {
      why = "has a segment outside the file (a damaged cubin)";
      return false;
    }
  }
  for (uint64_t i = 0; i < shnum; ++i)
    if (section(i, 4, 4) != kNoBits && !inside(section(i, 24, 8), section(i, 32, 8))) {
      why = "has section " + std::to_string(i) + " outside the file (a damaged cubin)";
      return false;
    }
  bool symtab = false;
  for (uint64_t i = 0; i < shnum && !symtab; ++i) { // the symbol table (a cubin has one)
    if (section(i, 4, 4) != kSymtab)
      continue;
    symtab = true;
    const uint64_t offset = section(i, 24, 8), size = section(i, 32, 8), link = section(i, 40, 4);
    const uint64_t entsize = std::max<uint64_t>(section(i, 56, 8), kSym);
    if (link >= shnum || !inside(offset, size) ||
        !inside(section(link, 24, 8), section(link, 32, 8))) {
      why = "has a symbol table outside the file (a damaged cubin)";
      return false;
    }
    const uint64_t strOffset = section(link, 24, 8), strSize = section(link, 32, 8);
    for (uint64_t k = 0, count = size / entsize; k < count; ++k) {
      const uint64_t at = offset + k * entsize;
      const uint64_t name = field(b, at, 4), info = b[at + 4], shndx = field(b, at + 6, 2);
      if (shndx == 0 || name >= strSize)
        continue;
      const char *text = reinterpret_cast<const char *>(b + strOffset + name);
      const size_t length = strnlen(text, std::min<uint64_t>(strSize - name, kLongestName + 1));
      if (length > kLongestName)
        continue;
      std::string symbol(text, length);
      if ((info & 0xf) == kFunc && info >> 4 == kGlobal) {
        out.kernels.push_back({std::move(symbol), 0});
        continue;
      }
      // A launch shape's bytes (the only objects read): at its value within
      // its section, where the section has bytes in the file.
      const uint64_t value = field(b, at + 8, 8), bytes = field(b, at + 16, 8);
      const bool launch = symbol.size() > launchSuffix.size() &&
                          symbol.compare(symbol.size() - launchSuffix.size(), launchSuffix.size(),
                                         launchSuffix) == 0;
      if ((info & 0xf) != kObject || !launch || bytes != launchBytes || shndx >= shnum ||
          section(shndx, 4, 4) == kNoBits)
        continue;
      const uint64_t sectionAt = section(shndx, 24, 8), sectionSize = section(shndx, 32, 8);
      if (!inside(sectionAt, sectionSize) || value > sectionSize || bytes > sectionSize - value)
        continue;
      out.objects.push_back(
          {std::move(symbol), std::vector<unsigned char>(b + sectionAt + value,
                                                         b + sectionAt + value + bytes)});
    }
  }
  if (!symtab) {
    why = "has no symbol table (a damaged cubin)";
    return false;
  }
  // The kernels' attributes: records of a format byte, an attribute byte and
  // two bytes, which for format 4 (a value of bytes) give its size.
  constexpr int kSizedValue = 4, kMaxThreads = 0x05;
  const uint64_t names = field(b, 62, 2); // the section names' section
  if (names >= shnum || !inside(section(names, 24, 8), section(names, 32, 8)))
    return true;
  const uint64_t namesAt = section(names, 24, 8), namesSize = section(names, 32, 8);
  const std::string prefix = ".nv.info.";
  std::map<std::string, size_t> kernelAt; // each kernel's place in out.kernels
  for (size_t k = 0; k < out.kernels.size(); ++k)
    kernelAt.emplace(out.kernels[k].first, k);
  for (uint64_t i = 0; i < shnum; ++i) {
    const uint64_t name = section(i, 0, 4), offset = section(i, 24, 8), size = section(i, 32, 8);
    if (name >= namesSize || !inside(offset, size))
      continue;
    const char *text = reinterpret_cast<const char *>(b + namesAt + name);
    const std::string sectionName(text, strnlen(text, namesSize - name));
    if (sectionName.compare(0, prefix.size(), prefix) != 0)
      continue;
    const auto kernel = kernelAt.find(sectionName.substr(prefix.size()));
    if (kernel == kernelAt.end())
      continue;
    uint64_t &maxThreads = out.kernels[kernel->second].second;
    for (uint64_t at = offset; at + 4 <= offset + size;) {
      const uint64_t length = b[at] == kSizedValue ? field(b, at + 2, 2) : 0;
      if (b[at] == kSizedValue && b[at + 1] == kMaxThreads && length >= 12 &&
          at + 4 + 12 <= offset + size) {
        // x * y * z of 32-bit values: past 64 bits, as many as can be said.
        uint64_t xy = 0, xyz = 0;
        maxThreads = __builtin_mul_overflow(field(b, at + 4, 4), field(b, at + 8, 4), &xy) ||
                             __builtin_mul_overflow(xy, field(b, at + 12, 4), &xyz)
                         ? UINT64_MAX
                         : xyz;
      }
      at += 4 + length;
    }
  }
  return true;
}

std::string checkBundledCubins(const BundledLaunch &launch, const NamedCubin &cubin,
                               const NamedCubin &pairCubin) {
  SpecResult spec = parseSpec(launch.spec);
  if (!spec)
    return cubin.name + ": its spec is invalid: " + spec.error->message();
  const std::string symbol = spec.spec->symbol();
  if (launch.fields == kernel::kLaunchShapeInts &&
      (launch.pair_shared_bytes > 0) != (pairCubin.size > 0))
    return launch.pair_shared_bytes > 0
               ? "pair_shared_bytes = " + std::to_string(launch.pair_shared_bytes) +
                     " launches a pair kernel, and no pair cubin is given"
               : pairCubin.name + " is given, and pair_shared_bytes = 0 launches no pair kernel";
  // Each cubin and the kernels the runtime looks up in it (Kernel::load),
  // with the threads of their launches and what the line or entry calls them.
  struct Launch {
    std::string kernel;
    long long threads;
    std::string column;
  };
  std::vector<std::pair<const NamedCubin *, std::vector<Launch>>> wanted = {
      {&cubin, {{symbol, launch.threads, "threads"}}}};
  if (spec.spec->mode == Mode::Decode)
    wanted[0].second.push_back({symbol + "_merge", launch.merge_threads, "merge_threads"});
  if (pairCubin.size > 0) // two pipelines of `threads` in one block
    wanted.push_back({&pairCubin, {{symbol + "_pair", 2 * launch.threads, "2 x threads"}}});
  // The launch shape each module says it was emitted for.
  const long long says[kernel::kLaunchShapeInts] = {launch.threads, launch.shared_bytes,
                                                    launch.merge_threads, launch.cluster_merge,
                                                    launch.pair_shared_bytes};
  const char *columns[kernel::kLaunchShapeInts] = {"threads", "shared_bytes", "merge_threads",
                                                   "cluster_merge", "pair_shared_bytes"};
  const std::string shapeName = symbol + kernel::kLaunchShapeSuffix;
  // Each wrong cubin is named (both, when both are wrong).
  std::string problems;
  auto problem = [&](const std::string &text) {
    problems += (problems.empty() ? "" : "; and ") + text;
  };
  for (const auto &[file, launches] : wanted) {
    CubinSymbols defined;
    std::string why;
    if (!readCubinSymbols(file->bytes, file->size, defined, why)) {
      problem(file->name + " " + why);
      continue;
    }
    bool wrong = false;
    for (const Launch &l : launches) {
      auto it = std::find_if(defined.kernels.begin(), defined.kernels.end(),
                             [&](const auto &d) { return d.first == l.kernel; });
      if (it == defined.kernels.end()) {
        problem(file->name + " does not define the kernel " + l.kernel +
                " that the spec names (the cubin was built for another spec: rebuild the "
                "bundle with `attnc aot`)");
        wrong = true;
        break;
      }
      // A block of more threads than the kernel was compiled for does not launch.
      if (it->second > 0 && static_cast<uint64_t>(l.threads) > it->second) {
        problem(file->name + "'s kernel " + l.kernel + " takes at most " +
                std::to_string(it->second) + " threads a block: " + l.column + " = " +
                std::to_string(l.threads) + " launches more");
        wrong = true;
        break;
      }
    }
    if (wrong)
      continue;
    auto shape = std::find_if(defined.objects.begin(), defined.objects.end(),
                              [&](const auto &o) { return o.first == shapeName; });
    if (shape == defined.objects.end()) {
      problem(file->name + " does not say the launch shape of its kernels (no " + shapeName +
              " of " + std::to_string(kernel::kLaunchShapeInts) +
              " ints with its bytes: built by an earlier attnc, or damaged; rebuild the bundle "
              "with `attnc aot`)");
      continue;
    }
    for (int i = 0; i < std::min(launch.fields, kernel::kLaunchShapeInts); ++i) {
      const auto built = static_cast<int32_t>(field(shape->second.data(), 4 * i, 4));
      if (built != says[i]) {
        problem(file->name + "'s kernels were built for " + columns[i] + " = " +
                std::to_string(built) + ", and are to be launched with " +
                std::to_string(says[i]) + " (an edited launch shape, or another spec's cubin)");
        break;
      }
    }
  }
  return problems;
}

} // namespace attn
