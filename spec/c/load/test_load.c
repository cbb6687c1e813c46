/*
 * test_load.c — the HTTP load generator of one loop against our own server
 * on the same loop (load_server.h): what it counts (requests, pipelined
 * requests, connections, errors of each kind, timeouts), its hooks, its
 * phases, and no allocation per request.
 */
#include <moonflow/load.h>

#include "load_server.h"
#include "test_cert.h"

static mf_loop_t *loop;
static uint16_t port;

typedef struct run {
    mf_load_t *load;
    bool done;
    int done_calls;
    uint64_t wall_ns;
} run_t;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void setup(void)
{
    if (loop)
        return;
    signal(SIGPIPE, SIG_IGN); /* as moonflow's main: a closed peer is EPIPE */
    loop = mf_loop_create();
    ASSERT(loop != NULL);
    port = load_server_start(loop);
}

static mf_load_target_t target(const char *request)
{
    return load_target(port, request);
}

static mf_load_config_t config(const mf_load_target_t *t, unsigned conns,
                               uint64_t ms)
{
    mf_load_config_t c = {.targets = t,
                          .ntargets = 1,
                          .connections = conns,
                          .duration_ns = ms * 1000000u,
                          .keepalive = true};
    return c;
}

static void on_done(mf_load_t *load, void *user)
{
    run_t *r = user;
    ASSERT(r->load == load);
    r->done = true;
    r->done_calls++;
}

/* Runs a load on the test's loop until its done (bounded: 20 s). */
static void run(run_t *r, const mf_load_config_t *c, const mf_load_hooks_t *h)
{
    int err = 0;
    memset(r, 0, sizeof(*r));
    load_server_reset();
    r->load = mf_load_create(loop, c, h, &err);
    ASSERT_EQ(err, 0);
    ASSERT(r->load != NULL);
    uint64_t t0 = now_ns();
    mf_load_start(r->load, on_done, r);
    ASSERT(!r->done); /* never from inside start */
    while (!r->done && now_ns() - t0 < 20000000000u)
        mf_loop_run(loop, MF_RUN_ONCE);
    r->wall_ns = now_ns() - t0;
    ASSERT(r->done);
    /* Let the server see the closes. */
    for (int i = 0; i < 20; i++)
        mf_loop_run(loop, MF_RUN_NOWAIT);
    ASSERT_EQ(r->done_calls, 1);
}

static uint64_t errors(const mf_load_stats_t *s)
{
    return s->errors.connect + s->errors.read + s->errors.write +
           s->errors.status + s->errors.timeout;
}

#define GET(path) "GET " path " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

TEST(counts_requests_in_a_buffer)
{
    ASSERT_EQ(mf_load_count_requests(GET("/"), strlen(GET("/"))), 1);
    const char *three = GET("/") GET("/a") GET("/b");
    ASSERT_EQ(mf_load_count_requests(three, strlen(three)), 3);
    const char *post = "POST /e HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
                       "\r\nhello" GET("/");
    ASSERT_EQ(mf_load_count_requests(post, strlen(post)), 2);
    /* Cut short, a body short of its length, not HTTP: none. */
    ASSERT_EQ(mf_load_count_requests(post, strlen(post) - 3), 0);
    ASSERT_EQ(mf_load_count_requests(post, 50), 0);
    ASSERT_EQ(mf_load_count_requests("hello\r\n\r\n", 9), 0);
    ASSERT_EQ(mf_load_count_requests("", 0), 0);
}

TEST(refuses_a_config_out_of_range)
{
    setup();
    mf_load_target_t t = target(GET("/"));
    int err = 0;
    mf_load_config_t c = config(&t, 0, 100);
    ASSERT(mf_load_create(loop, &c, NULL, &err) == NULL);
    ASSERT_EQ(err, MF_EINVAL);
    c = config(&t, 1, 0);
    ASSERT(mf_load_create(loop, &c, NULL, &err) == NULL);
    ASSERT_EQ(err, MF_EINVAL);
    mf_load_target_t bad = target("GET / HT");
    c = config(&bad, 1, 100);
    ASSERT(mf_load_create(loop, &c, NULL, &err) == NULL);
    ASSERT_EQ(err, MF_EINVAL);
    c = config(&t, 1, 100);
    c.rate = -1;
    ASSERT(mf_load_create(loop, &c, NULL, &err) == NULL);
    ASSERT_EQ(err, MF_EINVAL);
}

TEST(closed_loop_counts_every_answered_request)
{
    setup();
    mf_load_target_t t = target(GET("/"));
    mf_load_config_t c = config(&t, 4, 1000);
    run_t r;
    run(&r, &c, NULL);
    const mf_load_stats_t *s = mf_load_stats(r.load);
    printf("  %" PRIu64 " requests in %.3f s, server answered %" PRIu64 "\n",
           s->requests, (double)s->duration_ns / 1e9, load_server.answered);
    ASSERT(s->requests > 100);
    /* Every answer read, but those in flight when the window closed. */
    ASSERT(s->requests <= load_server.answered);
    ASSERT(s->requests + 4 >= load_server.answered);
    ASSERT_EQ(errors(s), 0);
    ASSERT(s->bytes > s->requests * 20);
    /* At least the second asked (a starved loop may end it late). */
    ASSERT(s->duration_ns >= 1000000000u && s->duration_ns < 3000000000u);
    ASSERT_EQ(mf_hdr_count(s->latency), s->requests);
    ASSERT_EQ(s->ntargets, 1);
    ASSERT_EQ(s->target_requests[0], s->requests);
    /* One sample each 100 ms tick (fewer when the machine starves us). */
    ASSERT(mf_hdr_count(s->rate) >= 3 && mf_hdr_count(s->rate) <= 11);
    ASSERT(mf_hdr_max(s->rate) > 0);
    mf_load_progress_t p;
    mf_load_progress(r.load, &p);
    ASSERT_EQ(p.requests, s->requests);
    ASSERT(!p.warming_up);
    ASSERT_EQ(load_server_connections(), 4);
    mf_load_destroy(r.load);
}

TEST(pipelined_buffer_counts_each_request)
{
    setup();
    const char *three = GET("/") GET("/") GET("/");
    mf_load_target_t t = target(three);
    mf_load_config_t c = config(&t, 2, 500);
    run_t r;
    run(&r, &c, NULL);
    const mf_load_stats_t *s = mf_load_stats(r.load);
    ASSERT(s->requests > 30);
    ASSERT(s->requests <= load_server.answered);
    ASSERT(s->requests + 2 * 3 >= load_server.answered);
    ASSERT_EQ(errors(s), 0);
    mf_load_destroy(r.load);
}

TEST(keepalive_off_connects_for_each_request)
{
    setup();
    /* The server closes first after "Connection: close": nothing to read
     * back but that each request came whole. */
    mf_load_target_t t = target("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                "Connection: close\r\n\r\n");
    mf_load_config_t c = config(&t, 2, 500);
    c.keepalive = false;
    run_t r;
    run(&r, &c, NULL);
    const mf_load_stats_t *s = mf_load_stats(r.load);
    ASSERT(s->requests > 10);
    ASSERT_EQ(errors(s), 0);
    ASSERT(s->requests + 2 >= load_server.answered);
    mf_load_destroy(r.load);
    /* Without the header the engine closes first: its client ports stay
     * in TIME_WAIT, one new port a connection, so the server counts them. */
    t = target(GET("/"));
    run(&r, &c, NULL);
    s = mf_load_stats(r.load);
    printf("  %" PRIu64 " requests, %zu connections\n", s->requests,
           load_server_connections());
    ASSERT(s->requests > 10);
    ASSERT_EQ(errors(s), 0);
    ASSERT_EQ(load_server_connections(), load_server.answered);
    mf_load_destroy(r.load);
}

TEST(requests_per_conn_reconnects_after_that_many)
{
    setup();
    mf_load_target_t t = target(GET("/"));
    mf_load_config_t c = config(&t, 2, 500);
    c.requests_per_conn = 5;
    run_t r;
    run(&r, &c, NULL);
    const mf_load_stats_t *s = mf_load_stats(r.load);
    size_t conns = load_server_connections();
    ASSERT(s->requests > 50);
    ASSERT_EQ(errors(s), 0);
    /* Five requests a connection, but the last of each load connection. */
    ASSERT(conns * 5 >= load_server.answered);
    ASSERT((conns - 2) * 5 <= load_server.answered);
    mf_load_destroy(r.load);
}

/* Runs request on 2 connections for 300 ms: no error, every answer read
 * but those in flight at the end. */
static void run_clean(const char *request, const mf_load_hooks_t *h)
{
    mf_load_target_t t = target(request);
    mf_load_config_t c = config(&t, 2, 300);
    run_t r;
    run(&r, &c, h);
    const mf_load_stats_t *s = mf_load_stats(r.load);
    printf("  %" PRIu64 " requests\n", s->requests);
    ASSERT(s->requests > 10);
    ASSERT_EQ(errors(s), 0);
    ASSERT(s->requests <= load_server.answered);
    /* In flight at the end: the requests of one write a connection. */
    ASSERT(s->requests + 2 * mf_load_count_requests(request, strlen(request)) >=
           load_server.answered);
    mf_load_destroy(r.load);
}

TEST(frames_every_kind_of_response)
{
    setup();
    /* A HEAD answer has a Content-Length and no body. */
    run_clean("HEAD / HTTP/1.1\r\nHost: h\r\n\r\n", NULL);
    /* Chunked, framed without a hook (nothing kept). */
    run_clean(GET("/stream?n=50"), NULL);
    /* HTTP/1.0: the server closes after each answer; no error. */
    run_clean("GET / HTTP/1.0\r\n\r\n", NULL);
    /* GET, HEAD, GET pipelined: the HEAD's answer in the middle. */
    run_clean(GET("/") "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n" GET("/"), NULL);
}

TEST(status_404_counts_a_status_error_and_a_request)
{
    setup();
    mf_load_target_t t = target(GET("/nowhere"));
    mf_load_config_t c = config(&t, 2, 300);
    run_t r;
    run(&r, &c, NULL);
    const mf_load_stats_t *s = mf_load_stats(r.load);
    ASSERT(s->requests > 10);
    ASSERT_EQ(s->errors.status, s->requests);
    ASSERT_EQ(s->errors.read + s->errors.connect + s->errors.timeout, 0);
    mf_load_destroy(r.load);
}

TEST(closed_port_counts_connect_errors_and_ends_on_time)
{
    setup();
    mf_load_target_t t = target(GET("/"));
    t.addr.in4.sin_port = htons(mf_test_free_port());
    mf_load_config_t c = config(&t, 3, 500);
    run_t r;
    run(&r, &c, NULL);
    const mf_load_stats_t *s = mf_load_stats(r.load);
    printf("  %" PRIu64 " connect errors\n", s->errors.connect);
    ASSERT_EQ(s->requests, 0);
    /* Each connection tries again every 10 ms: about 50 times in 500 ms. */
    ASSERT(s->errors.connect >= 3 * 5);
    ASSERT(s->errors.connect <= 3 * 60);
    ASSERT(r.wall_ns < 2000000000u);
    ASSERT(s->duration_ns >= 500000000u);
    mf_load_destroy(r.load);
}

TEST(a_response_late_past_the_timeout_counts_a_timeout)
{
    setup();
    mf_load_target_t t = target(GET("/held?ms=5000"));
    mf_load_config_t c = config(&t, 2, 1000);
    c.timeout_ns = 200000000u;
    run_t r;
    run(&r, &c, NULL);
    const mf_load_stats_t *s = mf_load_stats(r.load);
    printf("  %" PRIu64 " timeouts\n", s->errors.timeout);
    ASSERT_EQ(s->requests, 0);
    /* 200 ms each, seen within a 100 ms tick: 3 to 5 a connection. */
    ASSERT(s->errors.timeout >= 2 * 2 && s->errors.timeout <= 2 * 5);
    ASSERT(r.wall_ns < 3000000000u);
    mf_load_destroy(r.load);
}

/* ---- hooks ----------------------------------------------------------------
 */

typedef struct seen {
    mf_load_t *load;
    uint64_t responses, good, stop_after, alloc_at, alloc_from, alloc_to;
    int fail_with;
} seen_t;

static int on_stream(void *user, size_t t, const mf_http_response_t *head,
                     const char *body, size_t len)
{
    seen_t *s = user;
    const char want[] = "chunk 0\nchunk 1\nchunk 2\nchunk 3\nchunk 4\n";
    const mf_http_header_t *te = mf_http_find_header(
        head->headers, head->num_headers, "Transfer-Encoding");
    s->responses++;
    if (t == 0 && head->status == 200 && te && len == sizeof want - 1 &&
        memcmp(body, want, len) == 0)
        s->good++;
    return 0;
}

TEST(response_hook_gets_status_headers_and_dechunked_body)
{
    setup();
    mf_load_target_t t = target(GET("/stream?n=5"));
    mf_load_config_t c = config(&t, 2, 300);
    seen_t seen = {0};
    mf_load_hooks_t h = {.response = on_stream, .user = &seen};
    run_t r;
    run(&r, &c, &h);
    const mf_load_stats_t *s = mf_load_stats(r.load);
    ASSERT(s->requests > 10);
    ASSERT_EQ(errors(s), 0);
    ASSERT(seen.responses >= s->requests);
    ASSERT_EQ(seen.good, seen.responses);
    mf_load_destroy(r.load);
}

static int on_response_stop(void *user, size_t t, const mf_http_response_t *h,
                            const char *body, size_t len)
{
    seen_t *s = user;
    (void)t, (void)h, (void)body, (void)len;
    if (++s->responses == s->stop_after) {
        if (s->fail_with)
            return s->fail_with;
        mf_load_stop(s->load);
    }
    return 0;
}

static void run_until_hook_stops(seen_t *seen, run_t *r)
{
    mf_load_target_t t = target(GET("/"));
    mf_load_config_t c = config(&t, 3, 10000);
    mf_load_hooks_t h = {.response = on_response_stop, .user = seen};
    int err = 0;
    memset(r, 0, sizeof(*r));
    r->load = seen->load = mf_load_create(loop, &c, &h, &err);
    ASSERT(r->load != NULL);
    uint64_t t0 = now_ns();
    mf_load_start(r->load, on_done, r);
    while (!r->done && now_ns() - t0 < 5000000000u)
        mf_loop_run(loop, MF_RUN_ONCE);
    ASSERT(r->done);
    ASSERT(now_ns() - t0 < 3000000000u);
}

TEST(a_hook_stops_the_run)
{
    setup();
    seen_t seen = {.stop_after = 50};
    run_t r;
    run_until_hook_stops(&seen, &r);
    const mf_load_stats_t *s = mf_load_stats(r.load);
    ASSERT_EQ(mf_load_error(r.load), 0);
    ASSERT_EQ(s->requests, 50); /* nothing is read after the stop */
    ASSERT(s->duration_ns < 3000000000u);
    mf_load_destroy(r.load);

    seen = (seen_t){.stop_after = 20, .fail_with = MF_EPROTO};
    run_until_hook_stops(&seen, &r);
    ASSERT_EQ(mf_load_error(r.load), MF_EPROTO);
    ASSERT_EQ(mf_load_stats(r.load)->requests, 20);
    mf_load_destroy(r.load);
}

static const char *paths[] = {GET("/"), GET("/nowhere")};

static int on_request(void *user, size_t t, const char **buf, size_t *len)
{
    seen_t *s = user;
    ASSERT_EQ(t, 0);
    *buf = paths[s->responses++ % 2];
    *len = strlen(*buf);
    return 0;
}

static uint64_t on_delay(void *user)
{
    (void)user;
    return 50;
}

TEST(request_and_delay_hooks_shape_each_request)
{
    setup();
    mf_load_target_t t = target(GET("/"));
    mf_load_config_t c = config(&t, 1, 1000);
    seen_t seen = {0};
    mf_load_hooks_t h = {
        .request = on_request, .delay = on_delay, .user = &seen};
    run_t r;
    run(&r, &c, &h);
    const mf_load_stats_t *s = mf_load_stats(r.load);
    printf("  %" PRIu64 " requests with a 50 ms delay\n", s->requests);
    /* One request each 50 ms or a little more, every other one a 404. */
    ASSERT(s->requests >= 12 && s->requests <= 21);
    ASSERT(s->errors.status * 2 >= s->requests - 1);
    ASSERT(s->errors.status * 2 <= s->requests + 1);
    mf_load_destroy(r.load);
}

static uint64_t on_delay_count_allocs(void *user)
{
    seen_t *s = user;
    s->responses++;
    if (s->responses == s->alloc_at)
        s->alloc_from = mf_alloc_count();
    if (s->responses == s->alloc_at + 5000)
        s->alloc_to = mf_alloc_count();
    return 0;
}

static int on_response_count_allocs(void *user, size_t t,
                                    const mf_http_response_t *h,
                                    const char *body, size_t len)
{
    (void)t, (void)h, (void)body, (void)len;
    on_delay_count_allocs(user);
    return 0;
}

TEST(no_allocation_per_request)
{
    setup();
    mf_load_target_t t = target(GET("/"));
    mf_load_config_t c = config(&t, 4, 1500);
    for (int with_body = 0; with_body < 2; with_body++) {
        seen_t seen = {.alloc_at = 1000};
        mf_load_hooks_t h = {.user = &seen};
        if (with_body)
            h.response = on_response_count_allocs;
        else
            h.delay = on_delay_count_allocs;
        run_t r;
        run(&r, &c, &h);
        ASSERT(seen.alloc_to != 0);
        printf("  %" PRIu64 " allocations in 5000 requests\n",
               seen.alloc_to - seen.alloc_from);
        ASSERT_EQ(seen.alloc_to - seen.alloc_from, 0);
        mf_load_destroy(r.load);
    }
}

TEST(warm_up_is_not_recorded)
{
    setup();
    mf_load_target_t t = target(GET("/"));
    mf_load_config_t c = config(&t, 2, 500);
    c.warmup_ns = 500000000u;
    run_t r;
    run(&r, &c, NULL);
    const mf_load_stats_t *s = mf_load_stats(r.load);
    printf("  %" PRIu64 " of %" PRIu64 " answered recorded\n", s->requests,
           load_server.answered);
    ASSERT(s->requests > 0);
    ASSERT(s->requests * 10 < load_server.answered * 8);
    ASSERT(s->requests * 10 > load_server.answered * 2);
    ASSERT(s->duration_ns >= 500000000u && s->duration_ns < 2500000000u);
    ASSERT(r.wall_ns >= 1000000000u);
    mf_load_destroy(r.load);
}

TEST(constant_rate_sends_at_the_rate)
{
    setup();
    mf_load_target_t t = target(GET("/"));
    mf_load_config_t c = config(&t, 4, 1000);
    c.rate = 200;
    run_t r;
    run(&r, &c, NULL);
    const mf_load_stats_t *s = mf_load_stats(r.load);
    printf("  %" PRIu64 " requests at 200/s, p50 %.3f ms\n", s->requests,
           (double)mf_hdr_percentile(s->latency, 50) / 1e6);
    /* Never above the rate; below it only by what a loop starved at the
     * very end of the window (its timers end the run before its sockets
     * catch up) could not send. */
    ASSERT(s->requests >= 150 && s->requests <= 210);
    ASSERT_EQ(errors(s), 0);
    ASSERT_EQ(mf_hdr_count(s->latency), s->requests);
    /* The Req/Sec samples (every 100 ms) average the rate. */
    ASSERT(mf_hdr_mean(s->rate) > 150 && mf_hdr_mean(s->rate) < 250);
    mf_load_destroy(r.load);
}

TEST(stop_before_the_server_answers)
{
    setup();
    mf_load_target_t t = target(GET("/held?ms=3000"));
    mf_load_config_t c = config(&t, 2, 200);
    run_t r;
    run(&r, &c, NULL);
    const mf_load_stats_t *s = mf_load_stats(r.load);
    ASSERT_EQ(s->requests, 0);
    ASSERT_EQ(errors(s), 0);
    ASSERT(r.wall_ns < 2000000000u);
    mf_load_destroy(r.load);
}

TEST(https_target_speaks_tls)
{
    setup();
    mf_test_cert_t cert;
    mf_test_cert_make(&cert);
    mf_http_server_t *srv =
        load_server_listen_tls(loop, 0, cert.cert, cert.key);
    ASSERT(srv != NULL);
    mf_load_target_t t = target(GET("/stream?n=5"));
    t.addr.in4.sin_port = htons(mf_http_server_port(srv));
    t.tls = true;
    t.host = "localhost";
    mf_load_config_t c = config(&t, 2, 500);
    seen_t seen = {0};
    mf_load_hooks_t h = {.response = on_stream, .user = &seen};
    run_t r;
    run(&r, &c, &h);
    const mf_load_stats_t *s = mf_load_stats(r.load);
    printf("  %" PRIu64 " requests over TLS\n", s->requests);
    ASSERT(s->requests > 10);
    ASSERT_EQ(errors(s), 0);
    ASSERT(s->requests <= load_server.answered);
    ASSERT(s->requests + 2 >= load_server.answered);
    ASSERT_EQ(seen.good, seen.responses);
    mf_load_destroy(r.load);
    /* Plain bytes to a TLS port: no answer, the server closes. */
    t.tls = false;
    c.timeout_ns = 100000000u;
    run(&r, &c, NULL);
    s = mf_load_stats(r.load);
    ASSERT_EQ(s->requests, 0);
    ASSERT(s->errors.read + s->errors.timeout > 0);
    mf_load_destroy(r.load);
    t.tls = true;
    t.addr.in4.sin_port = htons(port); /* TLS to a plain port */
    run(&r, &c, NULL);
    s = mf_load_stats(r.load);
    ASSERT_EQ(s->requests, 0);
    ASSERT(s->errors.connect > 0);
    mf_load_destroy(r.load);
    mf_http_server_stop(srv, NULL, NULL);
    ASSERT(mf_test_cert_remove(&cert));
}

TEST(each_target_gets_its_connections_and_stats)
{
    setup();
    mf_load_target_t t[2] = {target(GET("/")), target(GET("/nowhere"))};
    mf_load_config_t c = config(t, 4, 300);
    c.ntargets = 2;
    run_t r;
    run(&r, &c, NULL);
    const mf_load_stats_t *s = mf_load_stats(r.load);
    ASSERT_EQ(s->ntargets, 2);
    ASSERT(s->target_requests[0] > 10 && s->target_requests[1] > 10);
    ASSERT_EQ(s->target_requests[0] + s->target_requests[1], s->requests);
    ASSERT_EQ(mf_hdr_count(s->target_latency[0]), s->target_requests[0]);
    ASSERT_EQ(mf_hdr_count(s->target_latency[1]), s->target_requests[1]);
    ASSERT_EQ(s->errors.status, s->target_requests[1]); /* the 404s */
    ASSERT_EQ(s->target_errors[0], 0);
    ASSERT_EQ(s->target_errors[1], s->target_requests[1]);
    mf_load_destroy(r.load);
}

typedef struct watch {
    mf_load_t *load;
    mf_load_progress_t warm, measured;
} watch_t;

static void on_watch(mf_timer_t *timer)
{
    watch_t *w = timer->data;
    if (!w->warm.warming_up && !w->warm.requests) {
        mf_load_progress(w->load, &w->warm);
        mf_timer_start(loop, timer, 400);
    } else {
        mf_load_progress(w->load, &w->measured);
    }
}

TEST(progress_shows_the_warm_up_then_the_window)
{
    setup();
    mf_load_target_t t = target(GET("/"));
    mf_load_config_t c = config(&t, 2, 600);
    c.warmup_ns = 300000000u;
    int err;
    watch_t w = {0};
    run_t r = {0};
    r.load = w.load = mf_load_create(loop, &c, NULL, &err);
    ASSERT(r.load != NULL);
    mf_timer_t timer;
    mf_timer_init(&timer, on_watch, &w);
    mf_loop_update_time(loop);
    mf_timer_start(loop, &timer, 150);
    mf_load_start(r.load, on_done, &r);
    uint64_t t0 = now_ns();
    while (!r.done && now_ns() - t0 < 5000000000u)
        mf_loop_run(loop, MF_RUN_ONCE);
    mf_timer_stop(loop, &timer);
    ASSERT(r.done);
    /* In the warm-up nothing counts; in the window the 100 ms refresh
     * shows requests, no errors, a p99. */
    ASSERT(w.warm.warming_up);
    ASSERT_EQ(w.warm.requests, 0);
    ASSERT(!w.measured.warming_up);
    ASSERT(w.measured.requests > 0);
    ASSERT(w.measured.requests <= mf_load_stats(r.load)->requests);
    ASSERT_EQ(w.measured.errors, 0);
    ASSERT(w.measured.p99_ns > 0);
    mf_load_destroy(r.load);
}

/* user: the request hook's answer (< 0), or 0 to give bytes that are not
 * HTTP. */
static int on_request_fail(void *user, size_t t, const char **buf, size_t *len)
{
    int *answer = user;
    (void)t;
    *buf = "not a request\r\n\r\n";
    *len = strlen(*buf);
    return *answer;
}

TEST(a_request_hook_error_or_bad_bytes_end_the_run)
{
    setup();
    mf_load_target_t t = target(GET("/"));
    mf_load_config_t c = config(&t, 2, 3000);
    int answers[] = {MF_ECANCELED, 0}, errs[] = {MF_ECANCELED, MF_EINVAL};
    for (int i = 0; i < 2; i++) {
        mf_load_hooks_t h = {.request = on_request_fail, .user = &answers[i]};
        run_t r;
        run(&r, &c, &h);
        ASSERT_EQ(mf_load_error(r.load), errs[i]);
        ASSERT_EQ(mf_load_stats(r.load)->requests, 0);
        ASSERT(r.wall_ns < 2000000000u); /* not the 3 s asked */
        mf_load_destroy(r.load);
    }
}
