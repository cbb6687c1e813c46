/*
 * http_date.h — the "Date: ...\r\n" line of a server's answers, cached: the
 * wall clock is read at most once per loop tick (the loop's cached time,
 * refreshed every iteration), as nginx reads it once per event loop turn,
 * and formatted at most once per second. Internal, a leaf (engine only).
 *
 * The caller embeds mf_http_date_t (zeroed: nothing cached yet) and owns
 * it; one loop thread uses it. The line returned lives in the cache until
 * its next refresh.
 */
#ifndef MF_HTTP_DATE_H
#define MF_HTTP_DATE_H

#include <stddef.h>
#include <stdint.h>

#include "moonflow/loop.h"

typedef struct mf_http_date {
    uint64_t checked; /* loop time of the last clock read */
    long sec;         /* the second the line shows */
    size_t len;       /* 0: nothing formatted yet */
    char line[40];    /* "Date: Tue, 01 Dec 2026 10:00:00 GMT\r\n" */
} mf_http_date_t;

/* Reads the clock for loop tick `tick` and reformats when the second has
 * changed (http_date.c). */
const char *mf__http_date_refresh(mf_http_date_t *d, uint64_t tick,
                                  size_t *len);

/* The Date line as of the loop's current tick; *len is its length. Inline:
 * every answer asks, and within a tick the cache answers. */
static inline const char *mf__http_date_line(mf_http_date_t *d,
                                             const mf_loop_t *loop, size_t *len)
{
    uint64_t tick = mf_loop_now(loop);
    if (tick == d->checked && d->len) {
        *len = d->len;
        return d->line;
    }
    return mf__http_date_refresh(d, tick, len);
}

#endif /* MF_HTTP_DATE_H */
