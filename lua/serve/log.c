/*
 * lua/serve/log.c — the access log of a worker: one line per request in
 * nginx's "combined" shape plus the request time, buffered and written when
 * the buffer fills or once a second. Workers share the file (O_APPEND;
 * whole lines per write), each with its own buffer: no lock. Lines a write
 * could not store (a full disk) are dropped, never the requests, and
 * counted: the count goes to stderr once a second.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "serve.h"

#define MF_LOG_BUF (64 * 1024)
#define MF_LOG_LINE 2048

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

static void mf__log_header(const mf_http_request_t *req, const char *name,
                           const char **value, int *len)
{
    const mf_http_header_t *h =
        mf_http_find_header(req->headers, req->num_headers, name);
    *value = h ? h->value : "-";
    *len = h ? (int)h->value_len : 1;
}

void mf_serve_log_request(mf_serve_worker_t *w, const mf_http_request_t *req,
                          const mf_sockaddr_t *peer, int status, size_t bytes,
                          double seconds)
{
    if (w->log_fd < 0)
        return;
    if (w->log_len + MF_LOG_LINE > MF_LOG_BUF)
        mf__log_flush(w);
    const char *ref, *ua;
    int reflen, ualen;
    char host[64];
    mf_sockaddr_format_ip(peer, host, sizeof host);
    mf__log_header(req, "referer", &ref, &reflen);
    mf__log_header(req, "user-agent", &ua, &ualen);
    int n = snprintf(w->log_buf + w->log_len, MF_LOG_LINE,
                     "%s - - [%s] \"%.*s %.*s HTTP/1.%d\" %d %zu \"%.*s\" "
                     "\"%.*s\" %.3f\n",
                     host, mf__log_time(w), (int)req->method_len, req->method,
                     req->target_len > 1024 ? 1024 : (int)req->target_len,
                     req->target, req->minor_version, status, bytes, reflen,
                     ref, ualen > 256 ? 256 : ualen, ua, seconds);
    if (n > 0)
        w->log_len += (size_t)n < MF_LOG_LINE ? (size_t)n : MF_LOG_LINE - 1;
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
