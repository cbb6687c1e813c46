/* The http task against origins that write exact bytes (http_fake_origin.h):
 * a connection with anything after its response is never reused (also
 * behind mf_task_http_forward), credentials stay with their origin across
 * redirects, an https → http redirect is refused unless allowed, running
 * out of redirects is an error, a redirect to GET drops the body and its
 * headers, oversized and cut answers say what happened, an empty line
 * after an interim answer is tolerated, and retries stay where they are
 * safe. */
#include <stdio.h>
#include <sys/stat.h>

#include <moonflow/http_client.h>
#include <moonflow/moonflow.h>

#include "http_fake_origin.h"
#include "http_peer.h"
#include "http_result.h"
#include "test.h"
#include "test_cert.h"

#define EVIL "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nEVIL"
#define OK2 "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
#define GO(status, to) \
    "HTTP/1.1 " status "\r\nLocation: " to "\r\nContent-Length: 0\r\n\r\n"

/* An answer kept alive, one that then closes, one written in parts. */
#define ANSWER(target, bytes)         \
    {                                 \
        target, {bytes}, 0, FAKE_KEEP \
    }
#define ANSWER_CLOSE(target, close, bytes) \
    {                                      \
        target, {bytes}, 0, close          \
    }
#define ANSWER_PARTS(target, ms, a, b) \
    {                                  \
        target, {a, b}, ms, FAKE_KEEP  \
    }

static const fake_answer_t answers[] = {
    ANSWER("/real", "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nreal"),
    ANSWER("/clean", OK2),
    /* Surplus after the response, for every framing. */
    ANSWER("/surplus-length", OK2 EVIL),
    ANSWER("/surplus-chunked",
           "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
           "2\r\nok\r\n0\r\n\r\n" EVIL),
    ANSWER("/surplus-204", "HTTP/1.1 204 No Content\r\n\r\n" EVIL),
    ANSWER("/surplus-304", "HTTP/1.1 304 Not Modified\r\n\r\n" EVIL),
    ANSWER("/surplus-head", OK2), /* to HEAD: "ok" is not its body */
    ANSWER("/surplus-crlf", OK2 "\r\n"),
    ANSWER_PARTS("/surplus-later", 20, OK2, EVIL),
    /* Redirects. */
    ANSWER("/to-b", GO("302 Found", "http://127.0.0.1:{B}/landed")),
    ANSWER("/to-same", GO("302 Found", "/landed")),
    ANSWER("/to-plain",
           GO("301 Moved Permanently", "http://127.0.0.1:{A}/landed")),
    ANSWER("/landed", "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nlanded"),
    ANSWER("/loop", GO("302 Found", "/loop")),
    ANSWER("/s301", GO("301 Moved Permanently", "/after")),
    ANSWER("/s302", GO("302 Found", "/after")),
    ANSWER("/s303", GO("303 See Other", "/after")),
    ANSWER("/s307", GO("307 Temporary Redirect", "/after")),
    ANSWER("/s308", GO("308 Permanent Redirect", "/after")),
    ANSWER("/after", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
    /* Sizes, cuts, interim answers. */
    ANSWER("/five", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfive!"),
    ANSWER("/five-chunked",
           "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
           "5\r\nfive!\r\n0\r\n\r\n"),
    ANSWER_CLOSE("/five-until-close", FAKE_CLOSE,
                 "HTTP/1.1 200 OK\r\n\r\nfive!"),
    ANSWER("/four", "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nfour"),
    ANSWER_CLOSE("/cut-head", FAKE_CLOSE, "HTTP/1.1 200 OK\r\nContent-Le"),
    ANSWER_CLOSE("/cut-body", FAKE_CLOSE,
                 "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc"),
    ANSWER("/interim", "HTTP/1.1 100 Continue\r\n\r\n\r\n" OK2),
    ANSWER_PARTS("/interim-split", 20,
                 "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n\r",
                 "\n" OK2),
    /* Connections the server closes. */
    ANSWER_CLOSE("/close-reused", FAKE_CLOSE_REUSED,
                 "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh"),
    /* A keep-alive answer, then the FIN. */
    ANSWER_CLOSE("/then-close", FAKE_CLOSE, OK2),
};

/* ---- the file's loop, origins and certificate ---------------------------- */

static mf_loop_t *loop;
static mf_test_cert_t tc; /* origin T's, trusted by the requests */

static void stop_all(void)
{
    mf_loop_destroy(loop);
    fake_origins_stop();
    if (!mf_test_cert_remove(&tc))
        fprintf(stderr, "could not remove %s\n", tc.dir);
}

/* The loop and the origins, once for the file; they end at exit. */
static void start_once(void)
{
    if (loop)
        return;
    mf_test_cert_make(&tc);
    fake_origins_start(answers, MF_ARRAY_SIZE(answers), tc.cert, tc.key);
    loop = mf_loop_create();
    atexit(stop_all);
}

/* ---- running one request ------------------------------------------------ */

static bool result_done(void *arg)
{
    return ((result_t *)arg)->done > 0;
}

static void url_of(char *url, size_t cap, int origin, const char *target)
{
    snprintf(url, cap, "%s://127.0.0.1:%u%s",
             origin == FAKE_T ? "https" : "http", fake.port[origin], target);
}

static mf_task_t *request(const char *method, int origin, const char *target,
                          result_t *r)
{
    char url[256];
    url_of(url, sizeof url, origin, target);
    memset(r, 0, sizeof(*r));
    return mf_task_http_create(loop, method, url, on_done, r);
}

/* Runs the task to its end (bounded). */
static void run(mf_task_t *task)
{
    result_t *r = task->user;
    mf_task_start(task);
    if (!peer_run_until(loop, result_done, r, 10000))
        MF_TEST_FAIL("the request did not end in time");
}

#define DEFAULT_MAX_BODY (64u << 20)

/* Options on t: redirects to follow, the body limit, https -> http. TLS
 * requests trust origin T's certificate. */
static mf_task_t *with_opts(mf_task_t *t, int redirects, uint64_t max_body,
                            bool insecure)
{
    mf_http_client_opts_t o;
    mf_http_client_opts_init(&o);
    o.max_redirects = redirects;
    o.max_response_body = max_body;
    o.allow_insecure_redirects = insecure;
    o.ca_file = tc.cert;
    mf_task_http_set_opts(t, &o);
    return t;
}

static void expect(const result_t *r, int state, int error, int status,
                   const char *body)
{
    if (r->state != state || r->error != error || r->status != status ||
        strcmp(r->body, body) != 0)
        MF_TEST_FAIL("got %s/%s %d \"%s\", expected %s/%s %d \"%s\"",
                     mf_state_name(r->state), mf_err_name(r->error), r->status,
                     r->body, mf_state_name(state), mf_err_name(error), status,
                     body);
}

static void get_real_on_a_fresh_connection(void)
{
    result_t r;
    int before = fake_accepted(FAKE_A);
    run(request("GET", FAKE_A, "/real", &r));
    expect(&r, MF_STATE_SUCCESS, 0, 200, "real");
    fake_request_t seen;
    ASSERT(fake_last("/real", &seen));
    ASSERT_EQ(seen.nth, 1); /* the first request of its connection */
    ASSERT_EQ(fake_accepted(FAKE_A) - before, 1);
}

/* ---- a response with bytes after it ends its connection ------------------ */

typedef struct surplus_case {
    const char *method, *target;
    int status;
    const char *body;
    unsigned idle_ms; /* wait before the next request, the loop not running */
} surplus_case_t;

static const surplus_case_t surplus_cases[] = {
    {"GET", "/surplus-length", 200, "ok", 0},
    {"GET", "/surplus-chunked", 200, "ok", 0},
    {"GET", "/surplus-204", 204, "", 0},
    {"GET", "/surplus-304", 304, "", 0},
    {"HEAD", "/surplus-head", 200, "", 0},
    {"GET", "/surplus-crlf", 200, "ok", 0},
    /* The surplus arrives while the connection is idle and before the
     * loop has polled it: the pool must look before it reuses. */
    {"GET", "/surplus-later", 200, "ok", 300},
};

TEST(a_connection_with_any_byte_after_its_response_is_never_reused)
{
    start_once();
    for (size_t i = 0; i < MF_ARRAY_SIZE(surplus_cases); i++) {
        const surplus_case_t *c = &surplus_cases[i];
        result_t r;
        run(request(c->method, FAKE_A, c->target, &r));
        if (r.state || r.status != c->status || strcmp(r.body, c->body))
            MF_TEST_FAIL("%s %s: %s %d \"%s\"", c->method, c->target,
                         mf_state_name(r.state), r.status, r.body);
        usleep(c->idle_ms * 1000);
        get_real_on_a_fresh_connection();
    }
    /* The control: a clean answer leaves its connection to the next one. */
    result_t r;
    run(request("GET", FAKE_A, "/clean", &r));
    int before = fake_accepted(FAKE_A);
    run(request("GET", FAKE_A, "/real", &r));
    expect(&r, MF_STATE_SUCCESS, 0, 200, "real");
    ASSERT_EQ(fake_accepted(FAKE_A), before);
}

/* A server that forwards everything to origin A. */
static void forward_to_a(mf_http_exchange_t *ex, void *user)
{
    char upstream[64];
    (void)user;
    snprintf(upstream, sizeof upstream, "http://127.0.0.1:%u",
             fake.port[FAKE_A]);
    mf_series_push_back(mf_http_exchange_series(ex),
                        mf_task_http_forward(ex, upstream, NULL, NULL));
}

static void on_proxy_stopped(mf_http_server_t *server, void *arg)
{
    (void)server;
    *(bool *)arg = true;
}

static bool flag_set(void *arg)
{
    return *(bool *)arg;
}

TEST(a_forward_never_hands_one_clients_answer_to_the_next)
{
    start_once();
    peer_loop = loop; /* peer_start_server's loop */
    mf_http_server_t *proxy = peer_start_server(forward_to_a, 0);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/surplus-length",
             mf_http_server_port(proxy));
    result_t first, second;
    memset(&first, 0, sizeof first);
    run(mf_task_http_create(loop, "GET", url, on_done, &first));
    expect(&first, MF_STATE_SUCCESS, 0, 200, "ok");
    int before = fake_accepted(FAKE_A);
    snprintf(url, sizeof url, "http://127.0.0.1:%u/real",
             mf_http_server_port(proxy));
    memset(&second, 0, sizeof second);
    run(mf_task_http_create(loop, "GET", url, on_done, &second));
    expect(&second, MF_STATE_SUCCESS, 0, 200, "real");
    ASSERT_EQ(fake_accepted(FAKE_A) - before, 1);
    bool stopped = false;
    mf_http_server_stop(proxy, on_proxy_stopped, &stopped);
    ASSERT(peer_run_until(loop, flag_set, &stopped, 5000));
}

/* ---- credentials and redirects ------------------------------------------- */

static mf_task_t *with_credentials(mf_task_t *t, int redirects, bool insecure)
{
    with_opts(t, redirects, DEFAULT_MAX_BODY, insecure);
    mf_task_http_add_header(t, "authorization", "Bearer secret");
    mf_task_http_add_header(t, "COOKIE", "session=1");
    mf_task_http_add_header(t, "Proxy-Authorization", "Basic cHJveHk=");
    mf_task_http_add_header(t, "Host", "first.example");
    mf_task_http_add_header(t, "X-Keep", "1");
    return t;
}

/* Whether the last request for /landed came to origin with the
 * credential headers (sent) or without them, and with X-Keep either way. */
static void expect_landed(int origin, bool sent)
{
    static const char *const names[] = {"Authorization", "Cookie",
                                        "Proxy-Authorization"};
    fake_request_t seen;
    char v[128];
    ASSERT(fake_last("/landed", &seen));
    ASSERT_EQ(seen.origin, origin);
    for (size_t i = 0; i < MF_ARRAY_SIZE(names); i++)
        if ((fake_header(&seen, names[i], v, sizeof v) != NULL) != sent)
            MF_TEST_FAIL("%s %s", names[i], sent ? "missing" : "was sent");
    ASSERT(fake_header(&seen, "X-Keep", v, sizeof v) != NULL);
}

/* The Host header of the last request for /landed. */
static const char *landed_host(char *v, size_t cap)
{
    fake_request_t seen;
    ASSERT(fake_last("/landed", &seen));
    const char *host = fake_header(&seen, "Host", v, cap);
    return host ? host : "(none)";
}

TEST(credentials_stay_with_their_origin_across_redirects)
{
    start_once();
    result_t r;
    /* Same origin: everything goes along. */
    fake_log_clear();
    char v[128], host[64];
    run(with_credentials(request("GET", FAKE_A, "/to-same", &r), 3, false));
    expect(&r, MF_STATE_SUCCESS, 0, 200, "landed");
    expect_landed(FAKE_A, true);
    ASSERT_STR_EQ(landed_host(v, sizeof v), "first.example");
    /* Same host, another port: another origin. */
    fake_log_clear();
    run(with_credentials(request("GET", FAKE_A, "/to-b", &r), 3, false));
    expect(&r, MF_STATE_SUCCESS, 0, 200, "landed");
    expect_landed(FAKE_B, false);
    /* The Host named the first origin: the new one gets its own. */
    snprintf(host, sizeof host, "127.0.0.1:%u", fake.port[FAKE_B]);
    ASSERT_STR_EQ(landed_host(v, sizeof v), host);
}

TEST(an_https_to_http_redirect_fails_unless_allowed)
{
    start_once();
    result_t r;
    fake_log_clear();
    run(with_credentials(request("GET", FAKE_T, "/to-plain", &r), 3, false));
    expect(&r, MF_STATE_TASK_ERROR, MF_EINSECUREREDIRECT, 301, "");
    ASSERT_EQ(fake_count("/to-plain"), 1);
    ASSERT_EQ(fake_count("/landed"), 0); /* nothing went out in plaintext */
    /* Allowed: followed, but the credentials stay behind. */
    run(with_credentials(request("GET", FAKE_T, "/to-plain", &r), 3, true));
    expect(&r, MF_STATE_SUCCESS, 0, 200, "landed");
    expect_landed(FAKE_A, false); /* another scheme: another origin */
}

TEST(running_out_of_redirects_is_an_error_and_zero_follows_none)
{
    start_once();
    result_t r;
    fake_log_clear();
    run(with_opts(request("GET", FAKE_A, "/loop", &r), 3, DEFAULT_MAX_BODY,
                  false));
    expect(&r, MF_STATE_TASK_ERROR, MF_ETOOMANYREDIRECTS, 302, "");
    ASSERT_EQ(r.redirects, 3);
    ASSERT_EQ(fake_count("/loop"), 4);
    ASSERT_STR_EQ(mf_strerror(MF_ETOOMANYREDIRECTS), "too many redirects");
    /* max_redirects 0 (the default): the 3xx is the answer. */
    fake_log_clear();
    run(request("GET", FAKE_A, "/loop", &r));
    expect(&r, MF_STATE_SUCCESS, 0, 302, "");
    ASSERT_EQ(r.redirects, 0);
    ASSERT_EQ(fake_count("/loop"), 1);
}

typedef struct method_case {
    const char *method, *target, *then; /* the method after the redirect */
} method_case_t;

static const method_case_t method_cases[] = {
    {"POST", "/s301", "GET"},   {"POST", "/s302", "GET"},
    {"POST", "/s303", "GET"},   {"PUT", "/s303", "GET"},
    {"DELETE", "/s303", "GET"}, {"HEAD", "/s303", "HEAD"},
    {"POST", "/s307", "POST"},  {"POST", "/s308", "POST"},
    {"PUT", "/s301", "PUT"},    {"PUT", "/s302", "PUT"},
};

/* The request that followed: its method; its body headers only when it
 * kept the method; its body and length only when it kept a body (a HEAD
 * sends none). */
static void expect_followed(const method_case_t *c)
{
    fake_request_t seen;
    char v[128];
    ASSERT(fake_last("/after", &seen));
    bool kept = strcmp(c->method, c->then) == 0;
    bool with_body = kept && strcmp(c->method, "HEAD") != 0;
    bool has_type = fake_header(&seen, "Content-Type", v, sizeof v) != NULL;
    bool has_lang = fake_header(&seen, "Content-Language", v, sizeof v) != NULL;
    bool has_len = fake_header(&seen, "Content-Length", v, sizeof v) != NULL;
    const char *body = with_body ? "payload" : "";
    if (strncmp(seen.raw, c->then, strlen(c->then)) != 0 ||
        seen.raw[strlen(c->then)] != ' ' || has_type != kept ||
        has_lang != kept || has_len != with_body ||
        strcmp(fake_body(&seen), body) != 0 ||
        !fake_header(&seen, "X-Keep", v, sizeof v))
        MF_TEST_FAIL("%s %s then:\n%s", c->method, c->target, seen.raw);
}

TEST(a_redirect_that_turns_into_get_drops_the_body_and_its_headers)
{
    start_once();
    for (size_t i = 0; i < MF_ARRAY_SIZE(method_cases); i++) {
        const method_case_t *c = &method_cases[i];
        result_t r;
        fake_log_clear();
        mf_task_t *t = with_opts(request(c->method, FAKE_A, c->target, &r), 2,
                                 DEFAULT_MAX_BODY, false);
        if (strcmp(c->method, "HEAD") != 0)
            mf_task_http_set_body(t, "payload", 7);
        mf_task_http_add_header(t, "Content-Type", "text/plain");
        mf_task_http_add_header(t, "content-language", "en");
        mf_task_http_add_header(t, "X-Keep", "1");
        run(t);
        expect(&r, MF_STATE_SUCCESS, 0, 200, "");
        ASSERT_EQ(r.redirects, 1);
        expect_followed(c);
    }
}

/* ---- sizes, cuts and interim answers ------------------------------------- */

TEST(a_response_over_max_response_body_is_message_too_long)
{
    start_once();
    const char *over[] = {"/five", "/five-chunked", "/five-until-close"};
    result_t r;
    for (size_t i = 0; i < MF_ARRAY_SIZE(over); i++) {
        run(with_opts(request("GET", FAKE_A, over[i], &r), 0, 4, false));
        if (r.state != MF_STATE_TASK_ERROR || r.error != MF_EMSGSIZE)
            MF_TEST_FAIL("%s: %s/%s", over[i], mf_state_name(r.state),
                         mf_err_name(r.error));
    }
    run(with_opts(request("GET", FAKE_A, "/four", &r), 0, 4, false));
    expect(&r, MF_STATE_SUCCESS, 0, 200, "four");
    /* 0 accepts no body at all, whatever the framing. */
    run(with_opts(request("GET", FAKE_A, "/five-chunked", &r), 0, 0, false));
    ASSERT_EQ(r.error, MF_EMSGSIZE);
}

TEST(an_answer_cut_by_the_close_is_connection_closed_and_not_retried)
{
    start_once();
    const char *cut[] = {"/cut-head", "/cut-body"};
    for (size_t i = 0; i < MF_ARRAY_SIZE(cut); i++) {
        result_t r;
        fake_log_clear();
        run(request("GET", FAKE_A, cut[i], &r));
        if (r.state != MF_STATE_SYS_ERROR || r.error != MF_ECLOSED)
            MF_TEST_FAIL("%s: %s/%s", cut[i], mf_state_name(r.state),
                         mf_err_name(r.error));
        /* Bytes came back: the request was seen, so it is not sent again
         * (even a GET: its answer was being produced). */
        ASSERT_EQ(fake_count(cut[i]), 1);
    }
}

TEST(an_empty_line_after_an_interim_answer_is_tolerated)
{
    start_once();
    const char *targets[] = {"/interim", "/interim-split"};
    for (size_t i = 0; i < MF_ARRAY_SIZE(targets); i++) {
        result_t r;
        run(request("GET", FAKE_A, targets[i], &r));
        expect(&r, MF_STATE_SUCCESS, 0, 200, "ok");
    }
}

/* ---- retries --------------------------------------------------------------
 */

TEST(a_reused_connection_closed_before_any_answer_is_retried_only_when_safe)
{
    start_once();
    result_t r;
    /* GET: the server closed the reused connection on reading it; nothing
     * came back, so it goes again on a new connection, once. */
    run(request("GET", FAKE_A, "/clean", &r));
    fake_log_clear();
    run(request("GET", FAKE_A, "/close-reused", &r));
    expect(&r, MF_STATE_SUCCESS, 0, 200, "fresh");
    ASSERT_EQ(fake_count("/close-reused"), 2);
    /* POST: the server may have acted on it; it is not sent again. */
    run(request("GET", FAKE_A, "/clean", &r));
    fake_log_clear();
    mf_task_t *t = request("POST", FAKE_A, "/close-reused", &r);
    mf_task_http_set_body(t, "once", 4);
    run(t);
    expect(&r, MF_STATE_SYS_ERROR, MF_ECLOSED, 0, "");
    ASSERT_EQ(fake_count("/close-reused"), 1);
}

TEST(an_idle_connection_the_server_closed_is_not_used_even_before_a_poll)
{
    start_once();
    result_t r;
    run(request("GET", FAKE_A, "/then-close", &r));
    expect(&r, MF_STATE_SUCCESS, 0, 200, "ok");
    usleep(100 * 1000); /* the FIN arrives; the loop does not run */
    int before = fake_accepted(FAKE_A);
    fake_log_clear();
    mf_task_t *t = request("POST", FAKE_A, "/close-reused", &r);
    mf_task_http_set_body(t, "once", 4);
    run(t);
    /* Not sent on the dead connection (a POST would not be retried). */
    expect(&r, MF_STATE_SUCCESS, 0, 200, "fresh");
    ASSERT_EQ(fake_accepted(FAKE_A) - before, 1);
    ASSERT_EQ(fake_count("/close-reused"), 1);
}
