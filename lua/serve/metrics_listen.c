/*
 * lua/serve/metrics_listen.c — the metrics page on an address of its own
 * (config: metrics = { path = "/metrics", listen = "127.0.0.1:9145" }), so
 * that it need not be reachable where the site is. Worker 0 serves it: the
 * address is opened like the site's (moonflow/listen.h: its lock, so one
 * process holds it and nothing else may listen there too), one listener,
 * and an HTTP server that answers the page at its path and 404 elsewhere.
 *
 * A graceful restart (--takeover) finds the address held by the server it
 * replaces, which lets it go when it exits: the new server tries again
 * once a second until then (said once on stderr), the page missing for
 * that while. Without --takeover a held address stops the start, naming
 * the key.
 *
 * Owns: the listener and its server (worker 0's, freed at its stop before
 * the site's server drains). May call: the listen and HTTP server APIs,
 * metrics.c.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <moonflow/error.h>
#include <moonflow/listen.h>

#include "serve.h"

struct mf_serve_metrics_listener {
    mf_serve_worker_t *w;
    mf_listen_t *listen;
    mf_http_server_t *server;
    mf_timer_t retry;
    void (*stopped)(void *arg);
    void *stopped_arg;
};

static void mf__page_handle(mf_http_exchange_t *ex, void *arg)
{
    mf_serve_worker_t *w = arg;
    const mf_http_request_t *req = mf_http_exchange_request(ex);
    const char *path = w->config->metrics_path;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    if (strlen(path) == req->path_len &&
        !memcmp(path, req->path, req->path_len)) {
        mf_serve_metrics_answer(w, ex, &start);
        return;
    }
    static const char type[] = "Content-Type: text/plain\r\n";
    mf_http_exchange_set_status(ex, 404);
    mf_http_exchange_add_header_static(ex, type, sizeof type - 1);
    mf_http_exchange_send_body(ex, "404 Not Found\n", 14);
}

/* Opens the address and starts the page's server on it; MF_EADDRINUSE
 * while another process holds it. */
static int mf__listener_try(struct mf_serve_metrics_listener *l)
{
    const mf_serve_config_t *c = l->w->config;
    mf_listen_opts_t opts = {c->metrics_listen, 1, 511, false};
    int err = 0;
    l->listen = mf_listen_open(&opts, &err);
    if (!l->listen)
        return err;
    int fd = dup(mf_listen_fd(l->listen, 0));
    if (fd < 0) {
        mf_listen_close(l->listen);
        l->listen = NULL;
        return MF_EMFILE;
    }
    mf_http_server_config_t http;
    mf_http_server_config_init(&http);
    http.listen = c->metrics_listen;
    http.listen_fds = &fd;
    http.nlisten_fds = 1;
    l->server =
        mf_http_server_start(l->w->loop, &http, mf__page_handle, l->w, &err);
    if (!l->server) {
        mf_listen_close(l->listen);
        l->listen = NULL;
    }
    return l->server ? 0 : err;
}

static void mf__listener_retry(mf_timer_t *timer)
{
    struct mf_serve_metrics_listener *l = timer->data;
    int rc = mf__listener_try(l);
    if (rc == 0) {
        fprintf(stderr, "moonflow serve: metrics page on http://%s%s\n",
                l->w->config->metrics_listen, l->w->config->metrics_path);
        return;
    }
    if (rc != MF_EADDRINUSE)
        fprintf(stderr,
                "moonflow serve: metrics.listen %s: %s (trying again)\n",
                l->w->config->metrics_listen, mf_strerror(rc));
    mf_timer_start(l->w->loop, timer, 1000);
}

int mf_serve_metrics_listen_open(mf_serve_worker_t *w)
{
    const mf_serve_config_t *c = w->config;
    if (!c->metrics_listen || w->id != 0)
        return 0;
    struct mf_serve_metrics_listener *l = mf_try_malloc(sizeof *l);
    if (!l)
        return MF_ENOMEM;
    memset(l, 0, sizeof *l);
    l->w = w;
    w->mlisten = l;
    mf_timer_init(&l->retry, mf__listener_retry, l);
    mf_timer_set_ref(w->loop, &l->retry, false);
    int rc = mf__listener_try(l);
    if (rc == MF_EADDRINUSE && c->take_over) {
        fprintf(stderr,
                "moonflow serve: metrics.listen %s: held by the server "
                "taken over; the page comes back there when it exits\n",
                c->metrics_listen);
        mf_timer_start(w->loop, &l->retry, 1000);
        return 0;
    }
    return rc;
}

static void mf__listener_free(struct mf_serve_metrics_listener *l)
{
    void (*done)(void *) = l->stopped;
    void *arg = l->stopped_arg;
    mf_listen_close(l->listen);
    l->w->mlisten = NULL;
    mf_free(l);
    if (done)
        done(arg);
}

static void mf__listener_server_stopped(mf_http_server_t *srv, void *arg)
{
    (void)srv;
    mf__listener_free(arg);
}

void mf_serve_metrics_listen_stop(mf_serve_worker_t *w, void (*done)(void *),
                                  void *arg)
{
    struct mf_serve_metrics_listener *l = w->mlisten;
    if (!l) {
        done(arg);
        return;
    }
    l->stopped = done;
    l->stopped_arg = arg;
    mf_timer_stop(w->loop, &l->retry);
    if (l->server)
        mf_http_server_stop(l->server, mf__listener_server_stopped, l);
    else
        mf__listener_free(l);
}
