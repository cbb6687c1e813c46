/*
 * static.c — static files under `moonflow serve`: the config's mounts
 * (static = { ["/assets"] = "public/" }) answered before any route, and a
 * handler's file answer, resp:file(path [, opts]). The files themselves
 * are answered by core (moonflow/http_static.h: resolving beneath a root,
 * validators, conditionals, ranges, sendfile); this file maps URLs and
 * Lua arguments onto it and writes the access log line.
 *
 * The worker owns its roots (w->statics, one per mount, opened at its
 * start and closed at its end, on its own thread).
 */
#include <lauxlib.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <moonflow/lua_arg.h>

#include "request.h"

/* Open files each worker keeps per mount (mf_http_static_cache). */
#define MF_SERVE_STATIC_CACHE 256

int mf_serve_static_open(mf_serve_worker_t *w)
{
    const mf_serve_config_t *c = w->config;
    for (size_t i = 0; i < c->nstatics; i++) {
        const char *dir = c->statics[i].dir;
        char path[PATH_MAX];
        if (dir[0] == '/')
            snprintf(path, sizeof path, "%s", dir);
        else
            snprintf(path, sizeof path, "%s/%s", c->root, dir);
        int err = 0;
        w->statics[i] = mf_http_static_open(path, &err);
        if (!w->statics[i]) {
            snprintf(w->init_error, sizeof w->init_error,
                     "static[\"%.200s\"]: %.300s: %s",
                     c->statics[i].prefix[0] ? c->statics[i].prefix : "/", path,
                     mf_strerror(err));
            w->error_what = w->init_error;
            return err;
        }
        mf_http_static_precompressed(w->statics[i], c->static_precompressed);
        err =
            mf_http_static_cache(w->statics[i], w->loop, MF_SERVE_STATIC_CACHE);
        if (err < 0) /* still served, each file opened per request */
            fprintf(stderr,
                    "moonflow serve: static[\"%s\"]: %s: open files not "
                    "kept (the file watcher: %s)\n",
                    c->statics[i].prefix[0] ? c->statics[i].prefix : "/", path,
                    mf_strerror(err));
    }
    return 0;
}

void mf_serve_static_close(mf_serve_worker_t *w)
{
    for (size_t i = 0; i < MF_SERVE_MAX_STATIC; i++) {
        mf_http_static_close(w->statics[i]);
        w->statics[i] = NULL;
    }
}

/* The mount a path is under: its prefix is the path, or the path goes on
 * with "/" after it. -1: none. */
static int mf__static_mount(const mf_serve_config_t *c, const char *path,
                            size_t len)
{
    for (size_t i = 0; i < c->nstatics; i++) {
        size_t plen = strlen(c->statics[i].prefix);
        if (len >= plen && memcmp(path, c->statics[i].prefix, plen) == 0 &&
            (len == plen || path[plen] == '/'))
            return (int)i;
    }
    return -1;
}

/* A mount's answer, logged with the id made for it. */
typedef struct mf_static_log {
    mf_serve_worker_t *w;
    const struct timespec *start;
    const char *id;
} mf_static_log_t;

static void mf__static_logged(mf_http_exchange_t *ex, int status,
                              uint64_t bytes, void *arg)
{
    mf_static_log_t *log = arg;
    mf_serve_exchange_log(log->w, ex, status, (size_t)bytes, log->start, NULL,
                          log->id);
}

bool mf_serve_static_answer(mf_serve_worker_t *w, mf_http_exchange_t *ex,
                            const mf_http_request_t *head,
                            const struct timespec *start)
{
    const mf_serve_config_t *c = w->config;
    int i = mf__static_mount(c, head->path, head->path_len);
    if (i < 0)
        return false;
    char id[MF_SERVE_ID_MAX + 1];
    mf_serve_make_request_id(w, head, id);
    mf_serve_add_request_id(w, ex, id);
    mf_static_log_t log = {w, start, id};
    size_t plen = strlen(c->statics[i].prefix);
    mf_http_static_serve(w->statics[i], ex, head->path + plen,
                         head->path_len - plen, mf__static_logged, &log);
    return true;
}

/* ---- resp:file ------------------------------------------------------------
 */

/* The answer is going: the request is answered, its line logged. */
static void mf__file_logged(mf_http_exchange_t *ex, int status, uint64_t bytes,
                            void *arg)
{
    mf_serve_request_t *request = arg;
    request->ex = NULL;
    request->sent = true;
    if (!request->refused)
        request->status = status;
    request->bytes = (size_t)bytes;
    mf_serve_exchange_log(request->w, ex, status, (size_t)bytes,
                          &request->start, request, NULL);
}

/* opts: { root = "/mount", type = "text/plain" }; a key not known, or of
 * another type, raises. The root is a mount of the config's static
 * table, named by its prefix. */
static const mf_http_static_t *mf__file_opts(lua_State *L, int idx,
                                             mf_serve_request_t *request,
                                             const char **type)
{
    const mf_http_static_t *root = NULL;
    if (lua_isnoneornil(L, idx))
        return NULL;
    if (!lua_istable(L, idx))
        mf_lua_type_error(L, idx, "table");
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const char *key =
            lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
        bool known = !strcmp(key, "root") || !strcmp(key, "type");
        if (!known || lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L,
                       known ? "resp:file: option '%s' must be a string"
                             : "resp:file: unknown option '%s' (root, type)",
                       key);
        lua_pop(L, 1);
    }
    lua_getfield(L, idx, "type");
    *type = lua_tostring(L, -1);
    if (*type && (!**type || strpbrk(*type, "\r\n")))
        luaL_error(L, "resp:file: option 'type' must be a media type");
    lua_getfield(L, idx, "root");
    size_t len;
    const char *prefix = lua_tolstring(L, -1, &len);
    if (prefix) {
        const mf_serve_config_t *c = request->w->config;
        while (len > 1 && prefix[len - 1] == '/')
            len--;
        if (len == 1 && prefix[0] == '/')
            len = 0;
        for (size_t i = 0; i < c->nstatics && !root; i++)
            if (strlen(c->statics[i].prefix) == len &&
                !memcmp(c->statics[i].prefix, prefix, len))
                root = request->w->statics[i];
        if (!root)
            luaL_error(L,
                       "resp:file: root '%s' is not a mount of the "
                       "config's static table",
                       prefix);
    }
    lua_pop(L, 2);
    return root;
}

/* resp:file(path [, opts]): the file as the whole answer (ranges, 304s);
 * returns the status answered. */
int mf_serve_resp_file(lua_State *L)
{
    mf_serve_request_t *request = mf_serve_check_request(L, 1, 1);
    size_t len;
    const char *path = mf_lua_check_lstring(L, 2, &len);
    if (!len || memchr(path, '\0', len))
        return mf_lua_arg_error(L, 2, "a file path expected (no NUL byte)");
    const char *type = NULL;
    const mf_http_static_t *root = mf__file_opts(L, 3, request, &type);
    if (request->sent || request->streaming || request->proxying)
        return luaL_error(L, "the response was already sent");
    if (request->phased)
        return luaL_error(L, "resp:file: not in a route with phases (its "
                             "body filter cannot see a file's bytes)");
    if (!request->ex) {
        request->sent = true;
        lua_pushnil(L);
        lua_pushliteral(L, "closed");
        return 2;
    }
    char full[PATH_MAX];
    const char *file = path;
    if (!root && path[0] != '/') { /* from the scripts folder */
        int n = snprintf(full, sizeof full, "%s/%s", request->w->config->root,
                         path);
        if (n < 0 || (size_t)n >= sizeof full)
            return mf_lua_arg_error(L, 2, "path too long");
        file = full;
    }
    bool has_type;
    if (mf_serve_request_file_head(L, request, &has_type) < 0) {
        mf_http_exchange_t *ex = request->ex;
        mf__file_logged(ex, 500, 0, request);
        mf_http_exchange_abort(ex);
        return 0;
    }
    if (has_type)
        type = ""; /* resp.headers gave it: it wins over opts.type */
    int status = mf_http_static_serve_file(root, request->ex, file, type,
                                           mf__file_logged, request);
    lua_pushinteger(L, status);
    return 1;
}
