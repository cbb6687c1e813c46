/*
 * lua/serve/routes.h — URL path → handler function, for `moonflow serve`:
 * file routing under a root directory plus explicit routes from the config,
 * with a per-worker cache of compiled handlers and hot reload.
 *
 * File routing: "/" → ROOT/index.lua, "/api/user" → ROOT/api/user.lua, or
 * ROOT/api/user/index.lua. Paths with "..", hidden segments (".git") or
 * characters outside [A-Za-z0-9._~-] never reach the file system, nor do
 * the places for modules: ROOT/lib/ and any file or folder whose name
 * starts with "_" (ROOT/api/_shared.lua is required as "api._shared", never
 * served).
 *
 * A script is compiled and run once per worker, at the first request that
 * needs it, in the worker's current generation of the site's code (site.h:
 * its globals, require and site modules); it must return the handler
 * function. Reloads are lazy and per worker, never in the middle of a
 * request: requests in flight keep the function they started with (their
 * coroutine references it, and through it its generation's modules).
 * - A route's own script changed (mf_serve_routes_changed, fed by the
 *   worker's inotify watcher): that route is compiled again at its next
 *   request.
 * - Any other Lua file under the root changed, came or went (a module a
 *   route requires, a new module, a folder moved in): a new generation;
 *   every route is compiled again at its next request and requires fresh
 *   modules, so a route and its modules are always one version.
 * - SIGHUP (mf_serve_routes_invalidate_all, on every worker): a new
 *   generation too, so every worker reads every file from the disk again.
 * Each reload also flushes the worker's JIT traces: the machine code of the
 * replaced version is freed with them (it would otherwise stay until
 * LuaJIT's 40 MiB code limit).
 * A script or module that fails to compile or load is logged and the
 * previous version keeps serving — on every worker: the last good source of
 * each file is shared (sources.h), so a worker that never ran the old
 * version still gets it rather than an error.
 *
 * Misses are remembered (when mf_serve_routes_cache_misses is on): a path
 * with no script costs two stat() calls once, then a hash lookup, until the
 * watcher reports any change under the root (or invalidate_all runs); then
 * every path is looked up on the disk again. The miss cache has a fixed
 * size: random paths evict each other, memory never grows.
 *
 * Ownership: the routes object belongs to its worker and owns its entries,
 * their strings, the registry references to the handlers (released with
 * mf_lua_unref) and the site's generations. Threads: the worker's loop
 * thread only.
 */
#ifndef MF_SERVE_ROUTES_H
#define MF_SERVE_ROUTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <moonflow/http_compress.h>
#include <moonflow/lua_host.h>

typedef struct mf_serve_routes mf_serve_routes_t;

/* An explicit route: URL path → script file (relative to the root, or
 * absolute). Copied. */
typedef struct mf_serve_route_spec {
    const char *path;
    const char *file;
    uint32_t timeout_ms; /* the handler's; 0: the server's default */
    bool stream_body;    /* body = "stream": req:socket() reads the body */
    /* limit = {...}: lines "kind\tname=value..." for moonflow.limit's
     * route(), which checks them before the handler; NULL: none */
    const char *limit;
    /* compress = {...} or false: the route's own compression (NULL with
     * own_compress: none), else the server's. Points into the config. */
    const mf_http_compress_config_t *compress;
    bool own_compress;
} mf_serve_route_spec_t;

mf_serve_routes_t *mf_serve_routes_create(mf_lua_host_t *host, const char *root,
                                          const mf_serve_route_spec_t *routes,
                                          size_t nroutes);
void mf_serve_routes_destroy(mf_serve_routes_t *routes);

/* Route scripts this worker loaded again after a change (done) and those
 * of them that failed to load (the previous version kept serving). */
void mf_serve_routes_reloads(const mf_serve_routes_t *routes, uint64_t *done,
                             uint64_t *failed);

/* Remember paths that have no script. Only while a watcher feeds
 * mf_serve_routes_changed: without one, a file created later would stay
 * unknown. Off at creation. */
void mf_serve_routes_cache_misses(mf_serve_routes_t *routes, bool on);

/* Result of a lookup. */
typedef enum mf_serve_route_result {
    MF_SERVE_ROUTE_FOUND = 0,   /* the handler is pushed on L */
    MF_SERVE_ROUTE_MISSING = 1, /* no script for this path: 404 */
    MF_SERVE_ROUTE_BROKEN = 2,  /* the script never loaded: 500 (logged) */
    MF_SERVE_ROUTE_PHASES = 3   /* its table of phases is pushed on L */
} mf_serve_route_result_t;

/* Pushes the handler (or table of phases) for the URL path (without
 * query) onto L, and sets
 * *timeout_ms to the route's handler timeout (0: none of its own). */
mf_serve_route_result_t mf_serve_routes_push_handler(mf_serve_routes_t *routes,
                                                     lua_State *L,
                                                     const char *path,
                                                     size_t len,
                                                     uint32_t *timeout_ms);
/* The same lookup, pushing nothing: sets *ref to the registry reference
 * of the handler (or table of phases) when found, for the caller to push
 * onto the thread that runs it, valid until Lua code runs (a reload lets
 * go of it). */
mf_serve_route_result_t mf_serve_routes_find_handler(mf_serve_routes_t *routes,
                                                     const char *path,
                                                     size_t len,
                                                     uint32_t *timeout_ms,
                                                     int *ref);

/* Whether the explicit route of this URL path streams its body (body =
 * "stream"): asked by the server when a head with a body is parsed. A
 * hash lookup; no file is read. */
bool mf_serve_routes_stream_body(mf_serve_routes_t *routes, const char *path,
                                 size_t len);

/* Whether the explicit route of this URL path has its own compression
 * (compress in its config entry), and if so which (*config; NULL: none).
 * Free when no route has one. */
bool mf_serve_routes_compress(mf_serve_routes_t *routes, const char *path,
                              size_t len,
                              const mf_http_compress_config_t **config);

/* A file under the root changed (relative path as fswatch reports it). */
void mf_serve_routes_changed(mf_serve_routes_t *routes, const char *file);
/* A file appeared that may still be being written (a link is complete at
 * once): only the remembered misses are forgotten; its write, if any, comes
 * as a change. */
void mf_serve_routes_appeared(mf_serve_routes_t *routes, const char *file);
void mf_serve_routes_invalidate_all(mf_serve_routes_t *routes);

/* Frees the last good sources shared by the workers (at exit). */
void mf_serve_routes_forget_sources(void);

#endif /* MF_SERVE_ROUTES_H */
