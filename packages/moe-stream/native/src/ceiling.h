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

/* fdatasync + POSIX_FADV_DONTNEED over the whole file: its pages leave the page cache. 0 or errno. */
int k3_drop_file_cache(const char *path);

#endif
