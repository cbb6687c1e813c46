/*
 * lua/serve_routes.c — the route cache: a small open hash of URL paths to
 * entries holding the compiled handler (a registry reference), the script
 * file, and whether it must be compiled again.
 */
#include "serve_routes.h"

#include <lauxlib.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <moonflow/common.h>

typedef struct mf_route {
    struct mf_route *next; /* hash chain */
    char *path;            /* URL path, the key */
    char *file;            /* absolute or root-relative script file */
    char *rel;             /* file relative to the root ("" if outside) */
    bool fixed;            /* an explicit route from the config */
    bool stale;            /* compile again before the next use */
    int ref;               /* the handler, LUA_NOREF if none yet */
} mf_route_t;

#define MF_ROUTES_BUCKETS 256

struct mf_serve_routes {
    mf_lua_host_t *host;
    char *root;
    mf_route_t *buckets[MF_ROUTES_BUCKETS];
};

static unsigned mf__route_hash(const char *s, size_t n)
{
    unsigned h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h & (MF_ROUTES_BUCKETS - 1);
}

static mf_route_t *mf__route_find(mf_serve_routes_t *r, const char *path,
                                  size_t len)
{
    mf_route_t *e = r->buckets[mf__route_hash(path, len)];
    while (e && !(strlen(e->path) == len && memcmp(e->path, path, len) == 0))
        e = e->next;
    return e;
}

static mf_route_t *mf__route_add(mf_serve_routes_t *r, const char *path,
                                 size_t len, const char *file,
                                 const char *rel)
{
    mf_route_t *e = mf_xcalloc(1, sizeof(*e));
    e->path = strndup(path, len);
    e->file = strdup(file);
    e->rel = strdup(rel);
    e->ref = LUA_NOREF;
    e->stale = true;
    unsigned h = mf__route_hash(path, len);
    e->next = r->buckets[h];
    r->buckets[h] = e;
    return e;
}

/* Only plain segments reach the file system: no "..", no hidden files. */
static bool mf__route_path_ok(const char *p, size_t len)
{
    if (len == 0 || p[0] != '/' || len > 1024)
        return false;
    for (size_t i = 1; i < len; i++) {
        char c = p[i];
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                     (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                     c == '~' || c == '.';
        if (c == '/') {
            if (p[i - 1] == '/')
                return false;
        } else if (!plain || (c == '.' && p[i - 1] == '/')) {
            return false;
        }
    }
    return true;
}

/* ROOT/rel is a regular file; abs gets the path. */
static bool mf__route_try(const mf_serve_routes_t *r, const char *rel,
                          char *abs, size_t size)
{
    struct stat st;
    int n = snprintf(abs, size, "%s/%s", r->root, rel);
    return n > 0 && (size_t)n < size && stat(abs, &st) == 0 &&
           S_ISREG(st.st_mode);
}

/* Finds ROOT/path.lua or ROOT/path/index.lua; fills abs and rel. */
static bool mf__route_file(mf_serve_routes_t *r, const char *path, size_t len,
                           char *abs, size_t size, char *rel, size_t rsize)
{
    size_t plen = path[len - 1] == '/' ? len - 1 : len; /* "/a/" → "/a" */
    int n;
    if (path[len - 1] != '/') {
        n = snprintf(rel, rsize, "%.*s.lua", (int)plen - 1, path + 1);
        if (n > 0 && (size_t)n < rsize && mf__route_try(r, rel, abs, size))
            return true;
    }
    n = snprintf(rel, rsize, "%.*s%sindex.lua", (int)(plen ? plen - 1 : 0),
                 path + 1, plen > 1 ? "/" : "");
    return n > 0 && (size_t)n < rsize && mf__route_try(r, rel, abs, size);
}

/* Compiles and runs the script; on success the returned function replaces
 * the entry's handler. On failure the old handler (if any) stays. */
static void mf__route_load(mf_serve_routes_t *r, mf_route_t *e, lua_State *L)
{
    e->stale = false;
    if (luaL_loadfile(L, e->file) != 0 || lua_pcall(L, 0, 1, 0) != 0) {
        mf_lua_host_log(r->host, "moonflow: %s: %s%s", e->path,
                        lua_tostring(L, -1),
                        e->ref != LUA_NOREF ? " (the previous version "
                                              "keeps serving)"
                                            : "");
        lua_pop(L, 1);
        return;
    }
    if (!lua_isfunction(L, -1)) {
        mf_lua_host_log(r->host,
                        "moonflow: %s: the script must return a function "
                        "(got %s)%s",
                        e->file, luaL_typename(L, -1),
                        e->ref != LUA_NOREF ? "; the previous version keeps "
                                              "serving"
                                            : "");
        lua_pop(L, 1);
        return;
    }
    mf_lua_unref(r->host, e->ref);
    e->ref = mf_lua_ref(r->host, L); /* pops the function */
}

int mf_serve_routes_push(mf_serve_routes_t *r, lua_State *L, const char *path,
                         size_t len)
{
    mf_route_t *e = mf__route_find(r, path, len);
    if (!e) {
        char abs[PATH_MAX], rel[PATH_MAX];
        if (!mf__route_path_ok(path, len) ||
            !mf__route_file(r, path, len, abs, sizeof abs, rel, sizeof rel))
            return MF_SERVE_NOT_FOUND; /* not cached: files may appear */
        e = mf__route_add(r, path, len, abs, rel);
    }
    if (e->stale) {
        /* The main state compiles: the script's top level cannot yield. */
        mf__route_load(r, e, mf_lua_host_state(r->host));
    }
    if (e->ref == LUA_NOREF)
        return MF_SERVE_BROKEN;
    lua_rawgeti(L, LUA_REGISTRYINDEX, e->ref);
    return MF_SERVE_FOUND;
}

static void mf__route_drop(mf_serve_routes_t *r, mf_route_t **slot)
{
    mf_route_t *e = *slot;
    *slot = e->next;
    mf_lua_unref(r->host, e->ref);
    free(e->path);
    free(e->file);
    free(e->rel);
    mf_free(e);
}

/* A changed or removed file. A route whose file is gone is dropped (a 404
 * from now on, unless another file takes the path at the next lookup); one
 * whose file changed is compiled again at its next request. */
void mf_serve_routes_changed(mf_serve_routes_t *r, const char *file)
{
    for (int b = 0; b < MF_ROUTES_BUCKETS; b++) {
        mf_route_t **slot = &r->buckets[b];
        while (*slot) {
            mf_route_t *e = *slot;
            struct stat st;
            if (strcmp(e->rel, file) != 0) {
                slot = &e->next;
                continue;
            }
            if (!e->fixed && stat(e->file, &st) != 0) {
                mf__route_drop(r, slot);
                continue;
            }
            e->stale = true;
            slot = &e->next;
        }
    }
}

void mf_serve_routes_invalidate_all(mf_serve_routes_t *r)
{
    for (int b = 0; b < MF_ROUTES_BUCKETS; b++)
        for (mf_route_t *e = r->buckets[b]; e; e = e->next)
            e->stale = true;
}

mf_serve_routes_t *mf_serve_routes_create(mf_lua_host_t *host,
                                          const char *root,
                                          const mf_serve_route_spec_t *routes,
                                          size_t nroutes)
{
    mf_serve_routes_t *r = mf_xcalloc(1, sizeof(*r));
    r->host = host;
    r->root = strdup(root);
    for (size_t i = 0; i < nroutes; i++) {
        char abs[PATH_MAX];
        const char *f = routes[i].file;
        if (f[0] == '/')
            snprintf(abs, sizeof abs, "%s", f);
        else
            snprintf(abs, sizeof abs, "%s/%s", root, f);
        mf_route_t *e = mf__route_add(r, routes[i].path,
                                      strlen(routes[i].path), abs,
                                      f[0] == '/' ? "" : f);
        e->fixed = true;
    }
    return r;
}

void mf_serve_routes_destroy(mf_serve_routes_t *r)
{
    if (!r)
        return;
    for (int b = 0; b < MF_ROUTES_BUCKETS; b++)
        while (r->buckets[b])
            mf__route_drop(r, &r->buckets[b]);
    free(r->root);
    mf_free(r);
}
