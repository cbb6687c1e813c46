/*
 * lua/serve/site.c — generations of the site's code (site.h): each is an
 * environment table (reads fall through to _G), a require closure and its
 * tables of loaded modules and module files, all plain Lua values: an old
 * generation is freed by the collector once no function of it runs.
 *
 * May call: the Lua host (log, registry references), sources.h (reading
 * files, last good sources) and the file system (stat). Called by
 * routes.c.
 */
#include "site.h"

#include <lauxlib.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <moonflow/lua_arg.h>
#include <moonflow/common.h>
#include <moonflow/error.h>

#include "sources.h"

struct mf_serve_site {
    mf_lua_host_t *host;
    uint32_t generation;
    int env_ref;   /* the current generation's globals */
    int files_ref; /* its module files: path → true */
    char root[];
};

/* The require closure's upvalues. */
enum {
    MF__UP_LOADED = 1, /* name → module, or &mf__loading while it runs */
    MF__UP_ENV,        /* the generation's globals: its modules run in it */
    MF__UP_FILES,      /* path → true, every site file it required */
    MF__UP_REQUIRE,    /* the state's require: system modules */
    MF__UP_ROOT        /* the scripts folder (a string) */
};

static const char mf__loading = 0; /* its address marks a module loading */

/* Where a site module can be, in order: the site's lib/ folder first (the
 * place for modules: never a route), then the root. */
static const char *const mf__module_paths[] = {
    "%s/lib/%s.lua", "%s/lib/%s/init.lua", "%s/%s.lua", "%s/%s/init.lua"};

/* ---- finding and loading a site module ---------------------------------- */

/* path gets the site file of module name ("a.b" → ROOT/lib/a/b.lua ...);
 * false when the site has none (a system module, or no such module). */
static bool mf__module_find(const char *root, const char *name, char *path,
                            size_t size)
{
    char rel[PATH_MAX];
    size_t n = strlen(name);
    if (n == 0 || n >= sizeof rel)
        return false;
    for (size_t i = 0; i <= n; i++)
        rel[i] = name[i] == '.' ? '/' : name[i];
    for (size_t i = 0; i < MF_ARRAY_SIZE(mf__module_paths); i++) {
        struct stat st;
        int len = snprintf(path, size, mf__module_paths[i], root, rel);
        if (len > 0 && (size_t)len < size && stat(path, &st) == 0 &&
            S_ISREG(st.st_mode))
            return true;
    }
    return false;
}

/* Compiles text as a chunk of the generation whose globals are at env. */
static const char *mf__chunk_load(lua_State *L, int env, const char *file,
                                  const char *text, size_t len)
{
    char name[PATH_MAX + 1];
    snprintf(name, sizeof name, "@%s", file);
    if (mf_lua_load_buffer(L, text, len, name) != 0)
        return lua_tostring(L, -1);
    lua_pushvalue(L, env);
    lua_setfenv(L, -2);
    return NULL;
}

/* The module's last good source compiled instead of the broken one (whose
 * message is on top of L, and is logged). Leaves the chunk in its place
 * and returns true, or leaves the message and returns false. */
static bool mf__module_fall_back(lua_State *L, int env, const char *path)
{
    char *good;
    size_t len = 0;
    int rc = mf_serve_source_last_good(path, &good, &len);
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    if (rc == MF_ENOMEM)
        mf_lua_host_log(host,
                        "moonflow: %s: out of memory copying the last "
                        "good version",
                        path);
    if (rc < 0)
        return false; /* the caller raises the message */
    bool ok = !mf__chunk_load(L, env, path, good, len);
    mf_free(good);
    if (!ok) {
        lua_pop(L, 1); /* the old source's message: keep the new one */
        return false;
    }
    mf_lua_host_log(host, "moonflow: %s (the previous version runs instead)",
                    lua_tostring(L, -2));
    lua_remove(L, -2);
    return true;
}

/* Pushes the chunk of the module file path, compiled in the generation
 * whose globals are at env; raises when neither its source nor its last
 * good one compiles. A source that compiles becomes the last good one. */
static void mf__module_load(lua_State *L, int env, const char *path)
{
    char *text;
    size_t len = 0;
    int rc = mf_serve_source_read(path, &text, &len);
    if (rc < 0)
        luaL_error(L, "%s: cannot read the module (%s)", path, mf_strerror(rc));
    bool ok = !mf__chunk_load(L, env, path, text, len);
    if (ok)
        mf_serve_source_keep(mf_lua_host_from_state(L), path, text, len);
    mf_free(text);
    if (!ok && !mf__module_fall_back(L, env, path))
        lua_error(L);
}

/* require(name) of a generation: a site module once per generation, any
 * other module from the state's require. */
static int mf__site_require(lua_State *L)
{
    const char *name = mf_lua_check_string(L, 1);
    lua_settop(L, 1);
    lua_getfield(L, lua_upvalueindex(MF__UP_LOADED), name);
    if (lua_touserdata(L, 2) == &mf__loading)
        return luaL_error(L, "loop or previous error loading module '%s'",
                          name);
    if (!lua_isnil(L, 2))
        return 1;
    char path[PATH_MAX];
    if (!mf__module_find(lua_tostring(L, lua_upvalueindex(MF__UP_ROOT)), name,
                         path, sizeof path)) {
        lua_pushvalue(L, lua_upvalueindex(MF__UP_REQUIRE));
        lua_pushvalue(L, 1);
        lua_call(L, 1, 1);
        return 1;
    }
    lua_pushboolean(L, 1); /* a change to it renews the generation */
    lua_setfield(L, lua_upvalueindex(MF__UP_FILES), path);
    mf__module_load(L, lua_upvalueindex(MF__UP_ENV), path);
    lua_pushlightuserdata(L, (void *)&mf__loading);
    lua_setfield(L, lua_upvalueindex(MF__UP_LOADED), name);
    lua_pushvalue(L, 1);
    int rc = lua_pcall(L, 1, 1, 0);
    if (rc == 0 && lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_pushboolean(L, 1); /* as Lua's require: true for no value */
    }
    lua_pushvalue(L, rc == 0 ? -1 : 2); /* the module, or nil: retry later */
    lua_setfield(L, lua_upvalueindex(MF__UP_LOADED), name);
    return rc == 0 ? 1 : lua_error(L);
}

/* ---- generations ------------------------------------------------------- */

void mf_serve_site_renew(mf_serve_site_t *site)
{
    lua_State *L = mf_lua_host_state(site->host);
    lua_newtable(L); /* the globals, reading through to _G */
    int env = lua_gettop(L);
    lua_createtable(L, 0, 1);
    lua_pushvalue(L, LUA_GLOBALSINDEX);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, env);
    lua_newtable(L); /* loaded */
    lua_pushvalue(L, env);
    lua_newtable(L); /* files */
    lua_pushvalue(L, -1);
    lua_insert(L, env + 1); /* kept for files_ref */
    lua_getglobal(L, "require");
    lua_pushstring(L, site->root);
    lua_pushcclosure(L, mf__site_require, 5);
    lua_setfield(L, env, "require");
    mf_lua_unref(site->host, site->files_ref);
    site->files_ref = mf_lua_ref(site->host, L);
    mf_lua_unref(site->host, site->env_ref);
    site->env_ref = mf_lua_ref(site->host, L);
    site->generation++;
}

mf_serve_site_t *mf_serve_site_create(mf_lua_host_t *host, const char *root)
{
    size_t len = strlen(root) + 1;
    mf_serve_site_t *site = mf_xcalloc(1, sizeof(*site) + len);
    site->host = host;
    site->env_ref = site->files_ref = LUA_NOREF;
    memcpy(site->root, root, len);
    mf_serve_site_renew(site);
    return site;
}

void mf_serve_site_destroy(mf_serve_site_t *site)
{
    if (!site)
        return;
    mf_lua_unref(site->host, site->env_ref);
    mf_lua_unref(site->host, site->files_ref);
    mf_free(site);
}

uint32_t mf_serve_site_generation(const mf_serve_site_t *site)
{
    return site->generation;
}

/* key is path, or a file inside the folder path. */
static bool mf__path_at_or_under(const char *key, const char *path, size_t n)
{
    return strncmp(key, path, n) == 0 && (key[n] == '\0' || key[n] == '/');
}

bool mf_serve_site_has_module(mf_serve_site_t *site, const char *path)
{
    lua_State *L = mf_lua_host_state(site->host);
    size_t n = strlen(path);
    bool has = false;
    lua_rawgeti(L, LUA_REGISTRYINDEX, site->files_ref);
    lua_pushnil(L);
    while (!has && lua_next(L, -2)) {
        has = mf__path_at_or_under(lua_tostring(L, -2), path, n);
        lua_pop(L, 1);
    }
    lua_settop(L, lua_gettop(L) - (has ? 2 : 1)); /* lua_next left the key */
    return has;
}

const char *mf_serve_site_load(mf_serve_site_t *site, lua_State *L,
                               const char *file, const char *text, size_t len)
{
    lua_rawgeti(L, LUA_REGISTRYINDEX, site->env_ref);
    const char *err = mf__chunk_load(L, lua_gettop(L), file, text, len);
    lua_remove(L, -2); /* the environment */
    return err;
}
