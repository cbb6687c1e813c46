/*
 * examples/http_hello — an HTTP/1.1 server on the engine, one listener per
 * worker (SO_REUSEPORT). The benchmark server and the integration tests'
 * server.
 *
 *   http_hello [--listen 127.0.0.1:8080] [--workers N] [--body-size N]
 *              [--tls-cert FILE --tls-key FILE] [--sni NAME:CERT:KEY]
 *              [--max-body N]
 *              [--header-timeout MS] [--keepalive-timeout MS]
 *              [--body-timeout MS] [--write-timeout MS] [--max-connections N]
 *              [--upstream HOST:PORT]
 *
 * Routes:
 *   /               body-size bytes ("0123456789abcdef" repeated)
 *   /echo           the request body back, with X-Method / X-Body-Length
 *   /sleep?ms=N     a flow: a timer task in the exchange's series, then reply
 *   /held?ms=N      the exchange held by a timer, sent when it fires
 *   /stream?n=K     K chunks streamed with chunked encoding
 *   /info           method, path, query, Host and header count as text
 *   /fanout         two GETs to --upstream in parallel (a flow); the answer
 *                   is both bodies, one after the other
 * SIGINT/SIGTERM stop gracefully: in-flight requests finish first.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moonflow/http_client.h>
#include <moonflow/http_server.h>
#include <moonflow/moonflow.h>

#define MAX_SNI 8

typedef struct options {
    mf_http_server_config_t config;
    mf_tls_sni_t sni[MAX_SNI];
    unsigned workers;
    size_t body_size;
} options_t;

static char *hello_body;
static size_t hello_len;
static const char *upstream = "127.0.0.1:80";

static long query_long(const mf_http_request_t *req, const char *key,
                       long fallback)
{
    size_t klen = strlen(key);
    const char *q = req->query;
    const char *end = q ? q + req->query_len : NULL;
    while (q && q < end) {
        if ((size_t)(end - q) > klen && memcmp(q, key, klen) == 0 &&
            q[klen] == '=')
            return strtol(q + klen + 1, NULL, 10);
        q = memchr(q, '&', (size_t)(end - q));
        if (q)
            q++;
    }
    return fallback;
}

static bool path_is(const mf_http_request_t *req, const char *path)
{
    return req->path_len == strlen(path) &&
           memcmp(req->path, path, req->path_len) == 0;
}

static void add_header(mf_http_exchange_t *ex, const char *name,
                       const char *value)
{
    mf_http_exchange_add_header(ex, name, strlen(name), value, strlen(value));
}

static void on_slept(mf_task_t *task)
{
    mf_http_exchange_t *ex = task->user;
    char text[64];
    int n = snprintf(text, sizeof text, "slept %s\n",
                     mf_state_name(mf_task_state(task)));
    mf_http_exchange_append(ex, text, (size_t)n);
}

static void on_held_timer(mf_timer_t *timer)
{
    mf_http_exchange_t *ex = timer->data;
    mf_http_exchange_append(ex, "held\n", 5);
    mf_http_exchange_send(ex);
    free(timer);
}

static void on_held_closed(mf_http_exchange_t *ex, void *arg)
{
    mf_timer_t *timer = arg;
    (void)ex;
    mf_timer_stop(mf_http_exchange_loop(ex), timer);
    free(timer);
}

static void serve_echo(mf_http_exchange_t *ex, const mf_http_request_t *req)
{
    size_t len;
    const char *body = mf_http_exchange_body(ex, &len);
    char num[32];
    snprintf(num, sizeof num, "%zu", len);
    char method[16];
    snprintf(method, sizeof method, "%.*s", (int)req->method_len, req->method);
    add_header(ex, "X-Method", method);
    add_header(ex, "X-Body-Length", num);
    mf_http_exchange_append(ex, body, len);
}

static void serve_held(mf_http_exchange_t *ex, const mf_http_request_t *req)
{
    mf_timer_t *timer = malloc(sizeof(*timer));
    mf_timer_init(timer, on_held_timer, ex);
    mf_timer_start(mf_http_exchange_loop(ex), timer,
                   (uint64_t)query_long(req, "ms", 10));
    mf_http_exchange_on_close(ex, on_held_closed, timer);
    mf_http_exchange_hold(ex);
}

static void serve_stream(mf_http_exchange_t *ex, const mf_http_request_t *req)
{
    long n = query_long(req, "n", 3);
    for (long i = 0; i < n; i++) {
        char line[32];
        int len = snprintf(line, sizeof line, "chunk %ld\n", i);
        if (mf_http_exchange_write(ex, line, (size_t)len) < 0)
            return;
    }
    mf_http_exchange_send(ex);
}

static void serve_info(mf_http_exchange_t *ex, const mf_http_request_t *req)
{
    char text[512];
    int n = snprintf(
        text, sizeof text,
        "method=%.*s\npath=%.*s\nquery=%.*s\nhost=%.*s\n"
        "headers=%zu\nversion=1.%d\n",
        (int)req->method_len, req->method, (int)req->path_len, req->path,
        (int)req->query_len, req->query ? req->query : "", (int)req->host_len,
        req->host ? req->host : "", req->num_headers, req->minor_version);
    mf_http_exchange_append(ex, text, (size_t)n);
}

/* The parallel is done: both answers go out in branch order. */
static void on_fanned_in(mf_task_t *task)
{
    mf_http_exchange_t *ex = task->user;
    mf_parallel_t *par = mf_parallel_from_task(task);
    for (size_t i = 0; i < mf_parallel_size(par); i++) {
        mf_series_t *branch = mf_parallel_series_at(par, i);
        const char *body = mf_series_context(branch);
        if (mf_series_state(branch) != MF_STATE_SUCCESS || !body)
            mf_http_exchange_set_status(ex, 502);
        else
            mf_http_exchange_append(ex, body, strlen(body));
        free(mf_series_context(branch));
    }
}

/* A branch's answer is copied into its series' context: the task (and its
 * body) is gone after this callback; the parallel's callback reads it. */
static void on_branch_answer(mf_task_t *task)
{
    size_t len;
    const char *body = mf_task_http_body(task, &len);
    if (mf_task_state(task) != MF_STATE_SUCCESS || !body)
        return;
    char *copy = malloc(len + 1);
    memcpy(copy, body, len);
    copy[len] = 0;
    mf_series_set_context(mf_series_of(task), copy);
}

static void serve_fanout(mf_http_exchange_t *ex)
{
    mf_loop_t *loop = mf_http_exchange_loop(ex);
    char url[128];
    snprintf(url, sizeof url, "http://%s/", upstream);
    mf_parallel_t *par = mf_parallel_create(loop, on_fanned_in, ex);
    for (int i = 0; i < 2; i++)
        mf_parallel_add_task(
            par, mf_task_http_create(loop, "GET", url, on_branch_answer, NULL));
    mf_series_push_back(mf_http_exchange_series(ex), mf_parallel_task(par));
}

static void handle(mf_http_exchange_t *ex, void *user)
{
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    (void)user;
    static const char type[] = "Content-Type: text/plain\r\n";
    mf_http_exchange_add_header_static(ex, type, sizeof type - 1);
    if (path_is(req, "/echo"))
        serve_echo(ex, req);
    else if (path_is(req, "/sleep"))
        mf_series_push_back(
            mf_http_exchange_series(ex),
            mf_task_timer_create(mf_http_exchange_loop(ex),
                                 (uint64_t)query_long(req, "ms", 10), on_slept,
                                 ex));
    else if (path_is(req, "/held"))
        serve_held(ex, req);
    else if (path_is(req, "/stream"))
        serve_stream(ex, req);
    else if (path_is(req, "/info"))
        serve_info(ex, req);
    else if (path_is(req, "/fanout"))
        serve_fanout(ex);
    else if (path_is(req, "/"))
        mf_http_exchange_body_ref(ex, hello_body, hello_len);
    else {
        mf_http_exchange_set_status(ex, 404);
        mf_http_exchange_append(ex, "not found\n", 10);
    }
}

/* ---- workers and signals ---------------------------------------------------
 */

typedef struct worker_server {
    options_t *opts;
    mf_http_server_t *server;
    mf_waitgroup_t *wg;
    int error;
} worker_server_t;

static void start_on_worker(mf_loop_t *loop, void *arg)
{
    worker_server_t *ws = arg;
    ws->server =
        mf_http_server_start(loop, &ws->opts->config, handle, NULL, &ws->error);
    mf_waitgroup_done(ws->wg);
}

static void on_stopped(mf_http_server_t *srv, void *arg)
{
    worker_server_t *ws = arg;
    (void)srv;
    mf_waitgroup_done(ws->wg);
}

static void stop_on_worker(mf_loop_t *loop, void *arg)
{
    worker_server_t *ws = arg;
    (void)loop;
    mf_http_server_stop(ws->server, on_stopped, ws);
}

static void usage(void)
{
    fprintf(
        stderr,
        "usage: http_hello [--listen ADDR] [--workers N] [--body-size N]\n"
        "                  [--tls-cert FILE --tls-key FILE] [--max-body N]\n"
        "                  [--header-timeout MS] [--keepalive-timeout MS]\n");
    exit(2);
}

/* "name:cert:key" → one more SNI certificate (the strings stay in argv). */
static void add_sni(options_t *o, char *spec)
{
    char *cert = strchr(spec, ':');
    char *key = cert ? strchr(cert + 1, ':') : NULL;
    if (!key || o->config.tls.sni_count == MAX_SNI)
        usage();
    *cert++ = 0;
    *key++ = 0;
    o->sni[o->config.tls.sni_count++] =
        (mf_tls_sni_t){.server_name = spec, .cert_file = cert, .key_file = key};
    o->config.tls.sni = o->sni;
}

static void parse_options(int argc, char **argv, options_t *o)
{
    mf_http_server_config_init(&o->config);
    o->workers = 1;
    o->body_size = 16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage();
        i++;
        if (!strcmp(a, "--listen"))
            o->config.listen = v;
        else if (!strcmp(a, "--workers"))
            o->workers = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--body-size"))
            o->body_size = strtoul(v, NULL, 10);
        else if (!strcmp(a, "--tls-cert"))
            o->config.tls.cert_file = v;
        else if (!strcmp(a, "--tls-key"))
            o->config.tls.key_file = v;
        else if (!strcmp(a, "--sni"))
            add_sni(o, argv[i]);
        else if (!strcmp(a, "--max-body"))
            o->config.max_body = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--header-timeout"))
            o->config.header_timeout_ms = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--keepalive-timeout"))
            o->config.keepalive_timeout_ms = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--body-timeout"))
            o->config.body_timeout_ms = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--write-timeout"))
            o->config.write_timeout_ms = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--upstream"))
            upstream = v;
        else if (!strcmp(a, "--max-connections"))
            o->config.max_connections = strtoul(v, NULL, 10);
        else
            usage();
    }
}

int main(int argc, char **argv)
{
    options_t opts;
    parse_options(argc, argv, &opts);
    hello_len = opts.body_size;
    hello_body = malloc(hello_len + 1);
    for (size_t i = 0; i < hello_len; i++)
        hello_body[i] = "0123456789abcdef"[i % 16];

    /* Signals are taken by sigwait on this thread only. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    mf_workers_opts_t wopts = {.nloops = opts.workers, .npool = 1};
    mf_workers_t *workers = mf_workers_create(&wopts);
    unsigned n = mf_workers_count(workers);
    worker_server_t *ws = calloc(n, sizeof(*ws));
    mf_waitgroup_t wg;
    mf_waitgroup_init(&wg, n);
    for (unsigned i = 0; i < n; i++) {
        ws[i] = (worker_server_t){.opts = &opts, .wg = &wg};
        mf_workers_call(workers, i, start_on_worker, &ws[i]);
    }
    mf_waitgroup_wait(&wg);
    for (unsigned i = 0; i < n; i++)
        if (!ws[i].server) {
            fprintf(stderr, "http_hello: %s: %s\n", opts.config.listen,
                    mf_strerror(ws[i].error));
            return 1;
        }
    printf("listening on %s (port %u), %u workers\n", opts.config.listen,
           mf_http_server_port(ws[0].server), n);
    fflush(stdout);

    int sig;
    sigwait(&sigs, &sig);
    mf_waitgroup_add(&wg, n);
    for (unsigned i = 0; i < n; i++)
        mf_workers_call(workers, i, stop_on_worker, &ws[i]);
    mf_waitgroup_wait(&wg);
    mf_waitgroup_close(&wg);
    mf_workers_destroy(workers);
    free(ws);
    free(hello_body);
    printf("stopped\n");
    return 0;
}
