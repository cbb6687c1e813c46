/*
 * lua/bench/bench_http.c — the HTTP mode: wrk's execution model on the load
 * engine.
 *
 * As wrk's SCRIPTING documents it: the URLs are resolved (the addresses
 * that accept a connection, wrk.lookup's semantics); a main Lua state
 * loads the script; each thread gets a state of its own with the script
 * loaded, then setup(thread) runs in the main state and init(args) in the
 * thread's; the thread's static request is what wrk.format() builds from
 * the wrk table as init left it, unless the script defines request()
 * (then each request is request()'s answer); response() is a hook only if
 * it is a function after init; delay() likewise. Each thread is a pthread
 * with its own loop running one mf_load_t (core/load). After the run the
 * threads' stats are merged into a bench_result_t and done(summary,
 * latency, requests) runs in the main state with wrk's objects.
 *
 * Owns: the Lua states, the thread records, their loops and loads
 * (bench_wrk_t). May call: the engine (loop.h, load.h, hdr.h), wrk's Lua
 * API (moonflow/lua_wrk.h), the report (bench_report_header) and the
 * progress line. The hooks run on their thread's loop; the main thread
 * touches a thread's state only before its pthread starts and after it
 * ended.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lualib.h>

#include <moonflow/lua_wrk.h>
#include <moonflow/moonflow.h>

#include "bench_http.h"
#include "bench_url.h"

typedef struct wrk_thread {
    mf_lua_wrk_thread_t pub; /* first: the stop hook gets back to us */
    struct bench_wrk *w;
    unsigned index;
    unsigned connections;
    double rate;
    bool has_request, has_response, has_delay;
    int keep_ref; /* holds request()'s last string until the engine copied it */
    char **requests; /* static request per target */
    size_t *request_lens;
    pthread_t tid;
    bool started;
    mf_loop_t *loop;
    _Atomic(mf_load_t *) load; /* published for the progress line */
    int fail;                  /* the loop or load could not be made */
    bool script_failed;
    bool script_stopped; /* thread:stop() ended its load (read after join) */
} wrk_thread_t;

struct bench_wrk {
    const bench_opts_t *o;
    bench_url_t urls[MF_BENCH_MAX_URLS];
    mf_sockaddr_t addrs[MF_BENCH_MAX_URLS];
    size_t nurls;
    bool user_host; /* -H Host: given */
    lua_State *main;
    wrk_thread_t *threads;
};

/* ---- Lua states ----------------------------------------------------- */

static void report_lua_error(const wrk_thread_t *t, const char *what,
                             lua_State *L)
{
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "moonflow bench: thread %u: %s: %s\n", t->index + 1, what,
            msg ? msg : "(error object is not a string)");
    lua_pop(L, 1);
}

static bool has_header(const bench_opts_t *o, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < o->nheaders; i++)
        if (!strncasecmp(o->headers[i], name, n) && o->headers[i][n] == ':')
            return true;
    return false;
}

/* A state with wrk's API for the first URL and the script loaded. */
static lua_State *new_state(bench_wrk_t *w, char *err, size_t errlen)
{
    const bench_url_t *u = &w->urls[0];
    mf_lua_wrk_url_t url = {u->scheme, u->host, u->port, u->path};
    lua_State *L = luaL_newstate();
    if (!L) {
        snprintf(err, errlen, "out of memory for a Lua state");
        return NULL;
    }
    luaL_openlibs(L);
    int rc = mf_lua_wrk_open(L, &url, w->o->headers, w->o->nheaders);
    if (rc == 0 && !w->o->keepalive && !has_header(w->o, "Connection")) {
        lua_getglobal(L, "wrk");
        lua_getfield(L, -1, "headers");
        lua_pushstring(L, "close");
        lua_setfield(L, -2, "Connection");
        lua_pop(L, 2);
    }
    if (rc == 0 && w->o->script)
        rc = luaL_loadfile(L, w->o->script) || lua_pcall(L, 0, 0, 0);
    if (rc != 0) {
        snprintf(err, errlen, "%s", lua_tostring(L, -1));
        lua_close(L);
        return NULL;
    }
    return L;
}

static bool is_function(lua_State *L, const char *name)
{
    lua_getglobal(L, name);
    bool yes = lua_isfunction(L, -1);
    lua_pop(L, 1);
    return yes;
}

/* The request of target k as the wrk table builds it: wrk.request() for
 * the first URL (frozen by init), wrk.format with the URL's own path and
 * Host for the others. */
static const char other_target[] =
    "local path, host = ...\n"
    "local h = {}\n"
    "for k, v in pairs(wrk.headers) do h[k] = v end\n"
    "if host then h['Host'] = host end\n"
    "return wrk.format(nil, path, h)\n";

static int static_request(bench_wrk_t *w, lua_State *L, size_t k, char *err,
                          size_t errlen)
{
    if (k == 0) {
        lua_getglobal(L, "wrk");
        lua_getfield(L, -1, "request");
        lua_remove(L, -2);
        if (lua_pcall(L, 0, 1, 0) == 0)
            return 0;
    } else if (luaL_loadbuffer(L, other_target, sizeof other_target - 1,
                               "=wrk") == 0) {
        const bench_url_t *u = &w->urls[k];
        lua_pushstring(L, u->path);
        if (w->user_host)
            lua_pushnil(L);
        else if (u->port)
            lua_pushfstring(L, strchr(u->host, ':') ? "[%s]:%s" : "%s:%s",
                            u->host, u->port);
        else
            lua_pushfstring(L, strchr(u->host, ':') ? "[%s]" : "%s", u->host);
        if (lua_pcall(L, 2, 1, 0) == 0)
            return 0;
    }
    snprintf(err, errlen, "the request of %s: %s", w->o->urls[k],
             lua_tostring(L, -1));
    lua_pop(L, 1);
    return -1;
}

static int build_requests(bench_wrk_t *w, wrk_thread_t *t, char *err,
                          size_t errlen)
{
    lua_State *L = t->pub.L;
    t->requests = mf_xcalloc(w->nurls, sizeof(char *));
    t->request_lens = mf_xcalloc(w->nurls, sizeof(size_t));
    for (size_t k = 0; k < w->nurls; k++) {
        if (static_request(w, L, k, err, errlen) < 0)
            return -1;
        size_t len;
        const char *s = lua_tolstring(L, -1, &len);
        if (!s || mf_load_count_requests(s, len) == 0) {
            snprintf(err, errlen,
                     "the request for %s is not a complete HTTP request",
                     w->o->urls[k]);
            lua_pop(L, 1);
            return -1;
        }
        t->requests[k] = mf_xmalloc(len + 1);
        memcpy(t->requests[k], s, len + 1);
        t->request_lens[k] = len;
        lua_pop(L, 1);
    }
    return 0;
}

/* thread:stop(): ends the thread's load, from its own hooks (wrk allows it
 * only while the thread runs). */
static int thread_stop(mf_lua_wrk_thread_t *pub)
{
    wrk_thread_t *t = (wrk_thread_t *)pub;
    mf_load_t *load = atomic_load(&t->load);
    if (!load || !t->loop || !mf_loop_on_thread(t->loop))
        return -1;
    t->script_stopped = true;
    mf_load_stop(load);
    return 0;
}

/* setup(thread) in the main state, then init(args) in the thread's. */
static int setup_thread(bench_wrk_t *w, wrk_thread_t *t, char *err,
                        size_t errlen)
{
    const bench_opts_t *o = w->o;
    t->pub.L = new_state(w, err, errlen);
    if (!t->pub.L)
        return -1;
    t->pub.addr = w->addrs[0];
    t->pub.stop = thread_stop;
    mf_lua_wrk_push_thread(w->main, &t->pub);
    if (mf_lua_wrk_call(w->main, "setup", 1, 0) < 0) {
        snprintf(err, errlen, "setup(): %s", lua_tostring(w->main, -1));
        return -1;
    }
    if (mf_lua_wrk_thread_init(t->pub.L, &t->pub, o->urls[0], o->script_args,
                               o->nscript_args) < 0) {
        snprintf(err, errlen, "init(): %s", lua_tostring(t->pub.L, -1));
        return -1;
    }
    t->has_request = is_function(t->pub.L, "request");
    t->has_response = is_function(t->pub.L, "response");
    t->has_delay = is_function(t->pub.L, "delay");
    lua_pushnil(t->pub.L);
    t->keep_ref = luaL_ref(t->pub.L, LUA_REGISTRYINDEX);
    return build_requests(w, t, err, errlen);
}

/* ---- preparing ------------------------------------------------------- */

static int resolve_urls(bench_wrk_t *w, char *err, size_t errlen)
{
    for (size_t k = 0; k < w->nurls; k++) {
        bench_url_t *u = &w->urls[k];
        if (bench_url_parse(w->o->urls[k], u, err, errlen) < 0)
            return -1;
        const char *service = u->port ? u->port : u->scheme;
        if (mf_lua_wrk_resolve(u->host, service, &w->addrs[k], 1, err, errlen) <
            0)
            return -1;
    }
    return 0;
}

int bench_http_prepare(const bench_opts_t *o, bench_wrk_t **out, char *err,
                       size_t errlen)
{
    bench_wrk_t *w = mf_xcalloc(1, sizeof *w);
    *out = NULL;
    w->o = o;
    w->nurls = o->nurls;
    w->user_host = has_header(o, "Host");
    w->threads = mf_xcalloc(o->threads, sizeof *w->threads);
    if (resolve_urls(w, err, errlen) < 0)
        goto fail;
    w->main = new_state(w, err, errlen);
    if (!w->main)
        goto fail;
    for (unsigned i = 0; i < o->threads; i++) {
        wrk_thread_t *t = &w->threads[i];
        t->w = w;
        t->index = i;
        t->connections = o->connections / o->threads +
                         (i < o->connections % o->threads ? 1 : 0);
        t->rate = o->rate * t->connections / o->connections;
        if (setup_thread(w, t, err, errlen) < 0)
            goto fail;
    }
    *out = w;
    return 0;
fail:
    bench_http_destroy(w);
    return -1;
}

/* ---- the hooks, on the thread's loop -------------------------------- */

static int hook_request(void *user, size_t target, const char **buf,
                        size_t *len)
{
    wrk_thread_t *t = user;
    lua_State *L = t->pub.L;
    int rc = mf_lua_wrk_call(L, "request", 0, 1);
    if (rc == 1) { /* request was unset while running: wrk's default */
        *buf = t->requests[target];
        *len = t->request_lens[target];
        return 0;
    }
    if (rc < 0) {
        report_lua_error(t, "request()", L);
        t->script_failed = true;
        return MF_EINVAL;
    }
    if (lua_type(L, -1) != LUA_TSTRING) {
        fprintf(stderr,
                "moonflow bench: thread %u: request() returned %s, not a "
                "string\n",
                t->index + 1, luaL_typename(L, -1));
        lua_pop(L, 1);
        t->script_failed = true;
        return MF_EINVAL;
    }
    *buf = lua_tolstring(L, -1, len);
    lua_rawseti(L, LUA_REGISTRYINDEX, t->keep_ref);
    return 0;
}

static uint64_t hook_delay(void *user)
{
    wrk_thread_t *t = user;
    lua_State *L = t->pub.L;
    int rc = mf_lua_wrk_call(L, "delay", 0, 1);
    if (rc == 1) /* delay was unset while running */
        return 0;
    if (rc < 0) {
        report_lua_error(t, "delay()", L);
        t->script_failed = true;
        mf_load_stop(atomic_load(&t->load));
        return 0;
    }
    double ms = lua_tonumber(L, -1);
    lua_pop(L, 1);
    return ms > 0 ? (uint64_t)ms : 0;
}

static int hook_response(void *user, size_t target,
                         const mf_http_response_t *head, const char *body,
                         size_t body_len)
{
    wrk_thread_t *t = user;
    lua_State *L = t->pub.L;
    (void)target;
    lua_pushinteger(L, head->status);
    lua_createtable(L, 0, (int)head->num_headers);
    for (size_t i = 0; i < head->num_headers; i++) {
        const mf_http_header_t *h = &head->headers[i];
        lua_pushlstring(L, h->name, h->name_len);
        lua_pushlstring(L, h->value, h->value_len);
        lua_rawset(L, -3);
    }
    lua_pushlstring(L, body ? body : "", body_len);
    if (mf_lua_wrk_call(L, "response", 3, 0) < 0) {
        report_lua_error(t, "response()", L);
        t->script_failed = true;
        return MF_EINVAL;
    }
    return 0;
}

/* ---- the threads ------------------------------------------------------ */

static void on_load_done(mf_load_t *load, void *user)
{
    wrk_thread_t *t = user;
    (void)load;
    mf_loop_stop(t->loop);
}

static void thread_config(const wrk_thread_t *t, mf_load_config_t *cfg,
                          mf_load_target_t *targets)
{
    const bench_wrk_t *w = t->w;
    for (size_t k = 0; k < w->nurls; k++) {
        targets[k] = (mf_load_target_t){
            .addr = k == 0 ? t->pub.addr : w->addrs[k],
            .tls = w->urls[k].tls,
            .host = w->urls[k].host,
            .request = t->requests[k],
            .request_len = t->request_lens[k],
        };
    }
    *cfg = (mf_load_config_t){
        .targets = targets,
        .ntargets = w->nurls,
        .connections = t->connections,
        .duration_ns = w->o->duration_ns,
        .warmup_ns = w->o->warmup_ns,
        .timeout_ns = w->o->timeout_ns,
        .rate = t->rate,
        .keepalive = w->o->keepalive,
        .requests_per_conn = w->o->requests_per_conn,
    };
}

static void *thread_main(void *arg)
{
    wrk_thread_t *t = arg;
    mf_load_target_t targets[MF_BENCH_MAX_URLS];
    mf_load_config_t cfg;
    mf_load_hooks_t hooks = {
        .request = t->has_request ? hook_request : NULL,
        .delay = t->has_delay ? hook_delay : NULL,
        .response = t->has_response ? hook_response : NULL,
        .user = t,
    };
    thread_config(t, &cfg, targets);
    t->loop = mf_loop_create();
    if (!t->loop) {
        t->fail = MF_ENOMEM;
        return NULL;
    }
    mf_load_t *load = mf_load_create(t->loop, &cfg, &hooks, &t->fail);
    if (!load)
        return NULL;
    atomic_store(&t->load, load);
    mf_load_start(load, on_load_done, t);
    mf_loop_run(t->loop, MF_RUN_DEFAULT);
    return NULL;
}

/* The progress line's sample: the threads' live counters added up, the
 * worst p99. */
static void sample_progress(void *user, bench_progress_sample_t *out)
{
    bench_wrk_t *w = user;
    memset(out, 0, sizeof *out);
    for (unsigned i = 0; i < w->o->threads; i++) {
        mf_load_t *load = atomic_load(&w->threads[i].load);
        mf_load_progress_t p;
        if (!load) {
            out->warming_up = true;
            continue;
        }
        mf_load_progress(load, &p);
        out->requests += p.requests;
        out->errors += p.errors;
        out->p99_ns = p.p99_ns > out->p99_ns ? p.p99_ns : out->p99_ns;
        out->warming_up |= p.warming_up;
    }
}

/* Whether a script's thread:stop() ended some thread's load early. */
static bool any_script_stopped(const bench_wrk_t *w)
{
    for (unsigned i = 0; i < w->o->threads; i++)
        if (w->threads[i].script_stopped)
            return true;
    return false;
}

/* wrk runs for -d whatever its threads do: a thread:stop() ends that
 * thread's requests, not the run, and the report divides by the whole
 * duration. So does this, when a script stopped a thread early. */
static void wait_out_the_duration(const bench_wrk_t *w, uint64_t start_ns)
{
    if (!any_script_stopped(w))
        return;
    uint64_t end = start_ns + w->o->warmup_ns + w->o->duration_ns;
    for (uint64_t now = mf_monotonic_ns(); now < end; now = mf_monotonic_ns()) {
        uint64_t left = end - now;
        struct timespec ts = {.tv_sec = (time_t)(left / 1000000000u),
                              .tv_nsec = (long)(left % 1000000000u)};
        nanosleep(&ts, NULL);
    }
}

static int run_threads(bench_wrk_t *w, char *err, size_t errlen)
{
    int rc = 0;
    uint64_t start_ns = mf_monotonic_ns();
    for (unsigned i = 0; i < w->o->threads; i++) {
        wrk_thread_t *t = &w->threads[i];
        if (pthread_create(&t->tid, NULL, thread_main, t) != 0) {
            snprintf(err, errlen, "cannot start thread %u", i + 1);
            rc = -1;
            break;
        }
        t->started = true;
    }
    bench_progress_t *progress = bench_progress_start(w->o);
    bench_progress_source(progress, sample_progress, w);
    for (unsigned i = 0; i < w->o->threads; i++)
        if (w->threads[i].started)
            pthread_join(w->threads[i].tid, NULL);
    if (rc == 0)
        wait_out_the_duration(w, start_ns);
    bench_progress_stop(progress);
    return rc;
}

/* ---- the result ------------------------------------------------------ */

static void merge_stats(bench_result_t *r, const mf_load_stats_t *s)
{
    r->requests += s->requests;
    r->bytes += s->bytes;
    r->errors.connect += s->errors.connect;
    r->errors.read += s->errors.read;
    r->errors.write += s->errors.write;
    r->errors.status += s->errors.status;
    r->errors.timeout += s->errors.timeout;
    if (s->duration_ns > r->duration_ns)
        r->duration_ns = s->duration_ns;
    mf_hdr_merge(r->latency, s->latency);
    mf_hdr_merge(r->rate, s->rate);
    for (size_t k = 0; k < r->nseries && k < s->ntargets; k++) {
        r->series[k].count += s->target_requests[k];
        r->series[k].errors += s->target_errors[k];
        mf_hdr_merge(r->series[k].latency, s->target_latency[k]);
    }
}

static int check_threads(const bench_wrk_t *w, char *err, size_t errlen)
{
    for (unsigned i = 0; i < w->o->threads; i++) {
        const wrk_thread_t *t = &w->threads[i];
        mf_load_t *load = atomic_load(&t->load);
        if (t->script_failed) {
            snprintf(err, errlen, "thread %u stopped on a script error", i + 1);
            return -1;
        }
        if (!load || t->fail) {
            snprintf(err, errlen, "thread %u could not start its load: %s",
                     i + 1, mf_strerror(t->fail ? t->fail : MF_ENOMEM));
            return -1;
        }
        if (mf_load_error(load)) {
            snprintf(err, errlen, "thread %u stopped: %s", i + 1,
                     mf_strerror(mf_load_error(load)));
            return -1;
        }
    }
    return 0;
}

static bench_result_t *merge_result(const bench_wrk_t *w)
{
    bench_result_t *r = bench_result_new("http", w->nurls > 1 ? w->nurls : 0);
    if (!r)
        return NULL;
    for (size_t k = 0; k < r->nseries; k++) {
        size_t n = strlen(w->o->urls[k]) + 1;
        r->series[k].name = malloc(n);
        if (!r->series[k].name) {
            bench_result_free(r);
            return NULL;
        }
        memcpy(r->series[k].name, w->o->urls[k], n);
    }
    for (unsigned i = 0; i < w->o->threads; i++)
        merge_stats(r, mf_load_stats(atomic_load(&w->threads[i].load)));
    if (any_script_stopped(w) && r->duration_ns < w->o->duration_ns)
        r->duration_ns = w->o->duration_ns; /* wrk's runtime: the whole -d */
    return r;
}

int bench_http_execute(bench_wrk_t *w, bench_result_t **r, char *err,
                       size_t errlen)
{
    *r = NULL;
    bench_report_header(stdout, w->o);
    fflush(stdout);
    if (run_threads(w, err, errlen) < 0 || check_threads(w, err, errlen) < 0)
        return -1;
    *r = merge_result(w);
    if (!*r) {
        snprintf(err, errlen, "out of memory for the result");
        return -1;
    }
    return 0;
}

/* done(summary, latency, requests): wrk's objects (µs, requests/s). */
int bench_http_done(bench_wrk_t *w, const bench_result_t *r, char *err,
                    size_t errlen)
{
    return bench_lua_done(w->main, r, err, errlen);
}

int bench_lua_done(lua_State *L, const bench_result_t *r, char *err,
                   size_t errlen)
{
    if (!is_function(L, "done"))
        return 0;
    const mf_load_errors_t *e = &r->errors;
    lua_createtable(L, 0, 4);
    lua_pushnumber(L, (lua_Number)(r->duration_ns / 1000));
    lua_setfield(L, -2, "duration");
    lua_pushnumber(L, (lua_Number)r->requests);
    lua_setfield(L, -2, "requests");
    lua_pushnumber(L, (lua_Number)r->bytes);
    lua_setfield(L, -2, "bytes");
    lua_createtable(L, 0, 5);
    const struct {
        const char *name;
        uint64_t n;
    } errs[] = {{"connect", e->connect},
                {"read", e->read},
                {"write", e->write},
                {"status", e->status},
                {"timeout", e->timeout}};
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        lua_pushnumber(L, (lua_Number)errs[i].n);
        lua_setfield(L, -2, errs[i].name);
    }
    lua_setfield(L, -2, "errors");
    mf_lua_wrk_push_stats(L, r->latency, 1000);
    mf_lua_wrk_push_stats(L, r->rate, 1);
    fflush(stdout);
    if (mf_lua_wrk_call(L, "done", 3, 0) < 0) {
        snprintf(err, errlen, "done(): %s", lua_tostring(L, -1));
        lua_pop(L, 1);
        return -1;
    }
    fflush(stdout);
    return 0;
}

static void destroy_thread(wrk_thread_t *t)
{
    mf_load_t *load = atomic_load(&t->load);
    if (load)
        mf_load_destroy(load);
    if (t->loop) {
        mf_loop_run(t->loop, MF_RUN_NOWAIT);
        mf_loop_destroy(t->loop);
    }
    if (t->pub.L)
        lua_close(t->pub.L);
    for (size_t k = 0; t->requests && k < t->w->nurls; k++)
        mf_free(t->requests[k]);
    mf_free(t->requests);
    mf_free(t->request_lens);
}

void bench_http_destroy(bench_wrk_t *w)
{
    if (!w)
        return;
    for (unsigned i = 0; i < w->o->threads; i++)
        destroy_thread(&w->threads[i]);
    mf_free(w->threads);
    if (w->main)
        lua_close(w->main);
    for (size_t k = 0; k < w->nurls; k++)
        bench_url_free(&w->urls[k]);
    mf_free(w);
}

int bench_http_run(const bench_opts_t *o, bench_result_t **r, char *err,
                   size_t errlen)
{
    bench_wrk_t *w;
    *r = NULL;
    if (bench_http_prepare(o, &w, err, errlen) < 0)
        return -1;
    int rc = bench_http_execute(w, r, err, errlen);
    if (rc == 0)
        rc = bench_http_done(w, *r, err, errlen);
    bench_http_destroy(w);
    return rc;
}
