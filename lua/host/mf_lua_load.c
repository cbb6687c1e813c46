/*
 * lua/host/mf_lua_load.c — every load of user code in a watched host goes
 * through here, so that compiled loops can be stopped: the source gets
 * its loop checks (mf_lua_instrument.h) and the chunk is bound to the
 * host's stop word, scratch word and halt function (mf_lua_watchdog.c).
 *
 * Routed here: mf_lua_load_buffer / mf_lua_load_file (moonflow/lua_host.h:
 * serve's handlers, modules and init scripts, `moonflow run`'s script),
 * and in Lua `load`, `loadstring`, `loadfile`, `dofile` and the Lua file
 * searcher of `require` (package.loaders[2]), replaced in watched hosts.
 *
 * What cannot be checked runs with the JIT off (jit.off(fn, true)), so
 * that the watchdog's hook still stops it: bytecode (string.dump's
 * output; the checks a dumped function carries are bound again), and a chunk whose checked text does not load when its own text
 * does (past LuaJIT's 120 upvalues a function, say; logged).
 * An unwatched host loads as luaL_loadbuffer does.
 *
 * Owns: the registry entry of the check's three values (set once at
 * install). moonflow's embedded modules are loaded without checks (they
 * have no unbounded loop).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <luajit.h>

#include "mf_lua_instrument.h"
#include "mf_lua_int.h"

/* The registry key of {stop word, scratch word, halt} (cdata, cdata, C
 * function) in a watched host; absent: no checks. */
static const char mf_lua__check_key;

/* Pushes the table of the check's values, or nil. */
static void mf_lua__push_check(lua_State *L)
{
    lua_pushlightuserdata(L, (void *)&mf_lua__check_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
}

/* jit.off(fn, true) for the function on top: the hook reaches all of it. */
static void mf_lua__jit_off(lua_State *L)
{
    luaJIT_setmode(L, -1, LUAJIT_MODE_ALLFUNC | LUAJIT_MODE_OFF);
}

/* The checked chunk's outer function on top becomes the chunk: called
 * with the check's values (at index check), it returns the inner one. */
static int mf_lua__bind(lua_State *L, int check)
{
    for (int i = 1; i <= 3; i++)
        lua_rawgeti(L, check, i);
    if (lua_pcall(L, 3, 1, 0) != 0)
        return LUA_ERRMEM; /* only an allocation can fail there */
    return 0;
}

/* The chunk of text whose checked text did not load: its own, the JIT
 * off, said once in the log (why: the checked text's message). */
static int mf_lua__load_unchecked(lua_State *L, const char *text, size_t len,
                                  const char *name, const char *mode,
                                  const char *why)
{
    int rc = luaL_loadbufferx(L, text, len, name, mode);
    if (rc != 0)
        return rc;
    mf_lua__jit_off(L);
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    if (host && why)
        mf_lua_host_log(host,
                        "moonflow: %s: loaded without loop checks (%s): the "
                        "JIT is off for it, the watchdog's hook still stops it",
                        name, why);
    return 0;
}

/* Bytecode dumped from a checked function (string.dump) names the
 * check's values as upvalues, which a load leaves nil: they are bound to
 * this host's (function on top, the check's table at index check). */
static void mf_lua__bind_dumped(lua_State *L, int check)
{
    static const char *const names[] = {"__mf_w", "__mf_s", "__mf_h"};
    const char *name;
    for (int up = 1; (name = lua_getupvalue(L, -1, up)) != NULL; up++) {
        lua_pop(L, 1);
        for (int i = 0; i < 3; i++) {
            if (strcmp(name, names[i]) != 0)
                continue;
            lua_rawgeti(L, check, i + 1);
            lua_setupvalue(L, -2, up);
        }
    }
}

/* Loads with checks when the host has them (check: the index of their
 * table). */
static int mf_lua__load_checked(lua_State *L, int check, const char *text,
                                size_t len, const char *name, const char *mode)
{
    if (len > 0 && text[0] == LUA_SIGNATURE[0]) {
        int rc = mf_lua__load_unchecked(L, text, len, name, mode, NULL);
        if (rc == 0)
            mf_lua__bind_dumped(L, check);
        return rc;
    }
    mf_lua_instrumented_t ins;
    if (mf_lua_instrument(text, len, &ins) < 0)
        return mf_lua__load_unchecked(L, text, len, name, mode,
                                      "nested too deep to rewrite");
    int rc = luaL_loadbufferx(L, ins.text, ins.len, name, mode);
    free(ins.text);
    if (rc == 0)
        return mf_lua__bind(L, check);
    /* its own text may load where the checked one does not (limits) */
    char why[256];
    snprintf(why, sizeof why, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    return mf_lua__load_unchecked(L, text, len, name, mode, why);
}

static int mf_lua__load_mode(lua_State *L, const char *text, size_t len,
                             const char *name, const char *mode)
{
    mf_lua__push_check(L);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return luaL_loadbufferx(L, text, len, name, mode);
    }
    int check = lua_gettop(L);
    int rc = mf_lua__load_checked(L, check, text, len, name, mode);
    lua_remove(L, check);
    return rc;
}

int mf_lua_load_buffer(lua_State *L, const char *text, size_t len,
                       const char *chunkname)
{
    return mf_lua__load_mode(L, text, len, chunkname, NULL);
}

/* Reads path whole into a malloc'd buffer: 0, or -1 (errno set). */
static int mf_lua__read_file(const char *path, char **text, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t cap = 8192, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *grown = realloc(buf, cap * 2);
        if (!grown) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = grown;
        cap *= 2;
    }
    bool bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return -1;
    }
    *text = buf;
    *len = n;
    return 0;
}

static int mf_lua__load_file_mode(lua_State *L, const char *path,
                                  const char *mode)
{
    char *text;
    size_t len;
    /* stdin, or a file that cannot be read: LuaJIT's own load and message */
    if (!path || mf_lua__read_file(path, &text, &len) < 0)
        return luaL_loadfilex(L, path, mode);
    lua_pushfstring(L, "@%s", path);
    int rc = mf_lua__load_mode(L, text, len, lua_tostring(L, -1), mode);
    free(text);
    lua_remove(L, -2); /* the chunk name */
    return rc;
}

int mf_lua_load_file(lua_State *L, const char *path)
{
    return mf_lua__load_file_mode(L, path, NULL);
}

/* ---- the Lua functions of a watched host --------------------------------
 * Their LuaJIT counterparts' arguments, results and messages. */

/* Function or nil + message; env (at index envarg, a table) set on it. */
static int mf_lua__load_result(lua_State *L, int rc, int envarg)
{
    if (rc != 0) {
        lua_pushnil(L);
        lua_insert(L, -2);
        return 2;
    }
    if (envarg > 0 && lua_istable(L, envarg)) {
        lua_pushvalue(L, envarg);
        lua_setfenv(L, -2);
    }
    return 1;
}

/* The pieces a reader function returns, joined (pushed). */
static void mf_lua__read_pieces(lua_State *L, int reader)
{
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (;;) {
        lua_pushvalue(L, reader);
        lua_call(L, 0, 1);
        if (lua_isnil(L, -1) ||
            (lua_type(L, -1) == LUA_TSTRING && lua_objlen(L, -1) == 0)) {
            lua_pop(L, 1);
            break;
        }
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "reader function must return a string");
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
}

/* load(chunk [, chunkname [, mode [, env]]]) */
static int mf_lua__lua_load(lua_State *L)
{
    const char *name = luaL_optstring(L, 2, NULL);
    const char *mode = luaL_optstring(L, 3, NULL);
    int rc;
    if (lua_type(L, 1) == LUA_TSTRING) {
        size_t len;
        const char *s = lua_tolstring(L, 1, &len);
        rc = mf_lua__load_mode(L, s, len, name ? name : s, mode);
    } else {
        luaL_checktype(L, 1, LUA_TFUNCTION);
        mf_lua__read_pieces(L, 1);
        size_t len;
        const char *s = lua_tolstring(L, -1, &len);
        rc = mf_lua__load_mode(L, s, len, name ? name : "=(load)", mode);
        lua_remove(L, -2); /* the joined pieces */
    }
    return mf_lua__load_result(L, rc, 4);
}

/* loadstring(s [, chunkname]) */
static int mf_lua__lua_loadstring(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    const char *name = luaL_optstring(L, 2, s);
    return mf_lua__load_result(L, mf_lua__load_mode(L, s, len, name, NULL), 0);
}

/* loadfile([filename [, mode [, env]]]) */
static int mf_lua__lua_loadfile(lua_State *L)
{
    const char *path = luaL_optstring(L, 1, NULL);
    const char *mode = luaL_optstring(L, 2, NULL);
    return mf_lua__load_result(L, mf_lua__load_file_mode(L, path, mode), 3);
}

/* dofile([filename]): its results; a load error raises. */
static int mf_lua__lua_dofile(lua_State *L)
{
    const char *path = luaL_optstring(L, 1, NULL);
    lua_settop(L, 1);
    if (mf_lua__load_file_mode(L, path, NULL) != 0)
        return lua_error(L);
    lua_call(L, 0, LUA_MULTRET);
    return lua_gettop(L) - 1;
}

/* package.loaders[2]: a Lua file on package.path, loaded with checks. */
static int mf_lua__lua_searcher(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "searchpath");
    lua_pushstring(L, name);
    lua_getfield(L, -3, "path");
    if (lua_type(L, -1) != LUA_TSTRING)
        return luaL_error(L, "'package.path' must be a string");
    lua_call(L, 2, 2);
    if (lua_isnil(L, -2))
        return 1; /* searchpath's list of the files tried */
    lua_pop(L, 1);
    const char *path = lua_tostring(L, -1);
    if (mf_lua_load_file(L, path) != 0)
        return luaL_error(L, "error loading module '%s' from file '%s':\n\t%s",
                          name, path, lua_tostring(L, -1));
    return 1;
}

/* The check's values: the stop and scratch words as int32_t pointers (made
 * by ffi.cast from light userdata), and the halt function. */
static int mf_lua__make_check(lua_State *L, mf_lua_watch_t *w)
{
    static const char make[] =
        "local ffi = require 'ffi'\n"
        "local stop, scratch, halt = ...\n"
        "return { ffi.cast('int32_t *', stop),"
        " ffi.cast('int32_t *', scratch), halt }\n";
    if (luaL_loadbuffer(L, make, sizeof make - 1, "=[moonflow] checks") != 0)
        return -1;
    lua_pushlightuserdata(L, (void *)&w->stop);
    lua_pushlightuserdata(L, (void *)&w->scratch);
    lua_pushcfunction(L, mf_lua_watch_halt);
    if (lua_pcall(L, 3, 1, 0) != 0)
        return -1;
    lua_pushlightuserdata(L, (void *)&mf_lua__check_key);
    lua_insert(L, -2);
    lua_rawset(L, LUA_REGISTRYINDEX);
    return 0;
}

static void mf_lua__replace_loaders(lua_State *L)
{
    static const luaL_Reg globals[] = {{"load", mf_lua__lua_load},
                                       {"loadstring", mf_lua__lua_loadstring},
                                       {"loadfile", mf_lua__lua_loadfile},
                                       {"dofile", mf_lua__lua_dofile}};
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++) {
        lua_pushcfunction(L, globals[i].func);
        lua_setglobal(L, globals[i].name);
    }
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "loaders");
    lua_pushcfunction(L, mf_lua__lua_searcher);
    lua_rawseti(L, -2, 2);
    lua_pop(L, 2);
}

int mf_lua_load_install(mf_lua_host_t *host)
{
    lua_State *L = host->L;
    int top = lua_gettop(L);
    if (mf_lua__make_check(L, host->watch) < 0) {
        mf_lua_host_log(host, "moonflow: loop checks unavailable (%s): the "
                              "JIT is off",
                        lua_tostring(L, -1));
        lua_settop(L, top);
        return -1;
    }
    mf_lua__replace_loaders(L);
    lua_settop(L, top);
    return 0;
}
