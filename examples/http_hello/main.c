/*
 * examples/http_hello — an HTTP/1.1 server on the engine, one listener per
 * worker (SO_REUSEPORT): a constant answer, and a flow that calls two
 * backends in parallel. The benchmarks' C server (bench/http).
 *
 *   http_hello [--listen 127.0.0.1:8080] [--workers N] [--body-size N]
 *              [--tls-cert FILE --tls-key FILE] [--max-connections N]
 *              [--upstream HOST:PORT]
 *
 * Routes:
 *   /               body-size bytes ("0123456789abcdef" repeated)
 *   /fanout         two GETs to --upstream in parallel (a flow); the answer
 *                   is both bodies, one after the other (502 if one fails)
 * SIGINT/SIGTERM stop gracefully: in-flight requests finish first. The
 * options, the workers and the stop are in hello_server.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moonflow/http_client.h>
#include <moonflow/http_server.h>
#include <moonflow/moonflow.h>

#include "hello_server.h"

static const char *upstream = "127.0.0.1:80";

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
    if (!copy) /* no answer: the parallel's callback sends 502 */
        return;
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

static bool path_is(const mf_http_request_t *req, const char *path)
{
    return req->path_len == strlen(path) &&
           memcmp(req->path, path, req->path_len) == 0;
}

static void handle(mf_http_exchange_t *ex, void *user)
{
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    (void)user;
    static const char type[] = "Content-Type: text/plain\r\n";
    mf_http_exchange_add_header_static(ex, type, sizeof type - 1);
    if (path_is(req, "/fanout"))
        serve_fanout(ex);
    else if (path_is(req, "/"))
        hello_server_answer(ex);
    else {
        mf_http_exchange_set_status(ex, 404);
        mf_http_exchange_append(ex, "not found\n", 10);
    }
}

static int upstream_option(void *ctx, const char *flag, char *value)
{
    (void)ctx;
    if (strcmp(flag, "--upstream") != 0) {
        fprintf(stderr, "%s: unknown option\n", flag);
        return -1;
    }
    upstream = value;
    return 0;
}

int main(int argc, char **argv)
{
    hello_options_t opts;
    if (hello_server_options(&opts, argc, argv, upstream_option, NULL) < 0) {
        fprintf(stderr, "usage: http_hello [--listen ADDR] [--workers N] "
                        "[--body-size N]\n"
                        "                  [--tls-cert FILE --tls-key FILE] "
                        "[--max-connections N]\n"
                        "                  [--upstream HOST:PORT]\n");
        return 2;
    }
    return hello_server_run("http_hello", &opts, handle, NULL);
}
