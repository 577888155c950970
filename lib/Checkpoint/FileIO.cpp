//===- FileIO.cpp - Durable file writes and checked reads -----------------===//

#include "zeroc/Checkpoint/FileIO.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace zeroc {

const char *writeStepName(WriteStep step) {
  switch (step) {
  case WriteStep::TempPartlyWritten:
    return "temporary file partly written";
  case WriteStep::TempWritten:
    return "temporary file written";
  case WriteStep::TempSynced:
    return "temporary file synced";
  case WriteStep::Renamed:
    return "renamed";
  }
  return "?";
}

Diagnostic fileError(const std::string &path, const std::string &what,
                     int err) {
  return Diagnostic{path, 0, 0, what + ": " + std::strerror(err)};
}

//===----------------------------------------------------------------------===//
// FileHandle
//===----------------------------------------------------------------------===//

FileHandle &FileHandle::operator=(FileHandle &&other) noexcept {
  if (this != &other) {
    close();
    fd = other.fd;
    filePath = std::move(other.filePath);
    other.fd = -1;
  }
  return *this;
}

void FileHandle::close() {
  if (fd >= 0)
    ::close(fd);
  fd = -1;
}

Expected<FileHandle> FileHandle::openForReading(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return fileError(path, "cannot open for reading", errno);
  return FileHandle(fd, path);
}

Expected<uint64_t> FileHandle::size() const {
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return fileError(filePath, "cannot stat", errno);
  return static_cast<uint64_t>(st.st_size);
}

Expected<Done> FileHandle::readAt(uint64_t offset, void *out, size_t n) const {
  auto *p = static_cast<char *>(out);
  size_t done = 0;
  while (done < n) {
    ssize_t got = ::pread(fd, p + done, n - done, offset + done);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      return fileError(filePath, "cannot read", errno);
    if (got == 0)
      return Diagnostic{
          filePath, 0, 0,
          "unexpected end of file: needed bytes [" + std::to_string(offset) +
              ", " + std::to_string(offset + n) + "), the file ends at byte " +
              std::to_string(offset + done)};
    done += static_cast<size_t>(got);
  }
  return Done{};
}

//===----------------------------------------------------------------------===//
// Directories
//===----------------------------------------------------------------------===//

std::string joinPath(const std::string &dir, const std::string &name) {
  if (dir.empty())
    return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

static std::string parentDirectory(const std::string &path) {
  size_t end = path.size();
  while (end > 1 && path[end - 1] == '/')
    --end;
  size_t slash = path.rfind('/', end - 1);
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool pathExists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

Expected<Done> syncDirectory(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return fileError(path, "cannot open directory to sync it", errno);
  FileHandle handle(fd, path);
  // Some file systems cannot fsync a directory (EINVAL); their renames are
  // as durable as they get.
  if (::fsync(fd) != 0 && errno != EINVAL)
    return fileError(path, "cannot sync directory", errno);
  return Done{};
}

Expected<Done> makeDirectories(const std::string &path) {
  if (path.empty())
    return Done{};
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      return Diagnostic{path, 0, 0, "exists and is not a directory"};
    return Done{};
  }
  std::string parent = parentDirectory(path);
  if (parent != path) {
    auto made = makeDirectories(parent);
    if (!made)
      return made;
  }
  // Another rank may create it at the same moment: EEXIST is success.
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    return fileError(path, "cannot create directory", errno);
  return syncDirectory(parent);
}

//===----------------------------------------------------------------------===//
// Atomic writes
//===----------------------------------------------------------------------===//

static Expected<Done> writeAll(int fd, const std::string &path,
                               const void *data, size_t n, int64_t offset) {
  auto *p = static_cast<const char *>(data);
  size_t done = 0;
  while (done < n) {
    ssize_t put = offset < 0 ? ::write(fd, p + done, n - done)
                             : ::pwrite(fd, p + done, n - done,
                                        offset + static_cast<int64_t>(done));
    if (put < 0 && errno == EINTR)
      continue;
    if (put < 0)
      return fileError(path, "cannot write", errno);
    done += static_cast<size_t>(put);
  }
  return Done{};
}

AtomicFileWriter &
AtomicFileWriter::operator=(AtomicFileWriter &&other) noexcept {
  if (this != &other) {
    if (!finished && !temp.empty())
      ::unlink(temp.c_str());
    file = std::move(other.file);
    target = std::move(other.target);
    temp = std::move(other.temp);
    hooks = std::move(other.hooks);
    written = other.written;
    finished = other.finished;
    other.finished = true;
  }
  return *this;
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!finished && !temp.empty()) {
    file.close();
    ::unlink(temp.c_str());
  }
}

Expected<AtomicFileWriter>
AtomicFileWriter::create(const std::string &finalPath,
                         const WriteHooks &hooks) {
  AtomicFileWriter w;
  w.target = finalPath;
  // One temporary name per final name: a retry after a crash truncates the
  // debris instead of adding to it.
  w.temp = finalPath + ".tmp";
  w.hooks = hooks;
  int fd =
      ::open(w.temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    Diagnostic d = fileError(w.temp, "cannot create", errno);
    w.temp.clear();
    return d;
  }
  w.file = FileHandle(fd, w.temp);
  return w;
}

Expected<Done> AtomicFileWriter::write(const void *data, size_t n) {
  auto ok = writeAll(file.descriptor(), temp, data, n, -1);
  if (ok)
    written += n;
  return ok;
}

Expected<Done> AtomicFileWriter::writeAt(uint64_t offset, const void *data,
                                         size_t n) {
  return writeAll(file.descriptor(), temp, data, n,
                  static_cast<int64_t>(offset));
}

Expected<Done> AtomicFileWriter::crashIf(WriteStep step) {
  if (!hooks.crashAt || !hooks.crashAt(target, step))
    return Done{};
  if (step == WriteStep::TempPartlyWritten &&
      ::ftruncate(file.descriptor(), static_cast<off_t>(written / 2)) != 0)
    return fileError(temp, "cannot truncate", errno);
  file.close();
  finished = true; // a crashed process cleans nothing up
  return Diagnostic{target, 0, 0,
                    std::string("injected crash: ") + writeStepName(step)};
}

Expected<Done> AtomicFileWriter::commit() {
  for (WriteStep step : {WriteStep::TempPartlyWritten, WriteStep::TempWritten})
    if (auto crashed = crashIf(step); !crashed)
      return crashed;
  if (::fsync(file.descriptor()) != 0)
    return fileError(temp, "cannot sync", errno);
  if (auto crashed = crashIf(WriteStep::TempSynced); !crashed)
    return crashed;
  file.close();
  if (::rename(temp.c_str(), target.c_str()) != 0)
    return fileError(target, "cannot rename " + temp + " to it", errno);
  finished = true;
  if (auto crashed = crashIf(WriteStep::Renamed); !crashed)
    return crashed;
  return syncDirectory(parentDirectory(target));
}

Expected<Done> writeFileAtomically(const std::string &path,
                                   const std::string &content,
                                   const WriteHooks &hooks) {
  auto writer = AtomicFileWriter::create(path, hooks);
  if (!writer)
    return writer.error();
  if (auto ok = writer->write(content.data(), content.size()); !ok)
    return ok;
  return writer->commit();
}

Expected<std::string> readWholeFile(const std::string &path) {
  auto file = FileHandle::openForReading(path);
  if (!file)
    return file.error();
  auto size = file->size();
  if (!size)
    return size.error();
  std::string text(*size, '\0');
  if (auto ok = file->readAt(0, text.data(), text.size()); !ok)
    return ok.error();
  return text;
}

} // namespace zeroc
