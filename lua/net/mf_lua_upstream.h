/*
 * lua/net/mf_lua_upstream.h — what mf_lua_upstream.c takes from
 * mf_lua_upstream_conf.c (the definition table's reader). Internal.
 */
#ifndef MF_LUA_UPSTREAM_H
#define MF_LUA_UPSTREAM_H

#include <stddef.h>

#include <lua.h>
#include <moonflow/upstream.h>

/* Reads the definition table at idx into conf and servers (at most
 * MF_UPSTREAM_MAX_SERVERS; addresses point into the table): their count.
 * Raises "mf.upstream: ..." naming a bad key or value. */
size_t mf_lua_upstream_parse(lua_State *L, int idx, mf_upstream_conf_t *conf,
                             mf_upstream_server_conf_t *servers);
/* A non-negative number field of table t (def when absent); raises. */
unsigned mf_lua_upstream_uint_field(lua_State *L, int t, const char *name,
                                    unsigned def);

#endif /* MF_LUA_UPSTREAM_H */
