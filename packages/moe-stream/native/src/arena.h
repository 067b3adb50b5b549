/* arena.h: the store's one allocation: slots of equal size, aligned for O_DIRECT, faulted in up front. */
#ifndef K3_ARENA_H
#define K3_ARENA_H
#include <stdint.h>

/* NULL on failure (errno set). `prefault` touches every page now so RSS reflects the budget at start. */
uint8_t *k3_arena_alloc(uint64_t bytes, uint32_t align, int prefault);
void k3_arena_free(uint8_t *arena);

/* Gives the whole pages inside [p, p + bytes) back to the kernel now (MADV_DONTNEED); the range
   stays mapped and reads as zeros. close() uses it so memory is returned at once, while a JS view
   that outlives close() (freed only when collected) can never touch unmapped memory. */
void k3_release_pages(uint8_t *p, uint64_t bytes);

#endif
