/*
 * slab.h — per-loop allocator: power-of-two size classes (64 B … 16 KiB),
 * each a free list of objects carved from slabs of at least 64 KiB (at least
 * four objects each).
 *
 * Internal to the loop; single-threaded (the loop's thread). The slab owns
 * all the memory it hands out and frees it in mf__slab_close, so objects
 * still out at shutdown do not leak. Under AddressSanitizer freed objects are
 * poisoned, so a use after mf_loop_free is still caught.
 */
#ifndef MF_SLAB_H
#define MF_SLAB_H

#include <stddef.h>

/* 64, then two classes per power of two (96, 128, 192, 256, ... 12288,
 * 16384): an object wastes at most a third of its slot, not a half. */
#define MF_SLAB_CLASSES 17

typedef struct mf_slab_free {
    struct mf_slab_free *next;
} mf_slab_free_t;

typedef struct mf_slab_chunk {
    struct mf_slab_chunk *next;
    size_t bytes;
} mf_slab_chunk_t;

/* Slots are multiples of this: sizes rounded up to it share a class. */
#define MF_SLAB_GRAIN_SHIFT 5

typedef struct mf_slab {
    mf_slab_free_t *free[MF_SLAB_CLASSES];
    mf_slab_chunk_t *chunks;
    /* The class of every size up to MF_LOOP_ALLOC_MAX, by its count of
     * grains (rounded up): one load on every allocation and free. */
    unsigned char class_of[(16384 >> MF_SLAB_GRAIN_SHIFT) + 1];
} mf_slab_t;

void mf__slab_init(mf_slab_t *slab);
void mf__slab_close(mf_slab_t *slab);
void *mf__slab_alloc(mf_slab_t *slab, size_t size);
void mf__slab_free(mf_slab_t *slab, void *p, size_t size);

#endif /* MF_SLAB_H */
