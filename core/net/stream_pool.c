/*
 * stream_pool.c — the per-loop keepalive pool of streams: idle streams
 * kept by key, most recently pooled first, each with an idle timeout; a
 * stream whose socket fires while idle, or that fails the health peek when
 * taken, is closed instead of handed out.
 *
 * Owns the buckets (one per key, mf_xmalloc'd, kept until the loop ends:
 * a process talks to few peers) and the links of the streams idle in
 * them; the streams themselves stay stream.c's, closed through
 * mf__stream_close. Kept under its loop key.
 *
 * May call: the loop, stream.c's internal calls, libc.
 */
#include <stdlib.h>
#include <string.h>

#include "moonflow/error.h"
#include "stream_int.h"

#define MF_STREAM_KEY_MAX 511
#define MF_STREAM_POOL_SIZE 30 /* OpenResty's lua_socket_pool_size */

typedef struct mf_stream_bucket {
    mf_list_t link; /* the loop's buckets */
    mf_list_t idle; /* streams, most recently pooled first */
    size_t count;
    char key[];
} mf_stream_bucket_t;

typedef struct mf_stream_pools {
    mf_list_t buckets;
} mf_stream_pools_t;

static mf_stream_t *mf__stream_of(mf_list_t *link)
{
    return mf_container_of(link, mf_stream_t, pool_link);
}

/* Takes s out of its bucket (the caller closes it or hands it out). */
static void mf__stream_pool_unlink(mf_stream_t *s)
{
    mf_stream_bucket_t *b = s->bucket;
    mf_list_remove(&s->pool_link);
    b->count--;
    s->bucket = NULL;
    mf_timer_stop(s->loop, &s->idle);
}

static void mf__stream_pool_drop(mf_stream_t *s)
{
    mf__stream_pool_unlink(s);
    mf__stream_close(s);
}

void mf__stream_pool_event(mf_stream_t *s)
{
    mf__stream_pool_drop(s);
}

static void mf__stream_idle_expired(mf_timer_t *timer)
{
    mf__stream_pool_drop(timer->data);
}

static void mf__stream_pools_free(mf_loop_t *loop, void *ext)
{
    mf_stream_pools_t *p = ext;
    (void)loop;
    while (!mf_list_empty(&p->buckets)) {
        mf_stream_bucket_t *b = mf_container_of(mf_list_pop_front(&p->buckets),
                                                mf_stream_bucket_t, link);
        while (!mf_list_empty(&b->idle))
            mf__stream_pool_drop(mf__stream_of(b->idle.next));
        free(b);
    }
    free(p);
}

/* Above the protocol clients: its idle streams go before them (loop.h). */
#define MF_STREAM_POOL_LOOP_RANK 30
static mf_loop_key_t mf__stream_pools_key =
    MF_LOOP_KEY_INIT(MF_STREAM_POOL_LOOP_RANK, mf__stream_pools_free);

/* The bucket of key; a new one when create says so, else NULL. A bucket
 * found moves to the front: busy keys are found first. */
static mf_stream_bucket_t *mf__stream_bucket(mf_loop_t *loop, const char *key,
                                             bool create)
{
    mf_stream_pools_t *p = mf_loop_get(loop, &mf__stream_pools_key);
    if (!p) {
        if (!create)
            return NULL;
        p = mf_xmalloc(sizeof *p);
        mf_list_init(&p->buckets);
        mf_loop_set(loop, &mf__stream_pools_key, p);
    }
    mf_list_t *pos;
    mf_list_foreach(pos, &p->buckets)
    {
        mf_stream_bucket_t *b = mf_container_of(pos, mf_stream_bucket_t, link);
        if (strcmp(b->key, key) == 0) {
            mf_list_remove(&b->link);
            mf_list_push_front(&p->buckets, &b->link);
            return b;
        }
    }
    if (!create)
        return NULL;
    size_t n = strlen(key);
    mf_stream_bucket_t *b = mf_xmalloc(sizeof *b + n + 1);
    memcpy(b->key, key, n + 1);
    mf_list_init(&b->idle);
    b->count = 0;
    mf_list_push_front(&p->buckets, &b->link);
    return b;
}

static int mf__stream_pool_check(const mf_stream_t *s, const char *key)
{
    if (s->type != MF_STREAM_TCP || strlen(key) > MF_STREAM_KEY_MAX)
        return MF_EINVAL;
    if (s->state != MF_STREAM_OPEN)
        return MF_ENOTCONN;
    if (s->rd.active || s->wr.active)
        return MF_EBUSY;
    return mf__stream_healthy(s) ? 0 : MF_EPROTO;
}

int mf_stream_pool_put(mf_stream_t *s, const char *key, uint32_t idle_ms,
                       unsigned pool_size)
{
    int rc = mf__stream_pool_check(s, key);
    if (rc < 0) {
        if (s->state != MF_STREAM_CLOSED)
            mf__stream_close(s);
        return rc;
    }
    mf_stream_bucket_t *b = mf__stream_bucket(s->loop, key, true);
    if (!pool_size)
        pool_size = MF_STREAM_POOL_SIZE;
    while (b->count >= pool_size) /* the least recently pooled goes */
        mf__stream_pool_drop(mf__stream_of(b->idle.prev));
    mf_list_push_front(&b->idle, &s->pool_link);
    b->count++;
    s->bucket = b;
    s->state = MF_STREAM_POOLED;
    /* idle sockets do not keep a loop running */
    mf_io_set_ref(s->loop, &s->io, false);
    mf_timer_init(&s->idle, mf__stream_idle_expired, s);
    mf_timer_set_ref(s->loop, &s->idle, false);
    mf_timer_start(s->loop, &s->idle,
                   idle_ms ? idle_ms : MF_STREAM_DEFAULT_TIMEOUT_MS);
    return 0;
}

mf_stream_t *mf_stream_pool_take(mf_loop_t *loop, const char *key)
{
    mf_stream_bucket_t *b = mf__stream_bucket(loop, key, false);
    while (b && !mf_list_empty(&b->idle)) {
        mf_stream_t *s = mf__stream_of(b->idle.next);
        mf__stream_pool_unlink(s);
        if (!mf__stream_healthy(s)) {
            mf__stream_close(s);
            continue;
        }
        s->state = MF_STREAM_OPEN;
        s->reused++;
        mf_io_set_ref(loop, &s->io, true);
        return s;
    }
    return NULL;
}

size_t mf_stream_pool_count(const mf_loop_t *loop, const char *key)
{
    mf_stream_pools_t *p = mf_loop_get(loop, &mf__stream_pools_key);
    if (!p)
        return 0;
    mf_list_t *pos;
    mf_list_foreach(pos, &p->buckets)
    {
        mf_stream_bucket_t *b = mf_container_of(pos, mf_stream_bucket_t, link);
        if (strcmp(b->key, key) == 0)
            return b->count;
    }
    return 0;
}
