/* Never a silently short answer: with the allocator's failure injection
 * (mf_alloc_fail_next) armed inside the handler, each place where the
 * server builds a response runs out of memory once. Before the head is
 * out the client gets a 500 with Connection: close (or, when even that
 * cannot be queued, a closed connection and no bytes); after it, a cut
 * stream it can detect (no last chunk) and mf_http_exchange_write returns
 * an error. Each failure is counted, and the next request is served whole.
 * One server on loopback for the file; clients are plain sockets in a
 * thread (http_peer.h). */
#include "http_peer.h"

static int write_rc;       /* what the failing write returned */
static int first_write_rc; /* the write before it */

static void serve_stream_cut(mf_http_exchange_t *ex)
{
    static char big[100 * 1000]; /* its queueing needs a checked malloc */
    memset(big, 'b', sizeof big);
    first_write_rc = mf_http_exchange_write(ex, "first\n", 6);
    mf_alloc_fail_next(1);
    write_rc = mf_http_exchange_write(ex, big, sizeof big);
    mf_http_exchange_send(ex); /* ends (releases) the cut exchange */
}

static void handle(mf_http_exchange_t *ex, void *user)
{
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    (void)user;
    if (peer_path_is(req, "/oom/header")) {
        mf_alloc_fail_next(1);
        mf_http_exchange_add_header(ex, "X-Test", 6, "1", 1);
        mf_http_exchange_append(ex, "never sent\n", 11);
    } else if (peer_path_is(req, "/oom/body")) {
        mf_http_exchange_add_header(ex, "X-Test", 6, "1", 1);
        mf_alloc_fail_next(1);
        mf_http_exchange_append(ex, "never sent\n", 11);
    } else if (peer_path_is(req, "/oom/head")) {
        mf_http_exchange_body_ref(ex, "never sent\n", 11);
        mf_alloc_fail_next(1); /* the head's queueing, after the return */
    } else if (peer_path_is(req, "/oom/head-and-500")) {
        mf_http_exchange_body_ref(ex, "never sent\n", 11);
        mf_alloc_fail_next(2); /* the head, then the 500 instead */
    } else if (peer_path_is(req, "/oom/stream-head")) {
        mf_alloc_fail_next(1);
        write_rc = mf_http_exchange_write(ex, "never sent\n", 11);
        mf_http_exchange_send(ex);
    } else if (peer_path_is(req, "/oom/stream")) {
        serve_stream_cut(ex);
    } else {
        mf_http_exchange_body_ref(ex, "hello\n", 6);
    }
}

static void serve_once(void)
{
    peer_serve_once(handle, 0);
}

/* ---- one failing request, then a good one ------------------------------- */

typedef struct outcome {
    const char *path;
    peer_response_t failed;
    int failed_rc;
    bool closed; /* the server closed after the failed answer */
    peer_response_t next;
    int next_rc;
} outcome_t;

static void client_fail_then_hello(void *arg)
{
    outcome_t *o = arg;
    char req[128];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: h\r\n\r\n", o->path);
    peer_conn_t *c = peer_connect(peer_port);
    peer_send_str(c, req);
    o->failed_rc = peer_read_response(c, &o->failed);
    o->closed = peer_sees_close(c);
    peer_close(c);
    o->next_rc = peer_request(
        peer_port, "GET /hello HTTP/1.1\r\nHost: h\r\n\r\n", &o->next);
}

/* Runs one failing request; checks the failure was counted once and the
 * next request was answered whole. */
static outcome_t *run_failing(const char *path)
{
    serve_once();
    outcome_t *o = calloc(1, sizeof(*o));
    o->path = path;
    uint64_t before = mf_http_server_failed_responses(peer_server);
    peer_run(peer_loop, client_fail_then_hello, o);
    mf_alloc_fail_next(0); /* disarm whatever was not consumed */
    ASSERT_EQ(mf_http_server_failed_responses(peer_server), before + 1);
    ASSERT_EQ(o->next_rc, 0);
    ASSERT_EQ(o->next.status, 200);
    ASSERT_STR_EQ(o->next.body, "hello\n");
    return o;
}

static void assert_answered_500(const outcome_t *o)
{
    ASSERT_EQ(o->failed_rc, 0);
    ASSERT_EQ(o->failed.status, 500);
    ASSERT(o->failed.conn_close);
    ASSERT(strstr(o->failed.body, "never sent") == NULL);
    ASSERT(o->closed);
}

TEST(a_header_that_cannot_be_stored_turns_the_answer_into_a_500)
{
    outcome_t *o = run_failing("/oom/header");
    assert_answered_500(o);
    ASSERT(strcasestr(o->failed.head, "X-Test") == NULL);
    free(o);
}

TEST(a_body_that_cannot_be_stored_turns_the_answer_into_a_500)
{
    outcome_t *o = run_failing("/oom/body");
    assert_answered_500(o);
    free(o);
}

TEST(a_head_that_cannot_be_queued_is_answered_500)
{
    outcome_t *o = run_failing("/oom/head");
    assert_answered_500(o);
    free(o);
}

TEST(when_even_the_500_cannot_be_queued_the_connection_closes_unanswered)
{
    outcome_t *o = run_failing("/oom/head-and-500");
    ASSERT_EQ(o->failed_rc, -1);
    ASSERT_EQ(o->failed.status, 0); /* not a byte: the client sees the close */
    free(o);
}

TEST(a_streamed_write_whose_head_cannot_be_queued_is_answered_500)
{
    write_rc = 0;
    outcome_t *o = run_failing("/oom/stream-head");
    assert_answered_500(o);
    ASSERT_EQ(write_rc, MF_ENOMEM);
    free(o);
}

TEST(a_streamed_write_failing_after_the_head_cuts_the_connection)
{
    write_rc = 0;
    outcome_t *o = run_failing("/oom/stream");
    ASSERT_EQ(first_write_rc, 0);
    ASSERT(write_rc < 0);
    /* The head and the first chunk came, then the close without the last
     * chunk: a client can tell the body is cut. */
    ASSERT_EQ(o->failed_rc, -1);
    ASSERT_EQ(o->failed.status, 200);
    ASSERT(o->failed.chunked);
    ASSERT(!o->failed.complete);
    ASSERT_STR_EQ(o->failed.body, "first\n");
    free(o);
}
