/*
 * http_server.c — the listener, accepting, the Date cache, graceful stop,
 * and the server's side of http_server_int.h. Owns mf_http_server_t, whose
 * body is private to this file. May call: the connection's interface for
 * the server (http_conn.h: accept, stop), the net and engine layers.
 * Connections are in http_conn.c, the handler API in http_exchange.c.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http_conn.h"
#include "http_server_int.h"
#include "net/net.h"

struct mf_http_server {
    mf_loop_t *loop;
    mf_http_server_config_t config;
    mf_http_handler handler;
    void *user;
    int listen_fd;
    mf_io_t listen_io;
    bool accepting;
    uint16_t port;
    mf_tls_server_t *tls;
    mf_list_t conns; /* open connections (their list links) */
    size_t nconns;
    bool stopping;
    mf_http_server_stopped_cb stopped_cb;
    void *stopped_arg;
    mf_post_t stopped_post;
    uint64_t failed_responses; /* answered 500 or cut for lack of memory */
    long date_sec;
    uint64_t date_checked; /* loop time of the last clock read */
    char date[40];         /* "Date: Tue, 01 Dec 2026 10:00:00 GMT\r\n" */
    size_t date_len;
    char server_line[80];
    size_t server_line_len;
};

void mf_http_server_config_init(mf_http_server_config_t *c)
{
    memset(c, 0, sizeof(*c));
    c->listen = "127.0.0.1:8080";
    c->backlog = 1024;
    c->max_connections = 10000;
    c->limits = (mf_http_limits_t)MF_HTTP_LIMITS_DEFAULT;
    c->max_body = 1024 * 1024;
    c->header_timeout_ms = 10000;
    c->body_timeout_ms = 10000;
    c->min_body_rate = 500;
    c->body_rate_grace_ms = 10000;
    c->keepalive_timeout_ms = 60000;
    c->write_timeout_ms = 10000;
    c->server_header = "moonflow";
}

/* ---- Date header, formatted once per second ----------------------------- */

/* The wall clock is read at most once per loop tick (the loop's cached
 * time, refreshed every iteration), as nginx reads it once per event loop
 * turn: the responses of one iteration share their Date. */
const char *mf__http_server_date(mf_http_server_t *srv, size_t *len)
{
    uint64_t tick = mf_loop_now(srv->loop);
    if (tick == srv->date_checked && srv->date_len) {
        *len = srv->date_len;
        return srv->date;
    }
    srv->date_checked = tick;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME_COARSE, &now);
    if (now.tv_sec != srv->date_sec) {
        struct tm tm;
        gmtime_r(&now.tv_sec, &tm);
        srv->date_len = strftime(srv->date, sizeof srv->date,
                                 "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
        srv->date_sec = now.tv_sec;
    }
    *len = srv->date_len;
    return srv->date;
}

/* ---- accepting -------------------------------------------------------------
 */

static void mf__server_pause_accept(mf_http_server_t *srv)
{
    if (srv->accepting) {
        mf_io_stop(srv->loop, &srv->listen_io);
        srv->accepting = false;
    }
}

static void mf__server_resume_accept(mf_http_server_t *srv)
{
    if (!srv->accepting && !srv->stopping && srv->listen_fd >= 0 &&
        mf_io_start(srv->loop, &srv->listen_io, MF_IO_READ) == 0)
        srv->accepting = true;
}

static void mf__server_on_accept(mf_io_t *io, unsigned events)
{
    mf_http_server_t *srv = io->data;
    (void)events;
    while (srv->accepting) {
        if (srv->nconns >= srv->config.max_connections) {
            mf__server_pause_accept(srv); /* resumes when one closes */
            return;
        }
        mf_sockaddr_t peer;
        socklen_t plen = sizeof peer;
        int fd = accept4(srv->listen_fd, &peer.sa, &plen,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE)
                mf__server_pause_accept(srv); /* until a connection closes */
            return;                           /* EAGAIN: drained */
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        mf__http_conn_accept(srv, fd, &peer);
    }
}

/* ---- lifecycle
 * --------------------------------------------------------------- */

static int mf__server_listen(mf_http_server_t *srv)
{
    mf_sockaddr_t addr;
    int rc = mf__net_parse_listen(srv->config.listen, &addr);
    if (rc < 0)
        return rc;
    int fd = mf__net_listen(&addr, srv->config.backlog);
    if (fd < 0)
        return fd;
    mf_sockaddr_t bound;
    socklen_t blen = sizeof bound;
    getsockname(fd, &bound.sa, &blen);
    srv->port = mf__net_port(&bound);
    srv->listen_fd = fd;
    mf_io_init(&srv->listen_io, fd, mf__server_on_accept, srv);
    srv->accepting = false;
    mf__server_resume_accept(srv);
    return srv->accepting ? 0 : MF_EBADF;
}

static void mf__server_free(mf_http_server_t *srv)
{
    if (srv->listen_fd >= 0)
        close(srv->listen_fd);
    mf__tls_server_free(srv->tls);
    mf_free(srv);
}

mf_http_server_t *mf_http_server_start(mf_loop_t *loop,
                                       const mf_http_server_config_t *config,
                                       mf_http_handler handler, void *user,
                                       int *err)
{
    mf_http_server_t *srv = mf_xcalloc(1, sizeof(*srv));
    srv->loop = loop;
    srv->config = *config;
    srv->handler = handler;
    srv->user = user;
    srv->listen_fd = -1;
    mf_list_init(&srv->conns);
    const char *name = config->server_header ? config->server_header : "";
    if (*name && strlen(name) < sizeof srv->server_line - 12)
        srv->server_line_len = (size_t)snprintf(
            srv->server_line, sizeof srv->server_line, "Server: %s\r\n", name);
    int rc = 0;
    if (config->tls.cert_file && config->tls.key_file)
        rc = mf__tls_server_create(&config->tls, &srv->tls);
    if (rc == 0)
        rc = mf__server_listen(srv);
    if (rc < 0) {
        if (err)
            *err = rc;
        mf__server_free(srv);
        return NULL;
    }
    return srv;
}

static void mf__server_stopped(mf_post_t *post)
{
    mf_http_server_t *srv = post->data;
    if (srv->stopped_cb)
        srv->stopped_cb(srv, srv->stopped_arg);
    mf__server_free(srv);
}

static void mf__server_maybe_stopped(mf_http_server_t *srv)
{
    if (srv->stopping && srv->nconns == 0 && !srv->stopped_post.cb) {
        mf_post_init(&srv->stopped_post, mf__server_stopped, srv);
        mf_loop_defer(srv->loop, &srv->stopped_post);
    }
}

void mf__http_server_conn_opened(mf_http_server_t *srv, mf_list_t *link)
{
    mf_list_push_back(&srv->conns, link);
    srv->nconns++;
}

void mf__http_server_conn_closed(mf_http_server_t *srv, mf_list_t *link)
{
    mf_list_remove(link);
    srv->nconns--;
    mf__server_resume_accept(srv);
    mf__server_maybe_stopped(srv);
}

void mf_http_server_stop(mf_http_server_t *srv, mf_http_server_stopped_cb done,
                         void *arg)
{
    srv->stopping = true;
    srv->stopped_cb = done;
    srv->stopped_arg = arg;
    mf__server_pause_accept(srv);
    close(srv->listen_fd);
    srv->listen_fd = -1;
    /* Idle connections go now; busy ones finish their request and close
     * (their responses say Connection: close). */
    mf_list_t *node = srv->conns.next;
    while (node != &srv->conns) {
        mf_http_conn_t *conn = mf__http_conn_from_link(node);
        node = node->next; /* the connection may close and unlink */
        mf__http_conn_stop(conn);
    }
    mf__server_maybe_stopped(srv);
}

uint16_t mf_http_server_port(const mf_http_server_t *srv)
{
    return srv->port;
}

size_t mf_http_server_connections(const mf_http_server_t *srv)
{
    return srv->nconns;
}

mf_loop_t *mf_http_server_loop(const mf_http_server_t *srv)
{
    return srv->loop;
}

uint64_t mf_http_server_failed_responses(const mf_http_server_t *srv)
{
    return srv->failed_responses;
}

/* ---- for connections and exchanges (http_server_int.h) ------------------ */

const mf_http_server_config_t *
mf__http_server_config(const mf_http_server_t *srv)
{
    return &srv->config;
}

mf_tls_server_t *mf__http_server_tls(const mf_http_server_t *srv)
{
    return srv->tls;
}

bool mf__http_server_stopping(const mf_http_server_t *srv)
{
    return srv->stopping;
}

const char *mf__http_server_line(const mf_http_server_t *srv, size_t *len)
{
    *len = srv->server_line_len;
    return srv->server_line;
}

void mf__http_server_handle(mf_http_server_t *srv, mf_http_exchange_t *ex)
{
    srv->handler(ex, srv->user);
}

void mf__http_server_response_failed(mf_http_server_t *srv, bool answered)
{
    srv->failed_responses++;
    fprintf(stderr, "moonflow: http: out of memory building a response: %s\n",
            answered ? "answered 500" : "connection closed");
}
