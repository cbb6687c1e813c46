/*
 * lua/net/mf_lua_upstream.c — upstream groups in Lua (moonflow/upstream.h),
 * the module moonflow.upstream behind mf.upstream:
 *
 *   local up = mf.upstream("api", { servers = {"127.0.0.1:8081",
 *                {"127.0.0.1:8082", weight = 5}, {"10.0.0.9:80", backup =
 * true}}, policy = "consistent_hash", max_fails = 3, fail_timeout = 10, tries =
 * 2, tries_timeout = 5, health = { type = "http", path = "/health", interval =
 * 2, timeout = 1, rise = 2, fall = 3, statuses = {200} }, balancer =
 * function(ctx) return host, port end }) mf.upstream("api")              -- the
 * group object, or nil up:servers()  up:add(addr [, {weight, backup}])
 * up:remove(addr) up:weight(addr, w)  up:drain(addr [, on])  up:pick([key])
 * up.name
 *
 * Times are seconds (fractions allowed), as in the serve config. A group
 * is the process's: defining it again from every worker with the same
 * table changes nothing. The balancer (and a key function) belong to the
 * defining state's loop: they run there, once per attempt, on a Lua
 * thread of their own, and must not yield.
 *
 * Owns: per state, one userdata per group object (the balancer's record:
 * its thread and function references, cleared from the loop when
 * collected). May call: moonflow/upstream.h, the host, the Lua API.
 */
#include <lauxlib.h>
#include <string.h>

#include <moonflow/error.h>
#include <moonflow/lua_arg.h>
#include <moonflow/lua_host.h>
#include <moonflow/upstream.h>

#include "net/mf_lua_socket.h"
#include <moonflow/lua_upstream.h>

#include "net/mf_lua_upstream.h"

#define MF_LUA_UPSTREAM "moonflow.upstream"

typedef struct mf_lua_upstream {
    mf_upstream_t *up;
    mf_lua_host_t *host;
    mf_loop_t *loop;
    lua_State *thread; /* the balancer's */
    int thread_ref, balancer_ref, key_ref;
} mf_lua_upstream_t;

/* ---- the balancer: a Lua function per attempt -----------------------------
 */

/* Calls the group's key function (if any) on key, then the balancer (if
 * any) with ctx {name, key, attempt}; host, port from it, or the policy's
 * pick over the (new) key when it returns nothing. */
static int mf__balance(void *ud, mf_upstream_try_t *t, const char *key,
                       size_t key_len)
{
    mf_lua_upstream_t *u = ud;
    lua_State *T = u->thread;
    int top = lua_gettop(T);
    if (u->key_ref != LUA_NOREF) {
        lua_rawgeti(T, LUA_REGISTRYINDEX, u->key_ref);
        lua_pushlstring(T, key, key_len);
        if (lua_pcall(T, 1, 1, 0) != 0) {
            mf_lua_host_log(u->host, "upstream '%s': key: %s",
                            mf_upstream_name(t->up), lua_tostring(T, -1));
            lua_settop(T, top);
            return MF_EINVAL;
        }
        if (lua_isstring(T, -1))
            key = lua_tolstring(T, -1, &key_len); /* kept on T's stack */
    }
    int rc = 1;
    if (u->balancer_ref != LUA_NOREF) {
        lua_rawgeti(T, LUA_REGISTRYINDEX, u->balancer_ref);
        lua_createtable(T, 0, 3);
        lua_pushstring(T, mf_upstream_name(t->up));
        lua_setfield(T, -2, "name");
        lua_pushlstring(T, key, key_len);
        lua_setfield(T, -2, "key");
        lua_pushinteger(T, (lua_Integer)t->attempts + 1);
        lua_setfield(T, -2, "attempt");
        if (lua_pcall(T, 1, 2, 0) != 0) {
            mf_lua_host_log(u->host, "upstream '%s': balancer: %s",
                            mf_upstream_name(t->up), lua_tostring(T, -1));
            lua_settop(T, top);
            return MF_EINVAL;
        }
        if (lua_isstring(T, -2) && lua_isnumber(T, -1)) {
            lua_Integer port = lua_tointeger(T, -1);
            rc = port > 0 && port < 65536
                     ? mf_upstream_pick_address(t, lua_tostring(T, -2),
                                                (uint16_t)port)
                     : MF_EINVAL;
        }
    }
    if (rc == 1)
        rc = mf_upstream_pick(t, key, key_len);
    lua_settop(T, top);
    return rc;
}

static void mf__unhook(mf_lua_upstream_t *u)
{
    if (u->loop && u->up)
        mf_upstream_set_balancer(u->loop, u->up, NULL, u);
    u->loop = NULL;
    mf_lua_unref(u->host, u->balancer_ref);
    mf_lua_unref(u->host, u->key_ref);
    mf_lua_unref(u->host, u->thread_ref);
    u->balancer_ref = u->key_ref = u->thread_ref = LUA_NOREF;
}

static int mf__gc(lua_State *L)
{
    mf__unhook(lua_touserdata(L, 1));
    return 0;
}

static int mf__ref_function(lua_State *L, mf_lua_upstream_t *u, int t,
                            const char *name)
{
    lua_getfield(L, t, name);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return LUA_NOREF;
    }
    if (!lua_isfunction(L, -1))
        luaL_error(L, "mf.upstream: %s: a function expected", name);
    return mf_lua_ref(u->host, L);
}

static void mf__hook(lua_State *L, mf_lua_upstream_t *u, int t)
{
    u->balancer_ref = mf__ref_function(L, u, t, "balancer");
    u->key_ref = mf__ref_function(L, u, t, "key");
    if (u->balancer_ref == LUA_NOREF && u->key_ref == LUA_NOREF) {
        mf_upstream_set_balancer(u->loop, u->up, NULL, NULL);
        return;
    }
    u->thread = lua_newthread(L);
    u->thread_ref = mf_lua_ref(u->host, L);
    mf_upstream_set_balancer(u->loop, u->up, mf__balance, u);
}

/* ---- the module ---------------------------------------------------------- */

static mf_lua_upstream_t *mf__push_object(lua_State *L, mf_upstream_t *up)
{
    mf_lua_upstream_t *u = lua_newuserdata(L, sizeof(*u));
    memset(u, 0, sizeof(*u));
    u->up = up;
    u->host = mf_lua_host_from_state(L);
    u->balancer_ref = u->key_ref = u->thread_ref = LUA_NOREF;
    luaL_getmetatable(L, MF_LUA_UPSTREAM);
    lua_setmetatable(L, -2);
    return u;
}

/* mf.upstream(name [, definition]) */
static int mf__upstream(lua_State *L)
{
    const char *name = mf_lua_check_string(L, 1);
    if (lua_isnoneornil(L, 2)) {
        mf_upstream_t *up = mf_upstream_find(name, MF_UPSTREAM_NUL);
        if (!up)
            return 0;
        mf__push_object(L, up);
        return 1;
    }
    mf_lua_check_type(L, 2, LUA_TTABLE);
    mf_upstream_conf_t conf;
    mf_upstream_server_conf_t servers[MF_UPSTREAM_MAX_SERVERS];
    size_t n = mf_lua_upstream_parse(L, 2, &conf, servers);
    char err[256];
    if (mf_upstream_define(name, &conf, servers, n, err, sizeof err) < 0)
        return luaL_error(L, "mf.upstream: '%s': %s", name, err);
    mf_lua_upstream_t *u =
        mf__push_object(L, mf_upstream_find(name, MF_UPSTREAM_NUL));
    u->loop = u->host ? mf_lua_host_loop(u->host) : NULL;
    if (u->loop)
        mf__hook(L, u, 2);
    /* The state keeps the latest definition's object (its balancer lives
     * as long as it does). */
    luaL_getmetatable(L, MF_LUA_UPSTREAM);
    lua_getfield(L, -1, "defined");
    lua_pushvalue(L, -3);
    lua_setfield(L, -2, name);
    lua_pop(L, 2);
    return 1;
}

static mf_lua_upstream_t *mf__check(lua_State *L)
{
    return mf_lua_check_udata(L, 1, MF_LUA_UPSTREAM);
}

static void mf__push_stats(void *ud, const mf_upstream_server_stats_t *st)
{
    lua_State *L = ud;
    lua_createtable(L, 0, 10);
    lua_pushstring(L, st->address);
    lua_setfield(L, -2, "address");
    lua_pushstring(L, st->state);
    lua_setfield(L, -2, "state");
    lua_pushinteger(L, st->weight);
    lua_setfield(L, -2, "weight");
    lua_pushboolean(L, st->backup);
    lua_setfield(L, -2, "backup");
    lua_pushinteger(L, st->fails);
    lua_setfield(L, -2, "fails");
    lua_pushinteger(L, st->active);
    lua_setfield(L, -2, "active");
    lua_pushnumber(L, (lua_Number)st->requests);
    lua_setfield(L, -2, "requests");
    lua_pushnumber(L, (lua_Number)st->failures);
    lua_setfield(L, -2, "failures");
    lua_pushnumber(L, (lua_Number)st->downs);
    lua_setfield(L, -2, "downs");
    lua_pushnumber(L, st->latency_ms);
    lua_setfield(L, -2, "latency_ms");
    lua_rawseti(L, -2, (int)lua_objlen(L, -2) + 1);
}

static int mf__servers_method(lua_State *L)
{
    mf_lua_upstream_t *u = mf__check(L);
    lua_newtable(L);
    mf_upstream_stats(u->up, mf__push_stats, L);
    return 1;
}

/* nil, "why" for a refused change; true otherwise. */
static int mf__changed(lua_State *L, int rc, const char *address)
{
    if (rc == 0) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s",
                    rc == MF_ENOENT   ? "no such server"
                    : rc == MF_EEXIST ? "already a server"
                                      : "refused",
                    address);
    return 2;
}

static int mf__add(lua_State *L)
{
    mf_lua_upstream_t *u = mf__check(L);
    mf_upstream_server_conf_t s = {mf_lua_check_string(L, 2), 1, false};
    if (lua_istable(L, 3)) {
        s.weight = mf_lua_upstream_uint_field(L, 3, "weight", 1);
        lua_getfield(L, 3, "backup");
        s.backup = lua_toboolean(L, -1);
    }
    return mf__changed(L, mf_upstream_add(u->up, &s), s.address);
}

static int mf__remove(lua_State *L)
{
    mf_lua_upstream_t *u = mf__check(L);
    const char *a = mf_lua_check_string(L, 2);
    return mf__changed(L, mf_upstream_remove(u->up, a), a);
}

static int mf__weight(lua_State *L)
{
    mf_lua_upstream_t *u = mf__check(L);
    const char *a = mf_lua_check_string(L, 2);
    lua_Integer w = mf_lua_check_integer(L, 3);
    mf_lua_arg_check(L, w >= 1 && w <= 1000, 3, "1 to 1000 expected");
    return mf__changed(L, mf_upstream_set_weight(u->up, a, (unsigned)w), a);
}

static int mf__drain(lua_State *L)
{
    mf_lua_upstream_t *u = mf__check(L);
    const char *a = mf_lua_check_string(L, 2);
    bool on = lua_isnone(L, 3) || lua_toboolean(L, 3);
    return mf__changed(L, mf_upstream_drain(u->up, a, on), a);
}

/* up:pick([key]): the server a request would get now ("host:port"),
 * counted as one request that succeeded at once; nil, "no live upstream". */
static int mf__pick(lua_State *L)
{
    mf_lua_upstream_t *u = mf__check(L);
    size_t len = 0;
    const char *key = mf_lua_opt_lstring(L, 2, NULL, &len);
    mf_upstream_try_t t;
    mf_upstream_try_init(&t, u->up);
    int rc = u->loop ? mf_upstream_balance(u->loop, &t, key, len)
                     : mf_upstream_pick(&t, key, len);
    if (rc < 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "no live upstream in '%s'", mf_upstream_name(u->up));
        return 2;
    }
    bool v6 = strchr(t.host, ':') != NULL;
    lua_pushfstring(L, "%s%s%s:%d", v6 ? "[" : "", t.host, v6 ? "]" : "",
                    (int)t.port);
    mf_upstream_done(&t, true, 0);
    return 1;
}

static int mf__index(lua_State *L)
{
    mf_lua_upstream_t *u = mf__check(L);
    const char *k = lua_tostring(L, 2);
    if (k && strcmp(k, "name") == 0) {
        lua_pushstring(L, mf_upstream_name(u->up));
        return 1;
    }
    lua_getmetatable(L, 1);
    lua_getfield(L, -1, "methods");
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    return 1;
}

static const luaL_Reg mf__methods[] = {
    {"servers up:servers()", mf__servers_method},
    {"add up:add(address, opts)", mf__add},
    {"remove up:remove(address)", mf__remove},
    {"weight up:weight(address, weight)", mf__weight},
    {"drain up:drain(address, on)", mf__drain},
    {"pick up:pick(key)", mf__pick},
    {NULL, NULL}};

int mf_lua_open_upstream(lua_State *L)
{
    luaL_newmetatable(L, MF_LUA_UPSTREAM);
    lua_newtable(L);
    mf_lua_register(L, mf__methods);
    lua_setfield(L, -2, "methods");
    lua_pushcfunction(L, mf__index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, mf__gc);
    lua_setfield(L, -2, "__gc");
    lua_newtable(L);
    lua_setfield(L, -2, "defined");
    lua_pop(L, 1);
    lua_newtable(L);
    mf_lua_push_named(L, mf__upstream, "mf.upstream(name, definition)");
    lua_setfield(L, -2, "define");
    return 1;
}
