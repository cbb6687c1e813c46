/*
 * moonflow/lua_upstream.h — upstream groups (moonflow/upstream.h) defined
 * from a Lua table, as mf.upstream reads it, for a program that reads them
 * from its configuration (serve's `upstreams` key). Thread-safe (the
 * groups are the process's).
 */
#ifndef MOONFLOW_LUA_UPSTREAM_H
#define MOONFLOW_LUA_UPSTREAM_H

#include <stddef.h>

#include <moonflow/common.h>

MF_EXTERN_C_BEGIN

#include <lua.h>

/* Defines group name from the table at idx (no balancer or key function:
 * those run in a worker's state, set there with mf.upstream). 0, or -1
 * with the fault in err ("unknown key 'polcy'", "server 'x' is not
 * host:port"). */
MF_API int mf_lua_upstream_define_from(lua_State *L, int idx, const char *name,
                                       char *err, size_t cap);

MF_EXTERN_C_END

#endif /* MOONFLOW_LUA_UPSTREAM_H */
