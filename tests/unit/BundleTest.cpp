//===- BundleTest.cpp - The AOT bundle registry --------------------------===//

#include "attnc/Bundle.h"
#include "attnc/attnc.h"
#include "FakeCubin.h"

#include "attn/params.cuh"

#include <catch2/catch.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

namespace {
/// What the registrations below print on stderr, taken into a file while
/// they run (this file's statics start in order): a test reads it, and a
/// listing of the tests (at build time) prints none of the refusals made here
/// on purpose.
class StderrTaken {
public:
  StderrTaken() {
    std::fflush(stderr);
    file_ = std::tmpfile();
    saved_ = file_ ? dup(STDERR_FILENO) : -1;
    if (saved_ >= 0 && dup2(fileno(file_), STDERR_FILENO) < 0) {
      close(saved_);
      saved_ = -1;
    }
  }
  /// Gives stderr back; what was printed meanwhile.
  std::string giveBack() {
    std::fflush(stderr);
    if (saved_ >= 0) {
      dup2(saved_, STDERR_FILENO);
      close(saved_);
      saved_ = -1;
    }
    std::string text;
    if (file_) {
      std::rewind(file_);
      char buf[4096];
      for (size_t n; (n = std::fread(buf, 1, sizeof buf, file_)) > 0;)
        text.append(buf, n);
      std::fclose(file_);
      file_ = nullptr;
    }
    return text;
  }

private:
  std::FILE *file_ = nullptr;
  int saved_ = -1;
};
StderrTaken startupStderr;

using attn::test::fakeCubin;
using attn::test::launchOf;

std::string symbol(const std::string &spec) { return attn::parseSpec(spec).spec->symbol(); }
/// A made-up cubin of `spec`'s kernel that says the launch shape `shape`.
std::string cubinOf(const std::string &spec, std::vector<int32_t> shape, const char *text) {
  return fakeCubin(text, {symbol(spec)}, 190, launchOf(spec, std::move(shape)));
}
const unsigned char *bytes(const std::string &s) {
  return reinterpret_cast<const unsigned char *>(s.data());
}

/// A spec's canonical form, kept for the whole test (an entry points into it).
const char *canonical(const char *spec) {
  static auto *kept = new std::vector<std::unique_ptr<std::string>>();
  kept->push_back(std::make_unique<std::string>(attn::parseSpec(spec).spec->str()));
  return kept->back()->c_str();
}

const char *const k64Sm80 = canonical("mode=prefill,head_dim=64,target=sm_80");
const char *const k64Sm90 = canonical("mode=prefill,head_dim=64,target=sm_90a");
const std::string firstSm80 = cubinOf(k64Sm80, {128, 4096, 0, 0, 0}, "first");
const std::string firstSm90 = cubinOf(k64Sm90, {256, 8192, 0, 0, 0}, "first");
const std::string secondSm80 = cubinOf(k64Sm80, {64, 0, 0, 0, 0}, "second");
const unsigned char fake[] = {1, 2, 3};
constexpr size_t kParams = sizeof(attn::kernel::Params);
const attn::BundleEntry entries[] = {
    {k64Sm80, "sm_80", bytes(firstSm80), firstSm80.size(), 128, 4096, 0, 0, 0, nullptr, 0,
     kParams},
    {k64Sm90, "sm_90a", bytes(firstSm90), firstSm90.size(), 256, 8192, 0, 0, 0, nullptr, 0,
     kParams},
};
const attn::BundleEntry later[] = {
    {k64Sm80, "sm_80", bytes(secondSm80), secondSm80.size(), 64, 0, 0, 0, 0, nullptr, 0, kParams},
};
const attn::BundleRegistration first("first", entries, 2);
const attn::BundleRegistration second("second", later, 1);
// As a bundle compiled against a header whose BundleEntry had one int less.
const attn::BundleEntry stale[] = {
    {"mode=prefill,head_dim=128,target=sm_90a", "sm_90a", fake, sizeof fake, 128, 4096, 0},
};
const attn::BundleRegistration third("stale", stale, 1, sizeof(attn::BundleEntry) - sizeof(int));
// As a bundle whose kernels were built for other kernel arguments (an
// attnc whose Params had a field less).
const attn::BundleEntry older[] = {
    {"mode=decode,head_dim=128,page_size=16,target=sm_90a", "sm_90a", fake, sizeof fake, 128,
     4096, 0, 0, 0, nullptr, 0, kParams - 8},
};
const attn::BundleRegistration fourth("older", older, 1);
// Damaged: an entry whose cubin is missing though its size is not, and a
// bundle whose entries are a null pointer.
const attn::BundleEntry damaged[] = {
    {"mode=prefill,head_dim=32,target=sm_80", "sm_80", fake, sizeof fake, 128, 4096, 0, 0, 0,
     nullptr, 0, kParams},
    {"mode=prefill,head_dim=48,target=sm_80", "sm_80", nullptr, 1 << 20, 128, 4096, 0, 0, 0,
     nullptr, 0, kParams},
};
const attn::BundleRegistration fifth("damaged", damaged, 2);
const attn::BundleRegistration sixth("empty", nullptr, 2);
// Entries whose launch shape is not the one their cubins say: fewer threads
// than the kernel was emitted for, and a cubin that says none (an earlier
// attnc's).
const char *const k128Sm80 = canonical("mode=prefill,head_dim=128,target=sm_80");
const std::string reshapedCubin = cubinOf(k128Sm80, {128, 65536, 0, 0, 0}, "reshaped");
const std::string unsaidCubin = fakeCubin("unsaid", {symbol(k128Sm80)});
const attn::BundleEntry reshaped[] = {
    {k128Sm80, "sm_80", bytes(reshapedCubin), reshapedCubin.size(), 64, 65536, 0, 0, 0, nullptr,
     0, kParams},
};
const attn::BundleEntry unsaid[] = {
    {k128Sm80, "sm_80", bytes(unsaidCubin), unsaidCubin.size(), 128, 65536, 0, 0, 0, nullptr, 0,
     kParams},
};
const attn::BundleRegistration seventh("reshaped", reshaped, 1);
const attn::BundleRegistration eighth("unsaid", unsaid, 1);
// Through the C API's form, which bundle.cpp calls (attnc_bundle_register):
// a bundle registered, one compiled with another layout of the C entries,
// and a name registered before.
const char *const kCausalSm80 = canonical("mode=prefill,head_dim=64,mask=causal,target=sm_80");
const std::string viaC = cubinOf(kCausalSm80, {128, 4096, 0, 0, 0}, "via C");
const attnc_bundle_entry cEntries[] = {
    {kCausalSm80, "sm_80", bytes(viaC), viaC.size(), 128, 4096, 0, 0, 0, nullptr, 0, kParams},
};
const attnc_status cLinked =
    attnc_bundle_register("linked-c", cEntries, 1, sizeof(attnc_bundle_entry));
const attnc_status cStale =
    attnc_bundle_register("stale-c", cEntries, 1, sizeof(attnc_bundle_entry) - sizeof(size_t));
const attnc_status cTaken = attnc_bundle_register("first", cEntries, 1, sizeof cEntries[0]);
const std::vector<std::string> kRegistered = {"first", "second", "linked-c"};
const std::string kStartupWarnings = startupStderr.giveBack();
const size_t kStartupRefusals = attn::bundleErrors().size();
} // namespace

TEST_CASE("bundles register their kernels at start-up, and the first one registered wins",
          "[bundle]") {
  CHECK(attn::bundleNames() == kRegistered);
  CHECK(attn::bundledKernels().size() == 4);
  const attn::BundleEntry *e = attn::findBundledKernel(k64Sm90, "sm_90a");
  REQUIRE(e);
  CHECK(e->threads == 256);
  CHECK(e->shared_bytes == 8192);
  const attn::BundleEntry *f = attn::findBundledKernel(k64Sm80, "sm_80");
  REQUIRE(f);
  CHECK(f->cubin_size == firstSm80.size()); // "first", not "second"
  CHECK(f->threads == 128);
  CHECK_FALSE(attn::findBundledKernel(k64Sm80, "sm_90a"));
  CHECK_FALSE(attn::findBundledKernel(k128Sm80, "sm_80"));
}

TEST_CASE("a bundle compiled against another layout of its entries is refused, with the reason",
          "[bundle]") {
  CHECK_FALSE(attn::findBundledKernel("mode=prefill,head_dim=128,target=sm_90a", "sm_90a"));
  const std::vector<std::string> errors = attn::bundleErrors();
  REQUIRE(errors.size() >= 8); // (a case run earlier in this process may add more)
  CHECK(errors[0].find("bundle stale") != std::string::npos);
  CHECK(errors[0].find(std::to_string(sizeof(attn::BundleEntry))) != std::string::npos);
  CHECK(errors[0].find("attnc aot") != std::string::npos);
}

TEST_CASE("a bundle whose kernels take other arguments than this runtime passes is refused",
          "[bundle]") {
  CHECK_FALSE(attn::findBundledKernel("mode=decode,head_dim=128,page_size=16,target=sm_90a",
                                      "sm_90a"));
  const std::vector<std::string> errors = attn::bundleErrors();
  REQUIRE(errors.size() >= 8); // (a case run earlier in this process may add more)
  CHECK(errors[1].find("bundle older") != std::string::npos);
  CHECK(errors[1].find(std::to_string(kParams - 8) + " bytes") != std::string::npos);
  CHECK(errors[1].find(std::to_string(kParams)) != std::string::npos);
  CHECK(errors[1].find("attnc aot") != std::string::npos);
  CHECK(attn::bundleNames() == kRegistered);
}

TEST_CASE("a bundle with an entry that could not be loaded is refused whole", "[bundle]") {
  // Not even its good entry is used: the bundle is damaged.
  CHECK_FALSE(attn::findBundledKernel("mode=prefill,head_dim=32,target=sm_80", "sm_80"));
  CHECK_FALSE(attn::findBundledKernel("mode=prefill,head_dim=48,target=sm_80", "sm_80"));
  const std::vector<std::string> errors = attn::bundleErrors();
  REQUIRE(errors.size() >= 8); // (a case run earlier in this process may add more)
  CHECK(errors[2] == "bundle damaged: entry 1 has no cubin; its kernels are not used");
  CHECK(errors[3] == "bundle empty: its entries are a null pointer; its kernels are not used");
  CHECK(attn::bundleNames() == kRegistered);
  CHECK(attn::bundledKernels().size() == 4);
}

TEST_CASE("a bundle whose entry's launch shape is not the one its cubin says is refused",
          "[bundle]") {
  CHECK_FALSE(attn::findBundledKernel(k128Sm80, "sm_80"));
  const std::vector<std::string> errors = attn::bundleErrors();
  REQUIRE(errors.size() >= 8); // (a case run earlier in this process may add more)
  CHECK(errors[4] == "bundle reshaped: entry 0 (" + std::string(k128Sm80) + ")'s cubin's kernels "
                     "were built for threads = 128, and are to be launched with 64 (an edited "
                     "launch shape, or another spec's cubin); its kernels are not used");
  CHECK(errors[5].find("bundle unsaid: entry 0 (" + std::string(k128Sm80) + ")'s cubin does not "
                       "say the launch shape of its kernels (no " + symbol(k128Sm80) +
                       "_launch of 5 ints with its bytes: built by an earlier attnc") !=
        std::string::npos);
  CHECK(attn::bundleNames() == kRegistered);
}

TEST_CASE("each refused linked bundle is named on stderr at start-up", "[bundle]") {
  // One warning line per refusal kept at start-up, in order, and nothing else.
  const std::vector<std::string> errors = attn::bundleErrors();
  REQUIRE(kStartupRefusals >= 8);
  REQUIRE(errors.size() >= kStartupRefusals);
  std::string want;
  for (size_t i = 0; i < kStartupRefusals; ++i)
    want += "attnc: warning: " + errors[i] + "\n";
  CHECK(kStartupWarnings == want);
  CHECK(kStartupWarnings.find("attnc: warning: bundle stale-c: compiled with entries of ") !=
        std::string::npos);
}

TEST_CASE("a bundle registered through the C API (bundle.cpp's call) serves like a linked one",
          "[bundle]") {
  CHECK(cLinked == ATTNC_OK);
  const attn::BundleEntry *e = attn::findBundledKernel(kCausalSm80, "sm_80");
  REQUIRE(e);
  CHECK(e->cubin == bytes(viaC));
  CHECK(e->cubin_size == viaC.size());
  CHECK(e->threads == 128);
  CHECK(e->shared_bytes == 4096);
  CHECK(e->params_bytes == kParams);
  CHECK(std::string(e->arch) == "sm_80");
}

TEST_CASE("the C API's registration refuses another entry layout and a name taken, with the "
          "reasons", "[bundle]") {
  CHECK(cStale == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(cTaken == ATTNC_ERROR_INVALID_ARGUMENT);
  const std::vector<std::string> errors = attn::bundleErrors();
  REQUIRE(errors.size() >= 8); // (a case run earlier in this process may add more)
  CHECK(errors[6] == "bundle stale-c: compiled with entries of " +
                         std::to_string(sizeof(attnc_bundle_entry) - sizeof(size_t)) +
                         " bytes, this attnc's are " + std::to_string(sizeof(attnc_bundle_entry)) +
                         " (regenerate it with this attnc's `attnc aot`); its kernels are not used");
  CHECK(errors[7] == "bundle first: a bundle named 'first' is already registered (linked into the "
                     "program); build one of them with another name (attnc aot --name); its "
                     "kernels are not used");
  // The first "first" keeps its kernels; the refused one added none.
  const attn::BundleEntry *f = attn::findBundledKernel(k64Sm80, "sm_80");
  REQUIRE(f);
  CHECK(f->cubin_size == firstSm80.size());
  CHECK(attn::bundleNames() == kRegistered);
  // A call on this thread gets the last one's reason, as attnc_last_error() would.
  CHECK(attnc_bundle_register(nullptr, cEntries, 1, sizeof cEntries[0]) ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(attn::cApiLastError() == "bundle (no name): no name; its kernels are not used");
  CHECK(attnc_bundle_register("none-c", nullptr, 3, sizeof cEntries[0]) ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(attn::cApiLastError() ==
        "bundle none-c: its entries are a null pointer; its kernels are not used");
  // A table of another layout is not read, named or not (16 bytes: fewer
  // than one entry of this layout); nor is one of a count that no memory holds.
  const unsigned char small[16] = {};
  CHECK(attnc_bundle_register(nullptr, reinterpret_cast<const attnc_bundle_entry *>(small), 1,
                              sizeof small) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(attn::cApiLastError().rfind("bundle (no name): compiled with entries of 16 bytes", 0) ==
        0);
  // The same bundle again (its bundle.cpp in two libraries of the program):
  // nothing new, and nothing refused.
  const size_t refusals = attn::bundleErrors().size();
  CHECK(attnc_bundle_register("linked-c", cEntries, 1, sizeof cEntries[0]) == ATTNC_OK);
  CHECK(attn::bundleErrors().size() == refusals);
  CHECK(attn::bundleNames() == kRegistered);
  CHECK(attnc_bundle_register("sized-c", nullptr, 0, 3) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(attn::cApiLastError().rfind("bundle sized-c: compiled with entries of 3 bytes", 0) == 0);
  CHECK(attnc_bundle_register("", cEntries, 1, sizeof cEntries[0]) ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(attn::cApiLastError() == "bundle (no name): no name; its kernels are not used");
  // An entry the runtime could never find: its spec not in canonical form, or
  // its architecture not its target's (attnc aot writes neither).
  const attnc_bundle_entry uncanonical[] = {
      {"mode=prefill,head_dim=64,mask=causal,target=sm_80", "sm_80", bytes(viaC), viaC.size(), 128,
       4096, 0, 0, 0, nullptr, 0, kParams},
  };
  CHECK(attnc_bundle_register("uncanonical-c", uncanonical, 1, sizeof uncanonical[0]) ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(attn::cApiLastError() ==
        "bundle uncanonical-c: entry 0 (mode=prefill,head_dim=64,mask=causal,target=sm_80): the "
        "spec is not in canonical form (" +
            std::string(kCausalSm80) + "); its kernels are not used");
  const attnc_bundle_entry otherArch[] = {
      {kCausalSm80, "sm_90a", bytes(viaC), viaC.size(), 128, 4096, 0, 0, 0, nullptr, 0, kParams},
  };
  CHECK(attnc_bundle_register("arch-c", otherArch, 1, sizeof otherArch[0]) ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(attn::cApiLastError() == "bundle arch-c: entry 0 (" + std::string(kCausalSm80) +
                                     "): architecture sm_90a for a spec of target sm_80 (attnc "
                                     "aot writes the target's); its kernels are not used");
  // A name with a line end or an escape would make its messages more lines,
  // or color a terminal: refused, and shown escaped.
  CHECK(attnc_bundle_register("two\nlines\x1b[31m", cEntries, 1, sizeof cEntries[0]) ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(attn::cApiLastError() ==
        "bundle two\\x0alines\\x1b[31m: the name has a control character (byte 3; attnc aot "
        "--name takes letters, digits and _); its kernels are not used");
  const attnc_bundle_entry doubled[] = {cEntries[0], cEntries[0]};
  CHECK(attnc_bundle_register("doubled-c", doubled, 2, sizeof doubled[0]) ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(attn::cApiLastError() == "bundle doubled-c: entry 1 is the kernel of entry 0 again (sm_80 " +
                                     std::string(kCausalSm80) + "); its kernels are not used");
  CHECK(attnc_bundle_register("huge-c", cEntries, SIZE_MAX / 64, sizeof cEntries[0]) ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(attn::cApiLastError() == "bundle huge-c: " + std::to_string(SIZE_MAX / 64) +
                                     " entries do not fit in memory (a wrong count); its "
                                     "kernels are not used");
  CHECK(attn::bundleNames() == kRegistered);
}
