/*
 * buf.h — growable byte buffers whose memory comes from the loop's free
 * lists (up to MF_LOOP_ALLOC_MAX) or a checked malloc above that, for
 * connection input/output and response bodies.
 *
 * Ownership: the struct is embedded by its user; the memory belongs to the
 * buffer and goes back with mf__buf_release on the same loop. Capacities
 * are powers of two, so a buffer that is reused settles in one size class.
 */
#ifndef MF_BUF_H
#define MF_BUF_H

#include <stddef.h>
#include <string.h>

#include "moonflow/error.h"
#include "moonflow/loop.h"

typedef struct mf_buf {
    char *data;
    size_t len;
    size_t cap;
} mf_buf_t;

static inline void mf__buf_init(mf_buf_t *buf)
{
    buf->data = NULL;
    buf->len = 0;
    buf->cap = 0;
}

/* Makes room for `extra` more bytes after len. 0 or MF_ENOMEM. */
int mf__buf_reserve(mf_loop_t *loop, mf_buf_t *buf, size_t extra);
/* Returns the memory; the buffer is empty and unallocated afterwards. */
void mf__buf_release(mf_loop_t *loop, mf_buf_t *buf);

static inline int mf__buf_append(mf_loop_t *loop, mf_buf_t *buf,
                                 const void *data, size_t len)
{
    if (buf->cap - buf->len < len) {
        int rc = mf__buf_reserve(loop, buf, len);
        if (rc < 0)
            return rc;
    }
    if (len)
        memcpy(buf->data + buf->len, data, len);
    buf->len += len;
    return 0;
}

#endif /* MF_BUF_H */
