/*
 * lua/serve/log.c — the access log of a worker: one line per request in
 * nginx's "combined" shape plus the request time and the request id, or
 * (access_log_format = "json") one JSON object per line, buffered and
 * written when the buffer fills or once a second. Requests the server refused
 * before any handler (400, 408, 413, 414, 431, 501, 505) get a line too, with
 * what is known of their request line ("-" when nothing is), as nginx logs
 * them; a client's bytes are escaped as nginx escapes them (\xNN). Workers
 * share the file (O_APPEND; whole lines per write), each with its own buffer:
 * no lock. Lines a write could not store (a full disk) are dropped, never the
 * requests, and counted: the count goes to stderr once a second.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "serve.h"

#define MF_LOG_BUF (64 * 1024)
/* Room for the longest line: a JSON line's client fields at their caps
 * (target 1024, Referer and User-Agent 256, method 64 bytes), each byte
 * escaped to 6 at worst, come to about 10 KiB, so a JSON line is never
 * cut (a cut one would not parse). */
#define MF_LOG_LINE (16 * 1024)

static size_t mf__count_lines(const char *p, size_t len)
{
    size_t n = 0;
    for (const char *end = p + len; (p = memchr(p, '\n', (size_t)(end - p)));
         p++)
        n++;
    return n;
}

static void mf__log_flush(mf_serve_worker_t *w)
{
    size_t off = 0;
    while (off < w->log_len) {
        ssize_t n = write(w->log_fd, w->log_buf + off, w->log_len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) { /* a full disk loses log lines, never requests */
            w->log_lost += mf__count_lines(w->log_buf + off, w->log_len - off);
            w->log_errno = n < 0 ? errno : ENOSPC;
            break;
        }
        off += (size_t)n;
    }
    w->log_len = 0;
}

/* Says how many lines were lost since the last report, if any. */
static void mf__log_report_lost(mf_serve_worker_t *w)
{
    if (!w->log_lost)
        return;
    fprintf(stderr, "moonflow: access log %s: %zu lines lost (%s)\n",
            w->config->access_log, w->log_lost,
            mf_strerror(mf_err_from_errno(w->log_errno)));
    w->log_lost = 0;
}

static void mf__log_tick(mf_timer_t *timer)
{
    mf_serve_worker_t *w = timer->data;
    mf__log_flush(w);
    mf__log_report_lost(w);
    mf_timer_start(w->loop, timer, 1000);
}

int mf_serve_log_open(mf_serve_worker_t *w)
{
    const char *path = w->config->access_log;
    w->log_fd = -1;
    if (!path || !strcmp(path, "off"))
        return 0;
    int fd = strcmp(path, "-") == 0
                 ? fcntl(1, F_DUPFD_CLOEXEC, 0)
                 : open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return mf_err_from_errno(errno);
    w->log_buf = mf_try_malloc(MF_LOG_BUF);
    if (!w->log_buf) {
        close(fd);
        return MF_ENOMEM;
    }
    w->log_fd = fd;
    mf_timer_init(&w->log_timer, mf__log_tick, w);
    mf_timer_set_ref(w->loop, &w->log_timer, false);
    mf_timer_start(w->loop, &w->log_timer, 1000);
    return 0;
}

/* The local time as the combined format writes it: the text changes once
 * a second. */
static const char *mf__log_time(mf_serve_worker_t *w)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME_COARSE, &now);
    if (now.tv_sec != w->log_sec) {
        struct tm tm;
        localtime_r(&now.tv_sec, &tm);
        strftime(w->log_time, sizeof w->log_time, "%d/%b/%Y:%H:%M:%S %z", &tm);
        w->log_sec = now.tv_sec;
    }
    return w->log_time;
}

/* ISO 8601 with milliseconds and the offset, for JSON lines:
 * 2026-12-02T06:40:01.123+00:00. It keeps its text in the same per-second
 * cache as mf__log_time: a worker writes one format only. */
static const char *mf__log_time_iso(mf_serve_worker_t *w)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME_COARSE, &now);
    if (now.tv_sec != w->log_sec) {
        struct tm tm;
        localtime_r(&now.tv_sec, &tm);
        char zone[8];
        strftime(zone, sizeof zone, "%z", &tm);
        size_t n =
            strftime(w->log_time, sizeof w->log_time, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(w->log_time + n, sizeof w->log_time - n, ".000%.3s:%s", zone,
                 zone + 3);
        w->log_sec = now.tv_sec;
    }
    unsigned ms = (unsigned)(now.tv_nsec / 1000000) % 1000;
    char *d = w->log_time + 20; /* after "YYYY-MM-DDTHH:MM:SS." */
    d[0] = (char)('0' + ms / 100);
    d[1] = (char)('0' + ms / 10 % 10);
    d[2] = (char)('0' + ms % 10);
    return w->log_time;
}

/* A line being written into the buffer: [p, end) is free, end is the
 * line's bound (MF_LOG_LINE), with room for a NUL. */
typedef struct mf_log_line {
    char *p;
    char *end;
} mf_log_line_t;

static void mf__log_put(mf_log_line_t *line, const char *s, size_t n)
{
    size_t room = (size_t)(line->end - line->p) - 1;
    n = n < room ? n : room;
    memcpy(line->p, s, n);
    line->p += n;
}

/* A client's bytes: escaped, at most max of them. */
static void mf__log_put_escaped(mf_log_line_t *line, const char *s, size_t n,
                                size_t max)
{
    line->p += mf_http_log_escape(line->p, (size_t)(line->end - line->p), s,
                                  n < max ? n : max);
}

static void mf__log_printf(mf_log_line_t *line, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void mf__log_printf(mf_log_line_t *line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line->p, (size_t)(line->end - line->p), fmt, ap);
    va_end(ap);
    if (n > 0)
        line->p += (size_t)n < (size_t)(line->end - line->p)
                       ? (size_t)n
                       : (size_t)(line->end - line->p) - 1;
}

/* "GET /path HTTP/1.1"; of a refused request the parts that are known,
 * "-" when none is. */
static void mf__log_request_line(mf_log_line_t *line,
                                 const mf_http_request_t *req)
{
    mf__log_put(line, "\"", 1);
    if (!req) {
        mf__log_put(line, "-\"", 2);
        return;
    }
    mf__log_put_escaped(line, req->method, req->method_len, 64);
    if (req->target_len) {
        mf__log_put(line, " ", 1);
        mf__log_put_escaped(line, req->target, req->target_len, 1024);
    }
    if (req->http2)
        mf__log_printf(line, " HTTP/2.0");
    else if (req->minor_version >= 0)
        mf__log_printf(line, " HTTP/1.%d", req->minor_version);
    mf__log_put(line, "\"", 1);
}

/* A request header's value, quoted and escaped; "-" when absent. */
static void mf__log_header(mf_log_line_t *line, const mf_http_request_t *req,
                           const char *name)
{
    const mf_http_header_t *h =
        req ? mf_http_find_header(req->headers, req->num_headers, name) : NULL;
    mf__log_put(line, " \"", 2);
    if (h)
        mf__log_put_escaped(line, h->value, h->value_len, 256);
    else
        mf__log_put(line, "-", 1);
    mf__log_put(line, "\"", 1);
}

/* ---- JSON lines ------------------------------------------------------------
 */

size_t mf_serve_json_byte(unsigned char c, char out[6])
{
    static const char hex[] = "0123456789abcdef";
    out[0] = (char)c;
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
        return 1;
    out[0] = '\\';
    out[1] = (char)c;
    if (c == '"' || c == '\\')
        return 2;
    memcpy(out + 1, "u00", 3);
    out[4] = hex[c >> 4];
    out[5] = hex[c & 15];
    return 6;
}

/* A client's bytes as a JSON string, at most max of them. */
static void mf__log_put_json(mf_log_line_t *line, const char *s, size_t n,
                             size_t max)
{
    char esc[6];
    mf__log_put(line, "\"", 1);
    for (size_t i = 0; i < n && i < max; i++)
        mf__log_put(line, esc, mf_serve_json_byte((unsigned char)s[i], esc));
    mf__log_put(line, "\"", 1);
}

/* "name":"value" from the head, or "name":null. */
static void mf__log_json_field(mf_log_line_t *line, const char *name,
                               const char *s, size_t n, size_t max)
{
    mf__log_printf(line, ",\"%s\":", name);
    if (s)
        mf__log_put_json(line, s, n, max);
    else
        mf__log_put(line, "null", 4);
}

static void mf__log_json_header(mf_log_line_t *line,
                                const mf_http_request_t *req, const char *field,
                                const char *header)
{
    const mf_http_header_t *h =
        req ? mf_http_find_header(req->headers, req->num_headers, header)
            : NULL;
    mf__log_json_field(line, field, h ? h->value : NULL, h ? h->value_len : 0,
                       256);
}

static void mf__log_json(mf_serve_worker_t *w, mf_log_line_t *line,
                         const mf_http_request_t *req, const char *host,
                         int status, size_t bytes, double seconds,
                         const char *id)
{
    bool has_line = req && req->method_len;
    mf__log_printf(line, "{\"time\":\"%s\",\"remote_addr\":\"%s\"",
                   mf__log_time_iso(w), host);
    mf__log_json_field(line, "method", has_line ? req->method : NULL,
                       has_line ? req->method_len : 0, 64);
    mf__log_json_field(line, "uri", req && req->target_len ? req->target : NULL,
                       req ? req->target_len : 0, 1024);
    if (req && req->http2)
        mf__log_printf(line, ",\"protocol\":\"HTTP/2.0\"");
    else if (req && req->minor_version >= 0)
        mf__log_printf(line, ",\"protocol\":\"HTTP/1.%d\"", req->minor_version);
    else
        mf__log_put(line, ",\"protocol\":null", 16);
    mf__log_printf(line, ",\"status\":%d,\"body_bytes_sent\":%zu", status,
                   bytes);
    mf__log_json_header(line, req, "referer", "referer");
    mf__log_json_header(line, req, "user_agent", "user-agent");
    mf__log_printf(line, ",\"request_time\":%.3f", seconds);
    mf__log_json_field(line, "request_id", id, strlen(id), MF_SERVE_ID_MAX);
    mf__log_put(line, "}\n", 2);
}

void mf_serve_log_request(mf_serve_worker_t *w, const mf_http_request_t *req,
                          const mf_sockaddr_t *peer, int status, size_t bytes,
                          double seconds, const char *id)
{
    if (w->log_fd < 0)
        return;
    char made[MF_SERVE_ID_MAX + 1];
    if (!id) {
        mf_serve_make_request_id(w, req, made);
        id = made;
    }
    if (w->log_len + MF_LOG_LINE > MF_LOG_BUF)
        mf__log_flush(w);
    char host[64];
    mf_sockaddr_format_ip(peer, host, sizeof host);
    mf_log_line_t line = {w->log_buf + w->log_len,
                          w->log_buf + w->log_len + MF_LOG_LINE};
    if (w->config->access_log_json) {
        mf__log_json(w, &line, req, host, status, bytes, seconds, id);
    } else {
        mf__log_printf(&line, "%s - - [%s] ", host, mf__log_time(w));
        mf__log_request_line(&line, req);
        mf__log_printf(&line, " %d %zu", status, bytes);
        mf__log_header(&line, req, "referer");
        mf__log_header(&line, req, "user-agent");
        mf__log_printf(&line, " %.3f %s\n", seconds, id);
    }
    if (line.p[-1] != '\n') /* cut: the line still ends */
        line.p[-1] = '\n';
    w->log_len = (size_t)(line.p - w->log_buf);
}

void mf_serve_log_reject(mf_http_server_t *srv, int status,
                         const mf_http_request_t *req,
                         const mf_sockaddr_t *peer, size_t body_bytes,
                         void *worker)
{
    mf_serve_worker_t *w = worker;
    (void)srv;
    if (w->log_fd >= 0)
        mf_serve_log_request(w, req, peer, status, body_bytes, 0, NULL);
    if (w->mstate)
        mf_serve_metrics_request(w, req, false, status, 0, body_bytes, 0);
}

void mf_serve_log_close(mf_serve_worker_t *w)
{
    if (w->log_fd < 0)
        return;
    mf_timer_stop(w->loop, &w->log_timer);
    mf__log_flush(w);
    mf__log_report_lost(w);
    close(w->log_fd);
    mf_free(w->log_buf);
    w->log_buf = NULL;
    w->log_fd = -1;
}
