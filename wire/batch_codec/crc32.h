/* RocketMQ's body CRC (zlib's CRC-32) for the compiled batch codec.
 *
 * ISA-L's crc32_gzip_refl is the same function as zlib's crc32 (same polynomial, same seed
 * and result convention) computed with carry-less multiplication: about 70 GB/s here against
 * zlib 1.2.13's 7.5 GB/s, which made the CRC checks of served 1 KiB records most of a pull's
 * cost. setup.py defines TROCKET_ISAL when Debian's libisal-dev is installed; without it the
 * codec uses zlib, with the same answers.
 */
#ifndef TROCKET_CRC32_H
#define TROCKET_CRC32_H

#ifdef TROCKET_ISAL
#include <isa-l/crc.h>
#define trocket_crc32(crc, buf, len) crc32_gzip_refl((uint32_t)(crc), (const unsigned char *)(buf), (uint64_t)(len))
#define TROCKET_CRC32_BACKEND "isa-l"
#else
#include <zlib.h>
#define trocket_crc32(crc, buf, len) crc32((crc), (buf), (len))
#define TROCKET_CRC32_BACKEND "zlib"
#endif

#endif
