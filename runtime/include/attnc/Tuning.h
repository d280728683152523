//===- Tuning.h - The tuning table: tile sizes measured best on this machine -*- C++ -*-===//
//
// `attnc tune` times candidate tile sizes (and pipeline depths) of a spec on
// the GPU and records the winner here; once installed, a spec that leaves
// tile_q and tile_kv open takes the recorded sizes, and the recorded stages
// unless it sets its own (attn::applyDefaultTiles). The file is text, one
// entry per line:
//
//   # comment
//   <tuningKey of the spec>: tile_q=<n>,tile_kv=<n>[,stages=<n>]   # what was measured
//
// Written to a temporary file and renamed, so a reader never sees half a
// table. The default file is $ATTNC_TUNING_FILE, else tuning.txt in the
// kernel cache directory.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_TUNING_H
#define ATTNC_TUNING_H

#include "attn/Spec.h"

#include <map>
#include <string>

namespace attn {

class TuningTable {
public:
  struct Entry {
    TunedTiles tiles;
    std::string note; ///< e.g. the measured speed-up, kept as a comment
  };

  /// $ATTNC_TUNING_FILE, else tuning.txt in the kernel cache directory; ""
  /// when there is neither.
  static std::string defaultPath();

  /// Reads `path`. A missing file is an empty table (true), and so is one
  /// behind a folder this user cannot search, unless `given` (installDefault
  /// passes it for a path ATTNC_TUNING_FILE names: a table meant may be there). One that is
  /// there but cannot be read, is not a regular file or is over 16 MiB makes
  /// it false with `error` saying so, as does a line that is not
  /// `key: tile_q=N,tile_kv=N[,stages=N]` (or whose values make no valid
  /// spec), named with its number; then nothing is loaded.
  bool load(const std::string &path, std::string &error, bool given = false);
  /// Writes the whole table (temporary file, then rename).
  bool save(const std::string &path, std::string &error) const;
  /// Records one entry in the table at `path`: under a lock (a file beside
  /// it, "<path>.lock"), reads the table as it is now, sets the entry and
  /// saves it, so that tuners sharing one table keep each other's entries.
  static bool record(const std::string &path, const Spec &spec, TunedTiles tiles,
                     const std::string &note, std::string &error);

  const Entry *find(const Spec &spec) const;
  void set(const Spec &spec, TunedTiles tiles, const std::string &note);
  size_t size() const { return entries_.size(); }

  /// Makes `table` the one applyDefaultTiles consults (nullptr: none). The
  /// table must outlive its installation.
  static void install(const TuningTable *table);
  /// Loads the default file and installs it for the life of the process,
  /// the first time it is called (later calls return the first outcome);
  /// "" on success (also when there is no file), else the problem (the
  /// built-in defaults stay in force), which the first call also writes to
  /// stderr as a warning.
  static std::string installDefault();

private:
  std::map<std::string, Entry> entries_;
};

} // namespace attn

#endif // ATTNC_TUNING_H
