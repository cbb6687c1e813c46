/*
 * http_peer.h — the other end of the server tests: a plain blocking HTTP/1.1
 * client on loopback, run in a thread of its own while the test's loop
 * serves on the main thread, and the helpers that drive that loop.
 *
 * Every wait is bounded: sockets have a receive timeout, the loop is run
 * until a condition or a deadline. Results are read by the test after the
 * thread is joined (the join orders the memory); counters the client
 * polls while it runs are atomics.
 */
#ifndef MF_HTTP_PEER_H
#define MF_HTTP_PEER_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <moonflow/moonflow.h>

#include "test.h"

#define PEER_TIMEOUT_MS 5000

/* ---- the client -----------------------------------------------------------
 */

typedef struct peer_conn {
    int fd;
    char buf[256 * 1024]; /* bytes received and not yet consumed */
    size_t len;
} peer_conn_t;

typedef struct peer_response {
    int status;      /* 0: the connection ended before a whole head */
    bool conn_close; /* the head says Connection: close */
    bool chunked;
    bool complete; /* the body ended as its framing says */
    char head[2048];
    char body[64 * 1024]; /* the first bytes of the body, NUL-terminated */
    size_t body_len;      /* the whole body's length */
} peer_response_t;

static inline peer_conn_t *peer_connect(uint16_t port)
{
    peer_conn_t *c = calloc(1, sizeof(*c));
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {PEER_TIMEOUT_MS / 1000, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(c->fd);
        c->fd = -1;
    }
    return c;
}

static inline void peer_close(peer_conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c);
}

/* Sends everything it can; a server that already closed (an answered 413)
 * makes the rest fail quietly: the answer is what the test reads. */
static inline void peer_send(peer_conn_t *c, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
        if (n <= 0)
            return;
        p += n;
        len -= (size_t)n;
    }
}

static inline void peer_send_str(peer_conn_t *c, const char *s)
{
    peer_send(c, s, strlen(s));
}

/* Reads more bytes; false on EOF, error or timeout. */
static inline bool peer_fill(peer_conn_t *c)
{
    if (c->len == sizeof c->buf)
        return false;
    ssize_t n = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
    if (n <= 0)
        return false;
    c->len += (size_t)n;
    return true;
}

static inline void peer_consume(peer_conn_t *c, size_t n)
{
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
}

/* Waits until n bytes are buffered; false if the stream ends first. */
static inline bool peer_need(peer_conn_t *c, size_t n)
{
    while (c->len < n)
        if (!peer_fill(c))
            return false;
    return true;
}

static inline void peer_body_add(peer_response_t *r, const char *p, size_t n)
{
    size_t cap = sizeof r->body - 1;
    size_t stored = r->body_len < cap ? r->body_len : cap;
    size_t keep = n < cap - stored ? n : cap - stored;
    memcpy(r->body + stored, p, keep);
    r->body[stored + keep] = 0;
    r->body_len += n;
}

/* The value of a header in the head, or NULL. */
static inline const char *peer_header(const peer_response_t *r,
                                      const char *name)
{
    size_t n = strlen(name);
    const char *p = strstr(r->head, "\r\n");
    while (p && p[2] != '\r' && p[2]) {
        p += 2;
        if (strncasecmp(p, name, n) == 0 && p[n] == ':')
            return p + n + 1 + (p[n + 1] == ' ');
        p = strstr(p, "\r\n");
    }
    return NULL;
}

static inline bool peer_read_chunked(peer_conn_t *c, peer_response_t *r)
{
    for (int chunks = 0; chunks < 100000; chunks++) {
        char *eol;
        while (!(eol = memmem(c->buf, c->len, "\r\n", 2)))
            if (!peer_fill(c))
                return false;
        size_t size = strtoul(c->buf, NULL, 16);
        peer_consume(c, (size_t)(eol - c->buf) + 2);
        if (!peer_need(c, size + 2))
            return false;
        peer_body_add(r, c->buf, size);
        peer_consume(c, size + 2);
        if (size == 0)
            return true;
    }
    return false;
}

/* Reads one response (for a request that was not HEAD). 0 when it came
 * whole, -1 when the stream ended first (r says how far it got). */
static inline int peer_read_response(peer_conn_t *c, peer_response_t *r)
{
    memset(r, 0, sizeof(*r));
    char *end;
    while (!(end = memmem(c->buf, c->len, "\r\n\r\n", 4)))
        if (!peer_fill(c))
            return -1;
    size_t head_len = (size_t)(end - c->buf) + 4;
    size_t copy = head_len < sizeof r->head ? head_len : sizeof r->head - 1;
    memcpy(r->head, c->buf, copy);
    r->head[copy] = 0;
    peer_consume(c, head_len);
    r->status = atoi(r->head + 9);
    const char *conn = peer_header(r, "Connection");
    r->conn_close = conn && strncasecmp(conn, "close", 5) == 0;
    const char *te = peer_header(r, "Transfer-Encoding");
    const char *cl = peer_header(r, "Content-Length");
    r->chunked = te && strncasecmp(te, "chunked", 7) == 0;
    if (r->chunked) {
        r->complete = peer_read_chunked(c, r);
    } else if (cl) {
        size_t n = strtoul(cl, NULL, 10);
        while (c->len < n && peer_fill(c))
            ;
        size_t got = c->len < n ? c->len : n;
        peer_body_add(r, c->buf, got);
        peer_consume(c, got);
        r->complete = got == n;
    } else { /* until the close */
        while (peer_fill(c))
            ;
        peer_body_add(r, c->buf, c->len);
        peer_consume(c, c->len);
        r->complete = true;
    }
    return r->complete ? 0 : -1;
}

/* Whether the server closes the connection (EOF) within the timeout, with
 * no byte left unread. */
static inline bool peer_sees_close(peer_conn_t *c)
{
    if (c->len)
        return false;
    char b;
    return recv(c->fd, &b, 1, 0) == 0;
}

/* One request on a new connection; the response in r. */
static inline int peer_request(uint16_t port, const char *raw,
                               peer_response_t *r)
{
    peer_conn_t *c = peer_connect(port);
    peer_send_str(c, raw);
    int rc = peer_read_response(c, r);
    peer_close(c);
    return rc;
}

/* Waits (bounded) until *counter reaches at least n. */
static inline bool peer_wait_count(atomic_int *counter, int n)
{
    for (int i = 0; i < PEER_TIMEOUT_MS; i++) {
        if (atomic_load(counter) >= n)
            return true;
        usleep(1000);
    }
    return false;
}

/* ---- the client thread and the loop that serves it ---------------------- */

typedef struct peer_thread {
    pthread_t tid;
    void (*fn)(void *arg);
    void *arg;
    atomic_bool done;
} peer_thread_t;

static inline void *peer_thread_main(void *p)
{
    peer_thread_t *t = p;
    t->fn(t->arg);
    atomic_store(&t->done, true);
    return NULL;
}

static inline void peer_start(peer_thread_t *t, void (*fn)(void *), void *arg)
{
    t->fn = fn;
    t->arg = arg;
    atomic_store(&t->done, false);
    ASSERT_EQ(pthread_create(&t->tid, NULL, peer_thread_main, t), 0);
}

static inline bool peer_is_done(void *t)
{
    return atomic_load(&((peer_thread_t *)t)->done);
}

/* A short repeating timer, so that the loop looks at the test's condition
 * even while no socket event arrives. */
static mf_timer_t peer_ticker;

static inline void peer_tick(mf_timer_t *timer)
{
    mf_timer_start(timer->data, timer, 2);
}

/* Runs the loop until cond(arg) holds or ms have passed; returns cond. */
static inline bool peer_run_until(mf_loop_t *loop, bool (*cond)(void *),
                                  void *arg, uint64_t ms)
{
    mf_timer_init(&peer_ticker, peer_tick, loop);
    mf_timer_start(loop, &peer_ticker, 2);
    mf_loop_update_time(loop);
    uint64_t end = mf_loop_now(loop) + ms;
    while (!cond(arg) && mf_loop_now(loop) < end)
        mf_loop_run(loop, MF_RUN_ONCE);
    mf_timer_stop(loop, &peer_ticker);
    return cond(arg);
}

/* Serves until the client thread has finished, then joins it. */
static inline void peer_finish(mf_loop_t *loop, peer_thread_t *t)
{
    if (!peer_run_until(loop, peer_is_done, t, 4 * PEER_TIMEOUT_MS))
        MF_TEST_FAIL("the client thread did not finish in time");
    pthread_join(t->tid, NULL);
}

/* Starts fn(arg) as the client and serves it to its end. */
static inline void peer_run(mf_loop_t *loop, void (*fn)(void *), void *arg)
{
    peer_thread_t t;
    peer_start(&t, fn, arg);
    peer_finish(loop, &t);
}

/* ---- handler helpers ------------------------------------------------------
 */

static inline bool peer_path_is(const mf_http_request_t *req, const char *p)
{
    return req->path_len == strlen(p) &&
           memcmp(req->path, p, req->path_len) == 0;
}

/* The number after "key=" when the query starts with it, else 0. */
static inline long peer_query_num(const mf_http_request_t *req, const char *key)
{
    size_t k = strlen(key);
    long n = 0;
    if (req->query && req->query_len > k && memcmp(req->query, key, k) == 0 &&
        req->query[k] == '=')
        /* within the query: the request's bytes are not NUL-terminated */
        for (size_t i = k + 1; i < req->query_len; i++) {
            if (req->query[i] < '0' || req->query[i] > '9')
                break;
            n = n * 10 + (req->query[i] - '0');
        }
    return n;
}

typedef struct peer_hold {
    mf_timer_t timer;
    mf_http_exchange_t *ex;
    const char *body;
    atomic_int *lost;
} peer_hold_t;

static inline void peer_hold_fire(mf_timer_t *timer)
{
    peer_hold_t *h = timer->data;
    mf_http_exchange_append(h->ex, h->body, strlen(h->body));
    mf_http_exchange_send(h->ex);
    free(h);
}

static inline void peer_hold_lost(mf_http_exchange_t *ex, void *arg)
{
    peer_hold_t *h = arg;
    mf_timer_stop(mf_http_exchange_loop(ex), &h->timer);
    if (h->lost)
        atomic_fetch_add(h->lost, 1);
    free(h);
}

/* Holds the exchange and answers body after ms; if the client leaves
 * first, the on_close callback counts it in *lost (when not NULL). */
static inline void peer_hold(mf_http_exchange_t *ex, uint64_t ms,
                             const char *body, atomic_int *lost)
{
    peer_hold_t *h = malloc(sizeof(*h));
    h->ex = ex;
    h->body = body;
    h->lost = lost;
    mf_timer_init(&h->timer, peer_hold_fire, h);
    mf_timer_start(mf_http_exchange_loop(ex), &h->timer, ms);
    mf_http_exchange_on_close(ex, peer_hold_lost, h);
    mf_http_exchange_hold(ex);
}

/* ---- one server for the test file ---------------------------------------- */

static mf_loop_t *peer_loop;
static mf_http_server_t *peer_server;
static uint16_t peer_port;
static atomic_int peer_stops; /* stop callbacks of any server of the file */

static inline void peer_on_stopped(mf_http_server_t *server, void *arg)
{
    (void)server;
    (void)arg;
    atomic_fetch_add(&peer_stops, 1);
}

static inline bool peer_stops_reached(void *arg)
{
    return atomic_load(&peer_stops) >= *(const int *)arg;
}

/* The refused-request hook of the servers started from here (set it
 * before the first one starts), or NULL. */
static mf_http_reject_cb peer_on_reject;

/* Another server on the file's loop, on a free loopback port. */
static inline mf_http_server_t *peer_start_server(mf_http_handler handler,
                                                  uint64_t max_body)
{
    mf_http_server_config_t c;
    mf_http_server_config_init(&c);
    c.listen = "127.0.0.1:0";
    c.on_reject = peer_on_reject;
    if (max_body)
        c.max_body = max_body;
    int err = 0;
    mf_http_server_t *s =
        mf_http_server_start(peer_loop, &c, handler, NULL, &err);
    if (!s)
        MF_TEST_FAIL("server: %s", mf_strerror(err));
    return s;
}

static inline void peer_stop_at_exit(void)
{
    int want = atomic_load(&peer_stops) + 1;
    mf_http_server_stop(peer_server, peer_on_stopped, NULL);
    if (!peer_run_until(peer_loop, peer_stops_reached, &want, 5000))
        fprintf(stderr, "the server did not stop\n");
    mf_loop_destroy(peer_loop);
}

/* Starts the file's loop and server on first use; they end at exit. */
static inline void peer_serve_once(mf_http_handler handler, uint64_t max_body)
{
    if (peer_server)
        return;
    peer_loop = mf_loop_create();
    peer_server = peer_start_server(handler, max_body);
    peer_port = mf_http_server_port(peer_server);
    atexit(peer_stop_at_exit);
}

#endif /* MF_HTTP_PEER_H */
