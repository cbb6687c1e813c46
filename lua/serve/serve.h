/*
 * lua/serve/serve.h — `moonflow serve`: HTTP handlers in Lua.
 *
 * Each worker loop owns a Lua host, an HTTP server (its own SO_REUSEPORT
 * listener), the route cache (routes.h), an inotify watcher on the
 * scripts folder and an access log buffer. A request runs the route's
 * handler `function(req, resp)` in a new coroutine of that worker's host
 * (handler.c); nothing is shared between workers but the last good source
 * of each script (routes.c).
 *
 * Modules: serve.c (the command: options, workers, signals), config.c (the
 * config file), handler.c (a request served by a Lua handler), routes.c
 * (URL path → handler), log.c (the access log). They call the Lua host
 * (lua/mf_lua_host.h) and the engine's public headers, never the other way.
 *
 * Ownership: mf_serve_main owns the process (workers, signals, exit code);
 * a worker's objects are created and destroyed on its own loop thread.
 */
#ifndef MF_SERVE_H
#define MF_SERVE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <moonflow/fswatch.h>
#include <moonflow/http_server.h>

#include <moonflow/lua_host.h>
#include "routes.h"

#define MF_SERVE_MAX_ROUTES 256
#define MF_SERVE_MAX_SNI 16
#define MF_SERVE_MAX_WORKERS 1024

typedef struct mf_serve_config {
    char *root;                  /* the scripts folder */
    unsigned workers;            /* 0: one per core */
    char *access_log;            /* NULL/"off", "-" (stdout) or a file */
    uint32_t handler_timeout_ms; /* 0: none; over it: 504 */
    mf_http_server_config_t http;
    mf_tls_sni_t sni[MF_SERVE_MAX_SNI];
    mf_serve_route_spec_t routes[MF_SERVE_MAX_ROUTES]; /* explicit ones */
    size_t nroutes;
    const char *file; /* the config file read (messages); NULL: none */
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
    mf_loop_t *loop;
    mf_lua_host_t *host;
    mf_http_server_t *server;
    mf_serve_routes_t *routes;
    mf_fswatch_t *watch;
    int error;              /* start failure (negative MF_E*) */
    const char *error_what; /* and what failed: the listen address ... */
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
} mf_serve_worker_t;

/* handler.c: the HTTP server's handler for a worker (mf_http_handler). */
void mf_serve_handler_on_request(mf_http_exchange_t *ex, void *worker);
/* Registers the request/response metatables in the worker's host. */
void mf_serve_handler_open(mf_serve_worker_t *w);

/* log.c: opens the access log (none when config->access_log is NULL or
 * "off"). Returns 0, or a negative MF_E* code after printing why. */
int mf_serve_log_open(mf_serve_worker_t *w);
void mf_serve_log_request(mf_serve_worker_t *w, const mf_http_request_t *req,
                          const mf_sockaddr_t *peer, int status, size_t bytes,
                          double seconds);
void mf_serve_log_close(mf_serve_worker_t *w);

/* serve.c: the `moonflow serve` command. */
int mf_serve_main(int argc, char **argv);

#endif /* MF_SERVE_H */
