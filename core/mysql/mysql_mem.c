/*
 * mysql_mem.c — task memory: a chain of chunks from the loop's free lists
 * (pieces bigger than a chunk get a chunk of their own from a checked
 * malloc), released at once when the task is destroyed. A warm loop hands
 * the same chunks to the next task: no malloc per query.
 *
 * Ownership: the arena is embedded in its task; the chunks belong to it.
 */
#include <string.h>

#include "mysql_int.h"

/* One loop size class: a point select's values, fields and copies fit. */
#define MF_MYSQL_CHUNK 4096

struct mf_mysql_chunk {
    mf_mysql_chunk_t *next;
    size_t size; /* of the whole chunk, header included */
    /* data follows, aligned for any value */
    max_align_t data[];
};

void mf__mysql_arena_init(mf_mysql_arena_t *a, uint64_t limit)
{
    a->head = NULL;
    a->left = 0;
    a->total = 0;
    a->limit = limit;
}

int mf__mysql_arena_charge(mf_mysql_arena_t *a, uint64_t size)
{
    if (a->limit && (size > a->limit || a->total > a->limit - size))
        return MF_EMSGSIZE;
    a->total += size;
    return 0;
}

static mf_mysql_chunk_t *mf__chunk_new(mf_loop_t *loop, size_t size)
{
    mf_mysql_chunk_t *c = size <= MF_LOOP_ALLOC_MAX ? mf_loop_alloc(loop, size)
                                                    : mf_try_malloc(size);
    if (c)
        c->size = size;
    return c;
}

void *mf__mysql_arena_alloc(mf_loop_t *loop, mf_mysql_arena_t *a, size_t size)
{
    size_t align = sizeof(max_align_t);
    size = (size + align - 1) & ~(align - 1);
    if (size == 0)
        size = align;
    if (mf__mysql_arena_charge(a, size) < 0)
        return NULL;
    if (size <= a->left) {
        char *end = (char *)a->head + a->head->size;
        void *p = end - a->left;
        a->left -= size;
        return p;
    }
    size_t head = offsetof(mf_mysql_chunk_t, data);
    size_t want = size + head > MF_MYSQL_CHUNK ? size + head : MF_MYSQL_CHUNK;
    mf_mysql_chunk_t *c = mf__chunk_new(loop, want);
    if (!c) {
        a->total -= size;
        return NULL;
    }
    if (want == MF_MYSQL_CHUNK || !a->head) {
        c->next = a->head; /* the new chunk is the one to fill */
        a->head = c;
        a->left = want - head - size;
        return c->data;
    }
    c->next = a->head->next; /* a big piece: keep filling the current one */
    a->head->next = c;
    return c->data;
}

void mf__mysql_arena_release(mf_loop_t *loop, mf_mysql_arena_t *a)
{
    mf_mysql_chunk_t *c = a->head;
    while (c) {
        mf_mysql_chunk_t *next = c->next;
        if (c->size <= MF_LOOP_ALLOC_MAX)
            mf_loop_free(loop, c, c->size);
        else
            mf_free(c);
        c = next;
    }
    mf__mysql_arena_init(a, a->limit);
}
