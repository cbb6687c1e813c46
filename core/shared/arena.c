/*
 * core/shared/arena.c — the stripe allocator of the shared dict (see
 * arena.h). Each block starts with two words: the size of the block before
 * it (0 for the first) and its own size, whose low bit says "in use".
 * Sizes are multiples of 16, so payloads stay 16-byte aligned. A free
 * block keeps its bin links in its payload (hence 32 bytes at least).
 *
 * May call: libc only.
 */
#include <stdbool.h>
#include <string.h>

#include "arena.h"

#define MF_ARENA_USED ((size_t)1)
#define MF_ARENA_MIN 32

typedef struct mf_arena_block {
    size_t prev_size;
    size_t size; /* | MF_ARENA_USED */
} mf_arena_block_t;

struct mf_arena_free {
    mf_arena_block_t hdr;
    mf_arena_free_t *next, *prev;
};

static size_t mf__size(const mf_arena_block_t *b)
{
    return b->size & ~MF_ARENA_USED;
}

static bool mf__used(const mf_arena_block_t *b)
{
    return b->size & MF_ARENA_USED;
}

static unsigned mf__bin(size_t size)
{
    return 63u - (unsigned)__builtin_clzll((unsigned long long)size);
}

static mf_arena_block_t *mf__next(const mf_arena_t *a, mf_arena_block_t *b)
{
    char *n = (char *)b + mf__size(b);
    return n == a->base + a->size ? NULL : (mf_arena_block_t *)(void *)n;
}

static mf_arena_block_t *mf__prev(mf_arena_block_t *b)
{
    return b->prev_size ? (mf_arena_block_t *)(void *)((char *)b - b->prev_size)
                        : NULL;
}

static void mf__bin_insert(mf_arena_t *a, mf_arena_block_t *b)
{
    mf_arena_free_t *f = (mf_arena_free_t *)b;
    unsigned i = mf__bin(mf__size(b));
    f->prev = NULL;
    f->next = a->bins[i];
    if (f->next)
        f->next->prev = f;
    a->bins[i] = f;
    a->nonempty |= 1ull << i;
}

static void mf__bin_remove(mf_arena_t *a, mf_arena_block_t *b)
{
    mf_arena_free_t *f = (mf_arena_free_t *)b;
    unsigned i = mf__bin(mf__size(b));
    if (f->prev)
        f->prev->next = f->next;
    else
        a->bins[i] = f->next;
    if (f->next)
        f->next->prev = f->prev;
    if (!a->bins[i])
        a->nonempty &= ~(1ull << i);
}

/* Writes b's size and tells the block after it. */
static void mf__set_size(mf_arena_t *a, mf_arena_block_t *b, size_t size,
                         bool used)
{
    b->size = size | (used ? MF_ARENA_USED : 0);
    mf_arena_block_t *n = mf__next(a, b);
    if (n)
        n->prev_size = size;
}

size_t mf_arena_block_size(size_t n)
{
    size_t bs = (n + sizeof(mf_arena_block_t) + 15) & ~(size_t)15;
    return bs < MF_ARENA_MIN ? MF_ARENA_MIN : bs;
}

void mf_arena_init(mf_arena_t *a, void *mem, size_t size)
{
    memset(a, 0, sizeof(*a));
    a->base = mem;
    a->size = size & ~(size_t)15;
    if (a->size < MF_ARENA_MIN) {
        a->size = 0;
        return;
    }
    mf_arena_block_t *b = mem;
    b->prev_size = 0;
    mf__set_size(a, b, a->size, false);
    a->free_bytes = a->size;
    mf__bin_insert(a, b);
}

/* A free block of at least bs bytes: first fit in bs's own bin, else the
 * head of the first bigger bin (all of its blocks fit). */
static mf_arena_block_t *mf__find(mf_arena_t *a, size_t bs)
{
    unsigned i = mf__bin(bs);
    for (mf_arena_free_t *f = a->bins[i]; f; f = f->next)
        if (mf__size(&f->hdr) >= bs)
            return &f->hdr;
    uint64_t above =
        i + 1 < MF_ARENA_BINS ? a->nonempty & ~((2ull << i) - 1) : 0;
    if (!above)
        return NULL;
    return &a->bins[__builtin_ctzll(above)]->hdr;
}

void *mf_arena_alloc(mf_arena_t *a, size_t n)
{
    size_t bs = mf_arena_block_size(n);
    if (n > a->size || bs > a->size)
        return NULL;
    mf_arena_block_t *b = mf__find(a, bs);
    if (!b)
        return NULL;
    mf__bin_remove(a, b);
    size_t size = mf__size(b);
    if (size - bs >= MF_ARENA_MIN) {
        mf_arena_block_t *rest = (mf_arena_block_t *)(void *)((char *)b + bs);
        rest->prev_size = bs;
        mf__set_size(a, rest, size - bs, false);
        mf__bin_insert(a, rest);
        size = bs;
    }
    mf__set_size(a, b, size, true);
    a->free_bytes -= size;
    return b + 1;
}

void mf_arena_free(mf_arena_t *a, void *p)
{
    mf_arena_block_t *b = (mf_arena_block_t *)p - 1;
    size_t size = mf__size(b);
    a->free_bytes += size;
    mf_arena_block_t *n = mf__next(a, b);
    if (n && !mf__used(n)) {
        mf__bin_remove(a, n);
        size += mf__size(n);
    }
    mf_arena_block_t *pb = mf__prev(b);
    if (pb && !mf__used(pb)) {
        mf__bin_remove(a, pb);
        size += mf__size(pb);
        b = pb;
    }
    mf__set_size(a, b, size, false);
    mf__bin_insert(a, b);
}

void mf_arena_shrink(mf_arena_t *a, void *p, size_t n)
{
    mf_arena_block_t *b = (mf_arena_block_t *)p - 1;
    size_t size = mf__size(b), bs = mf_arena_block_size(n);
    if (bs > size || size - bs < MF_ARENA_MIN)
        return;
    mf_arena_block_t *rest = (mf_arena_block_t *)(void *)((char *)b + bs);
    rest->prev_size = bs;
    mf__set_size(a, rest, size - bs, true);
    b->size = bs | MF_ARENA_USED;
    mf_arena_free(a, rest + 1); /* merges with a free block after it */
}

size_t mf_arena_usable(const void *p)
{
    const mf_arena_block_t *b = (const mf_arena_block_t *)p - 1;
    return mf__size(b) - sizeof(*b);
}
