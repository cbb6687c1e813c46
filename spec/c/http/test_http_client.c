/* The http task against our own server (on the same loop) and against a
 * real nginx started by the test: keep-alive reuse, redirects, timeouts,
 * DNS/connect/TLS failures reported in the task's state, chunked bodies,
 * pooling limits, and proxying with mf_task_http_forward. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <moonflow/http_client.h>
#include <moonflow/moonflow.h>

#include "dns_stub.h"
#include "http_peer.h"
#include "http_result.h"
#include "test.h"
#include "test_cert.h"
#include "test_port.h"

extern char **environ;

static mf_loop_t *loop;
static mf_http_server_t *server;
static uint16_t port;

/* ---- the test server --------------------------------------------------- */

static void serve_redirect(mf_http_exchange_t *ex, const mf_http_request_t *req)
{
    long n = peer_query_num(req, "n");
    if (n <= 0) {
        mf_http_exchange_append(ex, "landed\n", 7);
        return;
    }
    char loc[64];
    int len = snprintf(loc, sizeof loc, "/redirect?n=%ld", n - 1);
    mf_http_exchange_set_status(ex, 302);
    mf_http_exchange_add_header(ex, "Location", 8, loc, (size_t)len);
}

static char *big_body;
static size_t big_len;

static int drain_calls;

static void on_drain_count(mf_http_exchange_t *ex, void *arg)
{
    (void)ex;
    (void)arg;
    drain_calls++;
}

/* Constant header lines by reference (a third one is copied), and a body
 * sent from memory that is wiped right after the call: the response must
 * not depend on it (n bytes; n > 16 KiB takes the owned-copy path). */
static void serve_static(mf_http_exchange_t *ex, const mf_http_request_t *req)
{
    static const char a[] = "X-A: 1\r\n", b[] = "X-B: 2\r\n",
                      c[] = "X-C: 3\r\n";
    mf_http_exchange_add_header_static(ex, a, sizeof a - 1);
    mf_http_exchange_add_header(ex, "X-D", 3, "4", 1);
    mf_http_exchange_add_header_static(ex, b, sizeof b - 1);
    mf_http_exchange_add_header_static(ex, c, sizeof c - 1);
    size_t n = (size_t)peer_query_num(req, "n");
    char *body = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        body[i] = (char)('a' + i % 26);
    mf_http_exchange_send_body(ex, body, n);
    memset(body, 'X', n);
    free(body);
}

static void handle(mf_http_exchange_t *ex, void *user)
{
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    (void)user;
    if (peer_path_is(req, "/drain-then-send")) {
        /* A drain call is due on the next phase, but the exchange ends
         * first: the call must be dropped with it (ASan twin checks). */
        mf_http_exchange_on_drain(ex, on_drain_count, NULL);
        mf_http_exchange_append(ex, "sent\n", 5);
        mf_http_exchange_send(ex);
    } else if (peer_path_is(req, "/big")) {
        mf_http_exchange_body_ref(ex, big_body, big_len);
    } else if (peer_path_is(req, "/hello")) {
        mf_http_exchange_body_ref(ex, "hello client\n", 13);
    } else if (peer_path_is(req, "/redirect")) {
        serve_redirect(ex, req);
    } else if (peer_path_is(req, "/held")) {
        peer_hold(ex, (uint64_t)peer_query_num(req, "ms"), "late\n", NULL);
    } else if (peer_path_is(req, "/stream")) {
        for (long i = 0; i < peer_query_num(req, "n"); i++)
            mf_http_exchange_write(ex, "0123456789", 10);
        mf_http_exchange_send(ex);
    } else if (peer_path_is(req, "/static")) {
        serve_static(ex, req);
    } else if (peer_path_is(req, "/echo")) {
        size_t len;
        const char *body = mf_http_exchange_body(ex, &len);
        mf_http_exchange_append(ex, body, len);
    } else {
        mf_http_exchange_set_status(ex, 404);
    }
}

static void start_server(const char *cert, const char *key)
{
    mf_http_server_config_t c;
    mf_http_server_config_init(&c);
    c.listen = "127.0.0.1:0";
    c.tls.cert_file = cert;
    c.tls.key_file = key;
    int err = 0;
    server = mf_http_server_start(loop, &c, handle, NULL, &err);
    if (!server)
        MF_TEST_FAIL("server: %s", mf_strerror(err));
    port = mf_http_server_port(server);
}

static void stop_server(void)
{
    mf_http_server_stop(server, NULL, NULL);
    mf_loop_run(loop, MF_RUN_DEFAULT); /* pooled client conns do not count */
}

static void setup(void)
{
    loop = mf_loop_create();
    start_server(NULL, NULL);
}

static void teardown(void)
{
    stop_server();
    mf_loop_destroy(loop);
}

/* ---- results ---------------------------------------------------------- */

/* on_done, plus the X-A..X-D header values joined in r->headers. */
static void on_done_headers(mf_task_t *task)
{
    result_t *r = task->user;
    on_done(task);
    const char *names[] = {"X-A", "X-B", "X-C", "X-D"};
    r->headers[0] = 0;
    for (int i = 0; i < 4; i++) {
        size_t len;
        const char *v = mf_task_http_header(task, names[i], &len);
        char piece[16];
        snprintf(piece, sizeof piece, "%s%.*s", i ? " " : "", v ? (int)len : 1,
                 v ? v : "-");
        strncat(r->headers, piece, sizeof r->headers - strlen(r->headers) - 1);
    }
}

static mf_task_t *get(const char *path, result_t *r)
{
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%u%s", port, path);
    return mf_task_http_create(loop, "GET", url, on_done, r);
}

static void run_until(const result_t *r, int done)
{
    while (r->done < done)
        mf_loop_run(loop, MF_RUN_ONCE);
}

/* The server's listener keeps the loop alive, so run until the task is
 * done rather than until the loop is idle. */
static void run_one(mf_task_t *task)
{
    result_t *r = task->user;
    int before = r ? r->done : 0;
    mf_task_start(task);
    while (r && r->done == before)
        mf_loop_run(loop, MF_RUN_ONCE);
    if (!r)
        mf_loop_run(loop, MF_RUN_DEFAULT);
}

/* ---- tests against our server ------------------------------------------ */

TEST(get_returns_status_and_body)
{
    setup();
    result_t r = {0};
    run_one(get("/hello", &r));
    ASSERT_EQ(r.done, 1);
    ASSERT_EQ(r.state, MF_STATE_SUCCESS);
    ASSERT_EQ(r.status, 200);
    ASSERT_STR_EQ(r.body, "hello client\n");
    r.done = 0;
    run_one(get("/missing", &r));
    ASSERT_EQ(r.state, MF_STATE_SUCCESS); /* an HTTP status is not an error */
    ASSERT_EQ(r.status, 404);
    teardown();
}

static void check_static(size_t n)
{
    char path[64];
    snprintf(path, sizeof path, "/static?n=%zu", n);
    result_t r = {0};
    mf_task_t *t = get(path, &r);
    mf_task_set_callback(t, on_done_headers);
    run_one(t);
    ASSERT_EQ(r.state, MF_STATE_SUCCESS);
    ASSERT_EQ(r.status, 200);
    ASSERT_EQ(r.body_len, n);
    for (size_t i = 0; i < n && i < sizeof r.body - 1; i++)
        ASSERT_EQ(r.body[i], (char)('a' + i % 26));
    ASSERT_STR_EQ(r.headers, "1 2 3 4");
}

TEST(static_header_lines_and_send_body_copy_what_they_must)
{
    setup();
    check_static(0);
    check_static(11);
    check_static(16 * 1024);
    check_static(100 * 1000); /* over the copy limit: an owned copy */
    check_static(11);         /* the connection is still in step */
    teardown();
}

static void on_seq(mf_task_t *task)
{
    result_t *r = task->user;
    on_done(task);
    if (r->done < 20 && r->status == 200) {
        mf_task_t *next = get("/hello", r);
        mf_task_set_callback(next, on_seq);
        mf_series_push_back(mf_series_of(task), next);
    }
}

typedef struct endpoint_seen {
    int endpoints;
    mf_http_endpoint_stats_t last;
    char host[64];
} endpoint_seen_t;

static void on_endpoint(void *ud, const mf_http_endpoint_stats_t *st)
{
    endpoint_seen_t *e = ud;
    e->endpoints++;
    e->last = *st;
    snprintf(e->host, sizeof e->host, "%s", st->host);
    e->last.host = e->host;
}

TEST(sequential_requests_reuse_one_keep_alive_connection)
{
    setup();
    result_t r = {0};
    uint64_t before = mf_http_pool_connects(loop);
    mf_task_t *t = get("/hello", &r);
    mf_task_set_callback(t, on_seq);
    mf_task_start(t);
    run_until(&r, 20);
    ASSERT_EQ(r.done, 20);
    ASSERT_EQ(r.status, 200);
    ASSERT_EQ(mf_http_pool_connects(loop) - before, 1);
    ASSERT_EQ(mf_http_server_connections(server), 1); /* still pooled */
    endpoint_seen_t e = {0};
    mf_http_pool_stats(loop, on_endpoint, &e);
    ASSERT_EQ(e.endpoints, 1);
    ASSERT_STR_EQ(e.last.host, "127.0.0.1");
    ASSERT_EQ(e.last.connections, 1);
    ASSERT_EQ(e.last.idle, 1);
    ASSERT_EQ(e.last.waiters, 0);
    ASSERT_EQ(e.last.evictions, 0);
    teardown();
}

static void on_timer_done(mf_task_t *task)
{
    ((result_t *)task->user)->done++;
}

TEST(an_idle_connection_past_its_timeout_counts_as_an_eviction)
{
    setup();
    mf_http_pool_config_t pc = {.max_connections_per_endpoint = 4,
                                .idle_timeout_ms = 20};
    mf_http_pool_configure(loop, &pc);
    result_t r = {0};
    run_one(get("/hello", &r));
    ASSERT_EQ(r.status, 200);
    result_t wait = {0}; /* a timer task past the idle timeout */
    mf_task_t *t = mf_task_timer_create(loop, 80, on_timer_done, &wait);
    mf_task_start(t);
    run_until(&wait, 1);
    endpoint_seen_t e = {0};
    mf_http_pool_stats(loop, on_endpoint, &e);
    ASSERT_EQ(e.endpoints, 1);
    ASSERT_EQ(e.last.connections, 0);
    ASSERT_EQ(e.last.idle, 0);
    ASSERT_EQ(e.last.evictions, 1);
    teardown();
}

TEST(concurrent_requests_respect_the_pool_limit)
{
    setup();
    mf_http_pool_config_t pc = {.max_connections_per_endpoint = 4,
                                .idle_timeout_ms = 5000};
    mf_http_pool_configure(loop, &pc);
    static result_t rs[40];
    memset(rs, 0, sizeof rs);
    mf_parallel_t *par = mf_parallel_create(loop, NULL, NULL);
    for (int i = 0; i < 40; i++)
        mf_parallel_add_task(par, get("/held?ms=5", &rs[i]));
    mf_task_start(mf_parallel_task(par));
    while (!rs[39].done || !rs[0].done)
        mf_loop_run(loop, MF_RUN_ONCE);
    for (int spin = 0; spin < 100; spin++)
        mf_loop_run(loop, MF_RUN_NOWAIT);
    for (int i = 0; i < 40; i++) {
        ASSERT_EQ(rs[i].state, MF_STATE_SUCCESS);
        ASSERT_STR_EQ(rs[i].body, "late\n");
    }
    ASSERT_EQ(mf_http_pool_connects(loop), 4);
    teardown();
}

TEST(redirects_are_followed_up_to_the_limit)
{
    setup();
    result_t r = {0};
    mf_http_client_opts_t o;
    mf_http_client_opts_init(&o);
    o.max_redirects = 5;
    mf_task_t *t = get("/redirect?n=3", &r);
    mf_task_http_set_opts(t, &o);
    run_one(t);
    ASSERT_EQ(r.status, 200);
    ASSERT_EQ(r.redirects, 3);
    ASSERT_STR_EQ(r.body, "landed\n");
    /* One more than allowed fails the task; the last 3xx is still read. */
    o.max_redirects = 2;
    t = get("/redirect?n=3", &r);
    mf_task_http_set_opts(t, &o);
    run_one(t);
    if (r.state != MF_STATE_TASK_ERROR || r.error != MF_ETOOMANYREDIRECTS ||
        r.status != 302 || r.redirects != 2)
        MF_TEST_FAIL("%s/%s status %d redirects %d body %s",
                     mf_state_name(r.state), mf_err_name(r.error), r.status,
                     r.redirects, r.body);
    teardown();
}

TEST(a_slow_response_ends_as_timeout)
{
    setup();
    result_t r = {0};
    mf_http_client_opts_t o;
    mf_http_client_opts_init(&o);
    o.response_timeout_ms = 50;
    mf_task_t *t = get("/held?ms=3000", &r);
    mf_task_http_set_opts(t, &o);
    uint64_t t0 = mf_loop_now(loop);
    mf_task_start(t);
    while (!r.done)
        mf_loop_run(loop, MF_RUN_ONCE);
    ASSERT_EQ(r.state, MF_STATE_TIMEOUT);
    ASSERT_EQ(r.error, MF_ETIMEDOUT);
    ASSERT(mf_loop_now(loop) - t0 < 2000);
    /* The generic per-task timeout works the same way. */
    r.done = 0;
    t = get("/held?ms=3000", &r);
    mf_task_set_timeout(t, 50);
    mf_task_start(t);
    while (!r.done)
        mf_loop_run(loop, MF_RUN_ONCE);
    ASSERT_EQ(r.state, MF_STATE_TIMEOUT);
    teardown();
}

TEST(a_drain_callback_due_after_its_exchange_ended_is_dropped)
{
    setup();
    result_t r = {0};
    for (int i = 0; i < 5; i++)
        run_one(get("/drain-then-send", &r));
    ASSERT_STR_EQ(r.body, "sent\n");
    for (int i = 0; i < 10; i++)
        mf_loop_run(loop, MF_RUN_NOWAIT);
    ASSERT_EQ(drain_calls, 0);
    teardown();
}

TEST(chunked_bodies_and_request_bodies_round_trip)
{
    setup();
    result_t r = {0};
    run_one(get("/stream?n=30", &r));
    ASSERT_EQ(r.status, 200);
    ASSERT_EQ(r.body_len, 300);
    ASSERT(memcmp(r.body, "01234567890123456789", 20) == 0);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/echo", port);
    mf_task_t *t = mf_task_http_create(loop, "POST", url, on_done, &r);
    mf_task_http_set_body(t, "ping pong", 9);
    mf_task_http_add_header(t, "Content-Type", "text/plain");
    run_one(t);
    ASSERT_STR_EQ(r.body, "ping pong");
    teardown();
}

/* A body made as it is sent: pieces of at most 50000 bytes of a pattern,
 * none on the second call (MF_EAGAIN; a timer says it is ready), or an
 * error after fail_after bytes. */
typedef struct producer {
    size_t total, given;
    size_t fail_after; /* 0: never */
    int calls;
    mf_task_t *task;
    mf_timer_t later;
} producer_t;

static void producer_ready(mf_timer_t *timer)
{
    producer_t *p = timer->data;
    mf_task_http_body_ready(p->task);
}

static ssize_t produce(void *arg, void *buf, size_t len)
{
    producer_t *p = arg;
    if (++p->calls == 2) {
        mf_timer_start(loop, &p->later, 10);
        return MF_EAGAIN;
    }
    if (p->fail_after && p->given >= p->fail_after)
        return MF_EIO;
    size_t n = p->total - p->given;
    n = n < len ? n : len;
    n = n < 50000 ? n : 50000;
    for (size_t i = 0; i < n; i++)
        ((char *)buf)[i] = (char)('a' + (p->given + i) % 26);
    p->given += n;
    return (ssize_t)n;
}

static void post_produced(producer_t *p, int64_t length, result_t *r)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/echo", port);
    mf_task_t *t = mf_task_http_create(loop, "POST", url, on_done, r);
    p->task = t;
    mf_timer_init(&p->later, producer_ready, p);
    mf_task_http_set_body_source(t, produce, p, length);
    run_one(t);
}

TEST(a_body_from_a_source_is_sent_as_it_is_made)
{
    setup();
    result_t r = {0};
    producer_t chunked = {.total = 300000};
    post_produced(&chunked, -1, &r); /* no length: chunked */
    ASSERT_EQ(r.status, 200);
    ASSERT_EQ(r.body_len, 300000);
    ASSERT(memcmp(r.body, "abcdefghijklmnopqrstuvwxyzabc", 29) == 0);
    ASSERT(chunked.calls > 6); /* in pieces, one of them late */
    producer_t sized = {.total = 300000};
    post_produced(&sized, 300000, &r);
    ASSERT_EQ(r.status, 200);
    ASSERT_EQ(r.body_len, 300000);
    producer_t failing = {.total = 300000, .fail_after = 100000};
    post_produced(&failing, -1, &r); /* taken: never sent again */
    ASSERT_EQ(r.state, MF_STATE_SYS_ERROR);
    ASSERT_EQ(r.error, MF_EIO);
    producer_t short_one = {.total = 1000};
    post_produced(&short_one, 5000, &r); /* ends before its length */
    ASSERT_EQ(r.state, MF_STATE_SYS_ERROR);
    ASSERT_EQ(r.error, MF_ECLOSED);
    teardown();
}

TEST(connection_refused_and_bad_urls_fail_in_the_completion)
{
    setup();
    result_t r = {0};
    mf_task_t *t =
        mf_task_http_create(loop, "GET", "http://127.0.0.1:1/", on_done, &r);
    run_one(t);
    ASSERT_EQ(r.state, MF_STATE_SYS_ERROR);
    ASSERT_EQ(r.error, MF_ECONNREFUSED);
    run_one(mf_task_http_create(loop, "GET", "ftp://x/", on_done, &r));
    ASSERT_EQ(r.state, MF_STATE_TASK_ERROR);
    ASSERT_EQ(r.error, MF_EINVAL);
    run_one(mf_task_http_create(loop, "GET", "http://:80/", on_done, &r));
    ASSERT_EQ(r.state, MF_STATE_TASK_ERROR);
    teardown();
}

TEST(connect_failures_are_retried_up_to_max_retries)
{
    setup();
    result_t r = {0};
    mf_http_client_opts_t o;
    mf_http_client_opts_init(&o);
    o.max_retries = 3;
    mf_task_t *t =
        mf_task_http_create(loop, "POST", "http://127.0.0.1:1/", on_done, &r);
    mf_task_http_set_opts(t, &o);
    uint64_t before = mf_http_pool_connects(loop);
    run_one(t);
    ASSERT_EQ(r.error, MF_ECONNREFUSED);
    /* Nothing reached a server, so even a POST may go again. */
    ASSERT_EQ(mf_http_pool_connects(loop) - before, 4);
    teardown();
}

TEST(a_name_that_does_not_resolve_is_a_dns_error)
{
    setup();
    /* A real DNS server that answers NXDOMAIN for unknown names. */
    dns_stub_start();
    dns_stub_use(loop);
    result_t r = {0};
    run_one(mf_task_http_create(loop, "GET", "http://no-such-host.test/",
                                on_done, &r));
    dns_stub_stop();
    if (r.state != MF_STATE_DNS_ERROR || r.error != MF_EDNS)
        MF_TEST_FAIL("state %s error %s", mf_state_name(r.state),
                     mf_err_name(r.error));
    teardown();
}

TEST(a_request_that_cannot_be_built_fails_with_enomem)
{
    setup();
    result_t r = {0};
    size_t big = 100 * 1000; /* above the free lists: a checked malloc */
    char *body = calloc(1, big);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/echo", port);
    mf_task_t *t = mf_task_http_create(loop, "POST", url, on_done, &r);
    mf_alloc_fail_next(1);
    mf_task_http_set_body(t, body, big);
    run_one(t);
    ASSERT_EQ(r.state, MF_STATE_SYS_ERROR);
    ASSERT_EQ(r.error, MF_ENOMEM);
    /* Memory is back: the same request goes through whole. */
    t = mf_task_http_create(loop, "POST", url, on_done, &r);
    mf_task_http_set_body(t, body, big);
    run_one(t);
    ASSERT_EQ(r.state, MF_STATE_SUCCESS);
    ASSERT_EQ(r.body_len, big);
    free(body);
    teardown();
}

/* ---- forwarding --------------------------------------------------------- */

static uint16_t backend_port;

static void proxy_handle(mf_http_exchange_t *ex, void *user)
{
    char upstream[64];
    (void)user;
    snprintf(upstream, sizeof upstream, "http://127.0.0.1:%u", backend_port);
    mf_series_push_back(mf_http_exchange_series(ex),
                        mf_task_http_forward(ex, upstream, NULL, NULL));
}

/* A second server on the loop that forwards everything to the first. */
static mf_http_server_t *start_proxy(void)
{
    backend_port = port;
    mf_http_server_config_t c;
    mf_http_server_config_init(&c);
    c.listen = "127.0.0.1:0";
    mf_http_server_t *proxy =
        mf_http_server_start(loop, &c, proxy_handle, NULL, NULL);
    ASSERT(proxy != NULL);
    return proxy;
}

TEST(forward_relays_a_request_and_streams_the_answer_back)
{
    setup();
    mf_http_server_t *proxy = start_proxy();
    uint16_t pport = mf_http_server_port(proxy);
    const char *paths[] = {"/hello", "/stream?n=500", "/missing"};
    for (int i = 0; i < 3; i++) {
        result_t *r = calloc(1, sizeof(*r));
        char url[128];
        snprintf(url, sizeof url, "http://127.0.0.1:%u%s", pport, paths[i]);
        run_one(mf_task_http_create(loop, "GET", url, on_done, r));
        ASSERT_EQ(r->state, MF_STATE_SUCCESS);
        if (i == 0)
            ASSERT_STR_EQ(r->body, "hello client\n");
        if (i == 1)
            ASSERT_EQ(r->body_len, 5000);
        if (i == 2 && r->status != 404)
            MF_TEST_FAIL("status %d body %s", r->status, r->body);
        free(r);
    }
    /* A dead upstream becomes a 502 for the client. */
    backend_port = 1;
    result_t r = {0};
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/x", pport);
    run_one(mf_task_http_create(loop, "GET", url, on_done, &r));
    ASSERT_EQ(r.status, 502);
    mf_http_server_stop(proxy, NULL, NULL);
    teardown();
}

static long rss_kib(void)
{
    char line[256];
    long kib = -1;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

static void run_for_ms(uint64_t ms)
{
    mf_loop_update_time(loop);
    uint64_t end = mf_loop_now(loop) + ms;
    while (mf_loop_now(loop) < end) {
        mf_loop_run(loop, MF_RUN_NOWAIT);
        usleep(1000);
        mf_loop_update_time(loop);
    }
}

TEST(forward_to_a_slow_client_buffers_a_window_not_the_whole_body)
{
    big_len = 64u << 20;
    big_body = malloc(big_len);
    memset(big_body, 'b', big_len); /* resident before the baseline */
    setup();
    mf_http_server_t *proxy = start_proxy();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int small = 65536;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons(mf_http_server_port(proxy))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    const char req[] = "GET /big HTTP/1.1\r\nHost: h\r\n\r\n";
    ASSERT_EQ(write(fd, req, sizeof req - 1), (long)sizeof req - 1);
    long before = rss_kib();
    run_for_ms(600); /* the client reads nothing meanwhile */
    long grown = rss_kib() - before;
    if (grown > 24 * 1024) /* far below the 64 MiB body */
        MF_TEST_FAIL("the proxy buffered %ld KiB for a stalled client", grown);
    /* Then the client reads it all: nothing was lost while paused. */
    fcntl(fd, F_SETFL, O_NONBLOCK);
    size_t total = 0;
    char *buf = malloc(1 << 20);
    for (int spins = 0; spins < 200000 && total < big_len; spins++) {
        mf_loop_run(loop, MF_RUN_NOWAIT);
        ssize_t n = read(fd, buf, 1 << 20);
        if (n > 0)
            total += (size_t)n;
        else if (n == 0)
            break;
        else
            usleep(100);
    }
    ASSERT(total > big_len); /* the body plus the head and chunk framing */
    free(buf);
    close(fd);
    mf_http_server_stop(proxy, NULL, NULL);
    teardown();
    free(big_body);
}

/* ---- TLS ---------------------------------------------------------------- */

static mf_test_cert_t tc; /* its folder also holds nginx's files */

static void trace_released(mf_task_trace_t *t)
{
    (void)t;
}

static mf_http_timings_t last_timings;

static void on_done_timed(mf_task_t *task)
{
    mf_task_http_timings(task, &last_timings);
    on_done(task);
}

TEST(tls_verification_failure_is_a_tls_error_and_a_trusted_ca_passes)
{
    mf_test_cert_make(&tc);
    const char *cert = tc.cert;
    loop = mf_loop_create();
    start_server(cert, tc.key);
    char url[128];
    snprintf(url, sizeof url, "https://127.0.0.1:%u/hello", port);
    result_t r = {0};
    run_one(mf_task_http_create(loop, "GET", url, on_done, &r));
    ASSERT_EQ(r.state, MF_STATE_TLS_ERROR); /* self-signed: not trusted */

    mf_http_client_opts_t o;
    mf_http_client_opts_init(&o);
    o.ca_file = cert;
    /* Made under a trace context: the task stamps its steps. */
    mf_task_trace_t trace = {1, trace_released};
    mf_loop_set_trace(loop, &trace);
    mf_task_t *t = mf_task_http_create(loop, "GET", url, on_done_timed, &r);
    mf_loop_set_trace(loop, NULL);
    mf_task_http_set_opts(t, &o);
    run_one(t);
    ASSERT_EQ(r.state, MF_STATE_SUCCESS);
    ASSERT_STR_EQ(r.body, "hello client\n");
    ASSERT_EQ(trace.refs, 1); /* the task let it go */
    const mf_http_timings_t *tm = &last_timings;
    ASSERT(tm->resolved > 0);
    ASSERT(tm->connected >= tm->resolved);
    ASSERT(tm->opened > tm->connected); /* the TLS handshake in between */
    ASSERT(tm->sending >= tm->opened);
    ASSERT(tm->sent >= tm->sending);
    ASSERT(tm->first_byte >= tm->sent);

    /* The trusted connection is pooled, but a request that asks for the
     * system CAs must not reuse it: it verifies again, and fails. */
    o.ca_file = NULL;
    t = mf_task_http_create(loop, "GET", url, on_done, &r);
    mf_task_http_set_opts(t, &o);
    run_one(t);
    ASSERT_EQ(r.state, MF_STATE_TLS_ERROR);

    o.tls_verify = false; /* the opt-out */
    t = mf_task_http_create(loop, "GET", url, on_done_timed, &r);
    mf_task_http_set_opts(t, &o);
    run_one(t);
    ASSERT_EQ(r.state, MF_STATE_SUCCESS);
    /* Not traced: no clock read, nothing stamped. */
    ASSERT(last_timings.resolved == 0 && last_timings.sending == 0 &&
           last_timings.first_byte == 0);
    teardown();
    ASSERT(mf_test_cert_remove(&tc));
}

/* ---- against nginx ------------------------------------------------------ */

static pid_t start_nginx(uint16_t nport)
{
    char conf[256], cmd[1024];
    mf_test_cert_make(&tc);
    snprintf(conf, sizeof conf, "%s/nginx.conf", tc.dir);
    FILE *f = fopen(conf, "w");
    ASSERT(f != NULL);
    fprintf(f,
            "daemon off; master_process off; worker_processes 1;\n"
            "pid %s/nginx.pid; error_log %s/error.log;\n"
            "events { worker_connections 128; }\n"
            "http { access_log off;\n"
            " client_body_temp_path %s; proxy_temp_path %s;\n"
            " fastcgi_temp_path %s; uwsgi_temp_path %s; scgi_temp_path %s;\n"
            " keepalive_requests 1000;\n"
            " server { listen 127.0.0.1:%u;\n"
            "  location = / { return 200 \"nginx says hi\\n\"; }\n"
            "  location = /r { return 302 /; } } }\n",
            tc.dir, tc.dir, tc.dir, tc.dir, tc.dir, tc.dir, tc.dir, nport);
    fclose(f);
    (void)cmd;
    pid_t pid;
    char *argv[] = {"nginx", "-p", tc.dir, "-c", conf, "-e", "stderr", NULL};
    if (posix_spawn(&pid, "/usr/sbin/nginx", NULL, NULL, argv, environ) != 0)
        return -1;
    for (int i = 0; i < 200; i++) { /* wait for the port */
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons(nport)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (ok)
            return pid;
        usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static void on_nginx_seq(mf_task_t *task)
{
    result_t *r = task->user;
    on_done(task);
    if (r->done < 30 && r->status == 200)
        mf_series_push_back(mf_series_of(task),
                            mf_task_http_create(mf_task_loop(task), "GET",
                                                mf_task_http_url(task),
                                                on_nginx_seq, r));
}

TEST(against_nginx_keep_alive_is_reused_and_redirects_followed)
{
    if (access("/usr/sbin/nginx", X_OK) != 0)
        MF_TEST_FAIL("nginx is not installed (make installs nginx-light)");
    uint16_t nport = mf_test_free_port();
    pid_t pid = start_nginx(nport);
    ASSERT(pid > 0);
    loop = mf_loop_create();
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/", nport);
    result_t r = {0};
    mf_task_start(mf_task_http_create(loop, "GET", url, on_nginx_seq, &r));
    run_until(&r, 30);
    ASSERT_EQ(r.done, 30);
    ASSERT_STR_EQ(r.body, "nginx says hi\n");
    ASSERT_EQ(mf_http_pool_connects(loop), 1);

    snprintf(url, sizeof url, "http://127.0.0.1:%u/r", nport);
    mf_http_client_opts_t o;
    mf_http_client_opts_init(&o);
    o.max_redirects = 3;
    mf_task_t *t = mf_task_http_create(loop, "GET", url, on_done, &r);
    mf_task_http_set_opts(t, &o);
    run_one(t);
    ASSERT_EQ(r.status, 200);
    ASSERT_EQ(r.redirects, 1);
    ASSERT_STR_EQ(r.body, "nginx says hi\n");
    ASSERT_EQ(mf_http_pool_connects(loop), 1); /* the redirect reused it */
    mf_loop_destroy(loop);
    kill(pid, SIGTERM);
    ASSERT_EQ(waitpid(pid, NULL, 0), pid);
    ASSERT(mf_test_cert_remove(&tc));
}
