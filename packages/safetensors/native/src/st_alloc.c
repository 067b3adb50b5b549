/*
 * st_alloc.c: large allocations on transparent huge pages (when the kernel allows them). The
 * name hashes of a 497k-tensor checkpoint are probed at random; with 4 KB pages every probe
 * risks a TLB miss and every first touch a page fault, which dominated the profile.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "k3_safetensors.h"

#define HUGE_PAGE (2u << 20)

void *st_alloc_big(size_t bytes, int zero) {
    if (bytes < HUGE_PAGE) return zero ? calloc(1, bytes ? bytes : 1) : malloc(bytes ? bytes : 1);
    void *p = NULL;
    size_t rounded = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    if (posix_memalign(&p, HUGE_PAGE, rounded) != 0) return NULL;
    madvise(p, rounded, MADV_HUGEPAGE);
    if (zero) memset(p, 0, rounded);
    return p;
}
