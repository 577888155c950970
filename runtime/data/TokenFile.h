//===- TokenFile.h - Token files of zeroc, nanoGPT, llm.c, Megatron -*- C++
//-*-//
//
// The token files zerorun reads, told apart by their content: zeroc's ZTOK,
// llm.c's 1 KiB header, Megatron-LM's indexed datasets (.bin + .idx), and
// headerless uint16 (nanoGPT's .bin, *.u16) or uint32 (*.u32) tokens; and
// several of them read as one stream. docs/data-format.md is the reference
// for every layout, the detection rule and the errors.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_DATA_TOKENFILE_H
#define ZEROC_RUNTIME_DATA_TOKENFILE_H

#include "zeroc/Support/Diagnostic.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zeroc::runtime {

/// "ZTOK": the magic of a token file with a header.
inline constexpr char kTokenFileMagic[4] = {'Z', 'T', 'O', 'K'};
inline constexpr int kTokenFileVersion = 1;
inline constexpr int64_t kTokenFileHeaderBytes = 8;

/// llm.c (karpathy/llm.c, dev/data/data_common.py `write_datafile`): 256
/// little-endian int32, [0] magic, [1] version, [2] token count, then the
/// tokens. Two (magic, version, token width) triples exist.
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;
inline constexpr int32_t kLlmcMagicGpt2 = 20240520;   // version 1, uint16
inline constexpr int32_t kLlmcMagicLlama3 = 20240801; // version 7, uint32

/// Megatron-LM's index (megatron/core/datasets/indexed_dataset.py): the
/// 9-byte magic, uint64 version 1, a uint8 dtype code, uint64 sequence and
/// document counts, then int32 lengths, int64 pointers, int64 document
/// indices.
inline constexpr char kMegatronIndexMagic[9] = {'M', 'M', 'I', 'D', 'I',
                                                'D', 'X', 0,   0};
inline constexpr int64_t kMegatronIndexHeaderBytes = 9 + 8 + 1 + 8 + 8;

/// Where a token of a stream lies: the file and the token's index in it.
struct TokenLocation {
  std::string file;
  int64_t position = 0;
};

/// Token ids, by position.
class TokenSource {
public:
  virtual ~TokenSource() = default;
  /// The file's path, "synthetic", or a list of files: for messages.
  virtual const std::string &name() const = 0;
  /// Number of tokens, or -1 for an endless source.
  virtual int64_t size() const = 0;
  /// Tokens [begin, begin + count), inside the source. Signed formats
  /// (Megatron's int8..int64) give their negative ids as they are.
  virtual void read(int64_t begin, int64_t count, int64_t *out) const = 0;
  /// The file and position of token `position`, for messages.
  virtual TokenLocation locate(int64_t position) const {
    return {name(), position};
  }
  /// A hint appended to a bad-token-id error at `position` ("" if none): a
  /// headerless file that starts like a file with a header says so.
  virtual std::string badTokenHint(int64_t position) const {
    (void)position;
    return "";
  }
  /// Whether a loss mask comes with the tokens (FILE.mask or FILE.labels,
  /// --loss-mask).
  virtual bool hasLossMask() const { return false; }
  /// Whether tokens [begin, begin + count) count as targets: 1 or 0 each.
  /// Errors (naming the mask file and position): a mask byte other than 0
  /// or 1, a label other than -100 or its token. Only when hasLossMask().
  [[nodiscard]] virtual std::optional<Diagnostic>
  readLossMask(int64_t begin, int64_t count, uint8_t *out) const {
    (void)begin;
    std::fill(out, out + count, uint8_t(1));
    return std::nullopt;
  }
  /// Whether a document starts at token `position` (Megatron's document
  /// index; the first token of every file).
  virtual bool startsDocument(int64_t position) const { return position == 0; }
};

/// One token file, memory-mapped read-only, in any of the formats of
/// docs/data-format.md.
class TokenFile final : public TokenSource {
public:
  enum class Format {
    Ztok,
    Llmc,
    Megatron,
    NanoGpt,
    HeaderlessU16,
    HeaderlessU32
  };

  /// Detects the format from the content (and, for headerless files, the
  /// name) and checks the header. A Megatron dataset is opened from its
  /// .bin, its .idx, or the prefix both share. Errors name the file and,
  /// when no format fits, every format tried and why it failed.
  /// With `lossMask`, the loss mask is opened too: FILE.mask or
  /// FILE.labels (FILE: the token file's path, a Megatron dataset's .bin).
  static Expected<std::unique_ptr<TokenFile>> open(const std::string &path,
                                                   bool lossMask = false);
  ~TokenFile() override;

  const std::string &name() const override { return path; }
  int64_t size() const override { return count; }
  void read(int64_t begin, int64_t count, int64_t *out) const override;
  std::string badTokenHint(int64_t position) const override;
  bool hasLossMask() const override { return mask != nullptr; }
  std::optional<Diagnostic> readLossMask(int64_t begin, int64_t count,
                                         uint8_t *out) const override;
  bool startsDocument(int64_t position) const override;
  /// Bytes per token: 1, 2, 4 or 8.
  int width() const { return tokenWidth; }
  Format format() const { return kind; }
  /// "ZTOK", "llm.c", "Megatron indexed dataset", ...
  static const char *formatName(Format f);
  /// Token positions where a document starts (Megatron's document index;
  /// {0} for the other formats, which have no boundaries).
  const std::vector<int64_t> &documentStarts() const { return docStarts; }

private:
  TokenFile() = default;
  static Expected<std::unique_ptr<TokenFile>>
  openTokens(const std::string &path);
  std::optional<Diagnostic> mapFile(const std::string &file, void *&map,
                                    size_t &bytes);
  std::optional<Diagnostic> openMegatron(const std::string &prefix);
  std::optional<Diagnostic> openLossMask();
  std::string path;
  Format kind = Format::Ztok;
  void *map = nullptr, *indexMap = nullptr, *maskMap = nullptr;
  size_t mapBytes = 0, indexMapBytes = 0, maskMapBytes = 0;
  const unsigned char *mask = nullptr;
  /// The mask's path; true when it is FILE.labels (int32, Hugging Face's
  /// labels: -100 or the token) rather than FILE.mask (bytes 0/1).
  std::string maskPath;
  bool maskIsLabels = false;
  const unsigned char *tokens = nullptr;
  int64_t count = 0;
  int tokenWidth = 2;
  bool tokenSigned = false;
  std::vector<int64_t> docStarts = {0};
  /// For badTokenHint: why the first tokens may be a header after all.
  std::string headerHint;
};

/// Several sources read back to back as one stream: the tokens of the first,
/// then those of the second, ... (docs/data-format.md, "Several files").
class ConcatenatedTokens final : public TokenSource {
public:
  explicit ConcatenatedTokens(
      std::vector<std::shared_ptr<const TokenSource>> parts);
  const std::string &name() const override { return label; }
  int64_t size() const override { return total; }
  void read(int64_t begin, int64_t count, int64_t *out) const override;
  TokenLocation locate(int64_t position) const override;
  std::string badTokenHint(int64_t position) const override;
  bool hasLossMask() const override;
  std::optional<Diagnostic> readLossMask(int64_t begin, int64_t count,
                                         uint8_t *out) const override;
  bool startsDocument(int64_t position) const override;
  /// Where part i starts in the stream.
  int64_t partStart(size_t i) const { return starts[i]; }

private:
  /// The part holding stream position `position`.
  size_t partAt(int64_t position) const;
  /// Calls fn(part, position in part, count, offset from `begin`) for each
  /// part's share of positions [begin, begin + n).
  template <typename Fn>
  void forEachPart(int64_t begin, int64_t n, Fn fn) const;
  std::vector<std::shared_ptr<const TokenSource>> parts;
  std::vector<int64_t> starts;
  int64_t total = 0;
  std::string label;
};

/// The files named by `specs`, in order: each spec is a path, a Megatron
/// prefix, or a glob pattern (*, ?, [...]) whose matches are taken in
/// byte-wise sorted order. One file gives that file; several give a
/// ConcatenatedTokens. With `lossMask`, every file's mask too. Errors:
/// a pattern that matches nothing, any file's.
Expected<std::shared_ptr<const TokenSource>>
openTokenFiles(const std::vector<std::string> &specs, bool lossMask = false);

/// Writes a token file: with the ZTOK header, or headerless when `path` ends
/// in .u16 or .u32 (whose width must then match `width`). `width` is 2 or 4.
std::optional<Diagnostic> writeTokenFile(const std::string &path,
                                         const std::vector<uint32_t> &tokens,
                                         int width);

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_DATA_TOKENFILE_H
