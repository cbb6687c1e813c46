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

#define MF_LUA_UPSTREAM "moonflow.upstream"

typedef struct mf_lua_upstream {
    mf_upstream_t *up;
    mf_lua_host_t *host;
    mf_loop_t *loop;
    lua_State *thread; /* the balancer's */
    int thread_ref, balancer_ref, key_ref;
} mf_lua_upstream_t;

static const char *const mf__policies[] = {"weighted_round_robin",
                                           "random",
                                           "least_conn",
                                           "consistent_hash",
                                           "ewma",
                                           "manual",
                                           NULL};
static const char *const mf__checks[] = {"none",  "tcp",   "http",
                                         "redis", "mysql", NULL};

/* ---- the definition table ------------------------------------------------ */

static uint32_t mf__ms_field(lua_State *L, int t, const char *name,
                             uint32_t def)
{
    lua_getfield(L, t, name);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return def;
    }
    if (lua_type(L, -1) != LUA_TNUMBER || lua_tonumber(L, -1) < 0)
        luaL_error(L, "mf.upstream: %s: a number of seconds >= 0 expected",
                   name);
    double ms = lua_tonumber(L, -1) * 1000.0;
    lua_pop(L, 1);
    return ms > 4e9 ? 4000000000u : (uint32_t)ms;
}

static unsigned mf__uint_field(lua_State *L, int t, const char *name,
                               unsigned def)
{
    lua_getfield(L, t, name);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return def;
    }
    if (lua_type(L, -1) != LUA_TNUMBER || lua_tonumber(L, -1) < 0)
        luaL_error(L, "mf.upstream: %s: a number >= 0 expected", name);
    unsigned v = (unsigned)lua_tonumber(L, -1);
    lua_pop(L, 1);
    return v;
}

static int mf__enum_field(lua_State *L, int t, const char *name,
                          const char *const *names, int def)
{
    lua_getfield(L, t, name);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return def;
    }
    const char *s = lua_tostring(L, -1);
    for (int i = 0; s && names[i]; i++)
        if (strcmp(s, names[i]) == 0) {
            lua_pop(L, 1);
            return i;
        }
    return luaL_error(L,
                      "mf.upstream: %s: '%s' is not one of the known "
                      "values (%s, %s ...)",
                      name, s ? s : luaL_typename(L, -1), names[0], names[1]);
}

static void mf__health(lua_State *L, int t, mf_upstream_health_conf_t *h)
{
    lua_getfield(L, t, "health");
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return;
    }
    luaL_checktype(L, -1, LUA_TTABLE);
    int ht = lua_gettop(L);
    h->type = (mf_upstream_check_t)mf__enum_field(L, ht, "type", mf__checks,
                                                  MF_UPSTREAM_CHECK_TCP);
    h->interval_ms = mf__ms_field(L, ht, "interval", h->interval_ms);
    h->timeout_ms = mf__ms_field(L, ht, "timeout", h->timeout_ms);
    h->rise = mf__uint_field(L, ht, "rise", h->rise);
    h->fall = mf__uint_field(L, ht, "fall", h->fall);
    lua_getfield(L, ht, "path");
    if (lua_isstring(L, -1))
        snprintf(h->path, sizeof h->path, "%s", lua_tostring(L, -1));
    lua_getfield(L, ht, "host");
    if (lua_isstring(L, -1))
        snprintf(h->host, sizeof h->host, "%s", lua_tostring(L, -1));
    lua_getfield(L, ht, "statuses");
    if (lua_istable(L, -1))
        for (int i = 1; i <= MF_UPSTREAM_MAX_STATUSES; i++) {
            lua_rawgeti(L, -1, i);
            if (!lua_isnumber(L, -1)) {
                lua_pop(L, 1);
                break;
            }
            h->statuses[h->nstatuses++] = (int)lua_tointeger(L, -1);
            lua_pop(L, 1);
        }
    lua_settop(L, ht - 1);
}

/* The servers list into out (strings stay on the Lua stack's table). */
static size_t mf__servers(lua_State *L, int t, mf_upstream_server_conf_t *out)
{
    lua_getfield(L, t, "servers");
    if (!lua_istable(L, -1))
        luaL_error(L, "mf.upstream: servers: a list expected");
    int st = lua_gettop(L);
    size_t n = lua_objlen(L, st);
    if (n > MF_UPSTREAM_MAX_SERVERS)
        luaL_error(L, "mf.upstream: servers: at most %d",
                   MF_UPSTREAM_MAX_SERVERS);
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, st, (int)i + 1);
        mf_upstream_server_conf_t *s = &out[i];
        memset(s, 0, sizeof(*s));
        if (lua_type(L, -1) == LUA_TSTRING) {
            s->address = lua_tostring(L, -1);
        } else if (lua_istable(L, -1)) {
            int e = lua_gettop(L);
            lua_rawgeti(L, e, 1);
            s->address = lua_tostring(L, -1);
            lua_pop(L, 1); /* the string stays in the entry */
            s->weight = mf__uint_field(L, e, "weight", 1);
            lua_getfield(L, e, "backup");
            s->backup = lua_toboolean(L, -1);
            lua_pop(L, 1);
        }
        if (!s->address)
            luaL_error(L,
                       "mf.upstream: servers[%d]: \"host:port\" or "
                       "{\"host:port\", weight =, backup =} expected",
                       (int)i + 1);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return n;
}

static void mf__conf(lua_State *L, int t, mf_upstream_conf_t *conf)
{
    static const char *const known[] = {
        "servers",       "policy", "max_fails", "fail_timeout", "tries",
        "tries_timeout", "health", "balancer",  "key",          NULL};
    lua_pushnil(L);
    while (lua_next(L, t)) { /* a misspelt key is refused, naming it */
        lua_pop(L, 1);
        const char *k =
            lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        bool ok = false;
        for (int i = 0; k && known[i]; i++)
            ok = ok || strcmp(k, known[i]) == 0;
        if (!ok)
            luaL_error(L, "mf.upstream: unknown key '%s'",
                       k ? k : luaL_typename(L, -1));
    }
    mf_upstream_conf_init(conf);
    conf->policy = (mf_upstream_policy_t)mf__enum_field(
        L, t, "policy", mf__policies, MF_UPSTREAM_ROUND_ROBIN);
    conf->max_fails = mf__uint_field(L, t, "max_fails", conf->max_fails);
    conf->fail_timeout_ms =
        mf__ms_field(L, t, "fail_timeout", conf->fail_timeout_ms);
    conf->tries = mf__uint_field(L, t, "tries", 0);
    conf->tries_timeout_ms = mf__ms_field(L, t, "tries_timeout", 0);
    mf__health(L, t, &conf->health);
}

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
    mf__conf(L, 2, &conf);
    mf_upstream_server_conf_t servers[MF_UPSTREAM_MAX_SERVERS];
    size_t n = mf__servers(L, 2, servers);
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

/* The protected part of mf_lua_upstream_define_from: name (1), the
 * definition (2). */
static int mf__define_plain(lua_State *L)
{
    const char *name = lua_tostring(L, 1);
    mf_upstream_conf_t conf;
    mf__conf(L, 2, &conf);
    static const char *const hooks[] = {"balancer", "key"};
    for (size_t i = 0; i < 2; i++) {
        lua_getfield(L, 2, hooks[i]);
        if (!lua_isnil(L, -1))
            luaL_error(L,
                       "mf.upstream: %s: a function runs in a worker: set "
                       "it with mf.upstream in init_worker",
                       hooks[i]);
        lua_pop(L, 1);
    }
    mf_upstream_server_conf_t servers[MF_UPSTREAM_MAX_SERVERS];
    size_t n = mf__servers(L, 2, servers);
    char err[256];
    if (mf_upstream_define(name, &conf, servers, n, err, sizeof err) < 0)
        luaL_error(L, "mf.upstream: %s", err);
    return 0;
}

int mf_lua_upstream_define_from(lua_State *L, int idx, const char *name,
                                char *err, size_t cap)
{
    idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
    lua_pushcfunction(L, mf__define_plain);
    lua_pushstring(L, name);
    lua_pushvalue(L, idx);
    if (lua_pcall(L, 2, 0, 0) == 0)
        return 0;
    const char *msg = lua_tostring(L, -1);
    const char *words = msg ? strstr(msg, "mf.upstream: ") : NULL;
    snprintf(err, cap, "%s", words ? words + 13 : msg ? msg : "error");
    lua_pop(L, 1);
    return -1;
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
        s.weight = mf__uint_field(L, 3, "weight", 1);
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
