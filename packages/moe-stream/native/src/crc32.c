/* crc32.c: CRC-32 by table (the reference), by PCLMULQDQ folding (VPCLMULQDQ on 512-bit registers
   where the CPU has AVX-512 with it) and the combination of two crcs (GF(2) polynomial arithmetic,
   as zlib's crc32_combine). */
#include "crc32.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define POLY 0xEDB88320u

static uint32_t table[256];
static uint32_t x2n_table[32]; /* x^(2^k) mod P */
static k3_crc32_kernel best_kernel;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* a * b mod P, both bit-reflected polynomials (x^0 in the top bit). */
static uint32_t multmodp(uint32_t a, uint32_t b) {
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

static void init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        table[i] = c;
    }
    uint32_t p = 1u << 30; /* x^1 */
    x2n_table[0] = p;
    for (int k = 1; k < 32; k++) x2n_table[k] = p = multmodp(p, p);
    __builtin_cpu_init();
    int pclmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    int vpclmul = pclmul && __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("avx512f") &&
                  __builtin_cpu_supports("avx512bw");
    best_kernel = vpclmul ? K3_CRC32_VPCLMUL : pclmul ? K3_CRC32_PCLMUL : K3_CRC32_TABLE;
    /* K3_CRC32_KERNEL=pclmul|table caps it (to measure one kernel against another in a real run). */
    const char *cap = getenv("K3_CRC32_KERNEL");
    if (cap && strcmp(cap, "pclmul") == 0 && best_kernel > K3_CRC32_PCLMUL) best_kernel = K3_CRC32_PCLMUL;
    if (cap && strcmp(cap, "table") == 0) best_kernel = K3_CRC32_TABLE;
}

static uint32_t bytes(uint32_t c, const uint8_t *p, size_t n) {
    while (n--) c = table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

uint32_t k3_crc32_scalar(uint32_t crc, const uint8_t *p, size_t n) {
    pthread_once(&once, init);
    return ~bytes(~crc, p, n);
}

uint32_t k3_crc32_with(k3_crc32_kernel kernel, uint32_t crc, const uint8_t *p, size_t n) {
    pthread_once(&once, init);
    if (kernel > best_kernel) kernel = best_kernel;
    uint32_t c = ~crc;
    /* The wide kernel pays its setup back from a few hundred bytes on. */
    if (kernel == K3_CRC32_VPCLMUL && n < 512) kernel = K3_CRC32_PCLMUL;
    if (kernel != K3_CRC32_TABLE && n >= 64) {
        size_t body = n & ~(size_t)15;
        c = kernel == K3_CRC32_VPCLMUL ? k3_crc32_vpclmul_fold(c, p, body) : k3_crc32_pclmul_fold(c, p, body);
        p += body;
        n -= body;
    }
    return ~bytes(c, p, n);
}

uint32_t k3_crc32(uint32_t crc, const uint8_t *p, size_t n) {
    pthread_once(&once, init);
    return k3_crc32_with(best_kernel, crc, p, n);
}

k3_crc32_kernel k3_crc32_best_kernel(void) {
    pthread_once(&once, init);
    return best_kernel;
}

int k3_crc32_uses_pclmul(void) {
    pthread_once(&once, init);
    return best_kernel != K3_CRC32_TABLE;
}

/* x^(n * 2^k) mod P */
static uint32_t x2nmodp(uint64_t n, unsigned k) {
    uint32_t p = 1u << 31; /* x^0 */
    while (n) {
        if (n & 1) p = multmodp(x2n_table[k & 31], p);
        n >>= 1;
        k++;
    }
    return p;
}

uint32_t k3_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
    pthread_once(&once, init);
    return multmodp(x2nmodp(len_b, 3), crc_a) ^ crc_b;
}
