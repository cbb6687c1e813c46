/*
 * moonflow/lua_upstream.h — an upstream group's definition (moonflow/
 * upstream.h) read from a Lua table as mf.upstream reads it, for a program
 * that reads groups from its configuration (serve's `upstreams` key) and
 * defines them itself. Any thread; the table's state only.
 */
#ifndef MOONFLOW_LUA_UPSTREAM_H
#define MOONFLOW_LUA_UPSTREAM_H

#include <stddef.h>

#include <moonflow/common.h>
#include <moonflow/upstream.h>

MF_EXTERN_C_BEGIN

#include <lua.h>

/* Reads the table at idx into conf and servers (room for
 * MF_UPSTREAM_MAX_SERVERS; the addresses point into the table's strings:
 * copy them before it goes) and *n, without raising. A balancer or key
 * function is refused (it runs in a worker's state: set it with
 * mf.upstream there). 0, or -1 with the fault in err ("unknown key
 * 'polcy'", "servers[2]: \"host:port\" ... expected"). The servers'
 * addresses are checked when the group is defined. */
MF_API int mf_lua_upstream_read(lua_State *L, int idx, mf_upstream_conf_t *conf,
                                mf_upstream_server_conf_t *servers, size_t *n,
                                char *err, size_t cap);

MF_EXTERN_C_END

#endif /* MOONFLOW_LUA_UPSTREAM_H */
