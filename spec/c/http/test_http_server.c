/* The HTTP server from C, on loopback: keep-alive reuse, pipelining in
 * order around a held exchange, closing (Connection: close, HTTP/1.0, a
 * half-closed client, a client leaving mid-request), the on_close callback
 * exactly once, 413 and 431 answers, streaming, a graceful stop with
 * exchanges still held, the checks on a handler's response headers, an
 * aborted answer, and the on_reject hook. One server serves the whole file
 * (a second one is started only to be stopped); the clients are plain
 * blocking sockets in a thread of their own (http_peer.h). */
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

/* ---- response headers, as data: what add_header returns, and the line
 * a valid one puts in the head ------------------------------------------ */

#define S(lit) lit, sizeof(lit) - 1

typedef struct header_case {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
    int rc;           /* what mf_http_exchange_add_header returns */
    const char *line; /* the line in the head (rc 0) */
} header_case_t;

static const header_case_t header_cases[] = {
    /* names that are not tokens, managed names hidden among them */
    {S("Content-Length "), S("5"), MF_EINVAL, NULL},
    {S("Transfer-Encoding\t"), S("chunked"), MF_EINVAL, NULL},
    {S(" Connection"), S("close"), MF_EINVAL, NULL},
    {S("X-A\r\nContent-Length"), S("0"), MF_EINVAL, NULL},
    {S(""), S("v"), MF_EINVAL, NULL},
    {S("X:Y"), S("v"), MF_EINVAL, NULL},
    {S("X Y"), S("v"), MF_EINVAL, NULL},
    {S("X-\x01"), S("v"), MF_EINVAL, NULL},
    {S("X-\xc3\xa9"), S("v"), MF_EINVAL, NULL},
    /* values with control bytes */
    {S("X-Split"), S("a\r\nContent-Length: 0"), MF_EINVAL, NULL},
    {S("X-Lf"), S("a\nb"), MF_EINVAL, NULL},
    {S("X-Nul"), "a\0b", 3, MF_EINVAL, NULL},
    {S("X-Ctl"), S("a\x01"), MF_EINVAL, NULL},
    {S("X-Del"), S("a\x7f"), MF_EINVAL, NULL},
    /* names the server manages, in any case */
    {S("content-length"), S("5"), MF_EINVAL, NULL},
    {S("CONNECTION"), S("close"), MF_EINVAL, NULL},
    {S("Transfer-Encoding"), S("chunked"), MF_EINVAL, NULL},
    {S("Keep-Alive"), S("timeout=5"), MF_EINVAL, NULL},
    {S("date"), S("today"), MF_EINVAL, NULL},
    /* valid: OWS trimmed, obs-text, empty, every tchar, HTAB inside */
    {S("X-Trim"), S(" \tpadded value\t "), 0, "\r\nX-Trim: padded value\r\n"},
    {S("X-Obs"), S("caf\xc3\xa9"), 0, "\r\nX-Obs: caf\xc3\xa9\r\n"},
    {S("X-Empty"), S(""), 0, "\r\nX-Empty: \r\n"},
    {S("X-!#$%&'*+.^_`|~09"), S("tab\tinside"), 0,
     "\r\nX-!#$%&'*+.^_`|~09: tab\tinside\r\n"},
    {S("Content-Lengthy"), S("1"), 0, "\r\nContent-Lengthy: 1\r\n"},
};

#define NCASES MF_ARRAY_SIZE(header_cases)

static int header_rc[NCASES]; /* what the handler got, per case */
static int late_header_rc;    /* a header added after a streamed head */

static void serve_header(mf_http_exchange_t *ex, const mf_http_request_t *req)
{
    long i = peer_query_num(req, "i");
    const header_case_t *c = &header_cases[i];
    header_rc[i] = mf_http_exchange_add_header(ex, c->name, c->name_len,
                                               c->value, c->value_len);
    mf_http_exchange_append(ex, "never sent\n", 11);
    if (c->rc == 0)
        mf_http_exchange_body_ref(ex, "fine\n", 5);
}

static void serve_late_header(mf_http_exchange_t *ex)
{
    mf_http_exchange_write(ex, "a", 1);
    late_header_rc = mf_http_exchange_add_header(ex, "X-Late", 6, "1", 1);
    mf_http_exchange_send(ex);
}

/* An answer the handler cannot finish: before anything is sent, or after
 * the first piece of a stream. */
static void serve_abort(mf_http_exchange_t *ex, bool streamed)
{
    mf_http_exchange_append(ex, "never sent\n", 11);
    if (streamed)
        mf_http_exchange_write(ex, "first\n", 6);
    mf_http_exchange_abort(ex);
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
    } else if (peer_path_is(req, "/header")) {
        serve_header(ex, req);
    } else if (peer_path_is(req, "/late-header")) {
        serve_late_header(ex);
    } else if (peer_path_is(req, "/abort")) {
        serve_abort(ex, false);
    } else if (peer_path_is(req, "/abort-stream")) {
        serve_abort(ex, true);
    } else {
        mf_http_exchange_set_status(ex, 404);
    }
}

/* ---- refused requests, as the on_reject hook sees them ------------------ */

typedef struct rejected {
    int status;
    bool known; /* req was not NULL */
    char method[16];
    char target[32];
    int minor;
    char agent[32]; /* the User-Agent of a whole head */
    bool has_peer;
    size_t body_bytes; /* of the answer, as the hook was told */
} rejected_t;

static rejected_t rejects[64];
static int nrejects; /* the hook runs on the loop, i.e. the test's thread */

static void copy_text(char *out, size_t cap, const char *s, size_t n)
{
    n = n < cap - 1 ? n : cap - 1;
    memcpy(out, s, n);
    out[n] = 0;
}

static void on_reject(mf_http_server_t *srv, int status,
                      const mf_http_request_t *req, const mf_sockaddr_t *peer,
                      size_t body_bytes, void *user)
{
    (void)srv;
    (void)user;
    if (nrejects == (int)MF_ARRAY_SIZE(rejects))
        return;
    rejected_t *r = &rejects[nrejects++];
    memset(r, 0, sizeof(*r));
    r->status = status;
    r->body_bytes = body_bytes;
    r->has_peer = peer && peer->sa.sa_family == AF_INET;
    r->known = req != NULL;
    if (!req)
        return;
    copy_text(r->method, sizeof r->method, req->method, req->method_len);
    copy_text(r->target, sizeof r->target, req->target, req->target_len);
    r->minor = req->minor_version;
    const mf_http_header_t *ua =
        mf_http_find_header(req->headers, req->num_headers, "user-agent");
    if (ua)
        copy_text(r->agent, sizeof r->agent, ua->value, ua->value_len);
}

/* ---- one server for the file ------------------------------------------- */

static void serve_once(void)
{
    peer_on_reject = on_reject;
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

static const char *two_requests; /* what client_two_pipelined sends */

/* Sends two_requests (two pipelined requests) and reads both answers. */
static void client_two_pipelined(void *arg)
{
    answers_t *a = arg;
    peer_conn_t *c = peer_connect(peer_port);
    peer_send_str(c, two_requests);
    a->rc[0] = peer_read_response(c, &a->r[0]);
    a->rc[1] = peer_read_response(c, &a->r[1]);
    peer_close(c);
}

TEST(a_streamed_answer_arrives_chunked_and_whole_and_the_connection_goes_on)
{
    serve_once();
    answers_t *a = calloc(1, sizeof(*a));
    two_requests = "GET /stream?n=200 HTTP/1.1\r\nHost: h\r\n\r\n"
                   "GET /q?after HTTP/1.1\r\nHost: h\r\n\r\n";
    peer_run(peer_loop, client_two_pipelined, a);
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

/* ---- response headers --------------------------------------------------- */

typedef struct header_answers {
    peer_response_t r[NCASES];
    int rc[NCASES];
    bool closed[NCASES];
} header_answers_t;

static void client_headers(void *arg)
{
    header_answers_t *a = arg;
    for (size_t i = 0; i < NCASES; i++) {
        char req[64];
        snprintf(req, sizeof req,
                 "GET /header?i=%zu HTTP/1.1\r\nHost: h\r\n\r\n", i);
        peer_conn_t *c = peer_connect(peer_port);
        peer_send_str(c, req);
        a->rc[i] = peer_read_response(c, &a->r[i]);
        /* a refused header's 500 closes; a good answer keeps alive */
        a->closed[i] = header_cases[i].rc != 0 && peer_sees_close(c);
        peer_close(c);
    }
}

/* How many times a header named name starts a line of the head. */
static int count_lines(const char *head, const char *name)
{
    int n = 0;
    size_t len = strlen(name);
    for (const char *p = strstr(head, "\r\n"); p; p = strstr(p + 2, "\r\n"))
        if (strncasecmp(p + 2, name, len) == 0 && p[2 + len] == ':')
            n++;
    return n;
}

/* An assertion inside the loop over header_cases, naming the case. */
#define CASE_ASSERT(cond)                                            \
    do {                                                             \
        if (!(cond))                                                 \
            MF_TEST_FAIL("header case %zu: assertion %s", i, #cond); \
    } while (0)

TEST(an_invalid_or_managed_response_header_turns_the_answer_into_a_500)
{
    serve_once();
    header_answers_t *a = calloc(1, sizeof(*a));
    uint64_t refused = mf_http_server_invalid_headers(peer_server);
    uint64_t failed = mf_http_server_failed_responses(peer_server);
    int want_refused = 0;
    peer_run(peer_loop, client_headers, a);
    for (size_t i = 0; i < NCASES; i++) {
        const header_case_t *c = &header_cases[i];
        const peer_response_t *r = &a->r[i];
        CASE_ASSERT(header_rc[i] == c->rc);
        CASE_ASSERT(a->rc[i] == 0);
        /* one framing, whatever the handler tried */
        CASE_ASSERT(count_lines(r->head, "Content-Length") == 1);
        CASE_ASSERT(count_lines(r->head, "Transfer-Encoding") == 0);
        CASE_ASSERT(count_lines(r->head, "Connection") <= 1);
        if (c->rc == 0) {
            CASE_ASSERT(r->status == 200);
            CASE_ASSERT(strstr(r->head, c->line) != NULL);
            CASE_ASSERT(strcmp(r->body, "fine\n") == 0);
            continue;
        }
        want_refused++;
        CASE_ASSERT(r->status == 500);
        CASE_ASSERT(r->conn_close);
        CASE_ASSERT(a->closed[i]);
        CASE_ASSERT(strstr(r->body, "never sent") == NULL);
        CASE_ASSERT(count_lines(r->head, "X-Split") == 0);
    }
    ASSERT_EQ(mf_http_server_invalid_headers(peer_server),
              refused + (uint64_t)want_refused);
    /* not an out-of-memory failure */
    ASSERT_EQ(mf_http_server_failed_responses(peer_server), failed);
    free(a);
}

TEST(a_header_added_after_a_streamed_head_is_refused_and_the_stream_ends_whole)
{
    serve_once();
    answers_t *a = calloc(1, sizeof(*a));
    uint64_t refused = mf_http_server_invalid_headers(peer_server);
    two_requests = "GET /late-header HTTP/1.1\r\nHost: h\r\n\r\n"
                   "GET /q?next HTTP/1.1\r\nHost: h\r\n\r\n";
    peer_run(peer_loop, client_two_pipelined, a);
    ASSERT_EQ(late_header_rc, MF_EINVAL);
    ASSERT_EQ(mf_http_server_invalid_headers(peer_server), refused + 1);
    ASSERT_EQ(a->rc[0], 0);
    ASSERT(a->r[0].chunked);
    ASSERT_STR_EQ(a->r[0].body, "a");
    ASSERT(strcasestr(a->r[0].head, "X-Late") == NULL);
    ASSERT_EQ(a->rc[1], 0); /* the connection goes on */
    ASSERT_STR_EQ(a->r[1].body, "next");
    free(a);
}

/* ---- aborted answers ---------------------------------------------------- */

static void client_aborts(void *arg)
{
    answers_t *a = arg;
    peer_conn_t *c = peer_connect(peer_port);
    peer_send_str(c, "GET /abort HTTP/1.1\r\nHost: h\r\n\r\n");
    a->rc[0] = peer_read_response(c, &a->r[0]);
    a->closed = peer_sees_close(c);
    peer_close(c);
    c = peer_connect(peer_port);
    peer_send_str(c, "GET /abort-stream HTTP/1.1\r\nHost: h\r\n\r\n"
                     "GET /q?never HTTP/1.1\r\nHost: h\r\n\r\n");
    a->rc[1] = peer_read_response(c, &a->r[1]);
    a->closed = a->closed && peer_sees_close(c);
    peer_close(c);
}

TEST(an_aborted_answer_is_a_500_before_the_head_and_a_cut_stream_after)
{
    serve_once();
    answers_t *a = calloc(1, sizeof(*a));
    uint64_t failed = mf_http_server_failed_responses(peer_server);
    peer_run(peer_loop, client_aborts, a);
    ASSERT_EQ(a->rc[0], 0);
    ASSERT_EQ(a->r[0].status, 500);
    ASSERT(a->r[0].conn_close);
    ASSERT(strstr(a->r[0].body, "never sent") == NULL);
    /* The head and the first chunk, then the close without the last
     * chunk; the pipelined request behind it is never answered. */
    ASSERT_EQ(a->rc[1], -1);
    ASSERT_EQ(a->r[1].status, 200);
    ASSERT(a->r[1].chunked);
    ASSERT(!a->r[1].complete);
    ASSERT_STR_EQ(a->r[1].body, "first\n");
    ASSERT(a->closed);
    ASSERT_EQ(mf_http_server_failed_responses(peer_server), failed);
    free(a);
}

/* ---- the on_reject hook ------------------------------------------------- */

typedef struct refused {
    peer_response_t r[6];
    int rc[6];
} refused_t;

static void client_refused(void *arg)
{
    refused_t *a = arg;
    static const char *const reqs[] = {
        "GET /q HTTP/1.1\r\nHost: h\r\nBad Header: x\r\n\r\n",
        "\x16\x03\x01\x02\r\n\r\n",
        "GET /v HTTP/2.0\r\nHost: h\r\n\r\n",
        "POST /echo HTTP/1.1\r\nHost: h\r\nUser-Agent: ua-413\r\n"
        "Content-Length: 10000000\r\n\r\n",
    };
    for (int i = 0; i < 4; i++) {
        peer_conn_t *c = peer_connect(peer_port);
        peer_send_str(c, reqs[i]);
        a->rc[i] = peer_read_response(c, &a->r[i]);
        peer_close(c);
    }
    /* 431 and 414: a head, and a request line, over their limits */
    static char big[12000];
    memset(big, 'a', sizeof big - 1);
    for (int i = 4; i < 6; i++) {
        peer_conn_t *c = peer_connect(peer_port);
        peer_send_str(c, i == 4 ? "GET /q HTTP/1.1\r\nHost: h\r\nX-Big: "
                                : "GET /");
        peer_send_str(c, big);
        peer_send_str(c, i == 4 ? "\r\n\r\n" : " HTTP/1.1\r\n\r\n");
        a->rc[i] = peer_read_response(c, &a->r[i]);
        peer_close(c);
    }
}

TEST(each_refused_request_reaches_on_reject_with_what_is_known_of_it)
{
    serve_once();
    refused_t *a = calloc(1, sizeof(*a));
    int first = nrejects;
    int before = atomic_load(&handled);
    peer_run(peer_loop, client_refused, a);
    ASSERT_EQ(atomic_load(&handled), before);
    ASSERT_EQ(nrejects, first + 6);
    const rejected_t *r = &rejects[first];
    int want[] = {400, 400, 505, 413, 431, 414};
    for (int i = 0; i < 6; i++) {
        ASSERT_EQ(a->r[i].status, want[i]);
        ASSERT_EQ(r[i].status, want[i]);
        ASSERT(r[i].has_peer);
        /* The hook is told the body the client got: "400 Bad Request\n" */
        ASSERT_EQ(r[i].body_bytes, a->r[i].body_len);
        ASSERT_EQ(r[i].body_bytes, mf_http_error_body_len(want[i]));
    }
    /* A bad header: the request line is known, not the headers. */
    ASSERT(r[0].known);
    ASSERT_STR_EQ(r[0].method, "GET");
    ASSERT_STR_EQ(r[0].target, "/q");
    ASSERT_EQ(r[0].minor, 1);
    ASSERT_STR_EQ(r[0].agent, "");
    /* Not HTTP at all: nothing is known. */
    ASSERT(!r[1].known);
    /* A version we do not speak: method and target only. */
    ASSERT(r[2].known);
    ASSERT_STR_EQ(r[2].method, "GET");
    ASSERT_STR_EQ(r[2].target, "/v");
    ASSERT_EQ(r[2].minor, -1);
    /* A body too big: the whole head. */
    ASSERT_STR_EQ(r[3].method, "POST");
    ASSERT_STR_EQ(r[3].target, "/echo");
    ASSERT_EQ(r[3].minor, 1);
    ASSERT_STR_EQ(r[3].agent, "ua-413");
    /* Heads over the limit: the request line as far as it came whole. */
    ASSERT_STR_EQ(r[4].method, "GET");
    ASSERT_STR_EQ(r[4].target, "/q");
    ASSERT_EQ(r[4].minor, 1);
    ASSERT_STR_EQ(r[5].method, "GET");
    free(a);
}

TEST(log_escape_hides_quotes_backslashes_and_control_bytes)
{
    char out[32];
    ASSERT_EQ(mf_http_log_escape(out, sizeof out, "GET /a b", 8), 8);
    ASSERT_STR_EQ(out, "GET /a b");
    mf_http_log_escape(out, sizeof out, "a\"b\\c\r\n\x01\x7f\xff", 10);
    ASSERT_STR_EQ(out, "a\\x22b\\x5Cc\\x0D\\x0A\\x01\\x7F\\xFF");
    /* cut at a whole escape, always terminated */
    ASSERT_EQ(mf_http_log_escape(out, 6, "ab\r\n", 4), 2);
    ASSERT_STR_EQ(out, "ab");
    ASSERT_EQ(mf_http_log_escape(out, 1, "x", 1), 0);
    ASSERT_STR_EQ(out, "");
}

/* ---- stats ------------------------------------------------------------------
 */

static atomic_int stats_answered, stats_checked;

static void client_idle_keep_alive(void *arg)
{
    (void)arg;
    peer_conn_t *c = peer_connect(peer_port);
    peer_response_t r;
    peer_send_str(c, "GET /peer HTTP/1.1\r\nHost: h\r\n\r\n");
    peer_read_response(c, &r);
    atomic_store(&stats_answered, 1);
    for (int i = 0; i < 5000 && !atomic_load(&stats_checked); i++)
        usleep(1000); /* idle, kept alive, while the test looks */
    peer_close(c);
}

static bool stats_answer_seen(void *arg)
{
    (void)arg;
    return atomic_load(&stats_answered) != 0;
}

TEST(stats_count_open_and_idle_connections)
{
    serve_once();
    peer_thread_t t;
    peer_start(&t, client_idle_keep_alive, NULL);
    ASSERT(peer_run_until(peer_loop, stats_answer_seen, NULL, 5000));
    mf_loop_run(peer_loop, MF_RUN_NOWAIT); /* the answer's write is done */
    mf_http_server_stats_t st;
    mf_http_server_stats(peer_server, &st);
    ASSERT_EQ(st.connections, 1);
    ASSERT_EQ(st.idle, 1);
    ASSERT_EQ(st.failed_responses,
              mf_http_server_failed_responses(peer_server));
    atomic_store(&stats_checked, 1);
    peer_finish(peer_loop, &t);
    ASSERT(peer_run_until(peer_loop, no_connections, peer_server, 5000));
    mf_http_server_stats(peer_server, &st);
    ASSERT_EQ(st.connections, 0);
    ASSERT_EQ(st.idle, 0);
}
