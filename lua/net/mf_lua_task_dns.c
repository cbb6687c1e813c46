/*
 * lua/net/mf_lua_task_dns.c — the "dns" task kind: {kind = "dns", host = name}
 * (mf.task.dns(host [, opts]), mf.dns.resolve(host)) resolves a name with
 * the loop's asynchronous resolver (c-ares, cached: moonflow/dns.h), as a
 * step of a flow. Success: result.addresses = {"127.0.0.1", "::1", ...}
 * (IPv4 first); failure: state "dns error" (the name does not resolve),
 * "timeout" or "canceled".
 */
#include <lauxlib.h>
#include <string.h>

#include <moonflow/dns.h>

#include "host/mf_lua_leaf.h"

static void mf_lua__dns_check(lua_State *L, int idx)
{
    lua_getfield(L, idx, "host");
    size_t len;
    const char *host = lua_tolstring(L, -1, &len);
    if (lua_type(L, -1) != LUA_TSTRING || len == 0 || len > MF_DNS_MAX_HOST ||
        strlen(host) != len)
        luaL_error(L, "dns task: host must be a name of 1 to %d bytes",
                   MF_DNS_MAX_HOST);
    lua_pop(L, 1);
}

static mf_task_t *mf_lua__dns_create(lua_State *L, int idx, void *data,
                                     mf_loop_t *loop, mf_task_cb cb, void *user)
{
    (void)data;
    lua_getfield(L, idx, "host");
    mf_task_t *task =
        mf_task_dns_create(loop, lua_tostring(L, -1), 0, cb, user);
    lua_pop(L, 1);
    return task;
}

static void mf_lua__dns_result(lua_State *L, mf_task_t *task, void *data)
{
    (void)data;
    size_t n = mf_task_dns_count(task);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        char ip[64];
        lua_pushstring(
            L, mf_sockaddr_format_ip(mf_task_dns_addr(task, i), ip, sizeof ip));
        lua_rawseti(L, -2, (int)i + 1);
    }
    lua_setfield(L, -2, "addresses");
}

const mf_lua_kind_t mf_lua_task_dns_kind = {
    .name = "dns",
    .check = mf_lua__dns_check,
    .create = mf_lua__dns_create,
    .result = mf_lua__dns_result,
};
