//===- PermissionTest.cpp - Files this user may not read or write ----------===//
//
// The refusals that depend on permissions: a tuning table that cannot be
// read must not read as an empty one (the next `attnc tune` would save over
// it), a folder on the way that cannot be searched is no table, a kernel
// cache that cannot be written keeps kernels in memory and says so, a bundle
// folder whose manifest cannot be read is named with the system's reason.
// Root reads and writes everything, so a process running as root (as CI
// does) checks them in a child that gives root up for the user nobody.
//
//===----------------------------------------------------------------------===//

#include "attnc/BundleFolder.h"
#include "attnc/KernelCache.h"
#include "attnc/Tuning.h"

#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {
using namespace attn;

/// The user and group the child becomes: nobody and nogroup.
constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;

/// Runs `check` as a user without root's rights; returns what it found wrong
/// ("" for nothing). As root, in a child that drops to nobody first (its
/// answer comes back through a pipe); otherwise in this process.
std::string asOrdinaryUser(const std::function<std::string()> &check) {
  if (::geteuid() != 0)
    return check();
  int fds[2];
  if (::pipe(fds) != 0)
    return std::string("pipe: ") + std::strerror(errno);
  const pid_t pid = ::fork();
  if (pid < 0)
    return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) {
    ::close(fds[0]);
    std::string why;
    if (::setgroups(0, nullptr) != 0 || ::setgid(kNogroup) != 0 || ::setuid(kNobody) != 0)
      why = std::string("cannot give up root for nobody: ") + std::strerror(errno);
    else if (::geteuid() == 0)
      why = "still root after setuid";
    else {
      try {
        why = check();
      } catch (const std::exception &e) {
        why = std::string("exception: ") + e.what();
      }
    }
    for (size_t at = 0; at < why.size();) {
      const ssize_t n = ::write(fds[1], why.data() + at, why.size() - at);
      if (n <= 0)
        break;
      at += static_cast<size_t>(n);
    }
    ::_exit(0); // no atexit handlers, no Catch2 report from the child
  }
  ::close(fds[1]);
  std::string got;
  char buf[1024];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      break;
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    got += "; the child ended with status " + std::to_string(status);
  return got;
}

/// Collects the differences a check finds.
struct Findings {
  std::string text;
  void expect(bool ok, const std::string &what) {
    if (!ok)
      text += (text.empty() ? "" : "; ") + what;
  }
  void expectEqual(const std::string &got, const std::string &want) {
    expect(got == want, "got \"" + got + "\", want \"" + want + "\"");
  }
};

/// A folder of this test's own, which nobody can search (mode 0755).
struct Scratch {
  std::string dir = "/tmp/attnc-permission-test-" + std::to_string(::getpid());
  Scratch() {
    std::system(("rm -rf '" + dir + "'").c_str());
    REQUIRE(::mkdir(dir.c_str(), 0755) == 0);
  }
  ~Scratch() {
    std::system(("chmod -R u+rwx '" + dir + "' 2>/dev/null; rm -rf '" + dir + "'").c_str());
  }
  std::string path(const std::string &name) const { return dir + "/" + name; }
  void write(const std::string &name, const std::string &text, mode_t mode) const {
    { std::ofstream(path(name)) << text; }
    REQUIRE(::chmod(path(name).c_str(), mode) == 0);
  }
  void folder(const std::string &name, mode_t mode) const {
    REQUIRE(::mkdir(path(name).c_str(), 0755) == 0);
    REQUIRE(::chmod(path(name).c_str(), mode) == 0);
  }
};

const std::string kDenied = std::strerror(EACCES);
} // namespace

TEST_CASE("a tuning table this user cannot read is an error, not an empty table",
          "[permission]") {
  Scratch s;
  s.write("table.txt", "", 0000);
  s.folder("locked", 0755);
  s.write("locked/table.txt", "", 0644);
  REQUIRE(::chmod(s.path("locked").c_str(), 0000) == 0);
  s.folder("readonly", 0555);
  const std::string why = asOrdinaryUser([&] {
    Findings f;
    TuningTable table;
    std::string error;
    // There but not readable: refused with the reason.
    f.expect(!table.load(s.path("table.txt"), error), "an unreadable table loaded");
    f.expectEqual(error, s.path("table.txt") + " cannot be read (" + kDenied + ")");
    // Behind a folder this user cannot search: no table of theirs is there.
    error.clear();
    f.expect(table.load(s.path("locked/table.txt"), error),
             "a table behind an unsearchable folder was refused: " + error);
    f.expect(table.size() == 0, "a table behind an unsearchable folder has entries");
    // Unless the path was named (ATTNC_TUNING_FILE): then it is said.
    f.expect(!table.load(s.path("locked/table.txt"), error, /*given=*/true),
             "a named table behind an unsearchable folder loaded");
    f.expectEqual(error, s.path("locked/table.txt") + " cannot be reached (" + kDenied +
                             ": this user cannot search a folder on the way)");
    // Nor saved, nor recorded, where this user cannot write.
    SpecResult spec = parseSpec("mask=causal");
    if (!spec)
      return std::string("the spec does not parse");
    table.set(*spec.spec, {64, 64}, "");
    f.expect(!table.save(s.path("readonly/table.txt"), error), "saved into a read-only folder");
    const std::string unwritten = "cannot write the tuning table " + s.path("readonly/table.txt");
    f.expect(error.rfind(unwritten + " (", 0) == 0 && error.find(kDenied) != std::string::npos,
             "save said: " + error);
    f.expect(!TuningTable::record(s.path("readonly/table.txt"), *spec.spec, {64, 64}, "", error),
             "recorded into a read-only folder");
    f.expectEqual(error, "cannot lock the tuning table " + s.path("readonly/table.txt") + " (" +
                             s.path("readonly/table.txt.lock") + ": " + kDenied + ")");
    return f.text;
  });
  CHECK(why == "");
  // Nothing was written in their place.
  struct stat st;
  CHECK(::stat(s.path("readonly/table.txt").c_str(), &st) != 0);
}

TEST_CASE("a kernel cache this user cannot write or read is said, and kept in memory",
          "[permission]") {
  Scratch s;
  s.folder("readonly", 0555);
  s.folder("locked", 0000);
  // Listed but not searchable (r, no x): its entries cannot be looked at.
  const std::string entry = "attn_x-sm_90a-0123456789abcdef0123456789abcdef.cubin";
  s.folder("unsearchable", 0755);
  s.write("unsearchable/" + entry, "x", 0644);
  REQUIRE(::chmod(s.path("unsearchable").c_str(), 0744) == 0);
  const std::string why = asOrdinaryUser([&] {
    Findings f;
    // A folder that is there but read-only, and one that cannot be made.
    for (const std::string &dir : {s.path("readonly"), s.path("readonly/cache")}) {
      KernelCache cache(dir);
      f.expect(!cache.onDisk(), dir + " was taken for a disk cache");
      f.expectEqual(cache.warning(), "attnc: the kernel cache directory " + dir +
                                         " cannot be written (" + kDenied +
                                         "): compiled kernels stay in memory only");
    }
    // A folder that cannot be listed is said, not shown as empty.
    std::string error;
    f.expect(KernelCache::list(s.path("locked"), &error).empty(), "listed an unreadable folder");
    f.expectEqual(error, s.path("locked") + " cannot be read: " + kDenied);
    error.clear();
    f.expect(KernelCache::list(s.path("unsearchable"), &error).empty(),
             "listed an entry of an unsearchable folder");
    f.expectEqual(error, "1 file named like an entry cannot be read, and is left out (" + entry +
                             ": " + kDenied + ")");
    return f.text;
  });
  CHECK(why == "");
}

TEST_CASE("a bundle folder whose manifest this user cannot read is named with the reason",
          "[permission]") {
  Scratch s;
  s.folder("bundle", 0755);
  s.write("bundle/manifest.txt", "attnc-bundle 1 x\n", 0000);
  const std::string why = asOrdinaryUser([&] {
    Findings f;
    LoadedBundle loaded;
    std::string error;
    f.expect(!loadBundleFolder(s.path("bundle"), loaded, error), "an unreadable bundle loaded");
    f.expectEqual(error, s.path("bundle/manifest.txt") + " cannot be read (" + kDenied + ")");
    return f.text;
  });
  CHECK(why == "");
}
