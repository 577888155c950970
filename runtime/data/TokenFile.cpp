//===- TokenFile.cpp - Token files of zeroc, nanoGPT, llm.c, Megatron -----===//

#include "data/TokenFile.h"

#include "kernels/KernelTypes.h"
#include "zeroc/Support/Format.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace zeroc::runtime {

static Diagnostic fileError(const std::string &path, const std::string &msg) {
  return Diagnostic{path, 0, 0, msg};
}

static bool isFile(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

/// 2 or 4 for a headerless *.u16 / *.u32 path, 0 otherwise.
static int rawWidth(const std::string &path) {
  if (endsWith(path, ".u16"))
    return 2;
  if (endsWith(path, ".u32"))
    return 4;
  return 0;
}

static uint64_t littleEndian(const unsigned char *p, int bytes) {
  uint64_t v = 0;
  for (int b = bytes - 1; b >= 0; --b)
    v = v << 8 | p[b];
  return v;
}

static int32_t int32At(const unsigned char *p) {
  return int32_t(uint32_t(littleEndian(p, 4)));
}

/// The llm.c header's token width for (magic, version); 0 if unknown.
static int llmcWidth(int32_t magic, int32_t version) {
  if (magic == kLlmcMagicGpt2 && version == 1)
    return 2;
  if (magic == kLlmcMagicLlama3 && version == 7)
    return 4;
  return 0;
}

static bool isLlmcMagic(int32_t magic) {
  return magic == kLlmcMagicGpt2 || magic == kLlmcMagicLlama3;
}

/// Whether `bytes` start with a complete, consistent llm.c header: known
/// magic and version and a token count that gives exactly the file size.
static bool isCompleteLlmcHeader(const unsigned char *bytes, int64_t size) {
  if (size < kLlmcHeaderBytes)
    return false;
  int width = llmcWidth(int32At(bytes), int32At(bytes + 4));
  int64_t n = int32At(bytes + 8);
  return width && n >= 0 && kLlmcHeaderBytes + n * width == size;
}

/// Whether `bytes` start with a complete, consistent ZTOK header.
static bool isCompleteZtokHeader(const unsigned char *bytes, int64_t size) {
  if (size < kTokenFileHeaderBytes ||
      std::memcmp(bytes, kTokenFileMagic, 4) != 0)
    return false;
  int version = int(littleEndian(bytes + 4, 2));
  int width = int(littleEndian(bytes + 6, 2));
  return version == kTokenFileVersion && (width == 2 || width == 4) &&
         (size - kTokenFileHeaderBytes) % width == 0;
}

/// The first bytes of a file, for messages: "47 50 54 32".
static std::string firstBytes(const unsigned char *bytes, int64_t size) {
  std::string s;
  char buf[4];
  for (int64_t i = 0; i < std::min<int64_t>(size, 4); ++i) {
    std::snprintf(buf, sizeof buf, "%02x", bytes[i]);
    s += (i ? " " : "") + std::string(buf);
  }
  return s.empty() ? "an empty file" : "bytes " + s;
}

//===----------------------------------------------------------------------===//
// TokenFile
//===----------------------------------------------------------------------===//

const char *TokenFile::formatName(Format f) {
  switch (f) {
  case Format::Ztok:
    return "ZTOK";
  case Format::Llmc:
    return "llm.c";
  case Format::Megatron:
    return "Megatron indexed dataset";
  case Format::NanoGpt:
    return "nanoGPT (headerless uint16 .bin)";
  case Format::HeaderlessU16:
    return "headerless uint16 (*.u16)";
  case Format::HeaderlessU32:
    return "headerless uint32 (*.u32)";
  }
  return "?";
}

std::optional<Diagnostic> TokenFile::mapFile(const std::string &file,
                                             void *&mapped, size_t &bytes) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return fileError(file, std::string("cannot open token file: ") +
                               std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fileError(file, "cannot open token file: not a regular file");
  }
  bytes = size_t(st.st_size);
  if (bytes > 0) {
    void *m = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return fileError(file, std::string("cannot map token file: ") +
                                 std::strerror(err));
    }
    mapped = m;
    ::madvise(m, bytes, MADV_RANDOM);
  }
  ::close(fd); // The mapping keeps the file.
  return std::nullopt;
}

/// A Megatron dataset PREFIX.bin + PREFIX.idx. The sequences must lie back
/// to back in the .bin, in index order, as IndexedDatasetBuilder writes
/// them: the stream is then the .bin itself, and the index gives the
/// document boundaries.
std::optional<Diagnostic> TokenFile::openMegatron(const std::string &prefix) {
  std::string idx = prefix + ".idx", bin = prefix + ".bin";
  kind = Format::Megatron;
  path = bin;
  if (auto e = mapFile(idx, indexMap, indexMapBytes))
    return e;
  if (auto e = mapFile(bin, map, mapBytes))
    return e;
  const auto *p = static_cast<const unsigned char *>(indexMap);
  int64_t size = int64_t(indexMapBytes);
  auto bad = [&](const std::string &msg) {
    return fileError(idx, "bad Megatron index: " + msg);
  };
  if (size < 9 || std::memcmp(p, kMegatronIndexMagic, 9) != 0)
    return bad("expected the magic 'MMIDIDX\\x00\\x00' at byte 0, found " +
               firstBytes(p, size));
  if (size < kMegatronIndexHeaderBytes)
    return bad("the header needs " + std::to_string(kMegatronIndexHeaderBytes) +
               " bytes, the file has " + std::to_string(size) +
               " (truncated file?)");
  uint64_t version = littleEndian(p + 9, 8);
  if (version != 1)
    return bad("version " + std::to_string(version) +
               " is not supported by this build, which reads version 1");
  int code = p[17];
  // Megatron's DType codes; 6 and 7 are float64 and float32.
  static const struct {
    int code, width;
    bool isSigned;
    const char *name;
  } kDtypes[] = {{1, 1, false, "uint8"}, {2, 1, true, "int8"},
                 {3, 2, true, "int16"},  {4, 4, true, "int32"},
                 {5, 8, true, "int64"},  {8, 2, false, "uint16"}};
  bool known = false;
  for (const auto &d : kDtypes)
    if (d.code == code) {
      tokenWidth = d.width;
      tokenSigned = d.isSigned;
      known = true;
    }
  if (!known)
    return bad("dtype code " + std::to_string(code) +
               (code == 6 || code == 7
                    ? std::string(code == 6 ? " (float64)" : " (float32)")
                    : std::string()) +
               " is not an integer token type; expected 1 (uint8), 2 (int8), "
               "3 (int16), 4 (int32), 5 (int64) or 8 (uint16)");
  uint64_t sequences = littleEndian(p + 18, 8);
  uint64_t documents = littleEndian(p + 26, 8);
  // 4 + 8 bytes per sequence, 8 per document index; sizes checked before
  // they are multiplied.
  uint64_t room = uint64_t(size - kMegatronIndexHeaderBytes);
  uint64_t need = 0;
  bool fits = sequences <= room / 12 && documents <= room / 8;
  if (fits) {
    need = sequences * 12 + documents * 8;
    fits = need <= room;
  }
  if (!fits)
    return bad(std::to_string(sequences) + " sequences and " +
               std::to_string(documents) + " document indices need " +
               (sequences <= room && documents <= room
                    ? std::to_string(kMegatronIndexHeaderBytes +
                                     int64_t(sequences * 12 + documents * 8))
                    : std::string("more")) +
               " bytes, the file has " + std::to_string(size) +
               " (truncated file?)");
  // Multimodal indices add one int8 mode per sequence.
  uint64_t extra = room - need;
  if (extra != 0 && extra != sequences)
    return bad(std::to_string(sequences) + " sequences and " +
               std::to_string(documents) + " document indices fill " +
               std::to_string(kMegatronIndexHeaderBytes + int64_t(need)) +
               " bytes, the file has " + std::to_string(size));
  const unsigned char *lengths = p + kMegatronIndexHeaderBytes;
  const unsigned char *pointers = lengths + 4 * sequences;
  const unsigned char *docIndex = pointers + 8 * sequences;
  const unsigned char *modes = docIndex + 8 * documents;
  if (extra)
    for (uint64_t i = 0; i < sequences; ++i)
      if (modes[i] != 0)
        return bad("sequence " + std::to_string(i) + " has mode " +
                   std::to_string(int(int8_t(modes[i]))) +
                   " (a multimodal dataset); only text (mode 0) is read");
  // Sequence pointers: byte offsets, back to back.
  std::vector<int64_t> sequenceStart(size_t(sequences) + 1, 0);
  int64_t binBytes = int64_t(mapBytes);
  for (uint64_t i = 0; i < sequences; ++i) {
    int32_t length = int32At(lengths + 4 * i);
    int64_t pointer = int64_t(littleEndian(pointers + 8 * i, 8));
    int64_t expected = sequenceStart[i] * tokenWidth;
    if (length < 0)
      return bad("sequence " + std::to_string(i) + " has length " +
                 std::to_string(length));
    if (pointer != expected)
      return bad("sequence " + std::to_string(i) + " starts at byte " +
                 std::to_string(pointer) + " of the .bin, expected " +
                 std::to_string(expected) +
                 " (sequences stored back to back, as Megatron's "
                 "IndexedDatasetBuilder writes them)");
    // int32 lengths, n <= the index size / 12: the sums fit in int64.
    sequenceStart[i + 1] = sequenceStart[i] + length;
  }
  int64_t tokensInIndex = sequenceStart[size_t(sequences)];
  if (tokensInIndex * tokenWidth != binBytes)
    return fileError(bin,
                     "the Megatron index " + idx +
                         " and its data file disagree: the index describes " +
                         std::to_string(sequences) + " sequences of " +
                         std::to_string(tokensInIndex * tokenWidth) +
                         " bytes, the .bin holds " + std::to_string(binBytes) +
                         " bytes");
  // Document indices: sequence indices from 0 to `sequences`, one more than
  // the number of documents.
  if (documents == 0)
    return bad("no document indices (expected at least the leading 0)");
  docStarts.clear();
  int64_t previous = 0;
  for (uint64_t j = 0; j < documents; ++j) {
    int64_t s = int64_t(littleEndian(docIndex + 8 * j, 8));
    if ((j == 0 && s != 0) || s < previous || s > int64_t(sequences))
      return bad("document index " + std::to_string(j) + " is " +
                 std::to_string(s) + "; expected " +
                 (j == 0 ? std::string("0")
                         : "a sequence index in [" + std::to_string(previous) +
                               ", " + std::to_string(sequences) + "]"));
    if (j + 1 < documents &&
        (docStarts.empty() || docStarts.back() != sequenceStart[size_t(s)]))
      docStarts.push_back(sequenceStart[size_t(s)]);
    previous = s;
  }
  if (previous != int64_t(sequences))
    return bad("the last document index is " + std::to_string(previous) +
               "; expected the sequence count " + std::to_string(sequences));
  if (docStarts.empty())
    docStarts.push_back(0);
  tokens = static_cast<const unsigned char *>(map);
  count = tokensInIndex;
  return std::nullopt;
}

Expected<std::unique_ptr<TokenFile>> TokenFile::open(const std::string &path,
                                                     bool lossMask) {
  Expected<std::unique_ptr<TokenFile>> file = openTokens(path);
  if (file && lossMask)
    if (auto e = (*file)->openLossMask())
      return *e;
  return file;
}

/// The loss mask: FILE.mask, one byte per token, 0 or 1; or FILE.labels,
/// one little-endian int32 per token, -100 or the token itself.
std::optional<Diagnostic> TokenFile::openLossMask() {
  bool bytes = isFile(path + ".mask"), labels = isFile(path + ".labels");
  if (bytes && labels)
    return fileError(path, "both " + path + ".mask and " + path +
                               ".labels exist: keep the one loss mask "
                               "--loss-mask should read");
  if (!bytes && !labels)
    return fileError(path + ".mask",
                     "cannot open the loss mask of " + path +
                         " (--loss-mask reads FILE.mask or FILE.labels beside "
                         "each token file): " +
                         std::strerror(ENOENT));
  maskIsLabels = labels;
  maskPath = path + (labels ? ".labels" : ".mask");
  if (auto e = mapFile(maskPath, maskMap, maskMapBytes))
    return e;
  int64_t width = labels ? 4 : 1;
  if (int64_t(maskMapBytes) != count * width)
    return fileError(maskPath,
                     "the loss mask has " + std::to_string(maskMapBytes) +
                         " bytes; its token file has " + std::to_string(count) +
                         (labels ? " tokens (one int32 label per token)"
                                 : " tokens (one byte per token)"));
  mask = static_cast<const unsigned char *>(maskMap);
  return std::nullopt;
}

std::optional<Diagnostic> TokenFile::readLossMask(int64_t begin, int64_t n,
                                                  uint8_t *out) const {
  if (!maskIsLabels) {
    std::memcpy(out, mask + begin, size_t(n));
    for (int64_t i = 0; i < n; ++i)
      if (out[i] > 1)
        return fileError(maskPath, "loss mask byte " +
                                       std::to_string(begin + i) + " is " +
                                       std::to_string(int(out[i])) +
                                       "; expected 0 (not in the loss) or 1");
    return std::nullopt;
  }
  std::vector<int64_t> ids(size_t(n), 0);
  read(begin, n, ids.data());
  for (int64_t i = 0; i < n; ++i) {
    int32_t label = int32At(mask + 4 * (begin + i));
    out[i] = label != kIgnoredTarget; // Hugging Face's -100.
    if (out[i] && label != ids[size_t(i)])
      return fileError(maskPath,
                       "label " + std::to_string(begin + i) + " is " +
                           std::to_string(label) + " but token " +
                           std::to_string(begin + i) + " is " +
                           std::to_string(ids[size_t(i)]) +
                           "; a label is its token (in the loss) or -100 "
                           "(not in the loss)");
  }
  return std::nullopt;
}

bool TokenFile::startsDocument(int64_t position) const {
  return std::binary_search(docStarts.begin(), docStarts.end(), position);
}

Expected<std::unique_ptr<TokenFile>>
TokenFile::openTokens(const std::string &path) {
  std::unique_ptr<TokenFile> file(new TokenFile());
  file->path = path;

  // A Megatron dataset: its .idx, its .bin beside an .idx, or the prefix.
  std::string prefix;
  if (endsWith(path, ".idx"))
    prefix = path.substr(0, path.size() - 4);
  else if (endsWith(path, ".bin") &&
           isFile(path.substr(0, path.size() - 4) + ".idx"))
    prefix = path.substr(0, path.size() - 4);
  else if (!isFile(path) && isFile(path + ".bin") && isFile(path + ".idx"))
    prefix = path;
  if (!prefix.empty()) {
    if (auto e = file->openMegatron(prefix))
      return *e;
    return std::move(file);
  }

  if (auto e = file->mapFile(path, file->map, file->mapBytes))
    return *e;
  const auto *bytes = static_cast<const unsigned char *>(file->map);
  int64_t size = int64_t(file->mapBytes);
  auto error = [&](const std::string &msg) { return fileError(path, msg); };
  auto wholeTokens = [&](int64_t payload,
                         const std::string &what) -> std::optional<Diagnostic> {
    if (payload % file->tokenWidth != 0)
      return error(std::to_string(payload) + " bytes of " + what +
                   " is not a whole number of " +
                   std::to_string(file->tokenWidth) +
                   "-byte tokens (truncated file?)");
    file->count = payload / file->tokenWidth;
    return std::nullopt;
  };

  int raw = rawWidth(path);
  if (raw) {
    // The name decides; a complete header of another format is refused,
    // since training on it would read the header as tokens.
    if (isCompleteLlmcHeader(bytes, size))
      return error(
          "this file is named like headerless " +
          std::string(raw == 2 ? "uint16" : "uint32") +
          " tokens but starts with a complete llm.c header (magic " +
          std::to_string(int32At(bytes)) + ", version " +
          std::to_string(int32At(bytes + 4)) + ", " +
          std::to_string(int32At(bytes + 8)) +
          " tokens, which matches the file size): it is an llm.c file; name "
          "it *.bin so that its header is read (docs/data-format.md)");
    if (isCompleteZtokHeader(bytes, size))
      return error("this file is named like headerless " +
                   std::string(raw == 2 ? "uint16" : "uint32") +
                   " tokens but starts with a complete ZTOK header: name it "
                   "*.bin so that its header is read (docs/data-format.md)");
    file->kind = raw == 2 ? Format::HeaderlessU16 : Format::HeaderlessU32;
    file->tokenWidth = raw;
    file->tokens = bytes;
    if (size >= 4 && isLlmcMagic(int32At(bytes)))
      file->headerHint = "the file starts with llm.c's magic " +
                         std::to_string(int32At(bytes)) +
                         ": is it an llm.c file renamed? Name it *.bin";
    if (auto e = wholeTokens(size, "tokens"))
      return *e;
    return std::move(file);
  }

  // ZTOK, by its magic.
  if (size >= 4 && std::memcmp(bytes, kTokenFileMagic, 4) == 0) {
    file->kind = Format::Ztok;
    if (size < kTokenFileHeaderBytes)
      return error("bad token file header: the ZTOK header needs 8 bytes, the "
                   "file has " +
                   std::to_string(size));
    int version = int(littleEndian(bytes + 4, 2));
    int width = int(littleEndian(bytes + 6, 2));
    if (version != kTokenFileVersion)
      return error("bad token file header: version " + std::to_string(version) +
                   " is not supported by this build, which reads version " +
                   std::to_string(kTokenFileVersion));
    if (width != 2 && width != 4)
      return error("bad token file header: token width " +
                   std::to_string(width) +
                   " bytes; expected 2 (uint16) or 4 (uint32)");
    file->tokenWidth = width;
    file->tokens = bytes + kTokenFileHeaderBytes;
    if (auto e = wholeTokens(size - kTokenFileHeaderBytes, "tokens"))
      return *e;
    return std::move(file);
  }

  // llm.c, by its magic; then the version and count must agree.
  if (size >= 4 && isLlmcMagic(int32At(bytes))) {
    file->kind = Format::Llmc;
    int32_t magic = int32At(bytes);
    std::string notHeaderless =
        " (if the file is headerless tokens that happen to start like an "
        "llm.c header, name it *.u16 or *.u32)";
    if (size < kLlmcHeaderBytes)
      return error("bad llm.c header: the header is 1024 bytes, the file has " +
                   std::to_string(size) + " (truncated file?)" + notHeaderless);
    int32_t version = int32At(bytes + 4);
    int width = llmcWidth(magic, version);
    if (!width)
      return error("bad llm.c header: version " + std::to_string(version) +
                   " with magic " + std::to_string(magic) +
                   "; this build reads magic 20240520 version 1 (uint16, "
                   "GPT-2) and magic 20240801 version 7 (uint32, Llama 3)" +
                   notHeaderless);
    int64_t n = int32At(bytes + 8);
    int64_t payload = size - kLlmcHeaderBytes;
    if (n < 0 || n * width != payload)
      return error(
          "bad llm.c header: it counts " + std::to_string(n) + " tokens (" +
          std::to_string(n * width) + " bytes), the file holds " +
          std::to_string(payload) + " bytes after the header" +
          (n * width > payload ? " (truncated file?)" : "") + notHeaderless);
    file->tokenWidth = width;
    file->tokens = bytes + kLlmcHeaderBytes;
    file->count = n;
    return std::move(file);
  }

  // nanoGPT: a .bin of headerless uint16 tokens (np.uint16 tofile).
  if (endsWith(path, ".bin")) {
    file->kind = Format::NanoGpt;
    file->tokenWidth = 2;
    file->tokens = bytes;
    if (auto e = wholeTokens(size, "headerless uint16 tokens (nanoGPT .bin)"))
      return *e;
    // uint32 ids below 65536 read as uint16 put a 0 at every odd position:
    // refuse what is most likely a uint32 file.
    int64_t probe = std::min<int64_t>(file->count / 2, 512);
    bool oddZero = probe >= 16, evenZero = true;
    for (int64_t i = 0; i < probe && oddZero; ++i) {
      oddZero = bytes[4 * i + 2] == 0 && bytes[4 * i + 3] == 0;
      evenZero = evenZero && bytes[4 * i] == 0 && bytes[4 * i + 1] == 0;
    }
    if (oddZero && !evenZero)
      return error("read as nanoGPT's headerless uint16 tokens, every second "
                   "token of the first " +
                   std::to_string(2 * probe) +
                   " is 0: the file looks like uint32 tokens; name it *.u32 "
                   "if so, or *.u16 if uint16 is right (docs/data-format.md)");
    return std::move(file);
  }

  return error(
      "cannot tell the format of this token file (docs/data-format.md); "
      "tried: ZTOK: no magic 'ZTOK' at byte 0 (found " +
      firstBytes(bytes, size) +
      "); llm.c: the int32 at byte 0 is not the magic 20240520 or 20240801; "
      "Megatron indexed dataset: no .idx beside it (PREFIX.bin with "
      "PREFIX.idx); headerless tokens: the name does not end in .bin "
      "(nanoGPT, uint16), .u16 or .u32");
}

TokenFile::~TokenFile() {
  if (map)
    ::munmap(map, mapBytes);
  if (indexMap)
    ::munmap(indexMap, indexMapBytes);
  if (maskMap)
    ::munmap(maskMap, maskMapBytes);
}

std::string TokenFile::badTokenHint(int64_t position) const {
  return position < kLlmcHeaderBytes / tokenWidth ? headerHint : "";
}

// Little-endian by definition, decoded byte by byte so big-endian hosts
// read the same ids.
void TokenFile::read(int64_t begin, int64_t n, int64_t *out) const {
  const unsigned char *p = tokens + size_t(begin) * size_t(tokenWidth);
  int bits = 8 * tokenWidth;
  for (int64_t i = 0; i < n; ++i, p += tokenWidth) {
    uint64_t v = littleEndian(p, tokenWidth);
    if (tokenSigned && bits < 64 && (v >> (bits - 1)) & 1)
      v |= ~uint64_t(0) << bits; // Sign-extend.
    out[i] = int64_t(v);
  }
}

//===----------------------------------------------------------------------===//
// Several files
//===----------------------------------------------------------------------===//

ConcatenatedTokens::ConcatenatedTokens(
    std::vector<std::shared_ptr<const TokenSource>> sources)
    : parts(std::move(sources)) {
  for (const auto &p : parts) {
    starts.push_back(total);
    total += p->size();
  }
  label = parts.empty()
              ? "no files"
              : parts.front()->name() + " and " +
                    std::to_string(parts.size() - 1) + " more file(s)";
}

size_t ConcatenatedTokens::partAt(int64_t position) const {
  // The last part starting at or before `position` (empty parts skipped).
  auto it = std::upper_bound(starts.begin(), starts.end(), position);
  size_t i = size_t(it - starts.begin()) - 1;
  while (i + 1 < parts.size() && parts[i]->size() == 0)
    ++i;
  return i;
}

template <typename Fn>
void ConcatenatedTokens::forEachPart(int64_t begin, int64_t n, Fn fn) const {
  for (int64_t done = 0; done < n;) {
    size_t i = partAt(begin + done);
    int64_t local = begin + done - starts[i];
    int64_t take = std::min(n - done, parts[i]->size() - local);
    fn(*parts[i], local, take, done);
    done += take;
  }
}

void ConcatenatedTokens::read(int64_t begin, int64_t n, int64_t *out) const {
  forEachPart(begin, n,
              [&](const TokenSource &part, int64_t local, int64_t take,
                  int64_t done) { part.read(local, take, out + done); });
}

TokenLocation ConcatenatedTokens::locate(int64_t position) const {
  size_t i = partAt(position);
  return parts[i]->locate(position - starts[i]);
}

std::string ConcatenatedTokens::badTokenHint(int64_t position) const {
  size_t i = partAt(position);
  return parts[i]->badTokenHint(position - starts[i]);
}

bool ConcatenatedTokens::hasLossMask() const {
  return !parts.empty() && parts.front()->hasLossMask();
}

std::optional<Diagnostic>
ConcatenatedTokens::readLossMask(int64_t begin, int64_t n, uint8_t *out) const {
  std::optional<Diagnostic> error;
  forEachPart(
      begin, n,
      [&](const TokenSource &part, int64_t local, int64_t take, int64_t done) {
        if (!error)
          error = part.readLossMask(local, take, out + done);
      });
  return error;
}

bool ConcatenatedTokens::startsDocument(int64_t position) const {
  size_t i = partAt(position);
  return parts[i]->startsDocument(position - starts[i]);
}

Expected<std::shared_ptr<const TokenSource>>
openTokenFiles(const std::vector<std::string> &specs, bool lossMask) {
  std::vector<std::string> paths;
  for (const std::string &spec : specs) {
    if (spec.find_first_of("*?[") == std::string::npos) {
      paths.push_back(spec);
      continue;
    }
    glob_t g;
    int rc = ::glob(spec.c_str(), GLOB_NOSORT, nullptr, &g);
    std::vector<std::string> matches(g.gl_pathv, g.gl_pathv + g.gl_pathc);
    ::globfree(&g);
    if (rc == GLOB_NOMATCH || (rc == 0 && matches.empty()))
      return fileError(spec, "no file matches this pattern");
    if (rc != 0)
      return fileError(spec, "cannot expand this pattern");
    std::sort(matches.begin(), matches.end()); // Byte order, any locale.
    // PREFIX.bin and PREFIX.idx are one Megatron dataset: read it once; a
    // loss mask FILE.mask or FILE.labels goes with FILE.
    auto matched = [&](const std::string &p) {
      return std::binary_search(matches.begin(), matches.end(), p);
    };
    for (const std::string &m : matches)
      if (!(endsWith(m, ".idx") &&
            matched(m.substr(0, m.size() - 4) + ".bin")) &&
          !(endsWith(m, ".mask") && matched(m.substr(0, m.size() - 5))) &&
          !(endsWith(m, ".labels") && matched(m.substr(0, m.size() - 7))))
        paths.push_back(m);
  }
  if (paths.empty())
    return fileError("--data", "no token file given");
  std::vector<std::shared_ptr<const TokenSource>> files;
  for (const std::string &p : paths) {
    Expected<std::unique_ptr<TokenFile>> f = TokenFile::open(p, lossMask);
    if (!f)
      return f.error();
    files.push_back(std::move(*f));
  }
  if (files.size() == 1)
    return std::move(files.front());
  return std::shared_ptr<const TokenSource>(
      std::make_shared<ConcatenatedTokens>(std::move(files)));
}

std::optional<Diagnostic> writeTokenFile(const std::string &path,
                                         const std::vector<uint32_t> &tokens,
                                         int width) {
  if (width != 2 && width != 4)
    return fileError(path, "token width " + std::to_string(width) +
                               " bytes; expected 2 or 4");
  int raw = rawWidth(path);
  if (raw && raw != width)
    return fileError(path, "a " + std::to_string(raw) +
                               "-byte token file name for " +
                               std::to_string(width) + "-byte tokens");
  std::vector<unsigned char> bytes;
  bytes.reserve(size_t(kTokenFileHeaderBytes) + tokens.size() * size_t(width));
  if (!raw) {
    bytes.insert(bytes.end(), kTokenFileMagic, kTokenFileMagic + 4);
    bytes.insert(bytes.end(),
                 {uint8_t(kTokenFileVersion), 0, uint8_t(width), 0});
  }
  for (uint32_t t : tokens) {
    if (width == 2 && t > 0xffffu)
      return fileError(path, "token id " + std::to_string(t) +
                                 " does not fit in 2 bytes");
    for (int b = 0; b < width; ++b)
      bytes.push_back(uint8_t(t >> (8 * b)));
  }
  std::FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    return fileError(path, std::string("cannot create token file: ") +
                               std::strerror(errno));
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok)
    return fileError(path, "cannot write token file");
  return std::nullopt;
}

} // namespace zeroc::runtime
