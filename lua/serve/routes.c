/*
 * lua/serve/routes.c — the route cache: a small open hash of URL paths to
 * entries holding the compiled handler (a registry reference), the script
 * file, and whether it must be compiled again.
 */
#include "routes.h"

#include <lauxlib.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
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
    uint32_t source_hash;  /* of the source the handler came from */
    uint32_t timeout_ms;   /* from the config; 0 for file routes */
} mf_route_t;

#define MF_ROUTES_BUCKETS 256

struct mf_serve_routes {
    mf_lua_host_t *host;
    char *root;
    mf_route_t *buckets[MF_ROUTES_BUCKETS];
};

static uint32_t mf__fnv(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static unsigned mf__route_hash(const char *s, size_t n)
{
    return mf__fnv(s, n) & (MF_ROUTES_BUCKETS - 1);
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
                                 size_t len, const char *file, const char *rel)
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

/* ---- the last good source of each script, shared by the workers --------
 *
 * Each worker compiles scripts in its own state, at its own pace. Without a
 * shared memory of what last compiled, a worker that had not yet run a
 * script when a broken version was saved would have nothing to fall back
 * on. So every successful load publishes its source here, and a failed load
 * on a worker with no version of its own takes the last good one. The lock
 * is taken on loads only, never per request. */

typedef struct mf_good_source {
    struct mf_good_source *next;
    char *file;
    char *text;
    size_t len;
} mf_good_source_t;

static pthread_mutex_t mf__good_lock = PTHREAD_MUTEX_INITIALIZER;
static mf_good_source_t *mf__good;

static void mf__good_publish(const char *file, const char *text, size_t len)
{
    pthread_mutex_lock(&mf__good_lock);
    mf_good_source_t *g = mf__good;
    while (g && strcmp(g->file, file) != 0)
        g = g->next;
    if (!g) {
        g = mf_xcalloc(1, sizeof(*g));
        g->file = strdup(file);
        g->next = mf__good;
        mf__good = g;
    }
    if (g->len != len || memcmp(g->text, text, len) != 0) {
        free(g->text);
        g->text = malloc(len ? len : 1);
        memcpy(g->text, text, len);
        g->len = len;
    }
    pthread_mutex_unlock(&mf__good_lock);
}

/* A copy of the last good source (caller frees), or NULL. */
static char *mf__good_copy(const char *file, size_t *len)
{
    char *copy = NULL;
    pthread_mutex_lock(&mf__good_lock);
    for (mf_good_source_t *g = mf__good; g; g = g->next)
        if (strcmp(g->file, file) == 0) {
            copy = malloc(g->len ? g->len : 1);
            memcpy(copy, g->text, g->len);
            *len = g->len;
            break;
        }
    pthread_mutex_unlock(&mf__good_lock);
    return copy;
}

void mf_serve_routes_forget_sources(void)
{
    pthread_mutex_lock(&mf__good_lock);
    while (mf__good) {
        mf_good_source_t *g = mf__good;
        mf__good = g->next;
        free(g->file);
        free(g->text);
        mf_free(g);
    }
    pthread_mutex_unlock(&mf__good_lock);
}

static char *mf__read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *len = n;
    return buf;
}

/* Compiles and runs a chunk; leaves the function it returned on L. */
static const char *mf__route_compile(lua_State *L, const char *file,
                                     const char *text, size_t len)
{
    char name[PATH_MAX + 1];
    snprintf(name, sizeof name, "@%s", file);
    if (luaL_loadbuffer(L, text, len, name) != 0 || lua_pcall(L, 0, 1, 0) != 0)
        return lua_tostring(L, -1);
    if (!lua_isfunction(L, -1))
        return "the script must return a function";
    return NULL;
}

static void mf__route_set(mf_serve_routes_t *r, mf_route_t *e, lua_State *L,
                          const char *text, size_t len)
{
    mf_lua_unref(r->host, e->ref);
    e->ref = mf_lua_ref(r->host, L); /* pops the function */
    e->source_hash = mf__fnv(text, len);
}

/* Loads the script; on success the function replaces the entry's handler
 * and its source is published. On failure the worker runs the last good
 * source (the newest that compiled, whichever worker saw it), or keeps its
 * own version when that is the one. */
static void mf__route_load(mf_serve_routes_t *r, mf_route_t *e, lua_State *L)
{
    size_t len = 0;
    e->stale = false;
    char *text = mf__read_file(e->file, &len);
    const char *err = text ? mf__route_compile(L, e->file, text, len)
                           : "cannot read the file";
    if (!err) {
        mf__good_publish(e->file, text, len);
        mf__route_set(r, e, L, text, len);
        free(text);
        return;
    }
    free(text);
    char *good = mf__good_copy(e->file, &len);
    mf_lua_host_log(r->host, "moonflow: %s: %s%s", e->file, err,
                    good || e->ref != LUA_NOREF
                        ? " (the previous version keeps serving)"
                        : "");
    lua_settop(L, 0);
    if (good && mf__fnv(good, len) != e->source_hash &&
        !mf__route_compile(L, e->file, good, len))
        mf__route_set(r, e, L, good, len);
    lua_settop(L, 0);
    free(good);
}

/* A saved file that compiles becomes the last good source at once, so a
 * broken save that follows falls back to it even on a worker that never
 * ran it. Compiling (not running) is cheap and has no side effects. */
static void mf__route_publish_if_good(mf_serve_routes_t *r, const char *abs)
{
    size_t len;
    char *text = mf__read_file(abs, &len);
    lua_State *L = mf_lua_host_state(r->host);
    char name[PATH_MAX + 1];
    snprintf(name, sizeof name, "@%s", abs);
    if (text && luaL_loadbuffer(L, text, len, name) == 0)
        mf__good_publish(abs, text, len);
    lua_settop(L, 0);
    free(text);
}

int mf_serve_routes_push(mf_serve_routes_t *r, lua_State *L, const char *path,
                         size_t len, uint32_t *timeout_ms)
{
    *timeout_ms = 0;
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
    *timeout_ms = e->timeout_ms;
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
    size_t flen = strlen(file);
    if (flen > 4 && strcmp(file + flen - 4, ".lua") == 0) {
        char abs[PATH_MAX];
        int n = snprintf(abs, sizeof abs, "%s/%s", r->root, file);
        if (n > 0 && (size_t)n < sizeof abs)
            mf__route_publish_if_good(r, abs);
    }
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

mf_serve_routes_t *mf_serve_routes_create(mf_lua_host_t *host, const char *root,
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
        mf_route_t *e = mf__route_add(r, routes[i].path, strlen(routes[i].path),
                                      abs, f[0] == '/' ? "" : f);
        e->fixed = true;
        e->timeout_ms = routes[i].timeout_ms;
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
