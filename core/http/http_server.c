/*
 * http_server.c — the listeners, accepting, the configuration, the
 * registry of open connections, graceful stop and drain, and the reports
 * of what went wrong (answers that failed, headers refused, requests
 * refused: the on_reject hook). Owns mf_http_server_t, whose body is
 * private to this file, and the site in it (http_site.h), which the layers
 * below read and report through.
 *
 * The top of core/http's server: it creates a transport per accepted
 * socket (http_transport.h) and attaches HTTP/1 to it (http1.h); the
 * exchange ops it puts in the site (http_exchange.h) are how protocols
 * reach the handler's API. May call: those three, the parser's public API,
 * the net and engine layers. Nothing below calls it by name.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http1.h"
#include "http2.h"
#include "http_exchange.h"
#include "http_site.h"
#include "http_transport.h"
#include "net/net.h"

/* One listening socket: its watcher's fd is the socket, data the server. */
typedef struct mf_http_listener {
    mf_io_t io;
} mf_http_listener_t;

struct mf_http_server {
    mf_loop_t *loop;
    mf_http_server_config_t config;
    mf_http_site_t site; /* what the layers below see of this server */
    mf_http_listener_t *listeners; /* one, or the sockets given at start */
    unsigned nlisteners;
    bool accepting;
    uint16_t port;
    mf_tls_server_t *tls;
    mf_list_t conns; /* open connections (their transports' links) */
    size_t nconns;
    mf_timer_t drain_timer; /* a drain: when idle connections close */
    mf_http_server_stopped_cb stopped_cb;
    void *stopped_arg;
    mf_post_t stopped_post;
    uint64_t failed_responses; /* answered 500 or cut for lack of memory */
    uint64_t invalid_headers;  /* refused by mf_http_exchange_add_header */
};

void mf_http_server_config_init(mf_http_server_config_t *c)
{
    memset(c, 0, sizeof(*c));
    c->listen = "127.0.0.1:8080";
    c->listen_fds = NULL;
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
    c->http2 = (mf_http2_config_t)MF_HTTP2_CONFIG_DEFAULT;
}

/* ---- accepting -------------------------------------------------------------
 */

static void mf__server_pause_accept(mf_http_server_t *srv)
{
    if (!srv->accepting)
        return;
    for (unsigned i = 0; i < srv->nlisteners; i++)
        mf_io_stop(srv->loop, &srv->listeners[i].io);
    srv->accepting = false;
}

static void mf__server_resume_accept(mf_http_server_t *srv)
{
    if (srv->accepting || srv->site.stopping || !srv->nlisteners)
        return;
    for (unsigned i = 0; i < srv->nlisteners; i++)
        if (mf_io_start(srv->loop, &srv->listeners[i].io, MF_IO_READ) < 0)
            return; /* the start fails; a resume leaves it paused */
    srv->accepting = true;
}

static void mf__server_conn_closed(mf_transport_t *t, void *arg);

/* A new connection: a transport speaking HTTP/1, in the registry. */
static void mf__server_accepted(mf_http_server_t *srv, int fd,
                                const mf_sockaddr_t *peer)
{
    mf_transport_t *t = mf__transport_create(srv->loop, fd, peer, srv->tls,
                                             srv->config.write_timeout_ms,
                                             mf__server_conn_closed, srv);
    mf_list_push_back(&srv->conns, mf__transport_link(t));
    srv->nconns++;
    mf__http1_attach(&srv->site, t);
    mf__transport_start(t); /* on failure closed, and out of the registry */
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
        int fd = accept4(io->fd, &peer.sa, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE)
                mf__server_pause_accept(srv); /* until a connection closes */
            return;                           /* EAGAIN: drained */
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        mf__server_accepted(srv, fd, &peer);
    }
}

/* ---- lifecycle
 * --------------------------------------------------------------- */

/* Takes the sockets: from now on the server closes them. */
static void mf__server_adopt(mf_http_server_t *srv, const int *fds, unsigned n)
{
    srv->listeners = mf_xcalloc(n, sizeof(*srv->listeners));
    srv->nlisteners = n;
    for (unsigned i = 0; i < n; i++)
        mf_io_init(&srv->listeners[i].io, fds[i], mf__server_on_accept, srv);
}

static void mf__server_close_listeners(mf_http_server_t *srv)
{
    mf__server_pause_accept(srv); /* out of epoll before the close */
    for (unsigned i = 0; i < srv->nlisteners; i++)
        close(srv->listeners[i].io.fd);
    mf_free(srv->listeners);
    srv->listeners = NULL;
    srv->nlisteners = 0;
}

static int mf__server_listen(mf_http_server_t *srv)
{
    mf_sockaddr_t addr;
    int rc = mf__net_parse_listen(srv->config.listen, &addr);
    if (rc < 0)
        return rc;
    int fd = mf__net_listen(&addr, srv->config.backlog);
    if (fd < 0)
        return fd;
    mf__server_adopt(srv, &fd, 1);
    return 0;
}

static int mf__server_start_accepting(mf_http_server_t *srv)
{
    mf_sockaddr_t bound;
    socklen_t blen = sizeof bound;
    if (getsockname(srv->listeners[0].io.fd, &bound.sa, &blen) < 0)
        return mf_err_from_errno(errno);
    srv->port = mf__net_port(&bound);
    mf__server_resume_accept(srv);
    return srv->accepting ? 0 : MF_EBADF;
}

static void mf__server_drain_idle(mf_timer_t *timer);

static void mf__server_free(mf_http_server_t *srv)
{
    mf__server_close_listeners(srv);
    mf_timer_stop(srv->loop, &srv->drain_timer);
    mf__tls_server_free(srv->tls);
    mf_free(srv);
}

static const mf_http_site_hooks_t mf__server_hooks;

static void mf__server_init_site(mf_http_server_t *srv, mf_http_handler handler,
                                 void *user)
{
    mf_http_site_t *site = &srv->site;
    site->loop = srv->loop;
    site->srv = srv;
    site->config = &srv->config;
    site->handler = handler;
    site->user = user;
    site->exchange = &mf__http_exchange_ops;
    site->hooks = &mf__server_hooks;
    site->attach_h2 = srv->config.http2.enabled ? mf__http2_attach : NULL;
    bool plain = !srv->config.tls.cert_file || !srv->config.tls.key_file;
    site->upgrade_h2 =
        srv->config.http2.enabled && plain ? mf__http2_attach_upgraded : NULL;
    const char *name = srv->config.server_header;
    name = name ? name : "";
    if (*name && strlen(name) < sizeof site->server_line - 12)
        site->server_line_len =
            (size_t)snprintf(site->server_line, sizeof site->server_line,
                             "Server: %s\r\n", name);
}

mf_http_server_t *mf_http_server_start(mf_loop_t *loop,
                                       const mf_http_server_config_t *config,
                                       mf_http_handler handler, void *user,
                                       int *err)
{
    mf_http_server_t *srv = mf_xcalloc(1, sizeof(*srv));
    srv->loop = loop;
    srv->config = *config;
    srv->config.listen_fds = NULL; /* read during this call only */
    mf__server_init_site(srv, handler, user);
    mf_list_init(&srv->conns);
    mf_timer_init(&srv->drain_timer, mf__server_drain_idle, srv);
    if (config->nlisten_fds)
        mf__server_adopt(srv, config->listen_fds, config->nlisten_fds);
    int rc = mf__http2_config_check(&config->http2);
    srv->config.tls.alpn_h2 = config->http2.enabled;
    if (rc == 0 && config->tls.cert_file && config->tls.key_file)
        rc = mf__tls_server_create(&srv->config.tls, &srv->tls);
    if (rc == 0 && !srv->nlisteners)
        rc = mf__server_listen(srv);
    if (rc == 0)
        rc = mf__server_start_accepting(srv);
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
    if (srv->site.stopping && srv->nconns == 0 && !srv->stopped_post.cb) {
        mf_post_init(&srv->stopped_post, mf__server_stopped, srv);
        mf_loop_defer(srv->loop, &srv->stopped_post);
    }
}

void mf_http_server_stats(const mf_http_server_t *srv,
                          mf_http_server_stats_t *out)
{
    out->connections = srv->nconns;
    out->idle = 0;
    for (mf_list_t *n = srv->conns.next; n != &srv->conns; n = n->next)
        out->idle += mf__transport_idle(mf__transport_from_link(n));
    out->failed_responses = srv->failed_responses;
    out->invalid_headers = srv->invalid_headers;
    const mf_http2_counters_t *h2 = &srv->site.h2;
    out->h2_connections = h2->connections;
    out->h2_streams = h2->streams;
    out->h2_resets_received = h2->resets_received;
    out->h2_calm_goaways = h2->calm_goaways;
    out->h2_floods = h2->floods;
    out->h2_headers_refused = h2->headers_refused;
    out->h2_protocol_errors = h2->protocol_errors;
}

/* A transport closed: out of the registry (it frees itself later). */
static void mf__server_conn_closed(mf_transport_t *t, void *arg)
{
    mf_http_server_t *srv = arg;
    mf_list_remove(mf__transport_link(t));
    srv->nconns--;
    mf__server_resume_accept(srv);
    mf__server_maybe_stopped(srv);
}

/* Idle connections go now; busy ones finish their request and close
 * (their responses say Connection: close). */
static void mf__server_stop_connections(mf_http_server_t *srv)
{
    mf_list_t *node = srv->conns.next;
    while (node != &srv->conns) {
        mf_transport_t *t = mf__transport_from_link(node);
        node = node->next; /* the connection may close and unlink */
        mf__transport_stop(t);
    }
    mf__server_maybe_stopped(srv);
}

/* The end of a drain's grace. Every connection that sent a request since
 * the drain began has been answered with Connection: close and is gone or
 * going: those left idle now were idle all along. */
static void mf__server_drain_idle(mf_timer_t *timer)
{
    mf__server_stop_connections(timer->data);
}

void mf_http_server_drain(mf_http_server_t *srv, uint32_t idle_ms,
                          mf_http_server_stopped_cb done, void *arg)
{
    srv->site.stopping =
        true; /* from here every answer says Connection: close */
    srv->stopped_cb = done;
    srv->stopped_arg = arg;
    mf__server_close_listeners(srv);
    if (idle_ms && srv->nconns) {
        for (mf_list_t *n = srv->conns.next; n != &srv->conns; n = n->next)
            mf__transport_draining(mf__transport_from_link(n));
        mf_timer_start(srv->loop, &srv->drain_timer, idle_ms);
    } else {
        mf__server_stop_connections(srv);
    }
}

void mf_http_server_stop(mf_http_server_t *srv, mf_http_server_stopped_cb done,
                         void *arg)
{
    mf_http_server_drain(srv, 0, done, arg);
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

uint64_t mf_http_server_invalid_headers(const mf_http_server_t *srv)
{
    return srv->invalid_headers;
}

/* ---- reports ------------------------------------------------------------ */

size_t mf_http_log_escape(char *out, size_t cap, const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        bool plain = c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
        size_t need = plain ? 1 : 4;
        if (n + need >= cap)
            break;
        if (plain) {
            out[n++] = (char)c;
            continue;
        }
        out[n++] = '\\';
        out[n++] = 'x';
        out[n++] = hex[c >> 4];
        out[n++] = hex[c & 15];
    }
    out[n] = 0;
    return n;
}

static mf_http_server_t *mf__server_of(mf_http_site_t *site)
{
    return mf_container_of(site, mf_http_server_t, site);
}

static void mf__server_response_failed(mf_http_site_t *site, bool answered)
{
    mf__server_of(site)->failed_responses++;
    fprintf(stderr, "moonflow: http: out of memory building a response: %s\n",
            answered ? "answered 500" : "connection closed");
}

static void mf__server_header_refused(mf_http_site_t *site,
                                      const mf_http_request_t *req,
                                      const char *name, size_t name_len,
                                      const char *fault, bool report,
                                      bool head_sent)
{
    mf_http_server_t *srv = mf__server_of(site);
    char shown[4 * 64 + 1]; /* the first 64 bytes, each escaped at worst */
    srv->invalid_headers++;
    if (!report)
        return;
    size_t cut = name_len > 64 ? 64 : name_len;
    mf_http_log_escape(shown, sizeof shown, name, cut);
    fprintf(stderr,
            "moonflow: http: %.*s %.*s: response header \"%s%s\" %s: %s\n",
            (int)req->method_len, req->method, (int)req->path_len, req->path,
            shown, cut < name_len ? "..." : "", fault,
            head_sent ? "refused" : "the answer is a 500");
}

/* The minor version when v[0..len) is "HTTP/1." DIGIT (with the line's CR
 * after it, if any), read as the parser does (1.2 and later as 1.1), else
 * -1. */
static int mf__rejected_version(const char *v, size_t len)
{
    if (len < 8 || memcmp(v, "HTTP/1.", 7) != 0 || v[7] < '0' || v[7] > '9' ||
        (len > 8 && v[8] != '\r'))
        return -1;
    return v[7] > '1' ? 1 : v[7] - '0';
}

/* The parts of a refused request's line that arrived whole: the method
 * (a token followed by SP), then the target (up to the next SP), then the
 * version. False when not even the method is known. */
static bool mf__rejected_line(const char *p, size_t len, mf_http_request_t *req)
{
    const char *end = p + len;
    while (end - p >= 2 && p[0] == '\r' && p[1] == '\n')
        p += 2; /* empty lines before a request line are allowed */
    const char *lf = memchr(p, '\n', (size_t)(end - p));
    const char *stop = lf ? lf : end;
    const char *sp = memchr(p, ' ', (size_t)(stop - p));
    if (!sp || !mf_http_field_name_valid(p, (size_t)(sp - p)))
        return false;
    req->method = p;
    req->method_len = (size_t)(sp - p);
    const char *target = sp + 1;
    sp = memchr(target, ' ', (size_t)(stop - target));
    if (!sp)
        return true;
    req->target = req->path = target;
    req->target_len = req->path_len = (size_t)(sp - target);
    req->minor_version = mf__rejected_version(sp + 1, (size_t)(stop - sp - 1));
    return true;
}

/* What is known of a refused request (see mf_http_reject_cb), or NULL. */
static const mf_http_request_t *
mf__rejected_request(const mf_http_server_t *srv, const char *p, size_t len,
                     mf_http_request_t *req, mf_http_header_t *headers,
                     size_t nheaders)
{
    memset(req, 0, sizeof(*req));
    req->headers = headers;
    req->num_headers = nheaders;
    if (len &&
        mf_http_parse_request(p, len, req, &srv->config.limits, NULL) > 0)
        return req; /* a whole head: the body was refused */
    memset(req, 0, sizeof(*req));
    req->headers = headers;
    req->minor_version = -1;
    return len && mf__rejected_line(p, len, req) ? req : NULL;
}

static void mf__server_rejected(mf_http_site_t *site, int status,
                                size_t body_bytes, const mf_buf_t *in,
                                size_t off, const mf_sockaddr_t *peer)
{
    mf_http_server_t *srv = mf__server_of(site);
    enum { MAX_HEADERS = 100 }; /* as many as any request may have */
    mf_http_header_t headers[MAX_HEADERS];
    mf_http_request_t req;
    if (!srv->config.on_reject)
        return;
    size_t have = in->len > off ? in->len - off : 0;
    const char *p = have ? in->data + off : NULL;
    const mf_http_request_t *known =
        mf__rejected_request(srv, p, have, &req, headers, MAX_HEADERS);
    srv->config.on_reject(srv, status, known, peer, body_bytes, srv->site.user);
}

static const mf_http_site_hooks_t mf__server_hooks = {
    .response_failed = mf__server_response_failed,
    .header_refused = mf__server_header_refused,
    .rejected = mf__server_rejected,
};
