/* pretokenize.h: hand-written splitters for the cl100k, o200k and Kimi pat_str families. */
#ifndef K3_PRETOKENIZE_H
#define K3_PRETOKENIZE_H

#include <stddef.h>
#include <stdint.h>

typedef enum { K3_FAMILY_CL100K = 0, K3_FAMILY_O200K = 1, K3_FAMILY_KIMI = 2 } k3_family;

/* Byte index where the piece that starts at p ends (p < end); `end` is the segment end. */
size_t k3_piece_end(const uint8_t *s, size_t p, size_t end, k3_family family);

#endif
