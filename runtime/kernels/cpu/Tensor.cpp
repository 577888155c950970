//===- Tensor.cpp - Tensor views and 16-bit storage -----------------------===//

#include "cpu/Tensor.h"
#include "cpu/Parallel.h"

#include <algorithm>
#include <omp.h>

namespace zeroc::cpu {

float roundToDType(float x, DType dtype) {
  switch (dtype) {
  case DType::BF16:
    return bf16ToFloat(floatToBf16(x));
  case DType::F16:
    return f16ToFloat(floatToF16(x));
  default:
    return x;
  }
}

namespace {

void loadSerial(const Tensor &t, int64_t offset, int64_t n, float *dst) {
  switch (t.dtype) {
  case DType::F32:
    std::memcpy(dst, t.f32() + offset, n * sizeof(float));
    return;
  case DType::BF16: {
    const uint16_t *src = static_cast<const uint16_t *>(t.data) + offset;
    for (int64_t i = 0; i < n; ++i)
      dst[i] = bf16ToFloat(src[i]);
    return;
  }
  case DType::F16: {
    const uint16_t *src = static_cast<const uint16_t *>(t.data) + offset;
    for (int64_t i = 0; i < n; ++i)
      dst[i] = f16ToFloat(src[i]);
    return;
  }
  case DType::I32: {
    const int32_t *src = t.i32() + offset;
    for (int64_t i = 0; i < n; ++i)
      dst[i] = float(src[i]);
    return;
  }
  }
}

void storeSerial(const Tensor &t, int64_t offset, int64_t n, const float *src) {
  switch (t.dtype) {
  case DType::F32:
    // memmove: a kernel may store into the buffer it loaded from.
    std::memmove(t.f32() + offset, src, n * sizeof(float));
    return;
  case DType::BF16: {
    uint16_t *dst = static_cast<uint16_t *>(t.data) + offset;
    for (int64_t i = 0; i < n; ++i)
      dst[i] = floatToBf16(src[i]);
    return;
  }
  case DType::F16: {
    uint16_t *dst = static_cast<uint16_t *>(t.data) + offset;
    for (int64_t i = 0; i < n; ++i)
      dst[i] = floatToF16(src[i]);
    return;
  }
  case DType::I32: {
    int32_t *dst = t.i32() + offset;
    for (int64_t i = 0; i < n; ++i)
      dst[i] = int32_t(src[i]);
    return;
  }
  }
}

/// Large conversions and copies run on the pool (cpu/Threads.h), in chunks
/// of kSplit elements; each element is converted on its own, so the bits
/// do not depend on the split. Inside a kernel's parallel loop they stay on
/// the calling thread.
constexpr int64_t kSplit = 1 << 14;

bool split(int64_t n) { return n >= 4 * kSplit && !omp_in_parallel(); }

bool overlap(const void *a, const void *b, int64_t bytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + uintptr_t(bytes) && y < x + uintptr_t(bytes);
}

/// memmove, split over the pool where the ranges do not overlap.
void moveBytes(char *dst, const char *src, int64_t bytes) {
  if (dst == src || bytes <= 0)
    return;
  if (!split(bytes / 4) || overlap(dst, src, bytes)) {
    std::memmove(dst, src, size_t(bytes));
    return;
  }
  parallelChunks(bytes, 4 * kSplit, [&](int64_t at, int64_t count) {
    std::memcpy(dst + at, src + at, size_t(count));
  });
}

} // namespace

void loadF32(const Tensor &t, int64_t offset, int64_t n, float *dst) {
  if (t.dtype == DType::F32) {
    moveBytes(reinterpret_cast<char *>(dst),
              reinterpret_cast<const char *>(t.f32() + offset),
              n * int64_t(sizeof(float)));
    return;
  }
  if (!split(n))
    return loadSerial(t, offset, n, dst);
  parallelChunks(n, kSplit, [&](int64_t at, int64_t count) {
    loadSerial(t, offset + at, count, dst + at);
  });
}

void storeF32(const Tensor &t, int64_t offset, int64_t n, const float *src) {
  if (t.dtype == DType::F32) {
    // May overlap: a kernel may store into the buffer it loaded from.
    moveBytes(reinterpret_cast<char *>(t.f32() + offset),
              reinterpret_cast<const char *>(src), n * int64_t(sizeof(float)));
    return;
  }
  if (!split(n))
    return storeSerial(t, offset, n, src);
  parallelChunks(n, kSplit, [&](int64_t at, int64_t count) {
    storeSerial(t, offset + at, count, src + at);
  });
}

void copyElements(const Tensor &src, int64_t srcOffset, const Tensor &dst,
                  int64_t dstOffset, int64_t n) {
  if (src.dtype == dst.dtype) {
    int64_t size = bytesPerElement(src.dtype);
    moveBytes(static_cast<char *>(dst.data) + dstOffset * size,
              static_cast<const char *>(src.data) + srcOffset * size, n * size);
    return;
  }
  constexpr int64_t kChunk = 4096;
  auto run = [&](int64_t done, int64_t count) {
    float buffer[kChunk];
    loadSerial(src, srcOffset + done, count, buffer);
    storeSerial(dst, dstOffset + done, count, buffer);
  };
  if (!split(n)) {
    for (int64_t done = 0; done < n; done += kChunk)
      run(done, std::min(kChunk, n - done));
    return;
  }
  parallelChunks(n, kChunk, run);
}

const float *readF32(const Tensor &t, ScratchVector<float> &scratch) {
  if (t.dtype == DType::F32)
    return t.f32();
  scratch.resize(t.numel());
  loadF32(t, 0, t.numel(), scratch.data());
  return scratch.data();
}

float *writeF32(const Tensor &t, ScratchVector<float> &scratch) {
  if (t.dtype == DType::F32)
    return t.f32();
  scratch.assign(t.numel(), 0.0f);
  return scratch.data();
}

void commitF32(const Tensor &t, const ScratchVector<float> &scratch) {
  if (t.dtype != DType::F32)
    storeF32(t, 0, t.numel(), scratch.data());
}

std::string describe(const Tensor &t) {
  std::string s = "[";
  for (size_t i = 0; i < t.shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "] " + std::string(dtypeName(t.dtype));
}

static std::string prefix(const char *op, const char *name) {
  return std::string(op) + ": " + name + " ";
}

static std::string checkStorage(const char *op, const char *name,
                                const Tensor &t) {
  for (int64_t d : t.shape)
    if (d < 0)
      return prefix(op, name) + "has a negative dimension: " + describe(t);
  if (!t.data && t.numel() > 0)
    return prefix(op, name) + "has no data";
  return "";
}

std::string checkFloat(const char *op, const char *name, const Tensor &t) {
  if (!isFloat(t.dtype))
    return prefix(op, name) + "must be f32, bf16 or f16, found " + describe(t);
  return checkStorage(op, name, t);
}

std::string checkIds(const char *op, const char *name, const Tensor &t) {
  if (t.dtype != DType::I32)
    return prefix(op, name) + "must be i32, found " + describe(t);
  return checkStorage(op, name, t);
}

std::string checkRank(const char *op, const char *name, const Tensor &t,
                      int64_t rank) {
  if (t.rank() != rank)
    return prefix(op, name) + "must have rank " + std::to_string(rank) +
           ", found " + describe(t);
  return "";
}

std::string checkSameShape(const char *op, const char *name, const Tensor &t,
                           const char *otherName, const Tensor &other) {
  if (t.shape != other.shape)
    return prefix(op, name) + "must have the shape of " + otherName + " (" +
           describe(other) + "), found " + describe(t);
  return "";
}

Status firstError(std::initializer_list<std::string> checks) {
  auto it = std::find_if(checks.begin(), checks.end(),
                         [](const std::string &s) { return !s.empty(); });
  return it == checks.end() ? Status{} : Status{*it};
}

Status checkDocumentStarts(const char *op, const Tensor *documents,
                           int64_t batch, int64_t seq) {
  if (!documents)
    return {};
  std::vector<int64_t> expected = {batch, seq};
  if (documents->dtype != DType::I32 || documents->shape != expected)
    return {std::string(op) + ": documents must be i32 [batch, seq] = [" +
            std::to_string(batch) + ", " + std::to_string(seq) + "], found " +
            describe(*documents)};
  const int32_t *d = documents->i32();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < seq; ++i) {
      int32_t start = d[b * seq + i];
      int32_t before = i ? d[b * seq + i - 1] : 0;
      if (start != before && start != i)
        return {std::string(op) + ": documents[" + std::to_string(b) + ", " +
                std::to_string(i) + "] is " + std::to_string(start) +
                "; expected " + std::to_string(before) +
                " (the document of the token before) or " + std::to_string(i) +
                " (a document starting here)"};
    }
  return {};
}

} // namespace zeroc::cpu
