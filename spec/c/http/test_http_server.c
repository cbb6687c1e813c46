/* The HTTP server from C, on loopback: keep-alive reuse, pipelining in
 * order around a held exchange, closing (Connection: close, HTTP/1.0, a
 * half-closed client, a client leaving mid-request), the on_close callback
 * exactly once, 413 and 431 answers, streaming, and a graceful stop with
 * exchanges still held. One server serves the whole file (a second one is
 * started only to be stopped); the clients are plain blocking sockets in a
 * thread of their own (http_peer.h). */
#include "http_peer.h"

static atomic_int handled;     /* handler calls */
static atomic_int held;        /* /hold exchanges started */
static atomic_int hold_closed; /* their on_close calls */
static atomic_int parked;      /* /park exchanges started */
static atomic_int park_closed; /* their on_close calls */

/* ---- the handler ----------------------------------------------------------
 */

static void serve_hold(mf_http_exchange_t *ex, const mf_http_request_t *req)
{
    peer_hold(ex, (uint64_t)peer_query_num(req, "ms"), "held", &hold_closed);
    atomic_fetch_add(&held, 1);
}

static void park_lost(mf_http_exchange_t *ex, void *arg)
{
    (void)ex;
    (void)arg;
    atomic_fetch_add(&park_closed, 1);
}

static void serve_stream(mf_http_exchange_t *ex, const mf_http_request_t *req)
{
    long n = peer_query_num(req, "n");
    for (long i = 0; i < n; i++) {
        char line[32];
        int len = snprintf(line, sizeof line, "chunk %ld\n", i);
        if (mf_http_exchange_write(ex, line, (size_t)len) < 0)
            break;
    }
    mf_http_exchange_send(ex);
}

static void handle(mf_http_exchange_t *ex, void *user)
{
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    (void)user;
    atomic_fetch_add(&handled, 1);
    if (peer_path_is(req, "/q")) {
        mf_http_exchange_append(ex, req->query ? req->query : "-",
                                req->query ? req->query_len : 1);
    } else if (peer_path_is(req, "/peer")) {
        char text[16];
        int n = snprintf(text, sizeof text, "%u",
                         ntohs(mf_http_exchange_peer(ex)->in4.sin_port));
        mf_http_exchange_append(ex, text, (size_t)n);
    } else if (peer_path_is(req, "/echo")) {
        size_t len;
        const char *body = mf_http_exchange_body(ex, &len);
        mf_http_exchange_append(ex, body, len);
    } else if (peer_path_is(req, "/hold")) {
        serve_hold(ex, req);
    } else if (peer_path_is(req, "/park")) { /* answered never: only a close */
        mf_http_exchange_on_close(ex, park_lost, NULL);
        mf_http_exchange_hold(ex);
        atomic_fetch_add(&parked, 1);
    } else if (peer_path_is(req, "/stream")) {
        serve_stream(ex, req);
    } else {
        mf_http_exchange_set_status(ex, 404);
    }
}

/* ---- one server for the file ------------------------------------------- */

static void serve_once(void)
{
    peer_serve_once(handle, 64 * 1024);
}

static bool count_reached(void *arg)
{
    const int *want = arg; /* {target, index into counters} */
    atomic_int *counters[] = {&handled, &held,        &hold_closed,
                              &parked,  &park_closed, &peer_stops};
    return atomic_load(counters[want[1]]) >= want[0];
}

enum { C_HANDLED, C_HELD, C_HOLD_CLOSED, C_PARKED, C_PARK_CLOSED, C_STOPS };

static bool run_until_count(int counter, int target, uint64_t ms)
{
    int want[2] = {target, counter};
    return peer_run_until(peer_loop, count_reached, want, ms);
}

static bool no_connections(void *arg)
{
    return mf_http_server_connections(arg) == 0;
}

static bool never(void *arg)
{
    (void)arg;
    return false;
}

/* ---- keep-alive and pipelining ------------------------------------------ */

typedef struct many {
    int statuses[20];
    char peers[20][16];
    bool closed_header;
} many_t;

static void client_many(void *arg)
{
    many_t *m = arg;
    peer_conn_t *c = peer_connect(peer_port);
    for (int i = 0; i < 20; i++) {
        peer_response_t r;
        peer_send_str(c, "GET /peer HTTP/1.1\r\nHost: h\r\n\r\n");
        peer_read_response(c, &r);
        m->statuses[i] = r.status;
        snprintf(m->peers[i], sizeof m->peers[i], "%.15s", r.body);
        m->closed_header |= r.conn_close;
    }
    peer_close(c);
}

TEST(keep_alive_serves_many_requests_on_one_connection)
{
    serve_once();
    many_t m = {0};
    peer_run(peer_loop, client_many, &m);
    for (int i = 0; i < 20; i++) {
        ASSERT_EQ(m.statuses[i], 200);
        ASSERT_STR_EQ(m.peers[i], m.peers[0]); /* the same client peer_port */
    }
    ASSERT(atoi(m.peers[0]) > 0);
    ASSERT(!m.closed_header);
}

typedef struct answers {
    int n;
    peer_response_t r[4];
    int rc[4];
    bool closed;
} answers_t;

static void client_pipelined(void *arg)
{
    answers_t *a = arg;
    peer_conn_t *c = peer_connect(peer_port);
    peer_send_str(c, "GET /q?one HTTP/1.1\r\nHost: h\r\n\r\n"
                     "GET /hold?ms=30 HTTP/1.1\r\nHost: h\r\n\r\n"
                     "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 5"
                     "\r\n\r\nthree"
                     "GET /q?four HTTP/1.1\r\nHost: h\r\n\r\n");
    for (a->n = 0; a->n < 4; a->n++)
        a->rc[a->n] = peer_read_response(c, &a->r[a->n]);
    peer_close(c);
}

TEST(pipelined_requests_are_answered_in_order_around_a_held_one)
{
    serve_once();
    answers_t *a = calloc(1, sizeof(*a));
    int before = atomic_load(&hold_closed);
    peer_run(peer_loop, client_pipelined, a);
    const char *want[] = {"one", "held", "three", "four"};
    for (int i = 0; i < 4; i++) {
        ASSERT_EQ(a->rc[i], 0);
        ASSERT_EQ(a->r[i].status, 200);
        ASSERT_STR_EQ(a->r[i].body, want[i]);
    }
    ASSERT_EQ(atomic_load(&hold_closed), before); /* answered, not lost */
    free(a);
}

/* ---- closing ------------------------------------------------------------ */

static void client_closing(void *arg)
{
    answers_t *a = arg;
    peer_conn_t *c = peer_connect(peer_port);
    peer_send_str(c,
                  "GET /q?a HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    a->rc[0] = peer_read_response(c, &a->r[0]);
    a->closed = peer_sees_close(c);
    peer_close(c);

    c = peer_connect(peer_port);
    peer_send_str(c, "GET /q?b HTTP/1.0\r\n\r\n");
    a->rc[1] = peer_read_response(c, &a->r[1]);
    a->closed = a->closed && peer_sees_close(c);
    peer_close(c);

    c = peer_connect(peer_port); /* HTTP/1.0 asking for keep-alive: kept */
    for (int i = 2; i < 4; i++) {
        peer_send_str(c, "GET /q?c HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        a->rc[i] = peer_read_response(c, &a->r[i]);
    }
    peer_close(c);
}

TEST(connection_close_and_http10_end_the_connection_after_the_answer)
{
    serve_once();
    answers_t *a = calloc(1, sizeof(*a));
    peer_run(peer_loop, client_closing, a);
    ASSERT_EQ(a->rc[0], 0);
    ASSERT_STR_EQ(a->r[0].body, "a");
    ASSERT(a->r[0].conn_close);
    ASSERT_EQ(a->rc[1], 0);
    ASSERT_STR_EQ(a->r[1].body, "b");
    ASSERT(a->r[1].conn_close);
    ASSERT(a->closed);
    for (int i = 2; i < 4; i++) {
        ASSERT_EQ(a->rc[i], 0);
        ASSERT(!a->r[i].conn_close);
        ASSERT(strcasestr(a->r[i].head, "Connection: keep-alive") != NULL);
    }
    free(a);
}

static void client_half_close(void *arg)
{
    answers_t *a = arg;
    peer_conn_t *c = peer_connect(peer_port);
    peer_send_str(c, "GET /q?1 HTTP/1.1\r\nHost: h\r\n\r\n"
                     "GET /q?2 HTTP/1.1\r\nHost: h\r\n\r\n"
                     "GET /q?3 HTTP/1.1\r\nHost: h\r\n\r\n");
    shutdown(c->fd, SHUT_WR);
    for (a->n = 0; a->n < 3; a->n++)
        a->rc[a->n] = peer_read_response(c, &a->r[a->n]);
    a->closed = peer_sees_close(c);
    peer_close(c);
}

TEST(a_half_closed_client_still_gets_its_answers_then_the_close)
{
    serve_once();
    answers_t *a = calloc(1, sizeof(*a));
    peer_run(peer_loop, client_half_close, a);
    const char *want[] = {"1", "2", "3"};
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(a->rc[i], 0);
        ASSERT_STR_EQ(a->r[i].body, want[i]);
    }
    ASSERT(a->closed);
    ASSERT(peer_run_until(peer_loop, no_connections, peer_server, 2000));
    free(a);
}

#define HALF_CLOSE_TRIES 50

typedef struct half_close_tries {
    int answered; /* tries whose first answer came whole, as "one" */
    int closed;   /* tries that then saw the close, with nothing more */
} half_close_tries_t;

/* Two pipelined requests, the second held for long, and the FIN sent right
 * behind them: the server tends to read all three in one go. */
static void client_answer_then_held_then_fin(void *arg)
{
    half_close_tries_t *t = arg;
    for (int i = 0; i < HALF_CLOSE_TRIES; i++) {
        peer_response_t *r = calloc(1, sizeof(*r));
        peer_conn_t *c = peer_connect(peer_port);
        peer_send_str(c, "GET /q?one HTTP/1.1\r\nHost: h\r\n\r\n"
                         "GET /hold?ms=10000 HTTP/1.1\r\nHost: h\r\n\r\n");
        shutdown(c->fd, SHUT_WR);
        if (peer_read_response(c, r) == 0 && r->status == 200 &&
            strcmp(r->body, "one") == 0)
            t->answered++;
        if (peer_sees_close(c))
            t->closed++;
        peer_close(c);
        free(r);
    }
}

TEST(a_fin_behind_a_held_request_still_sends_the_answer_before_it)
{
    serve_once();
    half_close_tries_t t = {0};
    int held_before = atomic_load(&held);
    int closed_before = atomic_load(&hold_closed);
    peer_run(peer_loop, client_answer_then_held_then_fin, &t);
    ASSERT_EQ(t.answered, HALF_CLOSE_TRIES);
    ASSERT_EQ(t.closed, HALF_CLOSE_TRIES);
    /* Every held exchange was aborted, its on_close run once. */
    ASSERT(
        run_until_count(C_HOLD_CLOSED, closed_before + HALF_CLOSE_TRIES, 5000));
    ASSERT_EQ(atomic_load(&held), held_before + HALF_CLOSE_TRIES);
    ASSERT_EQ(atomic_load(&hold_closed), closed_before + HALF_CLOSE_TRIES);
    ASSERT(peer_run_until(peer_loop, no_connections, peer_server, 2000));
}

static void client_park_and_leave(void *arg)
{
    int *target = arg;
    peer_conn_t *c = peer_connect(peer_port);
    peer_send_str(c, "GET /park HTTP/1.1\r\nHost: h\r\n\r\n");
    peer_wait_count(&parked, *target); /* the exchange is held now */
    peer_close(c);
}

TEST(a_client_leaving_a_held_exchange_gets_on_close_exactly_once)
{
    serve_once();
    int closed_before = atomic_load(&park_closed);
    int target = atomic_load(&parked) + 1;
    peer_run(peer_loop, client_park_and_leave, &target);
    ASSERT(run_until_count(C_PARK_CLOSED, closed_before + 1, 5000));
    peer_run_until(peer_loop, never, NULL, 50); /* no second call comes */
    ASSERT_EQ(atomic_load(&park_closed), closed_before + 1);
    ASSERT(peer_run_until(peer_loop, no_connections, peer_server, 2000));
}

static void client_leave_mid_request(void *arg)
{
    (void)arg;
    peer_conn_t *c = peer_connect(peer_port);
    peer_send_str(c, "GET /q HTTP/1.1\r\nHost:");
    usleep(20000);
    peer_close(c);
    c = peer_connect(peer_port);
    peer_send_str(c, "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 100"
                     "\r\n\r\nonly ten..");
    usleep(20000);
    peer_close(c);
}

TEST(a_client_leaving_mid_request_is_closed_without_reaching_the_handler)
{
    serve_once();
    int before = atomic_load(&handled);
    peer_run(peer_loop, client_leave_mid_request, NULL);
    ASSERT(peer_run_until(peer_loop, no_connections, peer_server, 2000));
    ASSERT_EQ(atomic_load(&handled), before);
}

/* ---- limits ------------------------------------------------------------- */

static void client_limits(void *arg)
{
    answers_t *a = arg;
    /* 413: a declared length over max_body, refused before any byte. */
    peer_conn_t *c = peer_connect(peer_port);
    peer_send_str(c, "POST /echo HTTP/1.1\r\nHost: h\r\n"
                     "Content-Length: 10000000\r\n\r\n");
    a->rc[0] = peer_read_response(c, &a->r[0]);
    a->closed = peer_sees_close(c);
    peer_close(c);

    /* 413: a chunked body that grows past max_body (64 KiB) as it comes. */
    c = peer_connect(peer_port);
    peer_send_str(c, "POST /echo HTTP/1.1\r\nHost: h\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n");
    static char chunk[8192 + 16];
    memcpy(chunk, "2000\r\n", 6);
    memset(chunk + 6, 'c', 8192);
    memcpy(chunk + 6 + 8192, "\r\n", 2);
    for (int i = 0; i < 16; i++)
        peer_send(c, chunk, 8192 + 8);
    a->rc[1] = peer_read_response(c, &a->r[1]);
    a->closed = a->closed && peer_sees_close(c);
    peer_close(c);

    /* 431: a head over max_head_bytes (8 KiB). */
    c = peer_connect(peer_port);
    static char big[20000];
    memset(big, 'a', sizeof big - 1);
    peer_send_str(c, "GET /q HTTP/1.1\r\nHost: h\r\nX-Big: ");
    peer_send_str(c, big);
    peer_send_str(c, "\r\n\r\n");
    a->rc[2] = peer_read_response(c, &a->r[2]);
    a->closed = a->closed && peer_sees_close(c);
    peer_close(c);

    /* Within the limit, a chunked body arrives whole. */
    c = peer_connect(peer_port);
    peer_send_str(c, "POST /echo HTTP/1.1\r\nHost: h\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n"
                     "3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n");
    a->rc[3] = peer_read_response(c, &a->r[3]);
    peer_close(c);
}

TEST(over_limit_bodies_get_413_and_huge_heads_431_then_a_close)
{
    serve_once();
    answers_t *a = calloc(1, sizeof(*a));
    int before = atomic_load(&handled);
    peer_run(peer_loop, client_limits, a);
    ASSERT_EQ(a->r[0].status, 413);
    ASSERT(a->r[0].conn_close);
    ASSERT_EQ(a->r[1].status, 413);
    ASSERT(a->r[1].conn_close);
    ASSERT_EQ(a->r[2].status, 431);
    ASSERT(a->r[2].conn_close);
    ASSERT(a->closed);
    ASSERT_EQ(a->rc[3], 0);
    ASSERT_EQ(a->r[3].status, 200);
    ASSERT_STR_EQ(a->r[3].body, "abcdefg");
    ASSERT_EQ(atomic_load(&handled), before + 1); /* only the good one */
    free(a);
}

/* ---- streaming ---------------------------------------------------------- */

static void client_stream(void *arg)
{
    answers_t *a = arg;
    peer_conn_t *c = peer_connect(peer_port);
    peer_send_str(c, "GET /stream?n=200 HTTP/1.1\r\nHost: h\r\n\r\n"
                     "GET /q?after HTTP/1.1\r\nHost: h\r\n\r\n");
    a->rc[0] = peer_read_response(c, &a->r[0]);
    a->rc[1] = peer_read_response(c, &a->r[1]);
    peer_close(c);
}

TEST(a_streamed_answer_arrives_chunked_and_whole_and_the_connection_goes_on)
{
    serve_once();
    answers_t *a = calloc(1, sizeof(*a));
    peer_run(peer_loop, client_stream, a);
    ASSERT_EQ(a->rc[0], 0);
    ASSERT(a->r[0].chunked);
    size_t want = 0;
    for (int i = 0; i < 200; i++)
        want += (size_t)snprintf(NULL, 0, "chunk %d\n", i);
    ASSERT_EQ(a->r[0].body_len, want);
    ASSERT(strncmp(a->r[0].body, "chunk 0\nchunk 1\n", 16) == 0);
    ASSERT_EQ(a->rc[1], 0);
    ASSERT_STR_EQ(a->r[1].body, "after");
    free(a);
}

/* ---- graceful stop ------------------------------------------------------ */

typedef struct stop_case {
    uint16_t port;
    peer_response_t held_answer;
    int held_rc;
    bool held_closed;
    atomic_bool leave; /* the parked client may go */
    int park_target;
} stop_case_t;

static void client_held_during_stop(void *arg)
{
    stop_case_t *s = arg;
    peer_conn_t *c = peer_connect(s->port);
    peer_send_str(c, "GET /hold?ms=100 HTTP/1.1\r\nHost: h\r\n\r\n");
    s->held_rc = peer_read_response(c, &s->held_answer);
    s->held_closed = peer_sees_close(c);
    peer_close(c);
}

static void client_parked_during_stop(void *arg)
{
    stop_case_t *s = arg;
    peer_conn_t *c = peer_connect(s->port);
    peer_send_str(c, "GET /park HTTP/1.1\r\nHost: h\r\n\r\n");
    peer_wait_count(&parked, s->park_target);
    for (int i = 0; i < PEER_TIMEOUT_MS && !atomic_load(&s->leave); i++)
        usleep(1000);
    peer_close(c);
}

static bool both_held(void *arg)
{
    const int *want = arg; /* {held target, parked target} */
    return atomic_load(&held) >= want[0] && atomic_load(&parked) >= want[1];
}

TEST(stop_lets_held_exchanges_finish_and_on_close_runs_once_for_a_leaver)
{
    serve_once();
    mf_http_server_t *second = peer_start_server(handle, 64 * 1024);
    stop_case_t *s = calloc(1, sizeof(*s));
    s->port = mf_http_server_port(second);
    s->park_target = atomic_load(&parked) + 1;
    int targets[2] = {atomic_load(&held) + 1, s->park_target};
    int hold_closed_before = atomic_load(&hold_closed);
    int park_closed_before = atomic_load(&park_closed);
    int stopped_before = atomic_load(&peer_stops);
    peer_thread_t a, b;
    peer_start(&a, client_held_during_stop, s);
    peer_start(&b, client_parked_during_stop, s);
    ASSERT(peer_run_until(peer_loop, both_held, targets, 5000));

    mf_http_server_stop(second, peer_on_stopped, NULL);
    peer_finish(peer_loop, &a); /* its answer came, then the close */
    ASSERT_EQ(s->held_rc, 0);
    ASSERT_STR_EQ(s->held_answer.body, "held");
    ASSERT(s->held_answer.conn_close);
    ASSERT(s->held_closed);
    ASSERT_EQ(atomic_load(&peer_stops), stopped_before); /* one still held */

    atomic_store(&s->leave, true);
    peer_finish(peer_loop, &b);
    ASSERT(run_until_count(C_STOPS, stopped_before + 1, 5000));
    peer_run_until(peer_loop, never, NULL, 50);
    ASSERT_EQ(atomic_load(&park_closed), park_closed_before + 1);
    ASSERT_EQ(atomic_load(&hold_closed), hold_closed_before);
    ASSERT_EQ(atomic_load(&peer_stops), stopped_before + 1);
    /* The listener is gone: new connections are refused. */
    peer_conn_t *c = peer_connect(s->port);
    ASSERT_EQ(c->fd, -1);
    peer_close(c);
    free(s);
}
