/* ceiling.h: the disk's own limit for an access pattern, and cold-cache helpers for benchmarks. */
#ifndef K3_CEILING_H
#define K3_CEILING_H
#include <stdint.h>

/*
 * Reads `n` ranges (file index, offset, length) with `qd` plain pread threads, O_DIRECT aligned
 * supersets when `direct`. No cache, no JS: the reference the expert store is measured against.
 * Returns 0 and fills bytes/seconds, or an errno.
 */
int k3_read_ceiling(const char *const *paths, int n_paths, const uint32_t *file, const uint64_t *offset,
                    const uint64_t *length, int n, int qd, int direct, uint64_t *bytes, double *seconds);

/*
 * Memory backing alone: maps `bytes` of fresh anonymous memory (2 MiB-aligned; MADV_HUGEPAGE when
 * `huge`), faults it in with MADV_POPULATE_WRITE from `threads` threads (0 = one per core) taking
 * 8 MiB pieces in turn, and unmaps it. `seconds` is map to last fault: what any loader pays for
 * fresh memory before a byte of the file arrives (first-touch zeroing; in a VM with free page
 * reporting also the host backing each page again). 0 or an errno.
 */
int k3_backing_ceiling(uint64_t bytes, int threads, int huge, double *seconds);

/* fdatasync + POSIX_FADV_DONTNEED over the whole file: its pages leave the page cache. 0 or errno. */
int k3_drop_file_cache(const char *path);

#endif
