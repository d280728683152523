//===- BundleFolderTest.cpp - AOT bundle folders loaded at run time ---------===//
//
// A folder as `attnc aot` writes it (manifest.txt, cubins/), with made-up
// cubins: ELF files whose symbol tables define the kernels, and no code.
// Loading checks their sizes and checksums and that they define the kernels
// their specs name, not what the code is.
//
//===----------------------------------------------------------------------===//

#include "attnc/Bundle.h"
#include "attnc/BundleFolder.h"
#include "attnc/attnc.h"
#include "attnc/Cubin.h"
#include "FakeCubin.h"

#include "attn/Spec.h"
#include "attn/params.cuh"

#include <catch2/catch.hpp>

#include <array>
#include <cctype>
#include <cstdint>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace {
std::string canonical(const std::string &text) { return attn::parseSpec(text).spec->str(); }

const std::string kPrefill = "mode=prefill,head_dim=64,target=sm_90a";
const std::string kDecode = "mode=decode,head_dim=64,page_size=16,gqa=2,target=sm_90a";

using attn::test::fakeCubin;
using attn::test::launchOf;

std::string symbol(const std::string &spec) { return attn::parseSpec(spec).spec->symbol(); }
// The launch shapes of makeFolder's lines, which their cubins say.
const attn::test::FakeLaunch kPrefillLaunch = launchOf(kPrefill, {384, 99328, 0, 0, 0});
const attn::test::FakeLaunch kDecodeLaunch = launchOf(kDecode, {128, 51200, 128, 1, 100352});
const std::string kPrefillCubin = fakeCubin("prefill", {symbol(kPrefill)}, 190, kPrefillLaunch);
const std::string kDecodeCubin =
    fakeCubin("decode", {symbol(kDecode), symbol(kDecode) + "_merge"}, 190, kDecodeLaunch);
const std::string kPairCubin = fakeCubin("pair", {symbol(kDecode) + "_pair"}, 190, kDecodeLaunch);

void write(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  REQUIRE(out.good());
}

std::string read(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// The folders made, removed when the tests end.
struct Folders {
  std::vector<std::string> dirs;
  ~Folders() {
    for (const std::string &dir : dirs) {
      for (const char *file : {"/cubins/a.cubin", "/cubins/b.cubin", "/cubins/b_pair.cubin",
                               "/manifest.txt"})
        std::remove((dir + file).c_str());
      rmdir((dir + "/cubins").c_str());
      rmdir(dir.c_str());
    }
  }
} folders;

/// A bundle linked into the program, as bundle.cpp registers one: one
/// kernel of `given`'s spec (in canonical form) for `arch`, in a made-up
/// cubin that says it is launched with `threads` and `shared` bytes.
struct LinkedBundle {
  const std::string spec, cubin;
  const attn::BundleEntry entry;
  const attn::BundleRegistration registration;
  LinkedBundle(const char *name, const char *given, const char *arch, int threads, int shared)
      : spec(attn::parseSpec(given).spec->str()),
        cubin(fakeCubin(name, {symbol(spec)}, 190, launchOf(spec, {threads, shared, 0, 0, 0}))),
        entry{spec.c_str(), arch, reinterpret_cast<const unsigned char *>(cubin.data()),
              cubin.size(), threads, shared, 0, 0, 0, nullptr, 0, sizeof(attn::kernel::Params)},
        registration(name, &entry, 1) {}
};
const LinkedBundle linked("linked", "mode=prefill,head_dim=256,target=sm_80", "sm_80", 128, 4096);
// A kernel no other bundle here holds; its folder (twinFolder) holds it byte
// for byte, and loading that is loading this bundle again.
const LinkedBundle twin("twin", "mode=prefill,head_dim=96,target=sm_90a", "sm_90a", 128, 8192);

bool registered(const std::string &name) {
  for (const std::string &n : attn::bundleNames())
    if (n == name)
      return true;
  return false;
}

/// A fresh folder holding bundle `name`: a prefill kernel, and a decode
/// kernel with a pair kernel.
std::string makeFolder(const std::string &name,
                       long long paramsBytes = sizeof(attn::kernel::Params)) {
  char tmpl[] = "/tmp/attnc-bundle-folder-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  const std::string dir = tmpl;
  folders.dirs.push_back(dir);
  REQUIRE(mkdir((dir + "/cubins").c_str(), 0755) == 0);
  const std::string &a = kPrefillCubin, &b = kDecodeCubin, &p = kPairCubin;
  write(dir + "/cubins/a.cubin", a);
  write(dir + "/cubins/b.cubin", b);
  write(dir + "/cubins/b_pair.cubin", p);
  attn::ManifestLine one, two;
  one.arch = "sm_90a";
  one.spec = canonical(kPrefill);
  one.cubin = "cubins/a.cubin";
  one.threads = 384;
  one.shared_bytes = 99328;
  one.params_bytes = paramsBytes;
  one.registers = 168;
  one.bytes = static_cast<long long>(a.size());
  one.fnv1a = attn::fnv1aHex(a.data(), a.size());
  two = one;
  two.spec = canonical(kDecode);
  two.cubin = "cubins/b.cubin";
  two.threads = 128;
  two.shared_bytes = 51200;
  two.merge_threads = 128;
  two.cluster_merge = 1;
  two.pair_shared_bytes = 100352;
  two.bytes = static_cast<long long>(b.size());
  two.fnv1a = attn::fnv1aHex(b.data(), b.size());
  two.pair_cubin = "cubins/b_pair.cubin";
  two.pair_bytes = static_cast<long long>(p.size());
  two.pair_fnv1a = attn::fnv1aHex(p.data(), p.size());
  write(dir + "/manifest.txt", "# attnc 0.1.0 AOT bundle '" + name + "': 2 kernels\n# manifest " +
                                   std::to_string(attn::kManifestFormat) + ": " +
                                   attn::manifestColumns() + "\n" + attn::formatManifestLine(one) +
                                   "\n" + attn::formatManifestLine(two) + "\n");
  return dir;
}

/// A folder of the linked bundle `twin`: its one kernel, as attnc aot writes it.
std::string twinFolder() {
  char tmpl[] = "/tmp/attnc-bundle-folder-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  const std::string dir = tmpl;
  folders.dirs.push_back(dir);
  REQUIRE(mkdir((dir + "/cubins").c_str(), 0755) == 0);
  write(dir + "/cubins/a.cubin", twin.cubin);
  attn::ManifestLine m;
  m.arch = "sm_90a";
  m.spec = twin.spec;
  m.cubin = "cubins/a.cubin";
  m.threads = 128;
  m.shared_bytes = 8192;
  m.params_bytes = sizeof(attn::kernel::Params);
  m.registers = 190;
  m.bytes = static_cast<long long>(twin.cubin.size());
  m.fnv1a = attn::fnv1aHex(twin.cubin.data(), twin.cubin.size());
  write(dir + "/manifest.txt", "# attnc 0.1.0 AOT bundle 'twin': 1 kernel\n# manifest " +
                                   std::to_string(attn::kManifestFormat) + ": " +
                                   attn::manifestColumns() + "\n" + attn::formatManifestLine(m) +
                                   "\n");
  return dir;
}

/// Replaces the first `from` in `dir`'s manifest with `to`.
void editManifest(const std::string &dir, const std::string &from, const std::string &to) {
  std::string text = read(dir + "/manifest.txt");
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  write(dir + "/manifest.txt", text.replace(at, from.size(), to));
}

/// Writes `bytes` as the cubin `file` of `dir` and makes its manifest line
/// agree (the size and checksum).
void replaceCubin(const std::string &dir, const std::string &file, const std::string &bytes) {
  std::istringstream lines(read(dir + "/manifest.txt"));
  std::string line, text;
  for (int number = 1; std::getline(lines, line); ++number) {
    attn::ManifestLine m;
    if (number > 2 && attn::parseManifestLine(line, attn::kManifestFormat, m)) {
      const long long size = static_cast<long long>(bytes.size());
      const std::string sum = attn::fnv1aHex(bytes.data(), bytes.size());
      if (m.cubin == file)
        m.bytes = size, m.fnv1a = sum;
      if (m.pair_cubin == file)
        m.pair_bytes = size, m.pair_fnv1a = sum;
      line = attn::formatManifestLine(m);
    }
    text += line + "\n";
  }
  write(dir + "/" + file, bytes);
  write(dir + "/manifest.txt", text);
}

/// Sets the size column of `dir`'s prefill line (kPrefillCubin's) to `bytes`.
void setPrefillBytes(const std::string &dir, const std::string &bytes) {
  const std::string sum = attn::fnv1aHex(kPrefillCubin.data(), kPrefillCubin.size());
  editManifest(dir, " " + std::to_string(kPrefillCubin.size()) + " " + sum,
               " " + bytes + " " + sum);
}

/// The checksum manifests were written with before it was FNV-1a's (offset
/// basis 1469598103934665603, no leading zeros), computed here on its own.
std::string legacySum(const std::string &bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes)
    h = (h ^ c) * 1099511628211ull;
  char text[17];
  std::snprintf(text, sizeof text, "%llx", static_cast<unsigned long long>(h));
  return text;
}

/// Loads `dir`, which must fail; its error.
std::string refusal(const std::string &dir) {
  attn::LoadedBundle loaded;
  std::string error;
  CHECK_FALSE(attn::loadBundleFolder(dir, loaded, error));
  CHECK_FALSE(error.empty());
  return error;
}
} // namespace

TEST_CASE("a manifest line reads back as it was written", "[bundle-folder]") {
  attn::ManifestLine m, back;
  m.arch = "sm_80";
  m.spec = canonical(kDecode);
  m.cubin = "cubins/x.cubin";
  m.threads = 128, m.shared_bytes = 4096, m.merge_threads = 64, m.cluster_merge = 0;
  m.pair_shared_bytes = 0, m.params_bytes = 512, m.registers = 90, m.spill_bytes = 0;
  m.bytes = 10, m.fnv1a = "abc";
  REQUIRE(attn::parseManifestLine(attn::formatManifestLine(m), attn::kManifestFormat, back));
  CHECK(attn::formatManifestLine(back) == attn::formatManifestLine(m));
  CHECK(back.pair_cubin.empty());
  // A column short, a word where a number belongs, or a word too many.
  const std::string line = attn::formatManifestLine(m);
  CHECK_FALSE(attn::parseManifestLine(line.substr(0, line.rfind(' ')), 2, back));
  CHECK_FALSE(attn::parseManifestLine("sm_80 spec c.cubin many 1 1 0 0 8 1 0 3 ab", 2, back));
  CHECK_FALSE(attn::parseManifestLine(line + " p.cubin 3 ab extra", 2, back));
  CHECK(attn::parseManifestLine(line + " p.cubin 3 ab", 2, back));
  // Why a line does not parse: the column that is not a number, else the count.
  CHECK(attn::manifestLineProblem("sm_80 spec c.cubin many 1 1 0 0 8 1 0 3 ab", 2) ==
        "threads = 'many' is not a number");
  CHECK(attn::manifestLineProblem("sm_80 spec c.cubin 99999999999999999999 1 1 0 0 8 1 0 3 ab",
                                  2) ==
        "threads = 99999999999999999999 is out of range (a 64-bit number)");
  CHECK(attn::manifestLineProblem("sm_80 spec c.cubin 1 2", 2) ==
        "5 columns: line 2 names 13, or 16 with a pair kernel");
  CHECK(attn::manifestLineProblem("sm_80 spec c.cubin 128 x 0 90 0 3 ab", 1) ==
        "shared_bytes = 'x' is not a number");
  CHECK(back.pair_bytes == 3);
  // Format 1 has three columns fewer.
  CHECK(attn::parseManifestLine("sm_80 spec c.cubin 128 4096 0 90 0 3 ab", 1, back));
  CHECK(back.registers == 90);
  CHECK(attn::manifestFormat("# manifest 2: " + attn::manifestColumns(2)) == 2);
  CHECK(attn::manifestFormat("# manifest 2: arch spec") == 0); // columns garbled or cut
  CHECK(attn::manifestFormat("# manifest 1: " + attn::manifestColumns(1)) == 0); // never written
  CHECK(attn::manifestFormat("# manifest 3: a later format's own columns") == 3);
  CHECK(attn::manifestFormat("# " + attn::manifestColumns(1)) == 1);
  CHECK(attn::manifestFormat("# something else") == 0);
}

TEST_CASE("the manifest's checksum is 64-bit FNV-1a, and the one written before still reads",
          "[bundle-folder]") {
  // FNV-1a's published values.
  CHECK(attn::fnv1aHex("", 0) == "cbf29ce484222325");
  CHECK(attn::fnv1aHex("a", 1) == "af63dc4c8601ec8c");
  CHECK(attn::fnv1aHex("foobar", 6) == "85944171f73967e8");
  CHECK(attn::checksumMatches("a", 1, "af63dc4c8601ec8c"));
  // The sum manifests were written with before.
  CHECK(attn::checksumMatches("a", 1, legacySum("a")));
  CHECK_FALSE(attn::checksumMatches("b", 1, legacySum("a")));
  CHECK_FALSE(attn::checksumMatches("a", 1, "af63dc4c8601ec8d"));
  // A folder whose manifest has the old sums loads.
  const std::string dir = makeFolder("legacy-sums");
  editManifest(dir, attn::fnv1aHex(kPrefillCubin.data(), kPrefillCubin.size()),
               legacySum(kPrefillCubin));
  attn::LoadedBundle loaded;
  std::string error;
  CHECK(attn::loadBundleFolder(dir, loaded, error));
  CHECK(error.empty());
}

TEST_CASE("a bundle folder's kernels are registered with their launch shapes", "[bundle-folder]") {
  const std::string dir = makeFolder("served");
  attn::LoadedBundle loaded;
  std::string error;
  REQUIRE(attn::loadBundleFolder(dir, loaded, error));
  CHECK(error.empty());
  CHECK(loaded.name == "served");
  CHECK(loaded.kernels == 2);
  CHECK_FALSE(loaded.again);
  const attn::BundleEntry *p = attn::findBundledKernel(canonical(kPrefill), "sm_90a");
  REQUIRE(p);
  CHECK(std::string(reinterpret_cast<const char *>(p->cubin), p->cubin_size) == kPrefillCubin);
  CHECK(p->threads == 384);
  CHECK(p->shared_bytes == 99328);
  CHECK(p->pair_cubin == nullptr);
  const attn::BundleEntry *d = attn::findBundledKernel(canonical(kDecode), "sm_90a");
  REQUIRE(d);
  CHECK(d->merge_threads == 128);
  CHECK(d->cluster_merge == 1);
  CHECK(d->pair_shared_bytes == 100352);
  REQUIRE(d->pair_cubin);
  CHECK(std::string(reinterpret_cast<const char *>(d->pair_cubin), d->pair_cubin_size) ==
        kPairCubin);
  CHECK(attn::findBundledKernel(canonical(kDecode), "sm_80") == nullptr);
  const size_t registered = attn::bundledKernels().size();

  // The same folder again (by another spelling of its path): nothing new.
  REQUIRE(attn::loadBundleFolder(dir + "/./", loaded, error));
  CHECK(loaded.again);
  CHECK(loaded.kernels == 2);
  CHECK(attn::bundledKernels().size() == registered);

  // The same folder rebuilt (another manifest): refused, the first kernels kept.
  editManifest(dir, " 168 ", " 169 ");
  std::string why = refusal(dir);
  CHECK(why.find("bundle 'served' was loaded from this folder before and has been rebuilt since") !=
        std::string::npos);
  CHECK(attn::findBundledKernel(canonical(kPrefill), "sm_90a") == p);

  // A copy of the folder elsewhere (or the folder renamed) is the same bundle.
  REQUIRE(attn::loadBundleFolder(makeFolder("served"), loaded, error));
  CHECK(loaded.again);

  // Another bundle of the same name is refused.
  const std::string other = makeFolder("served");
  editManifest(other, " 168 ", " 170 ");
  why = refusal(other);
  CHECK(why.find("a bundle named 'served' is already registered (loaded from ") !=
        std::string::npos);
  CHECK(why.find("attnc aot --name") != std::string::npos);
  // And so is one named as a bundle linked into the program, with other kernels.
  CHECK(refusal(makeFolder("linked")).find("a bundle named 'linked' is already registered "
                                           "(linked into the program)") != std::string::npos);
  // The folder of a linked bundle, its kernels byte for byte, is that bundle:
  // loaded again, nothing new registered. One cubin byte changed is another.
  const std::string twinDir = twinFolder();
  INFO(error);
  REQUIRE(attn::loadBundleFolder(twinDir, loaded, error));
  CHECK(loaded.again);
  CHECK(loaded.kernels == 1);
  CHECK(attn::findBundledKernel(twin.spec, "sm_90a") == &twin.entry);
  std::string changed = twin.cubin;
  changed[changed.size() - 1] ^= 1;
  replaceCubin(twinDir, "cubins/a.cubin", changed);
  CHECK(refusal(twinDir).find("a bundle named 'twin' is already registered (linked into the "
                              "program)") != std::string::npos);
  CHECK(attn::bundledKernels().size() == registered);
}

TEST_CASE("a missing or corrupted cubin is named with its manifest line, and nothing is registered",
          "[bundle-folder]") {
  const size_t before = attn::bundledKernels().size();
  std::string dir = makeFolder("corrupted");
  write(dir + "/cubins/b_pair.cubin", "pain");
  std::string why = refusal(dir);
  CHECK(why.find("manifest.txt:4: cubins/b_pair.cubin is corrupted (4 bytes, checksum ") !=
        std::string::npos);
  CHECK(why.find("; the manifest says " + std::to_string(kPairCubin.size()) + " bytes, ") !=
        std::string::npos);
  dir = makeFolder("shortened");
  write(dir + "/cubins/a.cubin", "prefill");
  CHECK(refusal(dir).find("manifest.txt:3: cubins/a.cubin is corrupted (7 bytes") !=
        std::string::npos);
  // A size no file has: read as far as the file goes, not allocated.
  dir = makeFolder("huge");
  setPrefillBytes(dir, "1000000000000000");
  CHECK(refusal(dir).find("manifest.txt:3: cubins/a.cubin is corrupted (" +
                          std::to_string(kPrefillCubin.size()) + " bytes, checksum ") !=
        std::string::npos);
  dir = makeFolder("missing");
  std::remove((dir + "/cubins/b.cubin").c_str());
  CHECK(refusal(dir).find("manifest.txt:4: cubins/b.cubin is missing") != std::string::npos);
  // The prefill kernel of the folder above was fine: it is not registered either.
  CHECK(attn::bundledKernels().size() == before);
  for (const char *name : {"corrupted", "shortened", "huge", "missing"})
    CHECK_FALSE(registered(name));
}

TEST_CASE("a cubin that does not define the kernels its line's spec names is refused",
          "[bundle-folder]") {
  const size_t before = attn::bundledKernels().size();
  // The spec edited after the cubins were built: its kernels have other names.
  std::string dir = makeFolder("edited");
  editManifest(dir, "mode=prefill,head_dim=64,dtype=bf16", "mode=prefill,head_dim=64,dtype=f16");
  std::string why = refusal(dir);
  CHECK(why.find("manifest.txt:3: cubins/a.cubin does not define the kernel " +
                 symbol(kPrefill + ",dtype=f16") + " that the spec names") !=
        std::string::npos);
  // Each kernel of a decode spec: the main one and its merge in its cubin, its pair in its own.
  const std::string decode = symbol(kDecode);
  dir = makeFolder("no-merge");
  replaceCubin(dir, "cubins/b.cubin", fakeCubin("decode", {decode}));
  CHECK(refusal(dir).find("manifest.txt:4: cubins/b.cubin does not define the kernel " + decode +
                          "_merge") != std::string::npos);
  dir = makeFolder("pair-elsewhere");
  replaceCubin(dir, "cubins/b_pair.cubin", fakeCubin("pair", {decode + "_paired"}));
  CHECK(refusal(dir).find("manifest.txt:4: cubins/b_pair.cubin does not define the kernel " +
                          decode + "_pair") != std::string::npos);
  // Both cubins of the line wrong: both are named.
  dir = makeFolder("both-wrong");
  replaceCubin(dir, "cubins/b.cubin", fakeCubin("decode", {decode}));
  replaceCubin(dir, "cubins/b_pair.cubin", "pair-bytes");
  why = refusal(dir);
  CHECK(why.find("manifest.txt:4: cubins/b.cubin does not define the kernel " + decode +
                 "_merge") != std::string::npos);
  CHECK(why.find("; and cubins/b_pair.cubin is not an ELF file (not a cubin)") !=
        std::string::npos);
  // Bytes that are not a CUDA ELF file.
  dir = makeFolder("not-elf");
  replaceCubin(dir, "cubins/a.cubin", "prefill-cubin-bytes");
  CHECK(refusal(dir).find("manifest.txt:3: cubins/a.cubin is not an ELF file (not a cubin)") !=
        std::string::npos);
  dir = makeFolder("x86");
  replaceCubin(dir, "cubins/a.cubin", fakeCubin("prefill", {symbol(kPrefill)}, 62));
  CHECK(refusal(dir).find("cubins/a.cubin is an ELF file for machine 62, not a CUDA cubin") !=
        std::string::npos);
  // A symbol table past the end of the file (a cubin cut short, its manifest updated).
  dir = makeFolder("cut-short");
  replaceCubin(dir, "cubins/a.cubin", kPrefillCubin.substr(0, kPrefillCubin.size() - 100));
  CHECK(refusal(dir).find("cubins/a.cubin has section headers outside the file") !=
        std::string::npos);
  // Program headers, or a section's contents, past the end of the bytes:
  // the driver would read them from beyond the cubin.
  auto patched = [](std::string elf, size_t at, uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i)
      elf.at(at + i) = static_cast<char>((value >> (8 * i)) & 0xff);
    return elf;
  };
  std::string headers = patched(kPrefillCubin, 32, kPrefillCubin.size() - 8, 8); // e_phoff
  headers = patched(patched(headers, 54, 56, 2), 56, 1, 2); // one header of 56 bytes
  dir = makeFolder("headers-past");
  replaceCubin(dir, "cubins/a.cubin", headers);
  CHECK(refusal(dir).find("cubins/a.cubin has program headers outside the file") !=
        std::string::npos);
  uint64_t shoff = 0;
  for (int i = 7; i >= 0; --i)
    shoff = shoff << 8 | static_cast<unsigned char>(kPrefillCubin[40 + i]);
  // Section 1's offset (its header's bytes 24..31) past the end.
  dir = makeFolder("section-past");
  replaceCubin(dir, "cubins/a.cubin",
               patched(kPrefillCubin, shoff + 64 + 24, kPrefillCubin.size() + 1, 8));
  CHECK(refusal(dir).find("cubins/a.cubin has section 1 outside the file") != std::string::npos);
  // A size of 0 names the column and the file.
  dir = makeFolder("no-bytes");
  setPrefillBytes(dir, "0");
  CHECK(refusal(dir).find("manifest.txt:3: bytes = 0: cubins/a.cubin's size must be positive") !=
        std::string::npos);
  CHECK(attn::bundledKernels().size() == before);
  for (const char *name :
       {"no-bytes", "edited", "no-merge", "pair-elsewhere", "both-wrong", "not-elf", "x86",
        "cut-short", "headers-past", "section-past"})
    CHECK_FALSE(registered(name));
}

TEST_CASE("a line whose launch shape is not the one its cubins say is refused",
          "[bundle-folder]") {
  const size_t before = attn::bundledKernels().size();
  // Fewer threads than the kernel was emitted for: within its __launch_bounds__,
  // but its warps would not all run.
  std::string dir = makeFolder("fewer-threads");
  editManifest(dir, " 384 99328 ", " 128 99328 ");
  CHECK(refusal(dir).find("manifest.txt:3: cubins/a.cubin's kernels were built for threads = "
                          "384, and are to be launched with 128") != std::string::npos);
  dir = makeFolder("less-shared");
  editManifest(dir, " 384 99328 ", " 384 1024 ");
  CHECK(refusal(dir).find("cubins/a.cubin's kernels were built for shared_bytes = 99328, and "
                          "are to be launched with 1024") != std::string::npos);
  // The pair kernel's module says the shape too.
  dir = makeFolder("pair-shape");
  replaceCubin(dir, "cubins/b_pair.cubin",
               fakeCubin("pair", {symbol(kDecode) + "_pair"}, 190,
                         launchOf(kDecode, {128, 51200, 128, 1, 90000})));
  CHECK(refusal(dir).find("manifest.txt:4: cubins/b_pair.cubin's kernels were built for "
                          "pair_shared_bytes = 90000, and are to be launched with 100352") !=
        std::string::npos);
  // A cubin that says no launch shape (an earlier attnc's).
  dir = makeFolder("unsaid");
  replaceCubin(dir, "cubins/a.cubin", fakeCubin("prefill", {symbol(kPrefill)}));
  CHECK(refusal(dir).find("manifest.txt:3: cubins/a.cubin does not say the launch shape of its "
                          "kernels (no " + symbol(kPrefill) + "_launch of 5 ints with its bytes: "
                          "built by an earlier attnc, or damaged; rebuild the bundle with `attnc "
                          "aot`)") !=
        std::string::npos);
  CHECK(attn::bundledKernels().size() == before);
  for (const char *name : {"fewer-threads", "less-shared", "pair-shape", "unsaid"})
    CHECK_FALSE(registered(name));
  // A line of format 1 has no cluster_merge nor pair_shared_bytes column (nor a pair
  // cubin): its three columns of the shape are compared; as format 2 they would not pass.
  attn::ManifestLine old;
  old.spec = canonical(kDecode);
  old.cubin = "cubins/b.cubin";
  old.threads = 128, old.shared_bytes = 51200, old.merge_threads = 128;
  const std::vector<unsigned char> decode(kDecodeCubin.begin(), kDecodeCubin.end()), none;
  CHECK(attn::checkCubinKernels(old, 1, decode, none).empty());
  CHECK_FALSE(attn::checkCubinKernels(old, 2, decode, none).empty());
  old.shared_bytes = 4096;
  CHECK(attn::checkCubinKernels(old, 1, decode, none).find("built for shared_bytes = 51200") !=
        std::string::npos);
}

TEST_CASE("a cubin damaged anywhere is refused or read within its bytes", "[bundle-folder]") {
  // Each byte of a cubin flipped in turn: the symbol table's reader either
  // finds the kernels or says why not; it reads nothing past the bytes.
  attn::ManifestLine m;
  m.spec = canonical(kDecode);
  m.cubin = "cubins/b.cubin";
  m.threads = 128, m.shared_bytes = 51200, m.merge_threads = 128, m.cluster_merge = 1;
  m.pair_shared_bytes = 100352, m.pair_cubin = "cubins/b_pair.cubin";
  const std::vector<unsigned char> pair(kPairCubin.begin(), kPairCubin.end());
  int refused = 0;
  for (size_t i = 0; i < kDecodeCubin.size(); ++i) {
    std::vector<unsigned char> bytes(kDecodeCubin.begin(), kDecodeCubin.end());
    bytes[i] ^= 0xff;
    const std::string why = attn::checkCubinKernels(m, attn::kManifestFormat, bytes, pair);
    refused += !why.empty();
    if (!why.empty())
      CHECK(why.rfind("cubins/b.cubin", 0) == 0);
  }
  // The header's identity, the section headers' place, the kernels' names and
  // the launch shape's bytes were hit.
  CHECK(refused > 20);
  std::vector<unsigned char> whole(kDecodeCubin.begin(), kDecodeCubin.end());
  CHECK(attn::checkCubinKernels(m, attn::kManifestFormat, whole, pair).empty());
  for (size_t cut : {size_t(0), size_t(10), size_t(63), size_t(64), whole.size() - 1}) {
    std::vector<unsigned char> shorter(whole.begin(), whole.begin() + static_cast<long>(cut));
    CHECK_FALSE(attn::checkCubinKernels(m, attn::kManifestFormat, shorter, pair).empty());
  }
}

TEST_CASE("a made-up symbol table costs no more than the cubin's bytes to read",
          "[bundle-folder]") {
  // 20000 data objects, each over the whole of a 64 KiB section, and names
  // that run to the end of a string table without a terminator: reading
  // them whole would copy gigabytes. Only launch shapes (20 bytes, named
  // "..._launch") and names of at most 512 bytes are kept.
  using attn::test::put;
  const size_t objects = 20000, dataBytes = 64 << 10;
  std::string strtab(1, '\0');
  strtab += "object" + std::string(1, '\0');
  const size_t unterminated = strtab.size();
  strtab += std::string(4096, 'x');
  std::string symtab(24, '\0');
  for (size_t i = 0; i < objects; ++i) {
    std::string sym(24, '\0');
    put(sym, 0, i % 2 ? 1 : unterminated, 4); // st_name
    put(sym, 4, 1, 1);                        // STB_LOCAL, STT_OBJECT
    put(sym, 6, 3, 2);                        // in the data section
    put(sym, 16, dataBytes, 8);               // st_size: all of it
    symtab += sym;
  }
  std::string elf(64, '\0');
  elf.replace(0, 6, "\x7f" "ELF\x02\x01");
  put(elf, 18, 190, 2);
  const size_t strAt = elf.size(), symAt = strAt + strtab.size(), dataAt = symAt + symtab.size();
  elf += strtab + symtab + std::string(dataBytes, '\1');
  std::string headers(4 * 64, '\0');
  put(headers, 64 + 4, 3, 4), put(headers, 64 + 24, strAt, 8);
  put(headers, 64 + 32, strtab.size(), 8);
  put(headers, 128 + 4, 2, 4), put(headers, 128 + 24, symAt, 8);
  put(headers, 128 + 32, symtab.size(), 8), put(headers, 128 + 40, 1, 4);
  put(headers, 128 + 56, 24, 8);
  put(headers, 192 + 4, 1, 4), put(headers, 192 + 24, dataAt, 8);
  put(headers, 192 + 32, dataBytes, 8);
  put(elf, 40, elf.size(), 8), put(elf, 58, 64, 2), put(elf, 60, 4, 2);
  elf += headers;
  attn::CubinSymbols symbols;
  std::string why;
  REQUIRE(attn::readCubinSymbols(reinterpret_cast<const unsigned char *>(elf.data()), elf.size(),
                                 symbols, why));
  CHECK(symbols.objects.empty());
  CHECK(symbols.kernels.empty());
}

TEST_CASE("a manifest with CRLF line ends, blank lines and comments loads", "[bundle-folder]") {
  const std::string dir = makeFolder("windows");
  std::string text = read(dir + "/manifest.txt"), crlf;
  for (char c : text)
    crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  const size_t third = crlf.find("\r\nsm_90a") + 2;
  write(dir + "/manifest.txt",
        crlf.substr(0, third) + "\r\n   \r\n  # a note\r\n" + crlf.substr(third));
  attn::LoadedBundle loaded;
  std::string error;
  CHECK(attn::loadBundleFolder(dir, loaded, error));
  CHECK(error.empty());
  CHECK(loaded.kernels == 2);
}

TEST_CASE("what is not a loadable bundle folder is refused with the reason", "[bundle-folder]") {
  CHECK(refusal("/nonexistent/folder") ==
        "/nonexistent/folder/manifest.txt: cannot open: /nonexistent/folder does not exist");
  CHECK(refusal("/dev/null") == "/dev/null/manifest.txt: cannot open: /dev/null is not a folder");
  CHECK(refusal("/") == "//manifest.txt: cannot open: the folder has none (not a bundle folder? "
                        "`attnc aot -o DIR` writes one)");
  CHECK(refusal("") == "the bundle folder's name is empty");

  std::string dir = makeFolder("x");
  editManifest(dir, "# attnc 0.1.0 AOT bundle 'x'", "# my notes");
  CHECK(refusal(dir).find("manifest.txt:1: not the first line of a manifest") != std::string::npos);

  // Format 1: verifiable, but without the launch shape a load needs.
  dir = makeFolder("old");
  editManifest(dir, "# manifest 2: " + attn::manifestColumns(), "# " + attn::manifestColumns(1));
  CHECK(refusal(dir).find("manifest format 1") != std::string::npos);
  dir = makeFolder("newer");
  editManifest(dir, "# manifest 2:", "# manifest 3:");
  CHECK(refusal(dir).find("manifest format 3, this attnc reads 2") != std::string::npos);

  dir = makeFolder("broken");
  editManifest(dir, " 384 ", " many ");
  CHECK(refusal(dir).find("manifest.txt:3: not a manifest line (threads = 'many' is not a "
                          "number; columns: arch spec cubin") != std::string::npos);
  dir = makeFolder("uncanonical");
  editManifest(dir, canonical(kPrefill), "mode=prefill,head_dim=64,target=sm_90a");
  CHECK(refusal(dir).find("manifest.txt:3: the spec is not in canonical form (mode=prefill,") !=
        std::string::npos);
  dir = makeFolder("invalid");
  editManifest(dir, "head_dim=64", "head_dim=65");
  CHECK(refusal(dir).find("manifest.txt:3: invalid spec: head_dim = 65") != std::string::npos);
  dir = makeFolder("arch");
  editManifest(dir, "sm_90a mode=prefill", "sm_80 mode=prefill");
  CHECK(refusal(dir).find("manifest.txt:3: architecture sm_80 for a spec of target sm_90a") !=
        std::string::npos);
  // Launch sizes out of range are named with their line, not narrowed.
  for (const auto &[from, to, why] : std::vector<std::array<std::string, 3>>{
           {" 384 99328 ", " 0 99328 ", "threads = 0: not a multiple of 32 in 32..1024"},
           {" 384 99328 ", " 384 4294967296 ", "shared_bytes = 4294967296: not in 0..232448"},
           {" 384 99328 ", " 384 232449 ",
            "shared_bytes = 232449: not in 0..232448 (the most a thread block of sm_90a gets)"},
           {" 384 99328 0 0 ", " 384 99328 0 1 ",
            "cluster_merge = 1 is for decode kernels of target sm_90a"},
           {" 128 51200 128 ", " 128 51200 0 ",
            "merge_threads = 0: a decode kernel's merge takes 1..1024 threads"},
           {" 128 1 100352 ", " 128 1 232449 ", "pair_shared_bytes = 232449: not in 0..232448"},
           {" 128 51200 128 1 ", " 128 51200 128 2 ", "cluster_merge not 0 or 1"}}) {
    dir = makeFolder("range");
    editManifest(dir, from, to);
    const bool decodeLine = from.rfind(" 128 ", 0) == 0; // line 4; the prefill one is line 3
    CHECK(refusal(dir).find("manifest.txt:" + std::string(decodeLine ? "4" : "3") + ": " + why) !=
          std::string::npos);
  }
  // A checksum that is not lowercase hex is named as such, not as a corrupted cubin.
  dir = makeFolder("upper-sum");
  std::string sum = attn::fnv1aHex(kPrefillCubin.data(), kPrefillCubin.size()), upper = sum;
  for (char &c : upper)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  REQUIRE(upper != sum);
  editManifest(dir, " " + sum, " " + upper);
  CHECK(refusal(dir).find("manifest.txt:3: fnv1a = '" + upper +
                          "': not a checksum (16 lowercase hex digits)") != std::string::npos);
  dir = makeFolder("outside");
  editManifest(dir, "cubins/a.cubin", "../a.cubin");
  CHECK(refusal(dir).find("../a.cubin: a cubin must lie in the bundle folder") != std::string::npos);

  // Kernels built for other launch arguments: the registry's own refusal.
  dir = makeFolder("stale", sizeof(attn::kernel::Params) - 8);
  CHECK(refusal(dir).find("its kernels take arguments of") != std::string::npos);

  // Only comments.
  dir = makeFolder("empty");
  const std::string text = read(dir + "/manifest.txt");
  size_t second = text.find('\n', text.find('\n') + 1);
  write(dir + "/manifest.txt", text.substr(0, second + 1));
  CHECK(refusal(dir).find("manifest.txt lists 0 kernels, its first line says 2 (a manifest cut "
                          "short?)") != std::string::npos);
  // One kernel line fewer than the first line says, or a line cut before its pair columns.
  dir = makeFolder("short");
  editManifest(dir, "': 2 kernels", "': 3 kernels");
  CHECK(refusal(dir).find("manifest.txt lists 2 kernels, its first line says 3") !=
        std::string::npos);
  dir = makeFolder("unpaired");
  {
    std::string text = read(dir + "/manifest.txt");
    text = text.substr(0, text.find(" cubins/b_pair.cubin")) + "\n";
    write(dir + "/manifest.txt", text);
  }
  CHECK(refusal(dir).find("manifest.txt:4: pair_shared_bytes without its pair cubin") !=
        std::string::npos);
  // A kernel listed twice.
  dir = makeFolder("twice");
  {
    std::string text = read(dir + "/manifest.txt");
    const size_t third = text.find("\nsm_90a") + 1;
    const std::string line = text.substr(third, text.find('\n', third) - third + 1);
    write(dir + "/manifest.txt", text + line);
    editManifest(dir, "': 2 kernels", "': 3 kernels");
  }
  CHECK(refusal(dir).find("manifest.txt:5: the kernel of line 3 again") != std::string::npos);
  // A cubin that is a folder, and a manifest that is one: named, not read.
  dir = makeFolder("folder");
  std::remove((dir + "/cubins/a.cubin").c_str());
  REQUIRE(mkdir((dir + "/cubins/a.cubin").c_str(), 0755) == 0);
  CHECK(refusal(dir).find("manifest.txt:3: cubins/a.cubin is not a file") != std::string::npos);
  rmdir((dir + "/cubins/a.cubin").c_str());
  dir = makeFolder("manifest-folder");
  std::remove((dir + "/manifest.txt").c_str());
  REQUIRE(mkdir((dir + "/manifest.txt").c_str(), 0755) == 0);
  CHECK(refusal(dir).find("manifest.txt is not a file") != std::string::npos);
  rmdir((dir + "/manifest.txt").c_str());
  // A FIFO at either name would block a plain open and read: named, not waited on.
  dir = makeFolder("fifo");
  std::remove((dir + "/cubins/a.cubin").c_str());
  REQUIRE(mkfifo((dir + "/cubins/a.cubin").c_str(), 0644) == 0);
  CHECK(refusal(dir).find("manifest.txt:3: cubins/a.cubin is not a file") != std::string::npos);
  std::remove((dir + "/cubins/a.cubin").c_str());
  std::remove((dir + "/manifest.txt").c_str());
  REQUIRE(mkfifo((dir + "/manifest.txt").c_str(), 0644) == 0);
  CHECK(refusal(dir).find("manifest.txt is not a file") != std::string::npos);
  std::remove((dir + "/manifest.txt").c_str());
  for (const char *name : {"x", "old", "newer", "broken", "uncanonical", "invalid", "arch",
                           "range", "outside", "stale", "empty", "short", "unpaired",
                           "twice", "folder", "manifest-folder", "fifo"})
    CHECK_FALSE(registered(name));
}

TEST_CASE("the same kernels in another order are the same bundle", "[bundle-folder]") {
  // A folder, then a copy whose manifest lists its two kernels the other way round.
  const std::string dir = makeFolder("reordered");
  const std::string copy = makeFolder("reordered");
  std::string text = read(copy + "/manifest.txt");
  const size_t third = text.find('\n', text.find('\n') + 1) + 1;
  const size_t fourth = text.find('\n', third) + 1;
  text = text.substr(0, third) + text.substr(fourth) + text.substr(third, fourth - third);
  write(copy + "/manifest.txt", text);
  attn::LoadedBundle loaded;
  std::string error;
  REQUIRE(attn::loadBundleFolder(dir, loaded, error));
  CHECK_FALSE(loaded.again);
  REQUIRE(attn::loadBundleFolder(copy, loaded, error));
  CHECK(loaded.again);
  // Through the C form: a table, then its entries the other way round; not
  // when one kernel's bytes differ. (What the registry points into lives as
  // long as the process, as a bundle.cpp's arrays do.)
  static const std::string spec = canonical("mode=prefill,head_dim=32,target=sm_80");
  static const std::string other = canonical("mode=prefill,head_dim=32,mask=causal,target=sm_80");
  static const std::string cubin =
      fakeCubin("ordered", {symbol(spec)}, 190, launchOf(spec, {128, 4096, 0, 0, 0}));
  static const std::string otherCubin =
      fakeCubin("ordered", {symbol(other)}, 190, launchOf(other, {128, 4096, 0, 0, 0}));
  static const std::string changedCubin =
      fakeCubin("changed", {symbol(other)}, 190, launchOf(other, {128, 4096, 0, 0, 0}));
  auto entry = [](const std::string &s, const std::string &bytes) {
    return attnc_bundle_entry{s.c_str(), "sm_80",
                              reinterpret_cast<const unsigned char *>(bytes.data()), bytes.size(),
                              128, 4096, 0, 0, 0, nullptr, 0, sizeof(attn::kernel::Params)};
  };
  static const attnc_bundle_entry first[] = {entry(spec, cubin), entry(other, otherCubin)};
  REQUIRE(attnc_bundle_register("ordered", first, 2, sizeof first[0]) == ATTNC_OK);
  const attnc_bundle_entry swapped[] = {first[1], first[0]};
  CHECK(attnc_bundle_register("ordered", swapped, 2, sizeof swapped[0]) == ATTNC_OK);
  const attnc_bundle_entry changed[] = {first[0], entry(other, changedCubin)};
  CHECK(attnc_bundle_register("ordered", changed, 2, sizeof changed[0]) ==
        ATTNC_ERROR_INVALID_ARGUMENT);
}
