/*
 * lua/builtin/mf_lua_builtin.c — the binding's roof: what every host is
 * given at creation (lua/host/mf_lua_host.c reads these two tables, and
 * names no module itself): the C modules behind require "moonflow.*"
 * (package.preload) and the built-in Lua task kinds. A new module is its
 * opener's line below; a new kind is one mf_lua_task_NAME.c in its folder
 * (defining `const mf_lua_kind_t mf_lua_task_NAME_kind`) and its line in
 * MF_LUA_BUILTIN_KINDS.
 *
 * Owns: nothing (two constant tables).
 */
#include "engine/mf_lua_flow.h"
#include "host/mf_lua_int.h"
#include "host/mf_lua_leaf.h"
#include "http/mf_lua_http.h"
#include "kafka/mf_lua_kafka.h"
#include "mysql/mf_lua_mysql.h"
#include "net/mf_lua_socket.h"
#include "redis/mf_lua_redis.h"
#include "util/mf_lua_util.h"

const luaL_Reg mf_lua_builtin_modules[] = {
    {"moonflow.core", mf_lua_open_core},
    {"moonflow.flow", mf_lua_open_flow},
    {"moonflow.timer", mf_lua_open_timer},
    {"moonflow.redis", mf_lua_open_redis},
    {"moonflow.mysql", mf_lua_open_mysql},
    {"moonflow.kafka", mf_lua_open_kafka},
    {"moonflow.json", mf_lua_open_json},
    {"moonflow.codec", mf_lua_open_codec},
    {"moonflow.crypto", mf_lua_open_crypto},
    {"moonflow.uri", mf_lua_open_uri},
    {"moonflow.log", mf_lua_open_log},
    {"moonflow.re", mf_lua_open_re},
    {"moonflow.wait", mf_lua_open_wait},
    {"moonflow.cookie", mf_lua_open_cookie},
    {"moonflow.shared", mf_lua_open_shared},
    {"moonflow.metrics", mf_lua_open_metrics},
    {"moonflow.socket", mf_lua_open_socket},
    {"moonflow.upstream", mf_lua_open_upstream},
    {NULL, NULL}};

/* The kinds in the order they are registered. */
#define MF_LUA_BUILTIN_KINDS(X) \
    X(timer)                    \
    X(http)                     \
    X(go)                       \
    X(redis)                    \
    X(mysql)                    \
    X(kafka_produce)            \
    X(lua)                      \
    X(dns)                      \
    /* end of the list */

#define MF_LUA_KIND_DECLARE(name) \
    extern const mf_lua_kind_t mf_lua_task_##name##_kind;
MF_LUA_BUILTIN_KINDS(MF_LUA_KIND_DECLARE)
#undef MF_LUA_KIND_DECLARE

#define MF_LUA_KIND_ADDRESS(name) &mf_lua_task_##name##_kind,
const mf_lua_kind_t *const mf_lua_builtin_kinds[] = {
    MF_LUA_BUILTIN_KINDS(MF_LUA_KIND_ADDRESS) NULL};
#undef MF_LUA_KIND_ADDRESS
