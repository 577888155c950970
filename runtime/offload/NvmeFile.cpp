//===- NvmeFile.cpp - A tensor's bytes in a file on an NVMe path ----------===//

#include "offload/NvmeFile.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace zeroc::runtime {

namespace {
Diagnostic ioError(const std::string &path, const std::string &what,
                   int error) {
  return Diagnostic{path, 0, 0, what + ": " + std::strerror(error)};
}
} // namespace

std::shared_ptr<char> allocateIoBuffer(int64_t bytes) {
  size_t size = size_t(ioBytes(std::max<int64_t>(bytes, 1)));
  char *p = static_cast<char *>(std::aligned_alloc(kDirectIoAlignment, size));
  if (!p)
    throw std::bad_alloc();
  std::memset(p, 0, size);
  return std::shared_ptr<char>(p, [](char *q) { std::free(q); });
}

Expected<std::unique_ptr<NvmeFile>> NvmeFile::create(const std::string &dir,
                                                     const std::string &name,
                                                     int64_t bytes,
                                                     bool tryDirect) {
  std::unique_ptr<NvmeFile> f(new NvmeFile);
  f->filePath = dir + "/" + name;
  f->size = bytes;
  int flags = O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC;
#ifdef O_DIRECT
  if (tryDirect) {
    f->fd = ::open(f->filePath.c_str(), flags | O_DIRECT, 0600);
    f->isDirect = f->fd >= 0;
    // EINVAL: the filesystem does not take O_DIRECT; buffered below.
    if (f->fd < 0 && errno != EINVAL)
      return ioError(f->filePath, "cannot create the NVMe swap file", errno);
  }
#endif
  if (f->fd < 0)
    f->fd = ::open(f->filePath.c_str(), flags, 0600);
  if (f->fd < 0)
    return ioError(f->filePath, "cannot create the NVMe swap file", errno);
  if (::ftruncate(f->fd, ioBytes(bytes)) != 0)
    return ioError(f->filePath,
                   "cannot size the NVMe swap file to " +
                       std::to_string(ioBytes(bytes)) + " bytes",
                   errno);
  return f;
}

NvmeFile::~NvmeFile() {
  if (fd >= 0) {
    ::close(fd);
    ::unlink(filePath.c_str());
  }
}

Expected<Done> NvmeFile::read(void *buffer) const {
  int64_t total = ioBytes(size), done = 0;
  while (done < total) {
    ssize_t n = ::pread(fd, static_cast<char *>(buffer) + done,
                        size_t(total - done), off_t(done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return ioError(filePath, "cannot read the NVMe swap file", errno);
    if (n == 0)
      return Diagnostic{filePath, 0, 0,
                        "the NVMe swap file ends after " +
                            std::to_string(done) + " of " +
                            std::to_string(total) + " bytes"};
    done += n;
  }
  readTotal += total;
  return Done{};
}

Expected<Done> NvmeFile::write(const void *buffer) {
  int64_t total = ioBytes(size), done = 0;
  while (done < total) {
    ssize_t n = ::pwrite(fd, static_cast<const char *>(buffer) + done,
                         size_t(total - done), off_t(done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return ioError(filePath, "cannot write the NVMe swap file",
                     n < 0 ? errno : EIO);
    done += n;
  }
  writeTotal += total;
  return Done{};
}

} // namespace zeroc::runtime
