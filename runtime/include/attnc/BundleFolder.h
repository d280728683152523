//===- BundleFolder.h - AOT bundle folders: the manifest, loaded at run time -*- C++ -*-===//
//
// `attnc aot` writes a bundle folder: cubins/, manifest.txt (one line per
// kernel: its spec, launch shape, cubin file, size and checksum) and
// bundle.cpp. An application compiles bundle.cpp in (attnc/Bundle.h); a
// program that does not (Python, the C API's attnc_bundle_load) loads the
// folder instead: loadBundleFolder reads the manifest,
// checks each cubin against its size and checksum and that it defines the
// kernels its spec names, and registers the kernels
// with the same registry, so attn::Runtime finds them before NVRTC.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_BUNDLEFOLDER_H
#define ATTNC_BUNDLEFOLDER_H

#include <cstddef>
#include <cstdint>
#include <istream>
#include <string>
#include <vector>

namespace attn {

/// The manifest's format: its second line is "# manifest <N>: <columns>".
/// Format 2 added the launch shape's cluster_merge, pair_shared_bytes and
/// params_bytes (what loading a folder needs); a format 1 manifest can be
/// verified but not loaded.
constexpr int kManifestFormat = 2;

/// One kernel's line of manifest.txt.
struct ManifestLine {
  std::string arch, spec, cubin;                   ///< cubin: the file, relative to the folder
  long long threads = 0, shared_bytes = 0, merge_threads = 0;
  long long cluster_merge = 0, pair_shared_bytes = 0, params_bytes = 0; ///< format 2
  long long registers = 0, spill_bytes = 0;
  long long bytes = 0;                              ///< the cubin's size
  std::string fnv1a;                                ///< its checksum, hex
  std::string pair_cubin, pair_fnv1a;               ///< empty: no pair kernel
  long long pair_bytes = 0;
};

/// The columns of `format`'s lines, as the manifest's second line names them.
std::string manifestColumns(int format = kManifestFormat);

/// The line of `m` in the current format (no newline).
std::string formatManifestLine(const ManifestLine &m);

/// Parses one non-comment line of a manifest of `format` (1 or 2). False
/// when a column is missing, is not a number where one belongs, or there is
/// text after the last.
bool parseManifestLine(const std::string &line, int format, ManifestLine &out);

/// Why `line` does not parse as a line of `format` (1 or 2): the first
/// column that must be a number and is not, else how many columns it has
/// against how many the format names.
std::string manifestLineProblem(const std::string &line, int format);

/// The format a manifest's second line declares ("# manifest 2: " and the
/// columns as manifestColumns(2) names them; a later format's number with any
/// columns); 1 for a manifest without that line (written before formats were
/// numbered: "# " and format 1's columns), 0 when `line` is none of these.
int manifestFormat(const std::string &secondLine);

/// A manifest's first two lines: the bundle's name and the number of kernels
/// (line 1, "# attnc X.Y.Z AOT bundle 'NAME': N kernels"), the format (line 2).
struct ManifestHead {
  std::string name;
  long long kernels = 0;
  int format = 0;
};

/// Reads a manifest's first two lines from `in`, leaving it at the third.
/// False with `why` starting with the line's number ("1: ...", "2: ...")
/// when they are not what `attnc aot` writes (a format this attnc does not
/// read is not an error here).
bool readManifestHead(std::istream &in, ManifestHead &out, std::string &why);

/// A manifest line as read from a file: its trailing CR and blanks removed;
/// true when it is a kernel line (not blank, not a comment).
bool manifestKernelLine(std::string &line);

/// Why a parsed kernel line cannot be loaded, or "": its spec valid, GPU and
/// canonical, its architecture the spec's target's, its launch sizes in the
/// ranges a launch takes (format 2's own columns only for format 2), a pair
/// cubin listed exactly where the shape has a pair kernel, and its cubin
/// paths inside the folder.
std::string checkManifestLine(const ManifestLine &m, int format);

/// Reads the cubin `file` (a path in the bundle folder `dir`) that the
/// manifest gives `bytes` bytes and checksum `sum`: at most bytes + 1 bytes
/// of a regular file. False with `why` naming `file` (missing, not a file,
/// unreadable and why, corrupted with the sizes and checksums).
bool readManifestCubin(const std::string &dir, const std::string &file, long long bytes,
                       const std::string &sum, std::vector<unsigned char> &out, std::string &why);

/// Why the cubins of the kernel line `m` (its cubin, and its pair cubin
/// when it lists one) cannot be launched as the line says, or "": checkBundledCubins
/// (attnc/Cubin.h) with the line's spec and launch shape, each cubin named
/// by its path. The kernels are named after the whole spec
/// (Spec::symbol()), so a spec edited on a line after its cubin was built is
/// refused here, on any machine, instead of when the GPU looks the kernel up
/// by name; and each cubin says the launch shape its kernels were emitted
/// for, so an edited launch column is refused too. `m` has passed
/// checkManifestLine (of `format`: format 1's lines have three columns
/// of the shape).
std::string checkCubinKernels(const ManifestLine &m, int format,
                              const std::vector<unsigned char> &cubin,
                              const std::vector<unsigned char> &pairCubin);

/// Up to `most` bytes of the regular file at `path` into `out`, read without
/// waiting on what is not one: false with errno's value in `err` (EISDIR for
/// a folder or anything else that is not a regular file: a FIFO would block
/// the read, a device never end it). Held to the file it opened: one swapped
/// in at the name after a check is not read.
bool readRegularFile(const std::string &path, size_t most, std::vector<unsigned char> &out,
                     int &err);
/// `what` and what readRegularFile's `err` means for it: " is missing",
/// " is not a file" or " cannot be read (the system's reason)".
std::string unreadableFile(const std::string &what, int err);
/// The most of a manifest that is read (64 MiB: ~200k kernel lines); a
/// longer one is refused.
constexpr size_t kManifestMaxBytes = size_t(1) << 26;

/// 64-bit FNV-1a (offset basis 14695981039346656037), the manifest's
/// checksum of each cubin, as 16 hex digits.
std::string fnv1aHex(const void *bytes, size_t size);
/// Whether `sum` is the manifest checksum of the bytes: fnv1aHex's (64-bit
/// FNV-1a, 16 hex digits), or the one manifests were written with before
/// (an offset basis one digit short, no leading zeros), which still reads.
bool checksumMatches(const void *bytes, size_t size, const std::string &sum);

/// What loadBundleFolder found.
struct LoadedBundle {
  std::string name;   ///< the bundle's name (from the manifest's first line)
  size_t kernels = 0; ///< kernels the folder holds (every architecture)
  bool again = false; ///< this folder was loaded before: nothing new registered
};

/// Registers the kernels of the bundle folder `dir` (manifest.txt and the
/// cubins it lists; bundle.cpp is not read) for every attn::Runtime of the
/// process. All or nothing: a manifest that does not parse, a missing or
/// corrupted cubin, a cubin that does not define the kernels its line's
/// spec names (checkCubinKernels), kernels built for other launch arguments than this
/// runtime passes, or a bundle name already registered with another manifest
/// is an error naming the file and line (the last two: the folder) and
/// registers nothing. Loading the same
/// bundle again (the same manifest, from this folder or a copy, or the folder
/// of a bundle linked into the program, its kernels byte for byte) is not an
/// error and registers nothing new; loading the folder after it was rebuilt
/// is an error (the process keeps the kernels it loaded first). The kernels
/// stay registered, and their cubins in memory, for the rest of the program.
bool loadBundleFolder(const std::string &dir, LoadedBundle &out, std::string &error);

} // namespace attn

#endif // ATTNC_BUNDLEFOLDER_H
