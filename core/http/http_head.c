/*
 * http_head.c — HTTP/1 response heads: status line, the shared Server and
 * Date lines, numbers, and whole error answers. Pure formatting into the
 * caller's buffer; the lines come from the site (http_site.h, the Date
 * line through its cache, http_date.h).
 */
#include "http_head.h"

#include <stdio.h>

/* "HTTP/1.1 200 OK\r\n" */
static size_t mf__http_fmt_status_line(char *out, int status)
{
    const char *reason = mf_http_reason(status);
    size_t rlen = strlen(reason);
    if (status < 100 || status > 999)
        status = 500;
    memcpy(out, "HTTP/1.1 ", 9);
    out[9] = (char)('0' + status / 100);
    out[10] = (char)('0' + status / 10 % 10);
    out[11] = (char)('0' + status % 10);
    out[12] = ' ';
    memcpy(out + 13, reason, rlen);
    memcpy(out + 13 + rlen, "\r\n", 2);
    return 15 + rlen;
}

/* Formats the status line and the Server line of status into the site's
 * cache. Fits: reason phrases are at most 31 bytes, the Server line is
 * capped below 80. */
static void mf__http_head_cache_status(mf_http_site_t *site, int status)
{
    mf_http_status_cache_t *c = &site->status_cache;
    _Static_assert(sizeof c->text >= 15 + 31 + sizeof site->server_line,
                   "the status cache holds a status and a Server line");
    c->len = mf__http_fmt_status_line(c->text, status);
    memcpy(c->text + c->len, site->server_line, site->server_line_len);
    c->len += site->server_line_len;
    c->status = status;
}

/* Fits in h->fixed: the cached lines and Date are short. */
void mf__http_head_common(mf_http_head_t *h, mf_http_site_t *site, int status)
{
    size_t date_len;
    const char *date = mf__http_date_line(&site->date, site->loop, &date_len);
    if (site->status_cache.status != status)
        mf__http_head_cache_status(site, status);
    memcpy(h->fixed, site->status_cache.text, site->status_cache.len);
    h->len = site->status_cache.len;
    mf__http_head_put(h, date, date_len);
}

/* The body of an error answer, "400 Bad Request\n": its length. Fits:
 * reason phrases are at most 31 bytes. */
static size_t mf__http_error_body(char out[64], int status)
{
    int n = snprintf(out, 64, "%d %s\n", status, mf_http_reason(status));
    return n < 0 ? 0 : (size_t)n;
}

size_t mf_http_error_body_len(int status)
{
    char body[64];
    return mf__http_error_body(body, status);
}

size_t mf__http_head_error(mf_http_head_t *h, mf_http_site_t *site, int status)
{
    char body[64];
    size_t blen = mf__http_error_body(body, status);
    mf__http_head_common(h, site, status);
    mf__http_head_put(h, "Content-Type: text/plain\r\nContent-Length: ", 42);
    h->len += mf__http_fmt_u64(h->fixed + h->len, (uint64_t)blen);
    mf__http_head_put(h, "\r\nConnection: close\r\n\r\n", 23);
    mf__http_head_put(h, body, blen);
    return blen;
}
