/*
 * http_head.c — response heads: status line, the shared Server and Date
 * lines, numbers, and whole error answers. Pure formatting into the
 * caller's buffer; the server provides the Date and Server lines.
 */
#include "http_head.h"

#include <stdio.h>

#include "http_server_int.h"

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

/* Fits in h->fixed: reason phrases are short, the Server line is capped. */
void mf__http_head_common(mf_http_head_t *h, mf_http_server_t *srv, int status)
{
    size_t line_len, date_len;
    const char *line = mf__http_server_line(srv, &line_len);
    const char *date = mf__http_server_date(srv, &date_len);
    h->len = mf__http_fmt_status_line(h->fixed, status);
    mf__http_head_put(h, line, line_len);
    mf__http_head_put(h, date, date_len);
}

void mf__http_head_error(mf_http_head_t *h, mf_http_server_t *srv, int status)
{
    char body[64];
    int blen =
        snprintf(body, sizeof body, "%d %s\n", status, mf_http_reason(status));
    mf__http_head_common(h, srv, status);
    mf__http_head_put(h, "Content-Type: text/plain\r\nContent-Length: ", 42);
    h->len += mf__http_fmt_u64(h->fixed + h->len, (uint64_t)blen);
    mf__http_head_put(h, "\r\nConnection: close\r\n\r\n", 23);
    mf__http_head_put(h, body, (size_t)blen);
}
