/*
 * lua/mf_lua_kinds.h — the built-in Lua task kinds, registered on every
 * host at creation. A kind NAME is defined in lua/mf_lua_task_NAME.c as
 * `const mf_lua_kind_t mf_lua_task_NAME_kind`; adding one is that file
 * plus its line here.
 */
#ifndef MF_LUA_KINDS_H
#define MF_LUA_KINDS_H

#include <moonflow/lua_kind.h>

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

#endif /* MF_LUA_KINDS_H */
