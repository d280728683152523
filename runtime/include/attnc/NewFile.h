//===- NewFile.h - A file made anew, written whole ---------------*- C++ -*-===//
//
// Files that are renamed into place (kernel cache entries, the tuning table,
// the tools' outputs) are first written under a temporary name beside their
// target. That name is made anew: never a file that is there, nor through a
// link someone put at it, so that a shared folder cannot make us write
// elsewhere. The tools' outputs write through writeAndClose too.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_RUNTIME_NEWFILE_H
#define ATTNC_RUNTIME_NEWFILE_H

#include <cerrno>
#include <fcntl.h>
#include <initializer_list>
#include <string>
#include <string_view>
#include <unistd.h>

namespace attn {

/// Writes `parts`, in order, to the open file `fd` and closes it. Returns 0,
/// or the errno of the first write (or the close) that failed.
inline int writeAndClose(int fd, std::initializer_list<std::string_view> parts) {
  int failure = 0;
  for (std::string_view part : parts)
    for (size_t done = 0; !failure && done < part.size();) {
      const ssize_t n = ::write(fd, part.data() + done, part.size() - done);
      if (n > 0)
        done += static_cast<size_t>(n);
      else if (n == 0 || errno != EINTR)
        failure = n == 0 ? EIO : errno; // (a write that takes nothing gives no reason)
    }
  if (::close(fd) != 0 && !failure)
    failure = errno;
  return failure;
}

/// Writes `parts`, in order, to a new file `path` (O_EXCL, no link followed;
/// a file of that name left by a writer that died is removed first). Returns
/// 0, or the errno of what failed; a file it made is removed then.
inline int writeNewFile(const std::string &path, std::initializer_list<std::string_view> parts) {
  auto create = [&] {
    return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  };
  int fd = create();
  if (fd < 0 && errno == EEXIST && ::unlink(path.c_str()) == 0)
    fd = create();
  if (fd < 0)
    return errno;
  const int failure = writeAndClose(fd, parts);
  if (failure)
    ::unlink(path.c_str());
  return failure;
}

} // namespace attn

#endif // ATTNC_RUNTIME_NEWFILE_H
