/* arena.h: the store's one allocation: slots of equal size, aligned for O_DIRECT, faulted in up front. */
#ifndef K3_ARENA_H
#define K3_ARENA_H
#include <stdint.h>

/* NULL on failure (errno set). `prefault` touches every page now so RSS reflects the budget at start. */
uint8_t *k3_arena_alloc(uint64_t bytes, uint32_t align, int prefault);
void k3_arena_free(uint8_t *arena);

#endif
