/*
 * lua/serve/routes.c — the route cache: a small open hash of URL paths to
 * entries holding the compiled handler (a registry reference), the script
 * file, the generation it was compiled in and whether it must be compiled
 * again; beside it a fixed-size cache of paths known to have no script.
 * Which change reloads what is decided here (mf_serve_routes_changed).
 *
 * May call: the Lua host (registry references, log, the JIT flush), site.h
 * (generations: compiling in one), sources.h (reading scripts, last good
 * sources) and the file system (stat). Called by handler.c (lookups) and
 * serve.c (changes reported by the watcher, SIGHUP).
 */
#include "routes.h"

#include <lauxlib.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <luajit.h>

#include <moonflow/common.h>
#include <moonflow/error.h>

#include "site.h"
#include "sources.h"

typedef struct mf_serve_route {
    struct mf_serve_route *next; /* hash chain */
    uint32_t hash;               /* of path */
    size_t path_len;
    const char *path;     /* URL path, the key; the three strings live */
    const char *file;     /* absolute or root-relative script file */
    const char *rel_file; /* file relative to the root ("" if outside) */
    bool fixed;           /* an explicit route from the config */
    bool stale;           /* compile again before the next use */
    uint32_t generation;  /* of the site's code it was compiled in */
    int ref;              /* the handler, LUA_NOREF if none yet */
    /* MF_SERVE_ROUTE_FOUND, or _PHASES when ref is a table of phases */
    mf_serve_route_result_t found;
    uint32_t source_hash; /* of the source the handler came from */
    uint32_t timeout_ms;  /* from the config; 0 for file routes */
    bool stream_body;     /* from the config: body = "stream" */
    char *limit;          /* from the config (mf_serve_route_spec_t) */
    const mf_http_compress_config_t *compress; /* the config's, when own */
    bool own_compress;
    char strings[]; /* path, file and rel_file, each NUL-terminated */
} mf_serve_route_t;

#define MF_ROUTES_BUCKETS 256

/* A path with no script. Slots are indexed by the path's hash
 * (direct-mapped): a new miss replaces whatever had its slot, so a scanner
 * sending random paths only churns the cache. 512 slots of 128 bytes: 64
 * KiB per worker, allocated with the routes. Longer paths are not
 * remembered (looked up on the disk each time). */
#define MF_ROUTES_MISSES 512
#define MF_ROUTES_MISS_PATH 120

typedef struct mf_serve_route_miss {
    uint32_t hash;
    uint32_t len; /* 0: a free slot (a URL path has at least "/") */
    char path[MF_ROUTES_MISS_PATH];
} mf_serve_route_miss_t;

struct mf_serve_routes {
    mf_lua_host_t *host;
    mf_serve_site_t *site; /* the generation routes are compiled in */
    bool cache_misses;
    bool any_compress; /* a route has compression of its own */
    size_t nmisses;    /* slots in use: forgetting an empty cache is free */
    uint64_t reloads, reload_failures; /* scripts loaded again (metrics) */
    mf_serve_route_t *buckets[MF_ROUTES_BUCKETS];
    mf_serve_route_miss_t misses[MF_ROUTES_MISSES];
    char root[]; /* the scripts folder */
};

static uint32_t mf__fnv1a(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static mf_serve_route_t *mf__route_find(mf_serve_routes_t *r, const char *path,
                                        size_t len, uint32_t hash)
{
    mf_serve_route_t *e = r->buckets[hash & (MF_ROUTES_BUCKETS - 1)];
    while (e && !(e->hash == hash && e->path_len == len &&
                  memcmp(e->path, path, len) == 0))
        e = e->next;
    return e;
}

/* Copies s (n bytes) and a NUL to *p; returns the copy. */
static const char *mf__route_copy(char **p, const char *s, size_t n)
{
    char *copy = *p;
    memcpy(copy, s, n);
    copy[n] = '\0';
    *p += n + 1;
    return copy;
}

/* A new entry for the URL path; its script is ROOT/file when relative,
 * file itself otherwise. Small and made once per path: one allocation
 * (mf_xmalloc, as every engine-sized object) holds the entry and its
 * strings. */
static mf_serve_route_t *mf__route_add(mf_serve_routes_t *r, const char *path,
                                       size_t len, const char *file,
                                       bool relative)
{
    size_t root_len = relative ? strlen(r->root) + 1 : 0;
    size_t file_len = strlen(file);
    size_t size =
        len + 1 + root_len + file_len + 1 + (relative ? file_len : 0) + 1;
    mf_serve_route_t *e = mf_xmalloc(sizeof(*e) + size);
    memset(e, 0, sizeof(*e));
    char *p = e->strings;
    e->path = mf__route_copy(&p, path, len);
    e->path_len = len;
    e->hash = mf__fnv1a(path, len);
    e->file = p;
    if (relative) {
        memcpy(p, r->root, root_len - 1);
        p[root_len - 1] = '/';
        p += root_len;
    }
    mf__route_copy(&p, file, file_len);
    e->rel_file = mf__route_copy(&p, file, relative ? file_len : 0);
    e->ref = LUA_NOREF;
    e->stale = true;
    unsigned b = e->hash & (MF_ROUTES_BUCKETS - 1);
    e->next = r->buckets[b];
    r->buckets[b] = e;
    return e;
}

/* The site's lib/ folder holds modules: never a route. */
static bool mf__route_in_lib(const char *p, size_t len)
{
    return len >= 4 && memcmp(p, "/lib", 4) == 0 && (len == 4 || p[4] == '/');
}

/* Only plain segments reach the file system: no "..", no hidden files,
 * nothing private (a segment starting with "_": a helper beside the
 * routes), nothing under lib/. */
static bool mf__route_path_ok(const char *p, size_t len)
{
    if (len == 0 || p[0] != '/' || len > 1024 || mf__route_in_lib(p, len))
        return false;
    for (size_t i = 1; i < len; i++) {
        char c = p[i];
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                     (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                     c == '~' || c == '.';
        bool first = p[i - 1] == '/';
        if (c == '/') {
            if (first)
                return false;
        } else if (!plain || (first && (c == '.' || c == '_'))) {
            return false;
        }
    }
    return true;
}

/* ROOT/rel is a regular file. */
static bool mf__route_try(const mf_serve_routes_t *r, const char *rel)
{
    char abs[PATH_MAX];
    struct stat st;
    int n = snprintf(abs, sizeof abs, "%s/%s", r->root, rel);
    return n > 0 && (size_t)n < sizeof abs && stat(abs, &st) == 0 &&
           S_ISREG(st.st_mode);
}

/* Finds ROOT/path.lua or ROOT/path/index.lua; rel gets the one found. */
static bool mf__route_file(mf_serve_routes_t *r, const char *path, size_t len,
                           char *rel, size_t rsize)
{
    size_t plen = path[len - 1] == '/' ? len - 1 : len; /* "/a/" → "/a" */
    int n;
    if (path[len - 1] != '/') {
        n = snprintf(rel, rsize, "%.*s.lua", (int)plen - 1, path + 1);
        if (n > 0 && (size_t)n < rsize && mf__route_try(r, rel))
            return true;
    }
    n = snprintf(rel, rsize, "%.*s%sindex.lua", (int)(plen ? plen - 1 : 0),
                 path + 1, plen > 1 ? "/" : "");
    return n > 0 && (size_t)n < rsize && mf__route_try(r, rel);
}

/* ---- paths known to have no script ------------------------------------ */

static mf_serve_route_miss_t *mf__miss_slot(mf_serve_routes_t *r, uint32_t hash)
{
    return &r->misses[hash & (MF_ROUTES_MISSES - 1)];
}

static bool mf__miss_known(mf_serve_routes_t *r, const char *path, size_t len,
                           uint32_t hash)
{
    const mf_serve_route_miss_t *m = mf__miss_slot(r, hash);
    return m->len == len && m->hash == hash && memcmp(m->path, path, len) == 0;
}

static void mf__miss_remember(mf_serve_routes_t *r, const char *path,
                              size_t len, uint32_t hash)
{
    if (!r->cache_misses || len > MF_ROUTES_MISS_PATH)
        return;
    mf_serve_route_miss_t *m = mf__miss_slot(r, hash);
    if (!m->len)
        r->nmisses++;
    m->hash = hash;
    m->len = (uint32_t)len;
    memcpy(m->path, path, len);
}

static void mf__misses_forget(mf_serve_routes_t *r)
{
    if (!r->nmisses)
        return;
    memset(r->misses, 0, sizeof r->misses);
    r->nmisses = 0;
}

void mf_serve_routes_cache_misses(mf_serve_routes_t *r, bool on)
{
    r->cache_misses = on;
    if (!on)
        mf__misses_forget(r);
}

/* ---- loading scripts ----------------------------------------------------- */

/* A route's table of phases (at t): content a function; rewrite, access,
 * header_filter, body_filter, log and on_abort functions when given
 * (on_abort may be "stop"); no other key. NULL, or why not (a literal or
 * a string pushed on L). */
static const char *mf__route_check_phases(lua_State *L, int t)
{
    static const char *const names[] = {
        "content",     "rewrite", "access",   "header_filter",
        "body_filter", "log",     "on_abort", NULL};
    lua_getfield(L, t, "content");
    bool content = lua_isfunction(L, -1);
    lua_pop(L, 1);
    if (!content)
        return "a table of phases needs a content function";
    lua_pushnil(L);
    while (lua_next(L, t)) {
        int i = 0;
        const char *key =
            lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
        while (names[i] && strcmp(names[i], key))
            i++;
        bool stop = lua_type(L, -1) == LUA_TSTRING &&
                    !strcmp(lua_tostring(L, -1), "stop");
        if (!names[i]) {
            lua_pushfstring(L,
                            "%s: no such phase (content, rewrite, access, "
                            "header_filter, body_filter, log, on_abort)",
                            *key ? key : luaL_typename(L, -2));
            return lua_tostring(L, -1);
        }
        if (!lua_isfunction(L, -1) && !(stop && !strcmp(key, "on_abort"))) {
            lua_pushfstring(L, "phase %s: a function expected, got %s", key,
                            luaL_typename(L, -1));
            return lua_tostring(L, -1);
        }
        lua_pop(L, 1);
    }
    return NULL;
}

/* Compiles a route script in the site's current generation and runs it;
 * leaves the function it returned on L (the host's state). The main chunk
 * runs as a slice of the host: a script whose top level never ends is
 * stopped at the CPU budget like a handler, and the memory cap holds. */
/* The handler on top of L with the route's limits in front of it
 * (moonflow.limit's route(handler, limit, path)): in its place, a function
 * or a table of phases. */
static const char *mf__route_limit(mf_serve_routes_t *r, lua_State *L,
                                   const mf_serve_route_t *e)
{
    lua_getglobal(L, "require");
    lua_pushliteral(L, "moonflow.limit");
    if (mf_lua_host_pcall(r->host, 1, 1, 0) != 0)
        return lua_tostring(L, -1);
    lua_getfield(L, -1, "route");
    lua_remove(L, -2);
    lua_pushvalue(L, -2);
    lua_pushstring(L, e->limit);
    lua_pushlstring(L, e->path, e->path_len);
    if (mf_lua_host_pcall(r->host, 3, 1, 0) != 0)
        return lua_tostring(L, -1);
    lua_remove(L, -2);
    return NULL;
}

static const char *mf__route_compile(mf_serve_routes_t *r, lua_State *L,
                                     const mf_serve_route_t *e,
                                     const char *text, size_t len)
{
    const char *err = mf_serve_site_load(r->site, L, e->file, text, len);
    if (err)
        return err;
    if (mf_lua_host_pcall(r->host, 0, 1, 0) != 0)
        return lua_tostring(L, -1);
    if (lua_istable(L, -1))
        err = mf__route_check_phases(L, lua_gettop(L));
    else if (!lua_isfunction(L, -1))
        err = "the script must return a function or a table of phases";
    if (!err && e->limit)
        err = mf__route_limit(r, L, e);
    return err;
}

static void mf__route_set(mf_serve_routes_t *r, mf_serve_route_t *e,
                          lua_State *L, const char *text, size_t len)
{
    mf_lua_unref(r->host, e->ref);
    e->found =
        lua_istable(L, -1) ? MF_SERVE_ROUTE_PHASES : MF_SERVE_ROUTE_FOUND;
    e->ref = mf_lua_ref(r->host, L); /* pops the function */
    e->source_hash = mf__fnv1a(text, len);
}

/* The script failed (err): the worker runs the last good source (the
 * newest that compiled, whichever worker saw it), or keeps its own version
 * when that is the one. */
static void mf__route_fall_back(mf_serve_routes_t *r, mf_serve_route_t *e,
                                lua_State *L, const char *err)
{
    char *good;
    size_t len = 0;
    int rc = mf_serve_source_last_good(e->file, &good, &len);
    mf_lua_host_log(r->host, "moonflow: %s: %s%s%s", e->file, err,
                    rc == MF_ENOMEM ? " (out of memory copying the last good "
                                      "version)"
                                    : "",
                    good || e->ref != LUA_NOREF
                        ? " (the previous version keeps serving)"
                        : "");
    lua_settop(L, 0);
    if (good && mf__fnv1a(good, len) != e->source_hash &&
        !mf__route_compile(r, L, e, good, len))
        mf__route_set(r, e, L, good, len);
    lua_settop(L, 0);
    mf_free(good);
}

/* Loads the script in the current generation; on success the function
 * replaces the entry's handler and its source is published; on failure,
 * see mf__route_fall_back. */
static void mf__route_load(mf_serve_routes_t *r, mf_serve_route_t *e,
                           lua_State *L)
{
    char *text, why[128];
    size_t len = 0;
    bool again = e->ref != LUA_NOREF; /* a reload, not the first load */
    e->stale = false;
    e->generation = mf_serve_site_generation(r->site);
    int rc = mf_serve_source_read(e->file, &text, &len);
    const char *err = why;
    if (rc < 0)
        snprintf(why, sizeof why, "cannot read the script (%s)",
                 mf_strerror(rc));
    else
        err = mf__route_compile(r, L, e, text, len);
    if (!err) {
        mf_serve_source_keep(r->host, e->file, text, len);
        mf__route_set(r, e, L, text, len);
    }
    mf_free(text);
    r->reloads += again;
    r->reload_failures += again && err;
    if (err)
        mf__route_fall_back(r, e, L, err);
}

void mf_serve_routes_reloads(const mf_serve_routes_t *r, uint64_t *done,
                             uint64_t *failed)
{
    *done = r->reloads;
    *failed = r->reload_failures;
}

/* A saved file that compiles becomes the last good source at once, so a
 * broken save that follows falls back to it even on a worker that never
 * ran it. Compiling (not running) is cheap and has no side effects. A file
 * that cannot be read is reported by the load that needs it. */
static void mf__route_publish_if_good(mf_serve_routes_t *r, const char *abs)
{
    char *text;
    size_t len;
    if (mf_serve_source_read(abs, &text, &len) < 0)
        return;
    lua_State *L = mf_lua_host_state(r->host);
    char name[PATH_MAX + 1];
    snprintf(name, sizeof name, "@%s", abs);
    if (luaL_loadbuffer(L, text, len, name) == 0)
        mf_serve_source_keep(r->host, abs, text, len);
    lua_settop(L, 0);
    mf_free(text);
}

/* ---- lookups --------------------------------------------------------------
 */

/* The entry for a path not seen yet, or NULL: no script (remembered). */
static mf_serve_route_t *mf__route_discover(mf_serve_routes_t *r,
                                            const char *path, size_t len,
                                            uint32_t hash)
{
    char rel[PATH_MAX];
    if (!mf__route_path_ok(path, len) || mf__miss_known(r, path, len, hash))
        return NULL;
    if (!mf__route_file(r, path, len, rel, sizeof rel)) {
        mf__miss_remember(r, path, len, hash);
        return NULL;
    }
    return mf__route_add(r, path, len, rel, true);
}

mf_serve_route_result_t
mf_serve_routes_find_handler(mf_serve_routes_t *r, const char *path,
                             size_t len, uint32_t *timeout_ms, int *ref)
{
    *timeout_ms = 0;
    uint32_t hash = mf__fnv1a(path, len);
    mf_serve_route_t *e = mf__route_find(r, path, len, hash);
    if (!e && !(e = mf__route_discover(r, path, len, hash)))
        return MF_SERVE_ROUTE_MISSING;
    if (e->stale || e->generation != mf_serve_site_generation(r->site)) {
        /* The main state compiles: the script's top level cannot yield. */
        mf__route_load(r, e, mf_lua_host_state(r->host));
    }
    if (e->ref == LUA_NOREF)
        return MF_SERVE_ROUTE_BROKEN;
    *ref = e->ref;
    *timeout_ms = e->timeout_ms;
    return e->found;
}

mf_serve_route_result_t
mf_serve_routes_push_handler(mf_serve_routes_t *r, lua_State *L,
                             const char *path, size_t len, uint32_t *timeout_ms)
{
    int ref;
    mf_serve_route_result_t rc =
        mf_serve_routes_find_handler(r, path, len, timeout_ms, &ref);
    if (rc == MF_SERVE_ROUTE_FOUND || rc == MF_SERVE_ROUTE_PHASES)
        lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    return rc;
}

bool mf_serve_routes_stream_body(mf_serve_routes_t *r, const char *path,
                                 size_t len)
{
    mf_serve_route_t *e = mf__route_find(r, path, len, mf__fnv1a(path, len));
    return e && e->stream_body;
}

bool mf_serve_routes_compress(mf_serve_routes_t *r, const char *path,
                              size_t len,
                              const mf_http_compress_config_t **config)
{
    if (!r->any_compress)
        return false;
    mf_serve_route_t *e = mf__route_find(r, path, len, mf__fnv1a(path, len));
    if (!e || !e->own_compress)
        return false;
    *config = e->compress;
    return true;
}

/* ---- changes --------------------------------------------------------------
 */

static void mf__route_drop(mf_serve_routes_t *r, mf_serve_route_t **slot)
{
    mf_serve_route_t *e = *slot;
    *slot = e->next;
    mf_lua_unref(r->host, e->ref);
    mf_free(e->limit);
    mf_free(e);
}

/* The route's script is file, or inside the folder file. */
static bool mf__route_under(const mf_serve_route_t *e, const char *file,
                            size_t flen)
{
    return strncmp(e->rel_file, file, flen) == 0 &&
           (e->rel_file[flen] == '\0' || e->rel_file[flen] == '/');
}

/* Replaced code leaves its compiled traces behind: LuaJIT's machine code
 * is handed out from areas that are freed only all at once, by a flush
 * (OpenResty's LuaJIT lets them grow to 40 MiB per state first), so each
 * reload would keep the traces of the version it replaced. Flushing at the
 * reload frees them; hot code is traced again within a few requests. */
static void mf__routes_flush_traces(mf_serve_routes_t *r)
{
    luaJIT_setmode(mf_lua_host_state(r->host), 0,
                   LUAJIT_MODE_ENGINE | LUAJIT_MODE_FLUSH);
}

/* The routes whose script is file or under the folder file: dropped when
 * the file is gone (a 404 from now on, unless another file takes the path
 * at the next lookup), compiled again at their next request otherwise.
 * Returns how many there were. */
static size_t mf__routes_touch(mf_serve_routes_t *r, const char *file)
{
    size_t flen = strlen(file), n = 0;
    for (int b = 0; b < MF_ROUTES_BUCKETS; b++) {
        mf_serve_route_t **slot = &r->buckets[b];
        while (*slot) {
            mf_serve_route_t *e = *slot;
            struct stat st;
            if (!mf__route_under(e, file, flen)) {
                slot = &e->next;
                continue;
            }
            n++;
            if (!e->fixed && stat(e->file, &st) != 0) {
                mf__route_drop(r, slot);
                continue;
            }
            e->stale = true;
            slot = &e->next;
        }
    }
    return n;
}

/* Whether the change to abs (file relative to the root) needs a new
 * generation of the site's code: a module of the current one changed or
 * went; a Lua file that is no route's script changed or came (a new module,
 * or one that now shadows another, or that a failed require looked for);
 * or a folder arrived (with modules in it). A route's own script alone
 * reloads only that route. */
static bool mf__routes_needs_renew(mf_serve_routes_t *r, const char *abs,
                                   bool lua, size_t routes)
{
    struct stat st;
    if (mf_serve_site_has_module(r->site, abs))
        return true;
    if (lua)
        return routes == 0;
    return stat(abs, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A changed or removed file, or a folder that came or went (see
 * routes.h). Any change may give a remembered miss its script (a new
 * file, a new folder): every miss is forgotten. */
void mf_serve_routes_changed(mf_serve_routes_t *r, const char *file)
{
    char abs[PATH_MAX];
    struct stat st;
    mf__misses_forget(r);
    int n = snprintf(abs, sizeof abs, "%s/%s", r->root, file);
    if (n <= 0 || (size_t)n >= sizeof abs)
        return;
    size_t flen = (size_t)n - strlen(r->root) - 1;
    bool lua = flen > 4 && strcmp(file + flen - 4, ".lua") == 0;
    bool gone = stat(abs, &st) != 0;
    if (lua && !gone)
        mf__route_publish_if_good(r, abs);
    if (lua && gone)
        mf_serve_sources_forget(abs); /* no fallback for a removed file */
    size_t routes = mf__routes_touch(r, file);
    bool renew = mf__routes_needs_renew(r, abs, lua, routes);
    if (renew)
        mf_serve_site_renew(r->site);
    if (renew || routes)
        mf__routes_flush_traces(r);
}

void mf_serve_routes_appeared(mf_serve_routes_t *r, const char *file)
{
    (void)file;
    mf__misses_forget(r);
}

/* SIGHUP (or a watcher that lost events): a new generation, so every route
 * and every module is read again from the disk at its next use. */
void mf_serve_routes_invalidate_all(mf_serve_routes_t *r)
{
    mf__misses_forget(r);
    mf_serve_site_renew(r->site);
    mf__routes_flush_traces(r);
}

mf_serve_routes_t *mf_serve_routes_create(mf_lua_host_t *host, const char *root,
                                          const mf_serve_route_spec_t *routes,
                                          size_t nroutes)
{
    size_t root_len = strlen(root) + 1;
    mf_serve_routes_t *r = mf_xcalloc(1, sizeof(*r) + root_len);
    r->host = host;
    r->site = mf_serve_site_create(host, root);
    memcpy(r->root, root, root_len);
    for (size_t i = 0; i < nroutes; i++) {
        const char *f = routes[i].file;
        mf_serve_route_t *e = mf__route_add(
            r, routes[i].path, strlen(routes[i].path), f, f[0] != '/');
        e->fixed = true;
        e->timeout_ms = routes[i].timeout_ms;
        e->stream_body = routes[i].stream_body;
        e->compress = routes[i].compress;
        e->own_compress = routes[i].own_compress;
        r->any_compress |= routes[i].own_compress;
        if (routes[i].limit) {
            size_t n = strlen(routes[i].limit) + 1;
            e->limit = memcpy(mf_xmalloc(n), routes[i].limit, n);
        }
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
    mf_serve_site_destroy(r->site);
    mf_free(r);
}

void mf_serve_routes_forget_sources(void)
{
    mf_serve_sources_forget_all();
}
