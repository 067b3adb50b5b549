/* synth_block.c: `k3 synth`'s 4 M-element blocks in C, so they are built on a libuv thread while the
   JS thread copies earlier tensors into the O_DIRECT staging buffers (built on the JS thread, each
   one stopped the writes for ~60 ms). The reference is synth.ts's encode(); tests compare both. */
#include "synth_block.h"

#include <math.h>
#include <string.h>

typedef struct sfc32 {
    uint32_t a, b, c, d;
} sfc32;

/* One step of sfc32, as Sfc32.next() in synth.ts. */
static inline uint32_t sfc32_next(sfc32 *r) {
    uint32_t t = r->a + r->b + r->d;
    r->d += 1;
    r->a = r->b ^ (r->b >> 9);
    r->b = r->c + (r->c << 3);
    r->c = (r->c << 21) | (r->c >> 11);
    r->c += t;
    return t;
}

uint32_t k3_synth_elem_bytes(int kind) {
    switch (kind) {
    case K3_SYNTH_NORMAL_BF16: return 2;
    case K3_SYNTH_NORMAL_F32: return 4;
    case K3_SYNTH_NIBBLES:
    case K3_SYNTH_E8M0: return 1;
    default: return 0;
    }
}

/* ~N(mean, std²) as synth.ts's normalInto: the four 16-bit halves of two words, in double. */
static float normal_one(sfc32 *r, double mean, double std) {
    static const double inv16 = 1.0 / 65536.0;
    const double sqrt3 = sqrt(3.0); /* correctly rounded, as Math.sqrt(3) */
    uint32_t w1 = sfc32_next(r), w2 = sfc32_next(r);
    double sum = (double)((w1 & 0xffffu) + (w1 >> 16) + (w2 & 0xffffu) + (w2 >> 16) + 2u);
    double v = mean + std * (sqrt3 * (sum * inv16 - 2.0));
    return (float)v;
}

/* f32 -> bf16, round to nearest even (no NaN/Inf here), as encode(): (u + 0x7fff + lsb) >> 16 mod 2^32. */
static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

void k3_synth_block(int kind, const uint32_t state[4], uint64_t n, double mean, double std, uint32_t s, uint8_t *out) {
    sfc32 r = {state[0], state[1], state[2], state[3]};
    uint32_t esize = k3_synth_elem_bytes(kind);
    if (kind == K3_SYNTH_NORMAL_BF16) {
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = to_bf16(normal_one(&r, mean, std));
            memcpy(out + 2 * i, &h, 2); /* little-endian host, as the JS Uint16Array */
        }
    } else if (kind == K3_SYNTH_NORMAL_F32) {
        for (uint64_t i = 0; i < n; i++) {
            float f = normal_one(&r, mean, std);
            memcpy(out + 4 * i, &f, 4);
        }
    } else if (kind == K3_SYNTH_NIBBLES) {
        uint64_t i = 0;
        for (; i + 4 <= n; i += 4) {
            uint32_t w = sfc32_next(&r);
            out[i] = (uint8_t)w;
            out[i + 1] = (uint8_t)(w >> 8);
            out[i + 2] = (uint8_t)(w >> 16);
            out[i + 3] = (uint8_t)(w >> 24);
        }
        for (; i < n; i++) out[i] = (uint8_t)sfc32_next(&r);
    } else if (kind == K3_SYNTH_E8M0) {
        for (uint64_t i = 0; i < n; i += 32) {
            uint32_t w = sfc32_next(&r);
            for (uint64_t j = 0; j < 32 && i + j < n; j++) out[i + j] = (uint8_t)(s + ((w >> j) & 1u));
        }
    }
    memcpy(out + n * esize, out, n * esize);
}
