//===- Crc32c.h - CRC-32C (Castagnoli) checksums ----------------*- C++ -*-===//
//
// The checksum of checkpoint shard files: CRC-32C, the polynomial of iSCSI,
// ext4 and SSE 4.2's crc32 instruction, which computes it at memory speed.
// crc32c(0, "123456789", 9) == 0xE3069283.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_CHECKPOINT_CRC32C_H
#define ZEROC_CHECKPOINT_CRC32C_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace zeroc {

/// Extends `crc` (0 to start) by `n` bytes: crc32c(crc32c(0, a), b) is the
/// checksum of a followed by b. Uses the CPU's instruction when it has one.
uint32_t crc32c(uint32_t crc, const void *data, size_t n);
/// The same without the CPU instruction (tables, eight bytes at a time).
uint32_t crc32cPortable(uint32_t crc, const void *data, size_t n);

/// "0xe3069283", as messages and the manifest print checksums.
std::string crc32cHex(uint32_t crc);

} // namespace zeroc

#endif // ZEROC_CHECKPOINT_CRC32C_H
