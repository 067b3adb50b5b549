/* crc32.h: CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320): zlib's crc32, the checksum a
   packed trunk's manifest records per tensor. Chainable like zlib's: start from 0, pass the
   previous result to continue. */
#ifndef K3_CRC32_H
#define K3_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* The reference: one byte per table lookup. */
uint32_t k3_crc32_scalar(uint32_t crc, const uint8_t *p, size_t n);
/* The same value, by PCLMULQDQ folding where the CPU has it (else the reference). */
uint32_t k3_crc32(uint32_t crc, const uint8_t *p, size_t n);
/* 1 when k3_crc32 folds with PCLMULQDQ. */
int k3_crc32_uses_pclmul(void);

/* The kernels k3_crc32 chooses from, best first where the CPU has them; each gives the same value. */
typedef enum { K3_CRC32_TABLE = 0, K3_CRC32_PCLMUL = 1, K3_CRC32_VPCLMUL = 2 } k3_crc32_kernel;
/* The best kernel this CPU has (what k3_crc32 uses). */
k3_crc32_kernel k3_crc32_best_kernel(void);
/* k3_crc32 with a given kernel, capped at the best this CPU has (for tests and the bench). */
uint32_t k3_crc32_with(k3_crc32_kernel kernel, uint32_t crc, const uint8_t *p, size_t n);
/* The crc32 of A followed by B, from crc32(A), crc32(B) and B's length (zlib's crc32_combine). */
uint32_t k3_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

/* Internal: the folding kernels on the pre-inverted crc; n a multiple of 16, >= 64 (crc32_pclmul.c)
   or >= 256 (crc32_vpclmul.c). */
uint32_t k3_crc32_pclmul_fold(uint32_t crc, const uint8_t *p, size_t n);
uint32_t k3_crc32_vpclmul_fold(uint32_t crc, const uint8_t *p, size_t n);

#endif
