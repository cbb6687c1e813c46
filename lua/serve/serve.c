/*
 * lua/serve/serve.c — the `moonflow serve` command: options and config file,
 * worker loops (each with its Lua host, server, routes, watcher and access
 * log), signals (SIGINT/SIGTERM: graceful stop, bounded by timeouts.stop;
 * SIGHUP: reload every script; SIGUSR2 from the takeover thread: another
 * process serves now, drain and exit), and the exit code.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/random.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>

#include <moonflow/moonflow.h>

#include "serve.h"

#define MF_SERVE_DEFAULT_ROOT "scripts/site"
/* A handler holding its worker for a second of CPU stalls every other
 * connection of that worker for as long: longer work yields (mf.sleep(0))
 * or runs on the compute pool (mf.go). */
#define MF_SERVE_DEFAULT_CPU_MS 1000
#define MF_SERVE_DEFAULT_LUA_MEMORY_MIB 1024
#define MF_SERVE_DEFAULT_STOP_MS 1000
/* The exit status when workers were given up at a stop. */
#define MF_SERVE_EXIT_STUCK 3

static const char usage_serve[] =
    "usage: moonflow serve [DIR] [--config FILE] [--listen ADDR]\n"
    "                      [--workers N] [--access-log FILE|-|off]\n"
    "                      [--takeover]\n"
    "\n"
    "Serves the Lua handlers under DIR (default: scripts/site): DIR/a/b.lua\n"
    "answers /a/b, DIR/a/index.lua answers /a/. A handler script returns\n"
    "function(req, resp). Modules go in DIR/lib/ (require \"name\") or in\n"
    "files named _*.lua: never routes. Scripts and the modules they require\n"
    "reload when they change (inotify) and on SIGHUP; SIGINT/SIGTERM stop\n"
    "gracefully (a worker still busy after timeouts.stop, 1000 ms, is given\n"
    "up: exit status 3). --config FILE reads a Lua table (listen, workers,\n"
    "root, access_log, access_log_format, request_id_header, tls, limits,\n"
    "timeouts, routes, jit, log_level, init, init_worker, shared, metrics,\n"
    "trace); options given on the command line win.\n"
    "One server per address: another one there is an error. A graceful\n"
    "restart: start the new server with the same address and --takeover;\n"
    "it takes the listening sockets over from the running one, which\n"
    "finishes its requests in flight and exits 0 (no connection refused).\n"
    "Defaults: --listen 127.0.0.1:8080, one worker per core, no access log.\n";

/* ---- one worker ------------------------------------------------------------
 */

/* The error log: one write() per line, so that lines of workers that log
 * at once never mix (stderr has no buffer: a line in pieces would be
 * written in pieces). */
static void mf__serve_log_to_stderr(void *ud, const char *msg)
{
    char line[4200];
    (void)ud;
    size_t n = strlen(msg);
    if (n > sizeof line - 1)
        n = sizeof line - 1; /* mf.log cuts its lines well before */
    memcpy(line, msg, n);
    line[n++] = '\n';
    while (write(2, line, n) < 0 && errno == EINTR)
        ;
}

static void mf__serve_on_file_change(mf_fswatch_t *watch, const char *path,
                                     unsigned what, void *arg)
{
    mf_serve_worker_t *w = arg;
    (void)watch;
    if (what & MF_FSWATCH_OVERFLOW)
        mf_serve_routes_invalidate_all(w->routes);
    else if (what & MF_FSWATCH_CREATED)
        mf_serve_routes_appeared(w->routes, path);
    else
        mf_serve_routes_changed(w->routes, path);
}

/* A function run on every worker's loop thread (mf__serve_run_on_workers),
 * with the worker it runs for. */
typedef struct mf_serve_worker_job {
    mf_serve_worker_t *w;
    mf_waitgroup_t *wg;
    atomic_bool stopped; /* its objects are closed (read by main) */
} mf_serve_worker_job_t;

static void mf__serve_add_root_to_path(lua_State *L, const char *root)
{
    lua_getglobal(L, "package");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", root, root);
    lua_getfield(L, -2, "path");
    lua_concat(L, 2);
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);
}

/* Hot reload. Misses are remembered only while the watcher runs: without
 * it a new file would stay unknown. One that cannot start (the inotify
 * limits) is reported, and scripts then reload on SIGHUP only. */
static void mf__serve_watch(mf_serve_worker_t *w)
{
    const char *root = w->config->root;
    int err = 0;
    w->watch =
        mf_fswatch_start(w->loop, root, mf__serve_on_file_change, w, &err);
    if (w->watch) {
        mf_serve_routes_cache_misses(w->routes, true);
        return;
    }
    fprintf(stderr,
            "moonflow serve: %s: cannot watch for changes (%s): scripts "
            "reload on SIGHUP only\n",
            root, mf_strerror(err));
}

static void mf__serve_init_exit(mf_lua_co_t *co, const mf_lua_co_exit_t *ex,
                                void *data)
{
    mf_serve_worker_t *w = data;
    (void)co;
    if (ex->status == MF_LUA_CO_DONE || ex->status == MF_LUA_CO_ABORTED)
        return;      /* done, or still waiting when the server stopped */
    if (w->server) { /* it waited first: the server runs; the log says it */
        fprintf(stderr, "moonflow serve: worker %u: %s\n", w->id,
                ex->message ? ex->message : "aborted");
        return;
    }
    snprintf(w->init_error, sizeof w->init_error, "%s",
             ex->message ? ex->message : "aborted");
    w->error = MF_EINVAL;
    w->error_what = w->init_error;
}

/* Runs an init script (config init / init_worker) in a coroutine of the
 * worker's host: it may wait (it goes on while the server starts). A
 * script that does not load, or raises before its first wait, stops the
 * start with its message; a later raise is logged. 0 or -1. */
static int mf__serve_run_init(mf_serve_worker_t *w, const char *file)
{
    lua_State *L = mf_lua_host_state(w->host);
    if (mf_lua_load_file(L, file) != 0) {
        snprintf(w->init_error, sizeof w->init_error, "%s",
                 lua_tostring(L, -1));
        lua_pop(L, 1);
        w->error = MF_EINVAL;
        w->error_what = w->init_error;
        return -1;
    }
    mf_lua_host_spawn(w->host, 0, mf__serve_init_exit, w);
    return w->error ? -1 : 0;
}

/* A file of the config that would not open, named by its key as the
 * config file spells it: "access_log /var/log/x.log: no such file ...". */
static void mf__serve_file_failed(mf_serve_worker_t *w, const char *key,
                                  const char *path)
{
    snprintf(w->init_error, sizeof w->init_error, "%s %s: %s", key, path,
             mf_strerror(w->error));
    w->error_what = w->init_error;
}

/* Opens the worker's objects; a failure leaves w->error and w->error_what
 * (mf__serve_started reports it) and no server. */
/* The prefix of the request ids this worker makes: random, so that ids of
 * workers, restarts and machines do not meet. */
static void mf__serve_id_prefix(mf_serve_worker_t *w)
{
    if (getrandom(&w->id_prefix, sizeof w->id_prefix, 0) !=
        (ssize_t)sizeof w->id_prefix) {
        struct timespec now; /* no entropy yet (early boot): time, pid */
        clock_gettime(CLOCK_REALTIME, &now);
        w->id_prefix = ((uint64_t)now.tv_sec << 32) ^ (uint64_t)now.tv_nsec ^
                       ((uint64_t)getpid() << 16) ^ w->id;
    }
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++)
        w->id_prefix_hex[i] = hex[(w->id_prefix >> (60 - 4 * i)) & 15];
    mf_serve_request_id_line_open(w);
}

static void mf__serve_open_worker(mf_serve_worker_t *w)
{
    const mf_serve_config_t *c = w->config;
    mf__serve_id_prefix(w);
    /* package paths: the host's default, the system's module folders.
     * Interruptible: a handler that never yields is stopped at its budget
     * or its timeout, and at a stop. */
    mf_lua_host_opts_t opts = {.log = mf__serve_log_to_stderr,
                               .cpu_budget_ms = c->cpu_budget_ms,
                               .interruptible = true,
                               .jit = c->jit ? MF_LUA_JIT_ON : MF_LUA_JIT_OFF,
                               .memory_limit = (size_t)c->lua_memory_mib << 20,
                               .log_level = c->log_level,
                               .worker_id = w->id,
                               .worker_count = w->count,
                               .metrics = w->metrics};
    w->host = mf_lua_host_create(w->loop, &opts);
    if (!w->host) {
        w->error = MF_ENOMEM;
        w->error_what = "the Lua state";
        return;
    }
    mf__serve_add_root_to_path(mf_lua_host_state(w->host), c->root);
    mf_serve_handler_open(w);
    mf_serve_downstream_open(w);
    mf_serve_websocket_open(w);
    if ((w->error = mf_serve_static_open(w)) < 0)
        return;
    w->routes = mf_serve_routes_create(w->host, c->root, c->routes, c->nroutes);
    mf_serve_capture_open(w);
    if ((w->error = mf_serve_log_open(w)) < 0) {
        mf__serve_file_failed(w, "access_log", c->access_log);
        return;
    }
    if ((w->error = mf_serve_metrics_open(w)) < 0) {
        w->error_what = "the metrics";
        return;
    }
    if ((w->error = mf_serve_metrics_listen_open(w)) < 0) {
        snprintf(w->init_error, sizeof w->init_error, "metrics.listen %s: %s",
                 c->metrics_listen, mf_strerror(w->error));
        w->error_what = w->init_error;
        return;
    }
    if ((w->error = mf_serve_trace_open(w)) < 0) {
        mf__serve_file_failed(w, "trace.file", c->trace_file);
        return;
    }
    mf_serve_observe_open(w);
    mf__serve_watch(w);
    w->phase_outside = "init"; /* what ngx.get_phase() says meanwhile */
    if (c->init && w->id == 0 && mf__serve_run_init(w, c->init) < 0)
        return;
    w->phase_outside = "init_worker";
    if (c->init_worker && mf__serve_run_init(w, c->init_worker) < 0)
        return;
    w->phase_outside = "timer"; /* timers, and what init scripts do later */
    mf_http_server_config_t http = c->http; /* copied by the server */
    if (w->log_fd >= 0 || w->mstate)        /* refused requests count too */
        http.on_reject = mf_serve_log_reject;
    http.stream_body = mf_serve_downstream_stream_body;
    http.listen_fds = w->listen_fds;
    http.nlisten_fds = w->nlisten_fds;
    w->nlisten_fds = 0; /* the server's now, started or not */
    w->server = mf_http_server_start(w->loop, &http,
                                     mf_serve_handler_on_request, w, &w->error);
    if (!w->server)
        w->error_what = c->http.listen;
}

static void mf__serve_start_worker(mf_loop_t *loop, void *arg)
{
    mf_serve_worker_job_t *job = arg;
    mf_serve_worker_t *w = job->w;
    w->loop = loop;
    if (w->listen_fds) {
        mf__serve_open_worker(w);
    } else {
        w->error = MF_EMFILE;
        w->error_what = "the listener's dup";
    }
    mf_serve_handover_close_fds(w->listen_fds, w->nlisten_fds);
    w->listen_fds = NULL;
    mf_waitgroup_done(job->wg);
}

static void mf__serve_worker_stopped(mf_http_server_t *srv, void *arg)
{
    mf_serve_worker_job_t *job = arg;
    mf_serve_worker_t *w = job->w;
    (void)srv;
    w->server = NULL;
    mf_fswatch_stop(w->watch);
    mf_serve_log_close(w);
    mf_serve_observe_close(w);
    mf_serve_metrics_close(w);
    mf_serve_routes_destroy(w->routes);
    mf_serve_static_close(w);
    if (w->host)
        mf_lua_host_destroy(w->host); /* aborts background timers */
    w->host = NULL;
    mf_serve_handler_close(w);
    mf_serve_trace_close(w);
    atomic_store(&job->stopped, true);
    mf_waitgroup_done(job->wg);
}

/* The site's server drains, once the metrics page's own (if any) is
 * gone. */
static void mf__serve_drain_worker(void *arg)
{
    mf_serve_worker_job_t *job = arg;
    if (job->w->server)
        mf_http_server_drain(job->w->server, job->w->drain_ms,
                             mf__serve_worker_stopped, job);
    else
        mf__serve_worker_stopped(NULL, job);
}

static void mf__serve_stop_worker(mf_loop_t *loop, void *arg)
{
    mf_serve_worker_job_t *job = arg;
    (void)loop;
    mf_serve_metrics_listen_stop(job->w, mf__serve_drain_worker, job);
}

static void mf__serve_reload_worker(mf_loop_t *loop, void *arg)
{
    mf_serve_worker_job_t *job = arg;
    (void)loop;
    mf_serve_routes_invalidate_all(job->w->routes);
    mf_waitgroup_done(job->wg);
}

/* Runs fn on every worker and waits for all of them. */
static void mf__serve_run_on_workers(mf_workers_t *workers,
                                     mf_serve_worker_job_t *jobs,
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

/* The command line as given; applied on top of the config file. */
typedef struct mf_serve_args {
    const char *root, *config, *listen, *workers, *access_log;
    bool take_over;
} mf_serve_args_t;

/* Reads argv into args. Returns 0, 1 (--help: printed) or -1 (printed). */
static int mf__serve_parse_args(int argc, char **argv, mf_serve_args_t *args)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char **slot = !strcmp(a, "--config")       ? &args->config
                            : !strcmp(a, "--listen")     ? &args->listen
                            : !strcmp(a, "--workers")    ? &args->workers
                            : !strcmp(a, "--access-log") ? &args->access_log
                                                         : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_serve, stdout);
            return 1;
        }
        if (!strcmp(a, "--takeover")) {
            args->take_over = true;
            continue;
        }
        if (a[0] != '-' && args->root) {
            fprintf(stderr,
                    "moonflow serve: one scripts folder expected, "
                    "got %s and %s\n",
                    args->root, a);
            return -1;
        }
        if (a[0] != '-') {
            args->root = a;
        } else if (!slot) {
            fprintf(stderr, "moonflow serve: unknown option %s\n\n%s", a,
                    usage_serve);
            return -1;
        } else if (!v || (v[0] == '-' && v[1] == '-')) {
            /* "--listen --workers 2": the next option is not a value */
            fprintf(stderr, "moonflow serve: %s needs a value\n", a);
            return -1;
        } else {
            *slot = v;
            i++;
        }
    }
    return 0;
}

/* --workers N: 0 (one per core) up to MF_SERVE_MAX_WORKERS. */
static int mf__serve_parse_workers(const char *v, unsigned *out)
{
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (v[0] < '0' || v[0] > '9' || *end || errno || n > MF_SERVE_MAX_WORKERS) {
        fprintf(stderr,
                "moonflow serve: --workers: expected a number from 0 (one "
                "per core) to %d, got '%s'\n",
                MF_SERVE_MAX_WORKERS, v);
        return -1;
    }
    *out = (unsigned)n;
    return 0;
}

/* The config file, then the command line over it. Returns 0, 1 (--help) or
 * -1 (the reason printed). */
static int mf__serve_options(int argc, char **argv, mf_serve_config_t *c)
{
    mf_serve_args_t args = {0};
    int rc = mf__serve_parse_args(argc, argv, &args);
    if (rc != 0)
        return rc;
    char err[512];
    if (args.config &&
        mf_serve_config_load(c, args.config, err, sizeof err) < 0) {
        fprintf(stderr, "moonflow serve: %s\n", err);
        return -1;
    }
    if (args.workers && mf__serve_parse_workers(args.workers, &c->workers) < 0)
        return -1;
    if (args.listen &&
        mf_serve_check_listen(args.listen, err, sizeof err) < 0) {
        fprintf(stderr, "moonflow serve: --listen: %s\n", err);
        return -1;
    }
    if (args.root)
        c->root = mf_serve_config_strdup(c, args.root);
    if (args.listen)
        c->http.listen = mf_serve_config_strdup(c, args.listen);
    if (args.access_log)
        c->access_log = mf_serve_config_strdup(c, args.access_log);
    c->take_over = args.take_over;
    if (!c->root)
        c->root = mf_serve_config_strdup(c, MF_SERVE_DEFAULT_ROOT);
    struct stat st;
    if (stat(c->root, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "moonflow serve: %s: no such scripts folder\n",
                c->root);
        return -1;
    }
    if (mf_serve_config_check(c, err, sizeof err) < 0) {
        fprintf(stderr, "moonflow serve: %s\n", err);
        return -1;
    }
    return 0;
}

static void mf__serve_defaults(mf_serve_config_t *c)
{
    memset(c, 0, sizeof(*c));
    mf_http_server_config_init(&c->http);
    c->http.listen = "127.0.0.1:8080";
    c->drain_timeout_ms = 5000;
    c->cpu_budget_ms = MF_SERVE_DEFAULT_CPU_MS;
    c->jit = true; /* loop checks stop compiled loops (lua_host.h) */
    c->lua_memory_mib = MF_SERVE_DEFAULT_LUA_MEMORY_MIB;
    c->stop_timeout_ms = MF_SERVE_DEFAULT_STOP_MS;
    c->request_id_header = "X-Request-Id"; /* a literal: never freed */
}

/* ---- the command ------------------------------------------------------------
 */

static bool mf__serve_started(const mf_serve_worker_t *ws, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (!ws[i].server) {
            if (ws[i].error_what == ws[i].init_error) /* its own words */
                fprintf(stderr, "moonflow serve: %s\n", ws[i].init_error);
            else
                fprintf(stderr, "moonflow serve: %s: %s\n", ws[i].error_what,
                        mf_strerror(ws[i].error));
            return false;
        }
    return true;
}

/* Waits for signals: HUP reloads, INT/TERM return, and so does USR2 once
 * another process has taken over (the takeover thread sends it). */
static void mf__serve_wait(mf_workers_t *workers, mf_serve_worker_job_t *jobs,
                           const sigset_t *sigs,
                           const mf_serve_handover_t *handover)
{
    for (;;) {
        int sig = 0;
        sigwait(sigs, &sig);
        if (sig == SIGUSR2 && mf_serve_handover_done(handover))
            return;
        if (sig == SIGUSR2) {
            fprintf(stderr, "moonflow serve: SIGUSR2 ignored (a graceful "
                            "restart: start the new server with "
                            "--takeover)\n");
            continue;
        }
        if (sig != SIGHUP)
            return;
        fprintf(stderr, "moonflow serve: SIGHUP: reloading every script\n");
        mf__serve_run_on_workers(workers, jobs, mf__serve_reload_worker);
    }
}

/* Deals the listeners' dups to the workers. */
static void mf__serve_deal_listeners(mf_serve_worker_t *ws, unsigned n,
                                     const mf_serve_handover_t *handover)
{
    for (unsigned i = 0; i < n; i++)
        ws[i].listen_fds =
            mf_serve_handover_fds(handover, i, n, &ws[i].nlisten_fds);
}

/* Serves until a signal says stop (or another process took over); then
 * how long the stop keeps idle connections for one more request. */
static uint32_t mf__serve_until_stopped(mf_serve_config_t *c,
                                        mf_workers_t *workers,
                                        mf_serve_worker_job_t *jobs,
                                        const sigset_t *sigs,
                                        mf_serve_handover_t *handover)
{
    unsigned n = mf_workers_count(workers);
    mf_serve_handover_serving(handover, c->http.listen);
    fprintf(stderr, "moonflow serve: %s on http%s://%s (%u worker%s)\n",
            c->root, c->http.tls.cert_file ? "s" : "", c->http.listen, n,
            n == 1 ? "" : "s");
    mf__serve_wait(workers, jobs, sigs, handover);
    if (!mf_serve_handover_done(handover)) {
        fprintf(stderr, "moonflow serve: stopping\n");
        return 0;
    }
    fprintf(stderr,
            "moonflow serve: pid %d took %s over: finishing the requests "
            "in flight, then exiting\n",
            (int)handover->to, c->http.listen);
    return c->drain_timeout_ms;
}

/* ---- the stop ---------------------------------------------------------------
 */

static uint64_t mf__serve_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Waits for the workers of wg to stop: first for drain_ms (after a
 * takeover: requests in flight and idle keep-alive connections finish on
 * their own), then within grace_ms: true once they all did. Halfway through
 * the grace, Lua code still running is interrupted (its request answered
 * 503), which frees a worker held by a handler that never yields; what is
 * stuck in a C call stays stuck. Signals that arrive meanwhile wait
 * (pending, blocked): the grace bounds the stop already. */
static bool mf__serve_wait_stopped(mf_waitgroup_t *wg, uint32_t drain_ms,
                                   uint32_t grace_ms)
{
    if (drain_ms && mf_waitgroup_wait_for(wg, drain_ms) == 0)
        return true;
    uint64_t start = mf__serve_now_ms();
    if (mf_waitgroup_wait_for(wg, grace_ms / 2) == 0)
        return true;
    mf_lua_host_interrupt_all(true);
    uint64_t spent = mf__serve_now_ms() - start;
    return mf_waitgroup_wait_for(
               wg, spent < grace_ms ? (uint32_t)(grace_ms - spent) : 0) == 0;
}

/* Stops every worker gracefully; those that have not stopped within the
 * grace are given up: the process exits with MF_SERVE_EXIT_STUCK and a
 * line naming them, without waiting for them (their buffered access log
 * lines are lost). */
static void mf__serve_stop(mf_workers_t *workers, uint32_t drain_ms,
                           uint32_t grace_ms, mf_serve_worker_job_t *jobs)
{
    /* static: a worker given up may still count down after the exit began */
    static mf_waitgroup_t wg;
    unsigned n = mf_workers_count(workers);
    mf_waitgroup_init(&wg, n);
    for (unsigned i = 0; i < n; i++) {
        jobs[i].wg = &wg;
        mf_workers_call(workers, i, mf__serve_stop_worker, &jobs[i]);
    }
    bool stopped = mf__serve_wait_stopped(&wg, drain_ms, grace_ms);
    mf_lua_host_interrupt_all(false);
    if (stopped) {
        mf_waitgroup_close(&wg);
        return;
    }
    char busy[256] = "";
    size_t len = 0;
    for (unsigned i = 0; i < n && len < sizeof busy - 16; i++)
        if (!atomic_load(&jobs[i].stopped))
            len += (size_t)snprintf(busy + len, sizeof busy - len, " %u", i);
    fprintf(stderr,
            "moonflow serve: worker(s)%s did not stop within timeouts.stop "
            "(%u ms; stuck in a C call, or in Lua code that cannot be "
            "interrupted?): exiting without them, status %d\n",
            busy, grace_ms, MF_SERVE_EXIT_STUCK);
    fflush(stdout);
    fflush(stderr);
    _exit(MF_SERVE_EXIT_STUCK);
}

/* The config's shared dicts, in the process's registry before any worker
 * runs Lua: every worker sees the same ones, and a reload (which only
 * compiles scripts again) keeps them. -1 when one cannot be made. */
static int mf__serve_make_shared(const mf_serve_config_t *c)
{
    for (size_t i = 0; i < c->nshared; i++) {
        mf_shdict_t *d;
        int rc =
            mf_lua_shared_create(c->shared[i].name, c->shared[i].bytes, &d);
        if (rc < 0) {
            fprintf(stderr, "moonflow serve: shared.%s: %s\n",
                    c->shared[i].name, mf_strerror(rc));
            return -1;
        }
    }
    return 0;
}

/* The config's upstream groups, defined before any worker runs Lua (a
 * worker's mf.upstream of the same name then adds its balancer). -1 when
 * one is refused (a server that is not host:port, a bad weight). */
static int mf__serve_make_upstreams(const mf_serve_config_t *c)
{
    for (size_t i = 0; i < c->nupstreams; i++) {
        const struct mf_serve_upstream_spec *u = &c->upstreams[i];
        char why[300];
        if (mf_upstream_define(u->name, &u->conf, u->servers, u->nservers, why,
                               sizeof why) < 0) {
            fprintf(stderr, "moonflow serve: %s%supstreams.%s: %s\n",
                    c->file ? c->file : "", c->file ? ": " : "", u->name, why);
            return -1;
        }
    }
    return 0;
}

/* Runs the workers until SIGINT/SIGTERM; the exit status. */
static int mf__serve_run(mf_serve_config_t *c)
{
    if (mf__serve_make_upstreams(c) < 0)
        return 1;
    if (mf__serve_make_shared(c) < 0) {
        mf_lua_shared_destroy_all();
        return 1;
    }
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    sigaddset(&sigs, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL); /* workers inherit the mask */
    signal(SIGPIPE, SIG_IGN);

    mf_workers_opts_t wo = {.nloops = c->workers, .npool = 0};
    mf_workers_t *workers = mf_workers_create(&wo);
    if (!workers) {
        fprintf(stderr, "moonflow serve: cannot start the worker threads\n");
        mf_lua_shared_destroy_all();
        return 1;
    }
    unsigned n = mf_workers_count(workers);
    mf_serve_handover_t handover;
    if (mf_serve_handover_open(&handover, c, n) < 0) {
        mf_workers_destroy(workers);
        mf_lua_shared_destroy_all();
        return 1;
    }
    /* One shard per worker; mf.metrics writes it even without a page. */
    mf_metrics_t *metrics = mf_metrics_create(n);
    if (!metrics) {
        fprintf(stderr, "moonflow serve: no memory for the metrics\n");
        mf_serve_handover_close(&handover);
        mf_workers_destroy(workers);
        mf_lua_shared_destroy_all();
        return 1;
    }
    mf_serve_worker_t *ws = mf_xcalloc(n, sizeof(*ws));
    mf_serve_worker_job_t *jobs = mf_xcalloc(n, sizeof(*jobs));
    for (unsigned i = 0; i < n; i++) {
        ws[i].config = c;
        ws[i].metrics = metrics;
        ws[i].id = i;
        ws[i].count = n;
        ws[i].log_fd = -1; /* none until mf_serve_log_open */
        ws[i].trace_fd = -1;
        jobs[i].w = &ws[i];
    }
    mf__serve_deal_listeners(ws, n, &handover);
    mf__serve_run_on_workers(workers, jobs, mf__serve_start_worker);
    int status = 0;
    uint32_t drain_ms = 0;
    if (mf__serve_started(ws, n))
        drain_ms = mf__serve_until_stopped(c, workers, jobs, &sigs, &handover);
    else
        status = 1;
    /* The originals close first: a stop then closes each listener with its
     * worker's dup, and a taken-over one lives on in the new process. */
    mf_serve_handover_close(&handover);
    for (unsigned i = 0; i < n; i++)
        ws[i].drain_ms = drain_ms;
    mf__serve_stop(workers, drain_ms, c->stop_timeout_ms, jobs);
    mf_workers_destroy(workers);
    mf_lua_shared_destroy_all(); /* no host is left */
    mf_upstream_shutdown();      /* nor a loop that picks a server */
    mf_metrics_free(metrics);
    mf_serve_routes_forget_sources();
    mf_free(ws);
    mf_free(jobs);
    return status;
}

int mf_serve_main(int argc, char **argv)
{
    mf_serve_config_t c;
    mf__serve_defaults(&c);
    int rc = mf__serve_options(argc, argv, &c);
    int status = rc > 0 ? 0 : rc < 0 ? 2 : mf__serve_run(&c);
    mf_serve_config_free(&c);
    return status;
}
