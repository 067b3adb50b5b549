/*
 * st_hash.c: an open-addressing name -> uint32 table. Slots keep the value and 32 bits of the
 * hash, so most probes never touch the names; the names themselves stay in the caller's string
 * table and are fetched through name_of(ctx, value).
 */
#include <stdlib.h>
#include <string.h>
#include "k3_safetensors.h"

typedef struct {
    uint32_t value; /* value + 1; 0 = empty */
    uint32_t tag;   /* high 32 bits of the hash */
} slot_t;           /* one 8-byte slot: a probe costs one cache miss */

struct st_hash {
    slot_t *slots;
    uint32_t cap; /* power of two */
    uint32_t used;
    st_name_fn name_of;
    const void *ctx;
    int slots_in_arena; /* a copy's slots belong to an st_arena */
};

static uint32_t capacity_for(uint32_t expected) {
    uint32_t cap = 16;
    while (cap < expected * 2u && cap < (1u << 31)) cap <<= 1;
    return cap;
}

uint64_t st_hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    uint64_t tail = 0;
    for (size_t k = 0; i + k < n; k++) tail |= (uint64_t)s[i + k] << (8 * k);
    h = (h ^ tail) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

st_hash *st_hash_new(uint32_t expected, st_name_fn name_of, const void *ctx) {
    st_hash *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    uint32_t cap = capacity_for(expected);
    h->slots = st_alloc_big(cap * sizeof(slot_t), 1);
    if (!h->slots) {
        st_hash_free(h);
        return NULL;
    }
    h->cap = cap;
    h->name_of = name_of;
    h->ctx = ctx;
    return h;
}

void st_hash_free(st_hash *h) {
    if (!h) return;
    if (!h->slots_in_arena) free(h->slots);
    free(h);
}

int st_hash_reset(st_hash *h, uint32_t expected) {
    uint32_t cap = capacity_for(expected);
    if (cap != h->cap) {
        slot_t *slots = st_alloc_big(cap * sizeof(slot_t), 1);
        if (!slots) return -1;
        free(h->slots);
        h->slots = slots;
        h->cap = cap;
    } else
        memset(h->slots, 0, cap * sizeof(slot_t));
    h->used = 0;
    return 0;
}

st_hash *st_hash_copy(const st_hash *h, st_arena *arena, const void *ctx) {
    st_hash *c = malloc(sizeof *c);
    if (!c) return NULL;
    *c = *h;
    c->ctx = ctx;
    c->slots_in_arena = arena != NULL;
    c->slots = arena ? st_arena_alloc(arena, h->cap * sizeof(slot_t)) : malloc(h->cap * sizeof(slot_t));
    if (!c->slots) {
        free(c);
        return NULL;
    }
    memcpy(c->slots, h->slots, h->cap * sizeof(slot_t));
    return c;
}

void st_hash_set_ctx(st_hash *h, const void *ctx) { h->ctx = ctx; }

static int grow(st_hash *h) {
    uint32_t cap = h->cap * 2;
    slot_t *slots = st_alloc_big(cap * sizeof(slot_t), 1);
    if (!slots) return -1;
    for (uint32_t i = 0; i < h->cap; i++) {
        if (!h->slots[i].value) continue;
        const uint8_t *name;
        size_t len;
        h->name_of(h->ctx, h->slots[i].value - 1, &name, &len);
        uint32_t at = (uint32_t)st_hash_bytes(name, len) & (cap - 1);
        while (slots[at].value) at = (at + 1) & (cap - 1);
        slots[at] = h->slots[i];
    }
    if (!h->slots_in_arena) free(h->slots);
    h->slots_in_arena = 0;
    h->slots = slots;
    h->cap = cap;
    return 0;
}

/* The slot holding the name, or the empty slot where it would go (the table is never full). */
static uint32_t probe(const st_hash *h, const uint8_t *name, size_t len, uint64_t hash) {
    uint32_t tag = (uint32_t)(hash >> 32);
    uint32_t at = (uint32_t)hash & (h->cap - 1);
    while (h->slots[at].value) {
        if (h->slots[at].tag == tag) {
            const uint8_t *other;
            size_t other_len;
            h->name_of(h->ctx, h->slots[at].value - 1, &other, &other_len);
            if (other_len == len && memcmp(other, name, len) == 0) return at;
        }
        at = (at + 1) & (h->cap - 1);
    }
    return at;
}

uint32_t st_hash_insert(st_hash *h, const uint8_t *name, size_t len, uint64_t hash, uint32_t value) {
    if ((h->used + 1) * 2 > h->cap && grow(h) != 0) return UINT32_MAX - 1;
    uint32_t at = probe(h, name, len, hash);
    if (h->slots[at].value) return h->slots[at].value - 1;
    h->slots[at].value = value + 1;
    h->slots[at].tag = (uint32_t)(hash >> 32);
    h->used++;
    return UINT32_MAX;
}

uint32_t st_hash_find(const st_hash *h, const uint8_t *name, size_t len, uint64_t hash) {
    return h->slots[probe(h, name, len, hash)].value - 1; /* empty slot: 0 - 1 = UINT32_MAX */
}

void st_hash_prefetch(const st_hash *h, uint64_t hash) { __builtin_prefetch(&h->slots[(uint32_t)hash & (h->cap - 1)], 1); }
