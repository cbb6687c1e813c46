/*
 * lua/mf_lua_host.c — the host's state: creation (with the module loaders
 * and the registry of task kinds), logging, counted registry references,
 * shutdown. Coroutines live in mf_lua_co.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <lualib.h>

#include <moonflow/common.h>

#include "mf_lua_leaf.h"
#include "mf_lua_paths.h" /* generated: the system's module folders */

const char mf_lua_host_key;

static void mf_lua__log_stderr(void *ud, const char *msg)
{
    (void)ud;
    fprintf(stderr, "moonflow: %s\n", msg);
}

/* package.path = prefix .. ";" .. package.path (same for cpath). */
static void mf_lua__prepend_path(lua_State *L, const char *field,
                                 const char *prefix)
{
    if (!prefix || !*prefix)
        return;
    lua_getglobal(L, "package");
    lua_pushstring(L, prefix);
    lua_pushliteral(L, ";");
    lua_getfield(L, -3, field);
    lua_concat(L, 3);
    lua_setfield(L, -2, field);
    lua_pop(L, 1);
}

/* package.preload: the C modules and the embedded Lua sources. Fails only
 * if an embedded source does not compile (a defect of the build). */
static int mf_lua__preload(lua_State *L)
{
    static const luaL_Reg c_modules[] = {{"moonflow.core", mf_lua_open_core},
                                         {"moonflow.flow", mf_lua_open_flow},
                                         {"moonflow.timer", mf_lua_open_timer},
                                         {"moonflow.redis", mf_lua_open_redis},
                                         {NULL, NULL}};
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "preload");
    for (const luaL_Reg *m = c_modules; m->name; m++) {
        lua_pushcfunction(L, m->func);
        lua_setfield(L, -2, m->name);
    }
    for (size_t i = 0; i < mf_lua_modules_count; i++) {
        const mf_lua_module_t *m = &mf_lua_modules[i];
        char chunkname[128];
        snprintf(chunkname, sizeof chunkname, "=[moonflow] %s", m->name);
        if (luaL_loadbuffer(L, m->source, m->len, chunkname) != 0) {
            fprintf(stderr, "moonflow: embedded %s: %s\n", m->name,
                    lua_tostring(L, -1));
            return -1;
        }
        lua_setfield(L, -2, m->name);
    }
    lua_pop(L, 2);
    return 0;
}

static void mf_lua__host_ext_dtor(mf_loop_t *loop, void *ext)
{
    (void)loop;
    mf_lua_host_destroy(ext);
}

mf_lua_host_t *mf_lua_host_create(mf_loop_t *loop,
                                  const mf_lua_host_opts_t *opts)
{
    if (mf_loop_ext(loop, MF_LOOP_EXT_LUA))
        return NULL;
    lua_State *L = luaL_newstate();
    if (!L)
        return NULL;
    mf_lua_host_t *host = mf_xcalloc(1, sizeof(*host));
    host->L = L;
    host->loop = loop;
    host->log = opts && opts->log ? opts->log : mf_lua__log_stderr;
    host->log_ud = opts ? opts->log_ud : NULL;
    mf_list_init(&host->coroutines);
    mf_list_init(&host->timers);
    lua_pushlightuserdata(L, (void *)&mf_lua_host_key);
    lua_pushlightuserdata(L, host);
    lua_rawset(L, LUA_REGISTRYINDEX);
    luaL_openlibs(L);
    mf_lua__prepend_path(L, "path",
                         opts && opts->package_path ? opts->package_path
                                                    : MF_LUA_SYSTEM_PATH);
    mf_lua__prepend_path(L, "cpath",
                         opts && opts->package_cpath ? opts->package_cpath
                                                     : MF_LUA_SYSTEM_CPATH);
    if (mf_lua__preload(L) < 0) {
        lua_close(L);
        mf_free(host);
        return NULL;
    }
    mf_lua_kinds_init(host);
    mf_loop_set_ext(loop, MF_LOOP_EXT_LUA, host, mf_lua__host_ext_dtor);
    return host;
}

void mf_lua_host_destroy(mf_lua_host_t *host)
{
    if (!host)
        return;
    while (!mf_list_empty(&host->coroutines))
        mf_lua_co_abort(
            mf_container_of(host->coroutines.next, mf_lua_co_t, link),
            "host shutdown");
    mf_lua_timers_shutdown(host);
    mf_loop_set_ext(host->loop, MF_LOOP_EXT_LUA, NULL, NULL);
    lua_close(host->L);
    mf_free(host);
}

lua_State *mf_lua_host_state(const mf_lua_host_t *host)
{
    return host->L;
}

mf_loop_t *mf_lua_host_loop(const mf_lua_host_t *host)
{
    return host->loop;
}

mf_lua_host_t *mf_lua_host_from_state(lua_State *L)
{
    lua_pushlightuserdata(L, (void *)&mf_lua_host_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
    mf_lua_host_t *host = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return host;
}

mf_lua_host_t *mf_lua_host_of(const mf_loop_t *loop)
{
    return mf_loop_ext(loop, MF_LOOP_EXT_LUA);
}

void mf_lua_host_log(mf_lua_host_t *host, const char *fmt, ...)
{
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    host->log(host->log_ud, msg);
}

void mf_lua_host_counts(const mf_lua_host_t *host, mf_lua_counts_t *out)
{
    *out = host->counts;
}

int mf_lua_ref(mf_lua_host_t *host, lua_State *L)
{
    int ref = luaL_ref(L, LUA_REGISTRYINDEX);
    if (ref != LUA_REFNIL)
        host->counts.refs++;
    return ref;
}

void mf_lua_unref(mf_lua_host_t *host, int ref)
{
    if (ref == LUA_NOREF || ref == LUA_REFNIL)
        return;
    luaL_unref(host->L, LUA_REGISTRYINDEX, ref);
    host->counts.refs--;
}
