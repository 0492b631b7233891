// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of checkpoint chunks and
// of index.json. Debian ships no C++ CRC-32C (abseil 20220623 predates absl/crc), so it lives
// here: the SSE4.2 crc32 instruction when the CPU has it, a slicing-by-8 table otherwise. Both
// give the same result; Crc32c() picks one at run time.
#ifndef WEFT_COMMON_CHECKPOINT_CRC32C_H_
#define WEFT_COMMON_CHECKPOINT_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace weft::checkpoint {

// CRC-32C (Castagnoli) of data, continuing from crc (0 to start).
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

namespace internal {

// Table-driven, any CPU.
uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc);

// True when this CPU has SSE4.2 (checked once).
bool HasSse42();

// The SSE4.2 path; call only when HasSse42().
uint32_t Crc32cSse42(const void* data, size_t n, uint32_t crc);

}  // namespace internal
}  // namespace weft::checkpoint

#endif  // WEFT_COMMON_CHECKPOINT_CRC32C_H_
