/*
 * core/shared/arena.h — a first-fit allocator over one caller-given block
 * of memory (internal to core/shared). A stripe of a shared dict carves
 * its entries and list items from its arena, so a dict that is full
 * allocates nothing more from the system: a new entry either fits in a
 * free block or forces old entries out (the dict's LRU).
 *
 * Blocks carry boundary tags (their size and their neighbour's) so a freed
 * block merges with free neighbours at once; free blocks sit in bins by
 * the power of two of their size, found through a bitmap. Not thread-safe:
 * the stripe's lock covers it. Ownership: the memory is the caller's and
 * outlives the arena; pointers handed out point into it.
 */
#ifndef MF_SHARED_ARENA_H
#define MF_SHARED_ARENA_H

#include <stddef.h>
#include <stdint.h>

#define MF_ARENA_BINS 64

typedef struct mf_arena_free mf_arena_free_t;

typedef struct mf_arena {
    char *base;
    size_t size;       /* bytes of blocks (a multiple of 16) */
    size_t free_bytes; /* sum of the free blocks' sizes */
    uint64_t nonempty; /* bit i: bins[i] has a block */
    mf_arena_free_t *bins[MF_ARENA_BINS];
} mf_arena_t;

/* Bytes a block takes for an n-byte allocation (tags and rounding). */
size_t mf_arena_block_size(size_t n);

/* mem must be 16-byte aligned; size is rounded down to 16. */
void mf_arena_init(mf_arena_t *a, void *mem, size_t size);
/* n bytes, 16-byte aligned; NULL when no free block is big enough. */
void *mf_arena_alloc(mf_arena_t *a, size_t n);
void mf_arena_free(mf_arena_t *a, void *p);
/* Gives the tail of p's block back when n bytes need much less. */
void mf_arena_shrink(mf_arena_t *a, void *p, size_t n);
/* The bytes p may hold (at least what was asked for). */
size_t mf_arena_usable(const void *p);

#endif /* MF_SHARED_ARENA_H */
