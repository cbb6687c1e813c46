/*
 * http_head.h — serialising HTTP/1 response heads: the status line, the
 * Server and Date lines every answer shares (from the site, http_site.h),
 * numbers, and the complete error answer (4xx/5xx, text body, Connection:
 * close). Used by the HTTP/1 protocol (http1.c) only. Internal; calls only
 * leaves (http_date.h).
 *
 * A head is built in a fixed buffer on the caller's stack (no allocation),
 * then queued on the transport in one copy.
 */
#ifndef MF_HTTP_HEAD_H
#define MF_HTTP_HEAD_H

#include <stdint.h>
#include <string.h>

#include "http_site.h"

/* Room for the fixed part of any head: status line (short reasons), the
 * capped Server line, Date, framing and Connection lines. */
#define MF_HTTP_HEAD_FIXED 384

typedef struct mf_http_head {
    char fixed[MF_HTTP_HEAD_FIXED];
    size_t len;
} mf_http_head_t;

static inline void mf__http_head_put(mf_http_head_t *h, const char *s, size_t n)
{
    memcpy(h->fixed + h->len, s, n);
    h->len += n;
}

/* Decimal / lowercase hex digits of v at out; returns their count (at most
 * 20 / 16). Inline: every response head formats its Content-Length. */
static inline size_t mf__http_fmt_u64(char *out, uint64_t v)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

static inline size_t mf__http_fmt_hex(char *out, uint64_t v)
{
    static const char digits[] = "0123456789abcdef";
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = digits[v & 15];
        v >>= 4;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

/* Starts h with the status line, Server and Date. */
void mf__http_head_common(mf_http_head_t *h, mf_http_site_t *site, int status);

/* Fills h with a whole error answer: head and a one-line text body, with
 * Connection: close. Returns the body's length (mf_http_error_body_len). */
size_t mf__http_head_error(mf_http_head_t *h, mf_http_site_t *site, int status);

#endif /* MF_HTTP_HEAD_H */
