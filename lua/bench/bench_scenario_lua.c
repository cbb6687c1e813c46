/*
 * lua/bench/bench_scenario_lua.c — the scenario mode's Lua helpers
 * (bench_scenario.h): a flow's description and results read through the
 * Lua API, and a script read (not run) for the functions it defines.
 * Owns nothing; calls only Lua.
 */
#include "bench_scenario.h"

#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

/* Pushes t[key] of the table at idx, or nil when idx is not a table. */
void bench_scen_field(lua_State *L, int idx, const char *key)
{
    if (lua_type(L, idx) == LUA_TTABLE)
        lua_getfield(L, idx, key);
    else
        lua_pushnil(L);
}

/* Pushes the short detail of a task description of kind (its kind's
 * describe: the Redis command, the HTTP method, the MySQL statement, the
 * Kafka topic) or nil. */
void bench_scen_push_detail(lua_State *L, int d, const mf_lua_kind_t *kind)
{
    if (kind && kind->describe)
        kind->describe(L, d);
    else
        lua_pushnil(L);
    if (lua_type(L, -1) != LUA_TSTRING) {
        lua_pop(L, 1);
        lua_pushnil(L);
    }
}

/* "2 redis GET": the index, the kind's name, the detail as its kind labels
 * it (a Redis command, an SQL verb: the first word in capitals) or as is
 * (a method, a topic). */
void bench_scen_step_name(char *name, size_t len, unsigned index,
                          const char *kind_name, const mf_lua_kind_t *kind,
                          const char *detail)
{
    int n = snprintf(name, len, "%u %s", index, kind_name);
    if (!detail || n < 0 || (size_t)n + 2 >= len)
        return;
    size_t at = (size_t)n;
    name[at++] = ' ';
    if (kind && kind->label) {
        kind->label(detail, name + at, len - at);
        return;
    }
    for (; *detail && at + 1 < len; detail++)
        name[at++] = *detail;
    name[at] = '\0';
}

/* Whether the table at idx (a Redis reply) is an error reply {err = }. */
static bool is_error_reply(lua_State *L, int idx)
{
    if (lua_type(L, idx) != LUA_TTABLE)
        return false;
    lua_getfield(L, idx, "err");
    bool err = !lua_isnil(L, -1);
    lua_pop(L, 1);
    return err;
}

/* Whether a task that succeeded carries a failure in its answer: a Redis
 * error reply (value, or one of values), an HTTP status >= 400. */
static bool answer_failed(lua_State *L, int idx)
{
    lua_getfield(L, idx, "value");
    bool failed = is_error_reply(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, idx, "values");
    if (!failed && lua_type(L, -1) == LUA_TTABLE) {
        int vals = lua_gettop(L);
        for (size_t i = 1; !failed && i <= lua_objlen(L, vals); i++) {
            lua_rawgeti(L, vals, (int)i);
            failed = is_error_reply(L, -1);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    lua_getfield(L, idx, "status");
    failed |= lua_type(L, -1) == LUA_TNUMBER && lua_tonumber(L, -1) >= 400;
    lua_pop(L, 1);
    return failed;
}

/* Whether the result at idx (a task's table, or an array of them for a
 * series or parallel) holds no failed task; *timeout when one timed out. */
bool bench_scen_result_ok(lua_State *L, int idx, int depth, bool *timeout)
{
    if (lua_type(L, idx) != LUA_TTABLE || depth > 32)
        return true;
    lua_getfield(L, idx, "state");
    const char *state = lua_tostring(L, -1);
    lua_pop(L, 1); /* the state string stays interned in the result */
    if (state) {
        if (!strcmp(state, "timeout"))
            *timeout = true;
        return !strcmp(state, "success") && !answer_failed(L, idx);
    }
    bool ok = true;
    size_t n = lua_objlen(L, idx);
    for (size_t i = 1; i <= n; i++) {
        lua_rawgeti(L, idx, (int)i);
        ok &= bench_scen_result_ok(L, lua_gettop(L), depth + 1, timeout);
        lua_pop(L, 1);
    }
    return ok;
}

/* Why the result at idx failed, in buf: the first failed task's error
 * string ("connect: connection refused"), a Redis error reply, or an HTTP
 * status; "" when nothing in it failed. */
void bench_scen_result_why(lua_State *L, int idx, int depth, char *buf,
                           size_t n)
{
    buf[0] = '\0';
    if (lua_type(L, idx) != LUA_TTABLE || depth > 32)
        return;
    lua_getfield(L, idx, "state");
    bool leaf = lua_type(L, -1) == LUA_TSTRING;
    lua_pop(L, 1);
    if (!leaf) {
        size_t len = lua_objlen(L, idx);
        for (size_t i = 1; i <= len && !buf[0]; i++) {
            lua_rawgeti(L, idx, (int)i);
            bench_scen_result_why(L, lua_gettop(L), depth + 1, buf, n);
            lua_pop(L, 1);
        }
        return;
    }
    bool timeout = false;
    if (bench_scen_result_ok(L, idx, depth, &timeout))
        return;
    lua_getfield(L, idx, "error");
    lua_getfield(L, idx, "value");
    lua_getfield(L, idx, "status");
    if (lua_type(L, -3) == LUA_TSTRING)
        snprintf(buf, n, "%s", lua_tostring(L, -3));
    else if (lua_type(L, -1) == LUA_TNUMBER)
        snprintf(buf, n, "HTTP status %d", (int)lua_tonumber(L, -1));
    else if (lua_type(L, -2) == LUA_TTABLE) {
        lua_getfield(L, -2, "err");
        snprintf(buf, n, "%s",
                 lua_isstring(L, -1) ? lua_tostring(L, -1) : "an error reply");
        lua_pop(L, 1);
    } else
        snprintf(buf, n, "an error reply");
    lua_pop(L, 3);
}

/* Whether the script defines the global function name: `function name(`
 * or `name = function`, outside comments. Read, not run (running a script
 * has effects). */
bool bench_scen_script_defines(const char *path, const char *name)
{
    static const char probe[] =
        "local path, name = ...\n"
        "local f = io.open(path)\n"
        "if not f then return false end\n"
        "local s = f:read('*a') f:close()\n"
        "s = s:gsub('%-%-%[(=*)%[.-%]%1%]', ''):gsub('%-%-[^\\n]*', '')\n"
        "return s:find('%f[%w_]function%s+' .. name .. '%s*%(') ~= nil\n"
        "  or s:find('%f[%w_.]' .. name .. '%s*=%s*function%f[^%w_]') ~= nil\n";
    lua_State *L = luaL_newstate();
    if (!L)
        return false;
    luaL_openlibs(L);
    bool yes = luaL_loadstring(L, probe) == 0 &&
               (lua_pushstring(L, path), lua_pushstring(L, name),
                lua_pcall(L, 2, 1, 0) == 0) &&
               lua_toboolean(L, -1);
    lua_close(L);
    return yes;
}
