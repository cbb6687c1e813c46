/*
 * lua/serve/serve.c — the `moonflow serve` command: options and config file,
 * worker loops (each with its Lua host, server, routes, watcher and access
 * log), signals (SIGINT/SIGTERM: graceful stop; SIGHUP: reload every
 * script), and the exit code.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <lauxlib.h>

#include <moonflow/moonflow.h>

#include "serve.h"

#define MF_SERVE_DEFAULT_ROOT "scripts/site"
#define MF_SERVE_SYSTEM_PATH                                              \
    "/usr/local/share/lua/5.1/?.lua;/usr/local/share/lua/5.1/?/init.lua;" \
    "/usr/share/lua/5.1/?.lua;/usr/share/lua/5.1/?/init.lua"
#define MF_SERVE_SYSTEM_CPATH                                             \
    "/usr/local/lib/lua/5.1/?.so;/usr/lib/x86_64-linux-gnu/lua/5.1/?.so;" \
    "/usr/lib/lua/5.1/?.so"

static const char usage_serve[] =
    "usage: moonflow serve [DIR] [--config FILE] [--listen ADDR]\n"
    "                      [--workers N] [--access-log FILE|-|off]\n"
    "\n"
    "Serves the Lua handlers under DIR (default: scripts/site): DIR/a/b.lua\n"
    "answers /a/b, DIR/a/index.lua answers /a/. A handler script returns\n"
    "function(req, resp). Scripts reload when they change (inotify) and on\n"
    "SIGHUP; SIGINT/SIGTERM stop gracefully. --config FILE reads a Lua\n"
    "table (listen, workers, root, access_log, tls, limits, timeouts,\n"
    "routes); options given on the command line win.\n"
    "Defaults: --listen 127.0.0.1:8080, one worker per core, no access log.\n";

/* ---- one worker ------------------------------------------------------------
 */

static void mf__serve_log(void *ud, const char *msg)
{
    (void)ud;
    fprintf(stderr, "%s\n", msg);
}

static void mf__serve_changed(mf_fswatch_t *watch, const char *path,
                              unsigned what, void *arg)
{
    mf_serve_worker_t *w = arg;
    (void)watch;
    if (what & MF_FSWATCH_OVERFLOW)
        mf_serve_routes_invalidate_all(w->routes);
    else
        mf_serve_routes_changed(w->routes, path);
}

typedef struct mf_serve_job {
    mf_serve_worker_t *w;
    mf_waitgroup_t *wg;
} mf_serve_job_t;

static void mf__serve_add_paths(lua_State *L, const char *root)
{
    lua_getglobal(L, "package");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", root, root);
    lua_getfield(L, -2, "path");
    lua_concat(L, 2);
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);
}

static void mf__serve_start_worker(mf_loop_t *loop, void *arg)
{
    mf_serve_job_t *job = arg;
    mf_serve_worker_t *w = job->w;
    const mf_serve_config_t *c = w->config;
    w->loop = loop;
    mf_lua_host_opts_t opts = {.package_path = MF_SERVE_SYSTEM_PATH,
                               .package_cpath = MF_SERVE_SYSTEM_CPATH,
                               .log = mf__serve_log};
    w->host = mf_lua_host_create(loop, &opts);
    if (!w->host) {
        w->error = MF_ENOMEM;
        mf_waitgroup_done(job->wg);
        return;
    }
    mf__serve_add_paths(mf_lua_host_state(w->host), c->root);
    mf_serve_http_open(w);
    w->routes = mf_serve_routes_create(w->host, c->root, c->routes, c->nroutes);
    w->watch = mf_fswatch_start(loop, c->root, mf__serve_changed, w, NULL);
    mf_serve_log_open(w);
    w->server =
        mf_http_server_start(loop, &c->http, mf_serve_handle, w, &w->error);
    mf_waitgroup_done(job->wg);
}

static void mf__serve_worker_stopped(mf_http_server_t *srv, void *arg)
{
    mf_serve_job_t *job = arg;
    mf_serve_worker_t *w = job->w;
    (void)srv;
    w->server = NULL;
    mf_fswatch_stop(w->watch);
    mf_serve_log_close(w);
    mf_serve_routes_destroy(w->routes);
    if (w->host)
        mf_lua_host_destroy(w->host); /* aborts background timers */
    w->host = NULL;
    mf_waitgroup_done(job->wg);
}

static void mf__serve_stop_worker(mf_loop_t *loop, void *arg)
{
    mf_serve_job_t *job = arg;
    (void)loop;
    if (job->w->server)
        mf_http_server_stop(job->w->server, mf__serve_worker_stopped, job);
    else
        mf__serve_worker_stopped(NULL, job);
}

static void mf__serve_reload_worker(mf_loop_t *loop, void *arg)
{
    mf_serve_job_t *job = arg;
    (void)loop;
    mf_serve_routes_invalidate_all(job->w->routes);
    mf_waitgroup_done(job->wg);
}

/* Runs fn on every worker and waits for all of them. */
static void mf__serve_on_all(mf_workers_t *workers, mf_serve_job_t *jobs,
                             mf_worker_fn fn)
{
    unsigned n = mf_workers_count(workers);
    mf_waitgroup_t wg;
    mf_waitgroup_init(&wg, n);
    for (unsigned i = 0; i < n; i++) {
        jobs[i].wg = &wg;
        mf_workers_call(workers, i, fn, &jobs[i]);
    }
    mf_waitgroup_wait(&wg);
    mf_waitgroup_close(&wg);
}

/* ---- options ----------------------------------------------------------------
 */

static int mf__serve_options(int argc, char **argv, mf_serve_config_t *c)
{
    const char *config = NULL, *listen = NULL, *workers = NULL, *log = NULL;
    const char *root = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_serve, stdout);
            return 1;
        }
        if (a[0] != '-') {
            root = a;
            continue;
        }
        if (!v) {
            fprintf(stderr, "moonflow serve: %s needs a value\n", a);
            return -1;
        }
        i++;
        if (!strcmp(a, "--config"))
            config = v;
        else if (!strcmp(a, "--listen"))
            listen = v;
        else if (!strcmp(a, "--workers"))
            workers = v;
        else if (!strcmp(a, "--access-log"))
            log = v;
        else {
            fprintf(stderr, "moonflow serve: unknown option %s\n\n%s", a,
                    usage_serve);
            return -1;
        }
    }
    char err[512];
    if (config && mf_serve_config_load(c, config, err, sizeof err) < 0) {
        fprintf(stderr, "moonflow serve: %s\n", err);
        return -1;
    }
    if (root)
        c->root = mf_serve_config_strdup(c, root);
    if (listen)
        c->http.listen = mf_serve_config_strdup(c, listen);
    if (workers)
        c->workers = (unsigned)strtoul(workers, NULL, 10);
    if (log)
        c->access_log = mf_serve_config_strdup(c, log);
    if (!c->root)
        c->root = mf_serve_config_strdup(c, MF_SERVE_DEFAULT_ROOT);
    struct stat st;
    if (stat(c->root, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "moonflow serve: %s: no such scripts folder\n",
                c->root);
        return -1;
    }
    return 0;
}

static void mf__serve_defaults(mf_serve_config_t *c)
{
    memset(c, 0, sizeof(*c));
    mf_http_server_config_init(&c->http);
    c->http.listen = "127.0.0.1:8080";
}

/* ---- the command ------------------------------------------------------------
 */

static bool mf__serve_started(mf_serve_worker_t *ws, unsigned n,
                              const mf_serve_config_t *c)
{
    for (unsigned i = 0; i < n; i++)
        if (!ws[i].server) {
            fprintf(stderr, "moonflow serve: %s: %s\n", c->http.listen,
                    mf_strerror(ws[i].error));
            return false;
        }
    return true;
}

/* Waits for signals: HUP reloads, INT/TERM return. */
static void mf__serve_wait(mf_workers_t *workers, mf_serve_job_t *jobs,
                           const sigset_t *sigs)
{
    for (;;) {
        int sig = 0;
        sigwait(sigs, &sig);
        if (sig != SIGHUP)
            return;
        fprintf(stderr, "moonflow serve: SIGHUP: reloading every script\n");
        mf__serve_on_all(workers, jobs, mf__serve_reload_worker);
    }
}

int mf_serve_main(int argc, char **argv)
{
    mf_serve_config_t c;
    mf__serve_defaults(&c);
    int rc = mf__serve_options(argc, argv, &c);
    if (rc != 0) {
        mf_serve_config_free(&c);
        return rc > 0 ? 0 : 2;
    }
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL); /* workers inherit the mask */
    signal(SIGPIPE, SIG_IGN);

    mf_workers_opts_t wo = {.nloops = c.workers, .npool = 0};
    mf_workers_t *workers = mf_workers_create(&wo);
    unsigned n = mf_workers_count(workers);
    mf_serve_worker_t *ws = calloc(n, sizeof(*ws));
    mf_serve_job_t *jobs = calloc(n, sizeof(*jobs));
    for (unsigned i = 0; i < n; i++) {
        ws[i].config = &c;
        jobs[i].w = &ws[i];
    }
    mf__serve_on_all(workers, jobs, mf__serve_start_worker);
    int status = 0;
    if (mf__serve_started(ws, n, &c)) {
        fprintf(stderr, "moonflow serve: %s on http%s://%s (%u workers)\n",
                c.root, c.http.tls.cert_file ? "s" : "", c.http.listen, n);
        mf__serve_wait(workers, jobs, &sigs);
        fprintf(stderr, "moonflow serve: stopping\n");
    } else {
        status = 1;
    }
    mf__serve_on_all(workers, jobs, mf__serve_stop_worker);
    mf_workers_destroy(workers);
    mf_serve_routes_forget_sources();
    free(ws);
    free(jobs);
    mf_serve_config_free(&c);
    return status;
}
