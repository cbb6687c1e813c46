/*
 * lua/host/mf_lua_stdio.c — whole lines from many threads: print, io.write
 * and file:write with several arguments write them as one piece, and the
 * host's own log lines go out in one write().
 *
 * Why: every worker thread of a server has its own lua_State, but they
 * share the process's stdout and stderr. LuaJIT writes each argument of
 * print or file:write with its own fwrite, and stderr has no buffer, so
 * `io.stderr:write("GET ", path, ": ", err, "\n")` from two workers at
 * once reaches the file as one line's pieces between the other's. One
 * fwrite of the joined text holds the stream's lock for the whole of it:
 * on stderr that is one write(); on a buffered stdout the text lies in the
 * buffer in one piece.
 *
 * The replacements keep the originals' results and errors: an argument
 * that is neither a string nor a number goes to the original as it was
 * given, which raises as before.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mf_lua_int.h"

void mf_lua_write_all(int fd, const char *text, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, text, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return; /* nowhere to say so: the log itself failed */
        text += n;
        len -= (size_t)n;
    }
}

/* Whether the values from index first to the top are all strings or
 * numbers: what write accepts, and lua_tolstring turns into the same
 * text. */
static bool mf_lua__all_text(lua_State *L, int first)
{
    for (int i = first; i <= lua_gettop(L); i++) {
        int t = lua_type(L, i);
        if (t != LUA_TSTRING && t != LUA_TNUMBER)
            return false;
    }
    return true;
}

/* Replaces the values from index first to the top with their
 * concatenation. */
static void mf_lua__join_from(lua_State *L, int first)
{
    int n = lua_gettop(L) - first + 1;
    if (n > 1)
        lua_concat(L, n);
}

/* io.write(...) and file:write(...): the original (upvalue 1) with the
 * arguments joined, from argument `first` on (1 for io.write, 2 after the
 * file). */
static int mf_lua__write_joined(lua_State *L, int first)
{
    if (lua_gettop(L) > first && mf_lua__all_text(L, first))
        mf_lua__join_from(L, first);
    int base = lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, base, LUA_MULTRET);
    return lua_gettop(L);
}

static int mf_lua__io_write(lua_State *L)
{
    return mf_lua__write_joined(L, 1);
}

static int mf_lua__file_write(lua_State *L)
{
    return mf_lua__write_joined(L, 2);
}

/* print(...): each value through tostring, tab-separated, then a newline,
 * as LuaJIT's print writes them, but in one fwrite. */
static int mf_lua__print(lua_State *L)
{
    int n = lua_gettop(L);
    luaL_Buffer b;
    lua_getglobal(L, "tostring");
    luaL_buffinit(L, &b);
    for (int i = 1; i <= n; i++) {
        lua_pushvalue(L, n + 1); /* tostring */
        lua_pushvalue(L, i);
        lua_call(L, 1, 1);
        if (!lua_isstring(L, -1))
            return luaL_error(L, "'tostring' must return a string to 'print'");
        if (i > 1)
            luaL_addchar(&b, '\t');
        luaL_addvalue(&b);
    }
    luaL_addchar(&b, '\n');
    luaL_pushresult(&b);
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    fwrite(s, 1, len, stdout);
    return 0;
}

/* Replaces t[name] (t at index t) with fn, the original its upvalue. */
static void mf_lua__wrap(lua_State *L, int t, const char *name,
                         lua_CFunction fn)
{
    lua_getfield(L, t, name);
    if (!lua_isfunction(L, -1)) {
        lua_pop(L, 1);
        return;
    }
    lua_pushcclosure(L, fn, 1);
    lua_setfield(L, t, name);
}

void mf_lua_stdio_whole(lua_State *L)
{
    lua_pushcfunction(L, mf_lua__print);
    lua_setglobal(L, "print");
    lua_getglobal(L, "io");
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        return;
    }
    int io = lua_gettop(L);
    mf_lua__wrap(L, io, "write", mf_lua__io_write);
    /* The methods every file shares: the __index of stderr's metatable. */
    lua_getfield(L, io, "stderr");
    if (lua_getmetatable(L, -1)) {
        lua_getfield(L, -1, "__index");
        if (lua_istable(L, -1))
            mf_lua__wrap(L, lua_gettop(L), "write", mf_lua__file_write);
        lua_pop(L, 2);
    }
    lua_settop(L, io - 1);
}
