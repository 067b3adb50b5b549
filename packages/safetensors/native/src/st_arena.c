/*
 * st_arena.c: the memory a checkpoint's column tables live in. Each shard is parsed into
 * reused scratch columns, then copied at its exact size into this arena: chunks of up to 32 MB,
 * 2 MB-aligned and advised as transparent huge pages from 2 MB on, so the ~75 MB a K3 index
 * keeps costs a few dozen page faults instead of ~19,000 (on this paravirtualised VM a 4 KB fault costs several
 * microseconds of trap; in the profile fresh-page faults outweighed the whole JSON scan).
 * Allocation is thread-safe (shards are parsed in parallel); everything is freed at once.
 */
#include <pthread.h>
#include <stdlib.h>
#include "k3_safetensors.h"

#define ALIGN 64u

/* Chunk sizes grow 64 KB -> 2 MB -> 32 MB, so a small file's index stays small (huge pages only
   from the 2 MB chunk on) while a K3 index lives in 32 MB chunks. */
static size_t chunk_size(int nth) { return nth == 0 ? (64u << 10) : nth == 1 ? (2u << 20) : (32u << 20); }

typedef struct chunk {
    struct chunk *next;
    uint8_t *base;
    size_t used, size;
} chunk;

struct st_arena {
    pthread_mutex_t lock;
    chunk *head; /* the chunk being filled; older ones follow */
    int chunks;
};

st_arena *st_arena_new(void) {
    st_arena *a = calloc(1, sizeof *a);
    if (a) pthread_mutex_init(&a->lock, NULL);
    return a;
}

static chunk *add_chunk(st_arena *a, size_t at_least) {
    chunk *c = malloc(sizeof *c);
    if (!c) return NULL;
    size_t size = chunk_size(a->chunks);
    c->size = at_least > size ? at_least : size;
    c->base = st_alloc_big(c->size, 0);
    if (!c->base) {
        free(c);
        return NULL;
    }
    a->chunks++;
    c->used = 0;
    c->next = a->head;
    a->head = c;
    return c;
}

void *st_arena_alloc(st_arena *a, size_t bytes) {
    size_t rounded = (bytes + ALIGN - 1) / ALIGN * ALIGN;
    if (rounded == 0) rounded = ALIGN;
    pthread_mutex_lock(&a->lock);
    chunk *c = a->head;
    if (!c || c->size - c->used < rounded) c = add_chunk(a, rounded);
    void *p = NULL;
    if (c) {
        p = c->base + c->used;
        c->used += rounded;
    }
    pthread_mutex_unlock(&a->lock);
    return p;
}

void st_arena_free(st_arena *a) {
    if (!a) return;
    for (chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c->base);
        free(c);
    }
    pthread_mutex_destroy(&a->lock);
    free(a);
}
