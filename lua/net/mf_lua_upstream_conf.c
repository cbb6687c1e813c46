/*
 * lua/net/mf_lua_upstream_conf.c — an upstream group's definition read
 * from a Lua table (the one mf.upstream and serve's `upstreams` take) into
 * moonflow/upstream.h's records: keys checked (an unknown one is refused,
 * naming it), times in seconds, the servers' list. Uses the Lua API and
 * the header's types only, so a config reader links it alone.
 *
 * Owns nothing: the servers' addresses point into the table's strings.
 */
#include <lauxlib.h>
#include <stdio.h>
#include <string.h>

#include <moonflow/lua_upstream.h>

#include "mf_lua_upstream.h"

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

unsigned mf_lua_upstream_uint_field(lua_State *L, int t, const char *name,
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
    h->rise = mf_lua_upstream_uint_field(L, ht, "rise", h->rise);
    h->fall = mf_lua_upstream_uint_field(L, ht, "fall", h->fall);
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
            s->weight = mf_lua_upstream_uint_field(L, e, "weight", 1);
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
    conf->max_fails =
        mf_lua_upstream_uint_field(L, t, "max_fails", conf->max_fails);
    conf->fail_timeout_ms =
        mf__ms_field(L, t, "fail_timeout", conf->fail_timeout_ms);
    conf->tries = mf_lua_upstream_uint_field(L, t, "tries", 0);
    conf->tries_timeout_ms = mf__ms_field(L, t, "tries_timeout", 0);
    mf__health(L, t, &conf->health);
}

size_t mf_lua_upstream_parse(lua_State *L, int idx, mf_upstream_conf_t *conf,
                             mf_upstream_server_conf_t *servers)
{
    mf__conf(L, idx, conf);
    return mf__servers(L, idx, servers);
}

/* The protected part of mf_lua_upstream_read: the table (1), the out
 * records (light userdata 2, 3, 4). */
static int mf__read(lua_State *L)
{
    mf_upstream_conf_t *conf = lua_touserdata(L, 2);
    mf_upstream_server_conf_t *servers = lua_touserdata(L, 3);
    size_t *n = lua_touserdata(L, 4);
    static const char *const hooks[] = {"balancer", "key"};
    for (size_t i = 0; i < 2; i++) {
        lua_getfield(L, 1, hooks[i]);
        if (!lua_isnil(L, -1))
            luaL_error(L,
                       "mf.upstream: %s: a function runs in a worker: set "
                       "it with mf.upstream in init_worker",
                       hooks[i]);
        lua_pop(L, 1);
    }
    *n = mf_lua_upstream_parse(L, 1, conf, servers);
    return 0;
}

int mf_lua_upstream_read(lua_State *L, int idx, mf_upstream_conf_t *conf,
                         mf_upstream_server_conf_t *servers, size_t *n,
                         char *err, size_t cap)
{
    idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
    lua_pushcfunction(L, mf__read);
    lua_pushvalue(L, idx);
    lua_pushlightuserdata(L, conf);
    lua_pushlightuserdata(L, servers);
    lua_pushlightuserdata(L, n);
    if (lua_pcall(L, 4, 0, 0) == 0)
        return 0;
    const char *msg = lua_tostring(L, -1);
    const char *words = msg ? strstr(msg, "mf.upstream: ") : NULL;
    snprintf(err, cap, "%s", words ? words + 13 : msg ? msg : "error");
    lua_pop(L, 1);
    return -1;
}
