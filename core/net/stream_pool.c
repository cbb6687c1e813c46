/*
 * stream_pool.c — the keepalive pool of streams, as endpoints of the
 * loop's endpoint pool (moonflow/endpoint.h): an endpoint per key holds
 * the idle streams, most recently pooled first, each with its idle
 * timeout; a stream whose socket fires while idle, or that fails the
 * health peek when taken, is closed instead of handed out.
 *
 * Owns nothing: the endpoint pool owns the endpoints and the links of the
 * idle streams; the streams stay stream.c's, closed through
 * mf__stream_close.
 *
 * May call: the endpoint pool, stream.c's internal calls, libc.
 */
#include <string.h>

#include "moonflow/error.h"
#include "stream_int.h"

#define MF_STREAM_KEY_MAX 511
#define MF_STREAM_POOL_SIZE 30 /* OpenResty's lua_socket_pool_size */

static mf_stream_t *mf__stream_of(mf_pconn_t *pc)
{
    return mf_container_of(pc, mf_stream_t, pc);
}

static bool mf__stream_pool_healthy(mf_pconn_t *pc)
{
    return mf__stream_healthy(mf__stream_of(pc));
}

/* The socket fired while idle: room to write again is no news; bytes or
 * an end of file are. */
static bool mf__stream_pool_idle_event(mf_pconn_t *pc)
{
    return !mf__stream_healthy(mf__stream_of(pc));
}

static void mf__stream_pool_close(mf_pconn_t *pc)
{
    mf__stream_close(mf__stream_of(pc));
}

/* No open: a stream is opened by its user, and only adopted when idle. */
static const mf_endpoint_ops_t mf__stream_endpoint_ops = {
    .protocol = "stream",
    .healthy = mf__stream_pool_healthy,
    .idle_event = mf__stream_pool_idle_event,
    .close = mf__stream_pool_close,
};

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
    mf_endpoint_t *ep =
        mf_endpoint_get(s->loop, &mf__stream_endpoint_ops, key, NULL);
    /* The pool size is the putter's: over it, the least recently pooled
     * goes (the pool's max_idle). */
    mf_endpoint_limits_t limits = {
        .max_idle = pool_size ? pool_size : MF_STREAM_POOL_SIZE,
        .idle_timeout_ms = MF_STREAM_DEFAULT_TIMEOUT_MS};
    mf_endpoint_set_limits(ep, &limits);
    s->state = MF_STREAM_POOLED;
    /* idle sockets do not keep a loop running (the pool unrefs s->io) */
    mf_endpoint_adopt_idle(ep, &s->pc, &s->io,
                           idle_ms ? idle_ms : MF_STREAM_DEFAULT_TIMEOUT_MS);
    return 0;
}

mf_stream_t *mf_stream_pool_take(mf_loop_t *loop, const char *key)
{
    mf_endpoint_t *ep = mf_endpoint_find(loop, &mf__stream_endpoint_ops, key);
    mf_pconn_t *pc = ep ? mf_endpoint_take_idle(ep) : NULL;
    if (!pc)
        return NULL;
    mf_pconn_detach(pc); /* the taker's now, counted nowhere */
    mf_stream_t *s = mf__stream_of(pc);
    s->state = MF_STREAM_OPEN;
    s->reused++;
    return s;
}

size_t mf_stream_pool_count(const mf_loop_t *loop, const char *key)
{
    mf_endpoint_t *ep = mf_endpoint_find(loop, &mf__stream_endpoint_ops, key);
    return ep ? mf_endpoint_idle_count(ep) : 0;
}
