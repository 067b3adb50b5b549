/* char_start.h: which 3-byte UTF-8 characters a merge may start from as one part. */
#ifndef K3_CHAR_START_H
#define K3_CHAR_START_H

#include "rank_table.h"

/* Fills t->char3 (65536 ranks by code point, K3_NO_RANK = start from bytes) and t->char3_ok (by
 * code point, bit left * 3 + right: neighbours for which starting whole is exact; 0 none, 1 ASCII,
 * 2 a 3-byte char). Returns 0, or -1 when out of memory (both stay NULL: merges start from bytes). */
int k3_char_start_init(k3_rank_table *t);

#endif
