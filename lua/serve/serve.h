/*
 * lua/serve/serve.h — `moonflow serve`: HTTP handlers in Lua.
 *
 * Each worker loop owns a Lua host, an HTTP server (its own SO_REUSEPORT
 * listener, opened by the main thread under the address lock: handover.c),
 * the route cache (routes.h), an inotify watcher on the
 * scripts folder and an access log buffer. A request runs the route's
 * handler `function(req, resp)` in a new coroutine of that worker's host
 * (handler.c); nothing is shared between workers but the last good source
 * of each script (routes.c) and the shared dicts of the config (made before
 * the workers start, freed after they stop, never on a reload).
 *
 * Modules: serve.c (the command: options, workers, signals), config.c (the
 * config file), handler.c (a request served by a Lua handler), routes.c
 * (URL path → handler), log.c (the access log), handover.c (the listeners,
 * and a graceful restart by another process). They call the Lua host
 * (moonflow/lua_host.h) and the engine's public headers, never the other way.
 *
 * Ownership: mf_serve_main owns the process (workers, signals, exit code);
 * a worker's objects are created and destroyed on its own loop thread.
 */
#ifndef MF_SERVE_H
#define MF_SERVE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <moonflow/fswatch.h>
#include <moonflow/http_server.h>
#include <moonflow/http_static.h>
#include <moonflow/listen.h>
#include <moonflow/metrics.h>
#include <moonflow/task.h>
#include <moonflow/upstream.h>

#include <moonflow/lua_host.h>
#include <moonflow/lua_shared.h>
#include "routes.h"
#include "serve_main.h"

/* The metatable of a handler's req object: handler.c makes it, capture.c
 * knows a parent request by it. */
#define MF_SERVE_REQUEST_MT "moonflow.request"

#define MF_SERVE_MAX_ROUTES 256
#define MF_SERVE_MAX_SNI 16
#define MF_SERVE_MAX_UPSTREAMS 64
#define MF_SERVE_MAX_STATIC 32 /* static = { [prefix] = dir } mounts */
#define MF_SERVE_MAX_WORKERS 1024
#define MF_SERVE_ID_MAX 128       /* bytes of a request id */
#define MF_SERVE_ID_HEADER_MAX 64 /* bytes of request_id_header's name */

typedef struct mf_serve_config {
    char *root;           /* the scripts folder */
    unsigned workers;     /* 0: one per core */
    char *access_log;     /* NULL/"off", "-" (stdout) or a file */
    bool access_log_json; /* access_log_format = "json" */
    /* request_id_header: the response header that carries the request's
     * id back (default X-Request-Id); NULL ("off"): none. */
    char *request_id_header;
    char *init;                  /* run once, on worker 0, at start; NULL */
    char *init_worker;           /* run on every worker at start; NULL */
    uint32_t handler_timeout_ms; /* 0: none; over it: 504 */
    /* When taken over: how long an idle keep-alive connection may still
     * bring one more request (mf_http_server_drain). */
    uint32_t drain_timeout_ms;
    bool take_over;           /* --takeover: the running server's listeners */
    uint32_t cpu_budget_ms;   /* limits.cpu; 0: none; over it: 500 */
    uint32_t lua_memory_mib;  /* limits.lua_memory; 0: no cap */
    uint32_t stop_timeout_ms; /* timeouts.stop: the grace at SIGTERM */
    bool jit;                 /* jit = false: LuaJIT's compiler off */
    int log_level;            /* mf.log's threshold (MF_LUA_LOG_*; 0: info) */
    mf_http_server_config_t http;
    /* compress = {...}: http.compress points here when given */
    mf_http_compress_config_t compress;
    const char *compress_types[MF_HTTP_COMPRESS_MAX_TYPES];
    /* compress.precompressed: static mounts answer a file's .br or .gz
     * beside it when the client accepts that coding */
    bool static_precompressed;
    mf_tls_sni_t sni[MF_SERVE_MAX_SNI];
    mf_serve_route_spec_t routes[MF_SERVE_MAX_ROUTES]; /* explicit ones */
    size_t nroutes;
    struct mf_serve_shared_spec {
        const char *name; /* the config's copy */
        size_t bytes;
    } shared[MF_LUA_SHARED_MAX]; /* shared = { name = bytes } */
    size_t nshared;
    /* upstreams = { name = {...} }: defined at start (mf__serve_run) */
    struct mf_serve_upstream_spec {
        const char *name;
        mf_upstream_conf_t conf;
        mf_upstream_server_conf_t *servers; /* the config's copies */
        size_t nservers;
    } upstreams[MF_SERVE_MAX_UPSTREAMS];
    size_t nupstreams;
    /* static = { ["/assets"] = "public/" }: URL prefix (no trailing "/";
     * "" for "/") -> directory (relative to root, or absolute), longest
     * prefix first */
    struct mf_serve_static_spec {
        const char *prefix;
        const char *dir;
    } statics[MF_SERVE_MAX_STATIC];
    size_t nstatics;
    char *metrics_path;    /* metrics.path: the page's path; NULL: no page */
    char *metrics_listen;  /* metrics.listen: the page's own address; NULL:
                              the site's */
    char *trace_file;      /* trace.file: OTLP JSON lines; NULL: no tracing */
    char *trace_token;     /* trace.token: X-Moonflow-Trace asks; NULL */
    uint32_t trace_sample; /* trace.sample: one request in N; 0: none */
    const char *file;      /* the config file read (messages); NULL: none */
    struct mf_serve_config_string *strings; /* owned copies, a list */
} mf_serve_config_t;

/* Reads a Lua config file (a chunk returning a table) into config, on top
 * of what is already there. Relative paths are taken from the file's
 * folder. Returns 0, or -1 with a message in err. */
int mf_serve_config_load(mf_serve_config_t *config, const char *file, char *err,
                         size_t errlen);
/* Reads the config table on top of L (what a config chunk returned) into
 * config: every key checked (known, of its type, numbers integers in
 * range) as it is read, raw (no metamethod runs). Relative paths are taken
 * from dir. Returns 0, or -1 with a message naming the key in err. The
 * table stays on L; the config keeps copies of its strings. */
int mf_serve_config_read(mf_serve_config_t *config, lua_State *L,
                         const char *dir, char *err, size_t errlen);
/* Keeps a copy of s for the config's lifetime (never NULL: a config
 * string is small, the allocation aborts on out-of-memory as every
 * engine-sized one). */
char *mf_serve_config_strdup(mf_serve_config_t *config, const char *s);
void mf_serve_config_free(mf_serve_config_t *config);

/* config_check.c: what the settings (the config file and the command line
 * merged) must pass before a worker starts. A listen address the server
 * can use: 0, or -1 with "expected ..., got ..." in why (the caller names
 * the flag or key). */
int mf_serve_check_listen(const char *listen, char *why, size_t whylen);
/* The TLS certificates and keys and the explicit routes' scripts are
 * readable files. Returns 0, or -1 with a message in err naming the config
 * file, the key and the reason. */
int mf_serve_config_check(const mf_serve_config_t *config, char *err,
                          size_t errlen);

typedef struct mf_serve_worker {
    const mf_serve_config_t *config;
    unsigned id, count; /* mf.worker.id (0-based) and .count */
    mf_loop_t *loop;
    mf_lua_host_t *host;
    mf_http_server_t *server;
    mf_serve_routes_t *routes;
    mf_fswatch_t *watch;
    int *listen_fds; /* dups for this worker's server, until it starts */
    unsigned nlisten_fds;
    uint32_t drain_ms;      /* the stop: mf_http_server_drain's idle_ms */
    int error;              /* start failure (negative MF_E*) */
    const char *error_what; /* and what failed: the listen address ... */
    char init_error[600];   /* an init script's error (error_what then) */
    /* access log: lines buffered, written when full or every second */
    int log_fd;
    char *log_buf;
    size_t log_len;
    size_t log_lost; /* lines a write could not store, not reported yet */
    int log_errno;   /* why */
    mf_timer_t log_timer;
    long log_sec;
    char log_time[40];
    /* registry references of the request/response metatables: a rawgeti
     * per request instead of a lookup by name */
    int req_mt_ref;
    int resp_mt_ref;
    /* moonflow.serve's runners of a route with phases (handler.c): its
     * rewrite/access/content, its log, its header and body filters */
    int run_ref, log_ref, header_filter_ref, body_filter_ref;
    /* The phase of Lua code that runs for no request: "init" and
     * "init_worker" while those scripts start, "timer" after. */
    const char *phase_outside;
    /* request ids made here: 16 hex digits of the worker's random prefix
     * (a restart makes new ones), then 16 of the serial */
    uint64_t id_prefix;
    char id_prefix_hex[16]; /* id_prefix written once, as every id starts */
    uint64_t id_serial;
    /* id_serial's 16 hex digits, counted up with it (request.c): a made
     * id's end, with no formatting per request */
    char id_serial_hex[16];
    /* "Name: " of request_id_header, then id_prefix_hex: a made id's header
     * line is this and the serial's digits, with no length to measure per
     * answer (request.c). id_name_len 0: no id header. */
    char id_line_head[MF_SERVE_ID_HEADER_MAX + 2 + 16];
    uint8_t id_name_len;
    mf_metrics_t *metrics;           /* the process's registry; shard id */
    struct mf_serve_metrics *mstate; /* metrics.c; NULL: no page */
    /* the length of the metrics page's path when this server serves it (0:
     * not here): most requests are told apart from it without a call */
    size_t metrics_page_len;
    /* handler.c: the last request record let go, taken by the next request
     * (no trip through the loop's free lists); freed as the worker stops */
    struct mf_serve_request *spare_request;
    struct mf_serve_metrics_listener *mlisten; /* metrics_listen.c */
    int trace_fd;                              /* trace.c: the file; -1: none */
    size_t trace_lost;                         /* traces not written */
    uint64_t trace_count;        /* requests seen, for trace.sample */
    mf_task_observer_t observer; /* observe.c: metrics and traces */
    /* static.c: config->statics' roots, opened at the worker's start */
    mf_http_static_t *statics[MF_SERVE_MAX_STATIC];
} mf_serve_worker_t;

struct mf_serve_request;

/* static.c: opens the worker's static roots (0, or a negative MF_E* code
 * with w->error_what saying which), closes them; answers a request whose
 * path is under a mount (true: answered, logged) before any route. */
int mf_serve_static_open(mf_serve_worker_t *w);
void mf_serve_static_close(mf_serve_worker_t *w);
bool mf_serve_static_answer(mf_serve_worker_t *w, mf_http_exchange_t *ex,
                            const mf_http_request_t *head,
                            const struct timespec *start);
/* handler.c: the access log line and metrics of an exchange about to end
 * (request: a handler's record, or NULL with the answer's id). */
void mf_serve_exchange_log(mf_serve_worker_t *w, mf_http_exchange_t *ex,
                           int status, size_t bytes,
                           const struct timespec *start,
                           struct mf_serve_request *request, const char *id);

/* handler.c: the HTTP server's handler for a worker (mf_http_handler). */
void mf_serve_handler_on_request(mf_http_exchange_t *ex, void *worker);
/* Registers the request/response metatables in the worker's host. */
void mf_serve_handler_open(mf_serve_worker_t *w);
/* resp:send(body)'s plain case, for moonflow.serve's send through the
 * FFI (handler.c): 0 answered, 1 not taken (nothing done). */
int mf_serve_resp_send_ffi(const void *obj, const char *body, size_t len);
/* Frees what the handlers' side keeps between requests (once the host,
 * and with it every request, is gone). */
void mf_serve_handler_close(mf_serve_worker_t *w);
/* downstream.c: the downstream socket's class in the worker's host, and
 * the server's stream_body question (mf_http_server_config_t): whether the
 * request's route reads its body with req:socket() (body = "stream"). */
void mf_serve_downstream_open(mf_serve_worker_t *w);
bool mf_serve_downstream_stream_body(const mf_http_request_t *req,
                                     void *worker);
/* websocket.c: the WebSocket object's class in the worker's host. */
void mf_serve_websocket_open(mf_serve_worker_t *w);
/* A handler's coroutine keeps its req and resp objects in these slots of
 * mf_lua_co_keep (capture.c finds a request's req there). */
#define MF_SERVE_KEEP_REQ 0
#define MF_SERVE_KEEP_RESP 1

/* capture.c: mf.capture and mf.capture_multi in the worker's host. */
void mf_serve_capture_open(mf_serve_worker_t *w);

/* log.c: opens the access log (none when config->access_log is NULL or
 * "off"). Returns 0, or a negative MF_E* code after printing why. */
int mf_serve_log_open(mf_serve_worker_t *w);
/* One access line. req may be NULL or partial (a refused request: see
 * mf_http_reject_cb): what is unknown shows as "-". id: the request's id;
 * NULL: one is made from req (request.c's rule) and a new serial. */
void mf_serve_log_request(mf_serve_worker_t *w, const mf_http_request_t *req,
                          const mf_sockaddr_t *peer, int status, size_t bytes,
                          double seconds, const char *id);

/* request.c: the id of a request that has no record (a 404, a refused
 * one): its valid X-Request-Id, else the worker's next made id. out holds
 * MF_SERVE_ID_MAX + 1 bytes; returns the length. */
size_t mf_serve_make_request_id(mf_serve_worker_t *w,
                                const mf_http_request_t *req, char *out);
/* The request's id back to the client, in the header the config names
 * (request_id_header), unless it names none. The name was checked when
 * the config was read, and an id holds only bytes a field value may. */
void mf_serve_add_request_id(const mf_serve_worker_t *w, mf_http_exchange_t *ex,
                             const char *id);
/* Writes w->id_line_head from the config's request_id_header and
 * w->id_prefix_hex (once, as the worker opens). */
void mf_serve_request_id_line_open(mf_serve_worker_t *w);
/* The HTTP server's on_reject hook (user: the worker): the access line
 * and the metrics of a request refused before any handler ran, with the
 * body bytes of the server's answer. */
void mf_serve_log_reject(mf_http_server_t *srv, int status,
                         const mf_http_request_t *req,
                         const mf_sockaddr_t *peer, size_t body_bytes,
                         void *worker);
void mf_serve_log_close(mf_serve_worker_t *w);
/* One byte of a client's text as JSON writes it into out: itself, or a
 * two-byte escape (\" \\), or \u00XX for control bytes and bytes past
 * ASCII (the line stays valid JSON whatever was sent, as nginx's
 * escape=json keeps it). Returns the bytes written (1, 2 or 6). */
size_t mf_serve_json_byte(unsigned char c, char out[6]);

/* metrics.c: the server's metrics, when the config names a page. Declares
 * the families (0, or a negative MF_E* code after saying why). */
int mf_serve_metrics_open(mf_serve_worker_t *w);
void mf_serve_metrics_close(mf_serve_worker_t *w);
/* One finished request. req may be NULL or partial (refused by the
 * parser); routed: a script ran (its path is the route label). */
void mf_serve_metrics_request(mf_serve_worker_t *w,
                              const mf_http_request_t *req, bool routed,
                              int status, size_t bytes_in, size_t bytes_out,
                              double seconds);
/* The same for an exchange about to end (its body is the bytes in). */
void mf_serve_metrics_exchange(mf_serve_worker_t *w, mf_http_exchange_t *ex,
                               bool routed, int status, size_t bytes_out,
                               double seconds);
/* metrics_listen.c: on worker 0, the page's own address when the config
 * names one (0, or a negative MF_E* code: the address cannot be had), and
 * its stop, which calls done(arg) once the page's server is gone. */
int mf_serve_metrics_listen_open(mf_serve_worker_t *w);
void mf_serve_metrics_listen_stop(mf_serve_worker_t *w, void (*done)(void *),
                                  void *arg);

/* A task ended (the worker's task observer): its count and duration. */
void mf_serve_metrics_task(mf_serve_worker_t *w, mf_task_t *task, uint64_t ns);

/* trace.c: the worker's trace file (opened when the config names one; 0,
 * or a negative MF_E* code) and the spans of traced requests' tasks. */
int mf_serve_trace_open(mf_serve_worker_t *w);
void mf_serve_trace_close(mf_serve_worker_t *w);
void mf_serve_trace_started(mf_task_t *task);
void mf_serve_trace_finished(mf_task_t *task, uint64_t ns);

/* observe.c: the worker's task observer, feeding the metrics and the
 * traces (set when either is on; removed at the worker's stop). */
void mf_serve_observe_open(mf_serve_worker_t *w);
void mf_serve_observe_close(mf_serve_worker_t *w);

/* Whether req asks for the page; then mf_serve_metrics_answer sends it
 * (with its access line and its own count). */
bool mf_serve_metrics_is_page(const mf_serve_worker_t *w,
                              const mf_http_request_t *req);
void mf_serve_metrics_answer(mf_serve_worker_t *w, mf_http_exchange_t *ex,
                             const struct timespec *start);

/* handover.c: the process's listeners and the takeover thread. */
typedef struct mf_serve_handover {
    mf_listen_t *listen; /* the originals; workers get dups */
    pthread_t thread;
    bool thread_started;
    int cancel_fd;  /* eventfd: ends the thread */
    pthread_t main; /* woken with SIGUSR2 once handed over */
    atomic_bool handed_over;
    pid_t to; /* the process that took over */
} mf_serve_handover_t;

/* Opens (or, with c->take_over, takes over) the listeners for nworkers.
 * 0, or -1 after printing why ("127.0.0.1:8080: address already in use"). */
int mf_serve_handover_open(mf_serve_handover_t *h, const mf_serve_config_t *c,
                           unsigned nworkers);
/* Dups of the listeners of one worker (j % nworkers == worker), *n of
 * them; NULL when out of fds. Free with mf_serve_handover_close_fds. */
int *mf_serve_handover_fds(const mf_serve_handover_t *h, unsigned worker,
                           unsigned nworkers, unsigned *n);
void mf_serve_handover_close_fds(int *fds, unsigned n);
/* Every worker serves: confirms a takeover (the old process stops) and
 * starts the thread that answers the next one. Either failure is printed
 * and leaves the process serving (the old one gone, or this one not to be
 * taken over). */
void mf_serve_handover_serving(mf_serve_handover_t *h, const char *address);
/* Another process has taken over (then SIGUSR2 woke the main thread). */
bool mf_serve_handover_done(const mf_serve_handover_t *h);
/* Ends the thread and closes the originals (the workers' dups stay open
 * until their servers stop). */
void mf_serve_handover_close(mf_serve_handover_t *h);

#endif /* MF_SERVE_H */
