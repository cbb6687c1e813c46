/*
 * redis_reply.c — reply memory and the adapter that makes hiredis's
 * redisReader build mf_redis_reply_t trees directly in it.
 *
 * The reader calls our create functions with the slot's parent; an array
 * gets its elements as one block, and each child is written into its
 * parent's block, so a reply is a tree of plain structs with no pointer to
 * fix up afterwards. Top-level replies go where the connection's sink says
 * (the task's reply array or the connection's scratch memory); a sink with
 * no root discards the reply into a shared sentinel that is never written.
 *
 * Ownership: arenas belong to their task or connection and are released
 * with mf__redis_arena_reset. The reader belongs to its connection.
 */
#include <stdlib.h>
#include <string.h>

#include "redis_int.h"

struct mf_redis_chunk {
    mf_redis_chunk_t *next;
    size_t bytes; /* whole allocation, header included */
};

#define MF__CHUNK_HDR ((sizeof(mf_redis_chunk_t) + 15) & ~(size_t)15)
#define MF__CHUNK_MIN 1024

/* ---- arena ---------------------------------------------------------------
 */

void mf__redis_arena_init(mf_redis_arena_t *a, uint64_t limit)
{
    a->head = NULL;
    a->used = 0;
    a->total = 0;
    a->limit = limit;
}

static size_t mf__chunk_bytes(size_t need)
{
    size_t bytes = MF__CHUNK_MIN;
    while (bytes < need && bytes <= MF_LOOP_ALLOC_MAX / 2)
        bytes *= 2;
    return bytes < need ? need : bytes;
}

static mf_redis_chunk_t *mf__chunk_new(mf_loop_t *loop, size_t need)
{
    size_t bytes = mf__chunk_bytes(need + MF__CHUNK_HDR);
    mf_redis_chunk_t *c = bytes <= MF_LOOP_ALLOC_MAX
                              ? mf_loop_alloc(loop, bytes)
                              : mf_try_malloc(bytes);
    if (c)
        c->bytes = bytes;
    return c;
}

void *mf__redis_arena_alloc(mf_loop_t *loop, mf_redis_arena_t *a, size_t size)
{
    size = (size + 7) & ~(size_t)7;
    if (a->limit && a->total + size > a->limit)
        return NULL;
    mf_redis_chunk_t *c = a->head;
    if (!c || c->bytes - MF__CHUNK_HDR - a->used < size) {
        mf_redis_chunk_t *n = mf__chunk_new(loop, size);
        if (!n)
            return NULL;
        /* A big one-off block goes behind the head, so the head's free
         * space stays in use for the small nodes that follow. */
        if (c && n->bytes > MF__CHUNK_MIN * 2 &&
            n->bytes - MF__CHUNK_HDR - size <
                c->bytes - MF__CHUNK_HDR - a->used) {
            n->next = c->next;
            c->next = n;
            a->total += size;
            return (char *)n + MF__CHUNK_HDR;
        }
        n->next = c;
        a->head = c = n;
        a->used = 0;
    }
    void *p = (char *)c + MF__CHUNK_HDR + a->used;
    a->used += size;
    a->total += size;
    return p;
}

void mf__redis_arena_reset(mf_loop_t *loop, mf_redis_arena_t *a)
{
    mf_redis_chunk_t *c = a->head;
    while (c) {
        mf_redis_chunk_t *next = c->next;
        if (c->bytes <= MF_LOOP_ALLOC_MAX)
            mf_loop_free(loop, c, c->bytes);
        else
            mf_free(c);
        c = next;
    }
    a->head = NULL;
    a->used = 0;
    a->total = 0;
}

void mf__redis_arena_adopt(mf_redis_arena_t *into, mf_redis_arena_t *from)
{
    mf_redis_chunk_t *first = from->head;
    if (!first)
        return;
    if (!into->head) {
        into->head = first;
        into->used = from->used;
    } else {
        /* Behind into's head, whose free space stays in use. */
        mf_redis_chunk_t *last = first;
        while (last->next)
            last = last->next;
        last->next = into->head->next;
        into->head->next = first;
    }
    into->total += from->total;
    from->head = NULL;
    from->used = 0;
    from->total = 0;
}

/* ---- the reader adapter ----------------------------------------------- */

typedef struct mf_redis_adapter {
    mf_loop_t *loop;
    mf_redis_sink_t *sink;
} mf_redis_adapter_t;

/* Never written: every reply that nobody wants lands here. */
static mf_redis_reply_t mf__discard;

static mf_redis_reply_t *mf__slot(const redisReadTask *rt)
{
    mf_redis_adapter_t *ad = rt->privdata;
    if (rt->parent) {
        mf_redis_reply_t *parent = rt->parent->obj;
        if (parent == &mf__discard)
            return &mf__discard;
        return &parent->elements[rt->idx];
    }
    return ad->sink->root ? ad->sink->root : &mf__discard;
}

static void *mf__alloc(const redisReadTask *rt, size_t size)
{
    mf_redis_adapter_t *ad = rt->privdata;
    void *p = mf__redis_arena_alloc(ad->loop, ad->sink->arena, size);
    if (!p) {
        /* Over max_reply: the rest of this owner's replies is dropped. */
        ad->sink->overflow = true;
        ad->sink->root = NULL;
    }
    return p;
}

static void *mf__create_string(const redisReadTask *rt, char *str, size_t len)
{
    mf_redis_reply_t *slot = mf__slot(rt);
    if (slot == &mf__discard)
        return slot;
    char *copy = mf__alloc(rt, len + 1);
    if (!copy) {
        slot->type = MF_REDIS_NIL;
        return &mf__discard;
    }
    memcpy(copy, str, len);
    copy[len] = 0;
    slot->type = rt->type == REDIS_REPLY_STATUS  ? MF_REDIS_STATUS
                 : rt->type == REDIS_REPLY_ERROR ? MF_REDIS_ERROR
                                                 : MF_REDIS_STRING;
    slot->str = copy;
    slot->len = len;
    return slot;
}

static void *mf__create_array(const redisReadTask *rt, int n)
{
    mf_redis_reply_t *slot = mf__slot(rt);
    if (slot == &mf__discard)
        return slot;
    size_t count = n > 0 ? (size_t)n : 0;
    /* An empty array still gets a non-NULL block: NULL means nil array. */
    mf_redis_reply_t *elems =
        mf__alloc(rt, (count ? count : 1) * sizeof(*elems));
    if (!elems) {
        slot->type = MF_REDIS_NIL;
        return &mf__discard;
    }
    memset(elems, 0, count * sizeof(*elems));
    slot->type = MF_REDIS_ARRAY;
    slot->elements = elems;
    slot->len = count;
    return slot;
}

static void *mf__create_integer(const redisReadTask *rt, long long v)
{
    mf_redis_reply_t *slot = mf__slot(rt);
    if (slot != &mf__discard) {
        slot->type = MF_REDIS_INTEGER;
        slot->integer = v;
    }
    return slot;
}

static void *mf__create_nil(const redisReadTask *rt)
{
    mf_redis_reply_t *slot = mf__slot(rt);
    if (slot != &mf__discard) {
        memset(slot, 0, sizeof(*slot));
        /* "*-1" is a nil array, "$-1" a nil string. */
        slot->type =
            rt->type == REDIS_REPLY_ARRAY ? MF_REDIS_ARRAY : MF_REDIS_NIL;
    }
    return slot;
}

static void mf__free_object(void *obj)
{
    (void)obj; /* arena memory: released with its owner */
}

static redisReplyObjectFunctions mf__reader_fns = {
    mf__create_string, mf__create_array, mf__create_integer, mf__create_nil,
    mf__free_object};

redisReader *mf__redis_reader_create(mf_loop_t *loop, mf_redis_sink_t *sink)
{
    redisReader *r = redisReaderCreateWithFunctions(&mf__reader_fns);
    if (!r)
        return NULL;
    mf_redis_adapter_t *ad = mf_xmalloc(sizeof(*ad));
    ad->loop = loop;
    ad->sink = sink;
    r->privdata = ad;
    return r;
}

void mf__redis_reader_free(redisReader *reader)
{
    if (!reader)
        return;
    mf_free(reader->privdata);
    redisReaderFree(reader);
}
