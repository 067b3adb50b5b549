/*
 * resident_load.h: loading byte ranges of shard files into resident memory at disk speed.
 *
 * Every block (one contiguous range of one file) gets its own 2 MiB-aligned piece of one anonymous
 * mapping; the read pool (io_uring or pread threads, O_DIRECT with the buffered fallback) reads it
 * in `piece_bytes` pieces straight into place, several in flight. File byte x of a block lands at
 * data[x - base] with base = start rounded down to the direct-I/O alignment, so the block keeps the
 * file's alignment modulo 4096 and a tensor is a view of it (no copy). Each block owns its mapping
 * range (munmap it with k3_resident_block_free when done); nothing else is allocated per block.
 */
#ifndef K3_RESIDENT_LOAD_H
#define K3_RESIDENT_LOAD_H

#include <stddef.h>
#include <stdint.h>
#include "direct_file.h"

/* How the destination pages get faulted in. */
enum {
    K3_PREFAULT_NONE = 0,     /* 4 KiB pages faulted by the reads themselves */
    K3_PREFAULT_HUGE = 1,     /* MADV_HUGEPAGE: 2 MiB pages faulted by the reads */
    K3_PREFAULT_POPULATE = 2, /* MADV_HUGEPAGE + MADV_POPULATE_WRITE per block, ahead of its reads */
};

typedef struct k3_load_block {
    /* in */
    uint32_t file;
    uint64_t start, end; /* file bytes wanted: [start, end) */
    /* out */
    uint64_t base;  /* file offset of data[0] */
    uint8_t *data;  /* the block's memory (file byte x at data[x - base]) */
    uint64_t bytes; /* valid bytes from data: end - base */
    uint64_t owned; /* bytes of the mapping this block owns (for k3_resident_block_free) */
} k3_load_block;

typedef struct k3_load_config {
    k3_file *files;
    uint32_t n_files;
    uint64_t piece_bytes; /* multiple of 2 MiB */
    int threads;          /* queue depth */
    int engine;           /* K3_ENGINE_* */
    int prefault;         /* K3_PREFAULT_* */
    int populate_threads; /* threads faulting pages in ahead of the reads under POPULATE (0 = one per core, at most 8) */
    /* Called on the calling thread about every `progress_ms` while reads are in flight (may be NULL). */
    void (*progress)(void *ctx, uint64_t done_bytes, uint64_t total_bytes);
    void *progress_ctx;
    int progress_ms;
    /* Test hook: K3_FAULT_* for the read after `fault_after` reads (0 = none). */
    int fault_kind;
    int64_t fault_after;
} k3_load_config;

typedef struct k3_load_stats {
    uint64_t reads, device_bytes, requested_bytes, direct_reads, buffered_reads;
    uint64_t mapped_bytes;   /* sum of the blocks' owned ranges */
    double seconds;          /* wall time from the first allocation to the last completion */
    int engine;              /* K3_ENGINE_IN_USE_* */
    int prefault_used;       /* K3_PREFAULT_* actually applied (POPULATE falls back to touching pages) */
    int populate_threads;    /* populate threads run (0 unless POPULATE) */
    double populate_seconds; /* summed over the populate threads: time spent faulting pages in */
    double read_busy_seconds; /* wall time with at least one read in flight */
    char engine_note[160];
} k3_load_stats;

/*
 * Loads every block. 0 on success (every block's data/bytes/owned filled); otherwise an errno with
 * `message` naming the file and offsets (a truncated shard, an I/O error), and no block left mapped.
 */
int k3_resident_load(const k3_load_config *cfg, k3_load_block *blocks, int n_blocks, k3_load_stats *stats, char *message,
                     size_t message_len);

/* Unmaps one block's range. */
void k3_resident_block_free(uint8_t *data, uint64_t owned);

#endif
