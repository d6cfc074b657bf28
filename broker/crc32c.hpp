#pragma once
// CRC-32C (Castagnoli), as RecordBatch v2 uses. SSE4.2 instruction when the
// CPU has it (checked once at run time), a slicing table otherwise.

#include <cstddef>
#include <cstdint>

namespace ferry {

/// Extends `crc` (0 to start) over `n` bytes at `data`.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

/// The portable table implementation, exposed so tests can compare both.
uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc = 0);

/// True if crc32c() uses the hardware instruction on this machine.
bool crc32c_hardware();

} // namespace ferry
