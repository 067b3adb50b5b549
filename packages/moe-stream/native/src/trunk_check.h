/* trunk_check.h: a packed trunk's per-tensor crc32s checked as its reads land, on the reader
   threads (not on the thread that computes with the layer). */
#ifndef K3_TRUNK_CHECK_H
#define K3_TRUNK_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include "direct_file.h"

/* One layer's (or chunk's) load: its tensors and the reads that bring them in. */
typedef struct k3_check_load k3_check_load;

/* What the last read of a load found when a tensor's bytes do not match. */
typedef struct k3_check_verdict {
    int failed;          /* 1: a tensor's crc32 differs from the manifest's */
    uint32_t tensor;     /* the first one (file order), an index into the load's tensors */
    uint32_t expect, got;
    uint32_t others;     /* further tensors that differ */
} k3_check_verdict;

/*
 * A load of `n_tensors` tensors (file offset, length, expected crc32) read by `n_reads` reads
 * (file offset, length; every tensor byte inside one of them). `label` names the load in messages
 * ("layer 3"), `names` the tensors. NULL with `message` filled when a tensor is not covered or out
 * of memory. The load frees itself after k3_check_read_done has been called once per read.
 */
k3_check_load *k3_check_load_new(const char *label, uint32_t n_tensors, const char *const *names, const uint64_t *offsets,
                                 const uint64_t *lengths, const uint32_t *expects, uint32_t n_reads,
                                 const uint64_t *read_offsets, const uint64_t *read_lengths, char *message, size_t message_len);

/*
 * Read `read` of the load finished on this thread: `data` holds its bytes (file byte
 * read_offsets[read] first), or is NULL when the read failed or was cancelled. Computes the crc32
 * of each part of a tensor this read holds. The call for the last read combines the parts and
 * compares every tensor: on a mismatch it fills `verdict` and `result` (status EBADMSG, a message
 * naming `path`, the load, the tensor, its offset and both crc32s) and returns 1. Returns 0 otherwise
 * (nothing to report, or a read failed: its own error is reported).
 */
int k3_check_read_done(k3_check_load *load, uint32_t read, const uint8_t *data, const char *path,
                       k3_check_verdict *verdict, k3_read_result *result);

#endif
