/* arena.c: posix_memalign'd slab, 2 MiB-aligned when large so transparent hugepages can back it. */
#define _GNU_SOURCE
#include "arena.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

uint8_t *k3_arena_alloc(uint64_t bytes, uint32_t align, int prefault) {
    if (bytes == 0) bytes = align;
    size_t a = align < 4096 ? 4096 : align;
    if (bytes >= (8u << 20) && a < (2u << 20)) a = 2u << 20;
    void *p = NULL;
    int rc = posix_memalign(&p, a, (size_t)bytes);
    if (rc != 0) {
        errno = rc;
        return NULL;
    }
    if (a >= (2u << 20)) madvise(p, (size_t)bytes, MADV_HUGEPAGE);
    if (prefault && madvise(p, (size_t)bytes, MADV_POPULATE_WRITE) != 0) memset(p, 0, (size_t)bytes);
    return p;
}

void k3_arena_free(uint8_t *arena) { free(arena); }

void k3_release_pages(uint8_t *p, uint64_t bytes) {
    if (!p || bytes == 0) return;
    const uintptr_t page = 4096;
    /* Whole pages only: a partial page at either end may hold someone else's bytes. */
    uintptr_t start = ((uintptr_t)p + page - 1) & ~(page - 1);
    uintptr_t end = ((uintptr_t)p + (uintptr_t)bytes) & ~(page - 1);
    if (end > start) madvise((void *)start, end - start, MADV_DONTNEED);
}
