/*
 * hello_server.c — the frame of the C hello server: options, the "/" body,
 * a server on every worker, signals and the graceful stop. See
 * hello_server.h.
 */
#include "hello_server.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moonflow/moonflow.h>

/* Written by main before the workers start, read-only after. */
static char *hello_body;
static size_t hello_len;

/* ---- options ------------------------------------------------------------- */

int hello_server_number(const char *flag, const char *value, uint64_t max,
                        uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(value, &end, 10);
    /* strtoull would take "-1" (as a huge number) and leading spaces. */
    if (value[0] < '0' || value[0] > '9' || *end || errno || v > max) {
        fprintf(stderr, "%s: not a number from 0 to %llu: \"%s\"\n", flag,
                (unsigned long long)max, value);
        return -1;
    }
    *out = v;
    return 0;
}

/* One common option; 1 when flag is not one of them. */
static int hello_server_option(hello_options_t *o, const char *flag,
                               char *value)
{
    mf_http_server_config_t *c = &o->config;
    uint64_t n;
    if (!strcmp(flag, "--listen"))
        c->listen = value;
    else if (!strcmp(flag, "--tls-cert"))
        c->tls.cert_file = value;
    else if (!strcmp(flag, "--tls-key"))
        c->tls.key_file = value;
    else if (!strcmp(flag, "--workers")) {
        if (hello_server_number(flag, value, 1024, &n) < 0)
            return -1;
        o->workers = (unsigned)n;
    } else if (!strcmp(flag, "--body-size")) {
        if (hello_server_number(flag, value, SIZE_MAX, &n) < 0)
            return -1;
        o->body_size = (size_t)n;
    } else if (!strcmp(flag, "--max-connections")) {
        if (hello_server_number(flag, value, SIZE_MAX, &n) < 0)
            return -1;
        c->max_connections = (size_t)n;
    } else
        return 1;
    return 0;
}

int hello_server_options(hello_options_t *o, int argc, char **argv,
                         hello_option_fn extra, void *ctx)
{
    mf_http_server_config_init(&o->config);
    o->workers = 1;
    o->body_size = 16;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 == argc) {
            fprintf(stderr, "%s: needs a value\n", argv[i]);
            return -1;
        }
        int rc = hello_server_option(o, argv[i], argv[i + 1]);
        if (rc == 1 && extra)
            rc = extra(ctx, argv[i], argv[i + 1]);
        else if (rc == 1)
            fprintf(stderr, "%s: unknown option\n", argv[i]);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* ---- the "/" body -------------------------------------------------------- */

void hello_server_answer(mf_http_exchange_t *ex)
{
    mf_http_exchange_body_ref(ex, hello_body, hello_len);
}

static int hello_body_create(size_t len)
{
    hello_body = malloc(len ? len : 1);
    if (!hello_body)
        return -1;
    for (size_t i = 0; i < len; i++)
        hello_body[i] = "0123456789abcdef"[i % 16];
    hello_len = len;
    return 0;
}

/* ---- a server on every worker -------------------------------------------- */

typedef struct worker_server {
    const hello_options_t *opts;
    mf_http_handler handler;
    void *user;
    mf_http_server_t *server;
    mf_waitgroup_t *wg;
    int error;
} worker_server_t;

static void start_on_worker(mf_loop_t *loop, void *arg)
{
    worker_server_t *ws = arg;
    ws->server = mf_http_server_start(loop, &ws->opts->config, ws->handler,
                                      ws->user, &ws->error);
    mf_waitgroup_done(ws->wg);
}

static void on_stopped(mf_http_server_t *srv, void *arg)
{
    worker_server_t *ws = arg;
    (void)srv;
    ws->server = NULL;
    mf_waitgroup_done(ws->wg);
}

static void stop_on_worker(mf_loop_t *loop, void *arg)
{
    worker_server_t *ws = arg;
    (void)loop;
    mf_http_server_stop(ws->server, on_stopped, ws);
}

/* Runs fn on each worker whose server is (start) or is not (stop) running,
 * and waits until all of them are done. */
static void on_each_worker(mf_workers_t *workers, worker_server_t *ws,
                           bool running, mf_worker_fn fn)
{
    unsigned n = mf_workers_count(workers);
    mf_waitgroup_t wg;
    mf_waitgroup_init(&wg, 0);
    for (unsigned i = 0; i < n; i++) {
        if ((ws[i].server != NULL) != running)
            continue;
        ws[i].wg = &wg;
        mf_waitgroup_add(&wg, 1);
        mf_workers_call(workers, i, fn, &ws[i]);
    }
    mf_waitgroup_wait(&wg);
    mf_waitgroup_close(&wg);
}

/* The first worker whose server did not start, or NULL. */
static const worker_server_t *failed_worker(const worker_server_t *ws,
                                            unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (!ws[i].server)
            return &ws[i];
    return NULL;
}

static int serve_until_signal(const char *name, mf_workers_t *workers,
                              worker_server_t *ws, const sigset_t *sigs)
{
    unsigned n = mf_workers_count(workers);
    on_each_worker(workers, ws, false, start_on_worker);
    const worker_server_t *failed = failed_worker(ws, n);
    if (failed)
        fprintf(stderr, "%s: %s: %s\n", name, ws->opts->config.listen,
                mf_strerror(failed->error));
    else {
        printf("listening on %s (port %u), %u workers\n",
               ws->opts->config.listen, mf_http_server_port(ws[0].server), n);
        fflush(stdout);
        int sig;
        sigwait(sigs, &sig);
    }
    on_each_worker(workers, ws, true, stop_on_worker);
    return failed ? 1 : 0;
}

int hello_server_run(const char *name, const hello_options_t *o,
                     mf_http_handler handler, void *user)
{
    if (hello_body_create(o->body_size) < 0) {
        fprintf(stderr, "%s: no memory for a %zu-byte body\n", name,
                o->body_size);
        return 1;
    }
    /* Signals are taken by sigwait on this thread only: the workers
     * inherit the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    mf_workers_opts_t wopts = {.nloops = o->workers, .npool = 1};
    mf_workers_t *workers = mf_workers_create(&wopts);
    worker_server_t *ws =
        workers ? calloc(mf_workers_count(workers), sizeof(*ws)) : NULL;
    int rc = 1;
    if (!ws)
        fprintf(stderr, "%s: cannot start %u workers\n", name, o->workers);
    else {
        for (unsigned i = 0; i < mf_workers_count(workers); i++)
            ws[i] =
                (worker_server_t){.opts = o, .handler = handler, .user = user};
        rc = serve_until_signal(name, workers, ws, &sigs);
    }
    if (workers)
        mf_workers_destroy(workers);
    free(ws);
    free(hello_body);
    if (rc == 0)
        printf("stopped\n");
    return rc;
}
