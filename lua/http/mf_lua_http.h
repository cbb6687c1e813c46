/*
 * lua/http/mf_lua_http.h — the openers of the HTTP binding's modules (the
 * "http" task kind is lua/http/mf_lua_task_http.c, found through
 * lua/builtin). Internal to lua/.
 */
#ifndef MF_LUA_HTTP_H
#define MF_LUA_HTTP_H

#include <lua.h>

int mf_lua_open_uri(lua_State *L);    /* moonflow.uri: escape, args */
int mf_lua_open_cookie(lua_State *L); /* moonflow.cookie: parse, format */

#endif /* MF_LUA_HTTP_H */
