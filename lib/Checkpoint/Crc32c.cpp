//===- Crc32c.cpp - CRC-32C (Castagnoli) checksums ------------------------===//
//
// Reflected CRC with polynomial 0x82F63B78. The portable path is
// slicing-by-8: eight 256-entry tables let each step fold eight input bytes.
// On x86-64 with SSE 4.2 the crc32 instruction does the same eight bytes in
// one instruction.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Checkpoint/Crc32c.h"

#include <array>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define ZEROC_CRC32C_SSE42 1
#endif

namespace zeroc {

namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables makeTables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
    t[0][i] = c;
  }
  // t[k][i]: the CRC of byte i followed by k zero bytes.
  for (uint32_t i = 0; i < 256; ++i)
    for (int k = 1; k < 8; ++k)
      t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
  return t;
}

constexpr Tables kTables = makeTables();

uint32_t portable(uint32_t c, const unsigned char *p, size_t n) {
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c; // little-endian: the low word meets the running CRC
    c = kTables[7][lo & 0xff] ^ kTables[6][(lo >> 8) & 0xff] ^
        kTables[5][(lo >> 16) & 0xff] ^ kTables[4][lo >> 24] ^
        kTables[3][hi & 0xff] ^ kTables[2][(hi >> 8) & 0xff] ^
        kTables[1][(hi >> 16) & 0xff] ^ kTables[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--)
    c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xff];
  return c;
}

#ifdef ZEROC_CRC32C_SSE42
__attribute__((target("sse4.2"))) uint32_t
hardware(uint32_t c, const unsigned char *p, size_t n) {
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = _mm_crc32_u64(c64, word);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (n--)
    c = _mm_crc32_u8(c, *p++);
  return c;
}

bool hasHardware() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

} // namespace

uint32_t crc32cPortable(uint32_t crc, const void *data, size_t n) {
  return ~portable(~crc, static_cast<const unsigned char *>(data), n);
}

uint32_t crc32c(uint32_t crc, const void *data, size_t n) {
#ifdef ZEROC_CRC32C_SSE42
  if (hasHardware())
    return ~hardware(~crc, static_cast<const unsigned char *>(data), n);
#endif
  return crc32cPortable(crc, data, n);
}

std::string crc32cHex(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", crc);
  return buf;
}

} // namespace zeroc
