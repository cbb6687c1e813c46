/*
 * buf.c — growth and release of mf_buf_t.
 */
#include "buf.h"

#include "alloc.h"

/* A checked allocation either way: small buffers come from the loop's free
 * lists (which never fail), so the failure injection is honoured here too,
 * or an out-of-memory path behind a buffer could never be tested. */
static void *mf__buf_alloc(mf_loop_t *loop, size_t cap)
{
    if (cap <= MF_LOOP_ALLOC_MAX)
        return mf__alloc_should_fail() ? NULL : mf_loop_alloc(loop, cap);
    return mf_try_malloc(cap); /* user-sized: fail the request, not abort */
}

static void mf__buf_free(mf_loop_t *loop, void *p, size_t cap)
{
    if (cap <= MF_LOOP_ALLOC_MAX)
        mf_loop_free(loop, p, cap);
    else
        mf_free(p);
}

int mf__buf_reserve(mf_loop_t *loop, mf_buf_t *buf, size_t extra)
{
    size_t need = buf->len + extra;
    if (need < buf->len)
        return MF_ENOMEM; /* overflow */
    if (need <= buf->cap)
        return 0;
    size_t cap = buf->cap ? buf->cap : 1024;
    while (cap < need) {
        if (cap > SIZE_MAX / 2)
            return MF_ENOMEM;
        cap *= 2;
    }
    char *data = mf__buf_alloc(loop, cap);
    if (!data)
        return MF_ENOMEM;
    if (buf->len)
        memcpy(data, buf->data, buf->len);
    if (buf->data)
        mf__buf_free(loop, buf->data, buf->cap);
    buf->data = data;
    buf->cap = cap;
    return 0;
}

void mf__buf_release(mf_loop_t *loop, mf_buf_t *buf)
{
    if (buf->data)
        mf__buf_free(loop, buf->data, buf->cap);
    mf__buf_init(buf);
}
