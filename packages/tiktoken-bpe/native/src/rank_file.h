/* rank_file.h: parse a tiktoken rank file (`base64 rank` lines) into pool/offsets/ranks. */
#ifndef K3_RANK_FILE_H
#define K3_RANK_FILE_H

#include <stddef.h>
#include <stdint.h>

/* Parses data[0, len). pool needs len*3/4+4 bytes, offsets/ranks need (lines+1) entries, with
 * `cap` = their capacity. Returns the token count, or -(line number) of the first bad line, or
 * -(2^31-1) when a capacity is too small. Blank lines are skipped, "\r\n" accepted. */
long k3_parse_rank_file(const uint8_t *data, size_t len, uint8_t *pool, size_t pool_cap, uint32_t *offsets,
                        uint32_t *ranks, size_t cap, size_t *pool_used);

#endif
