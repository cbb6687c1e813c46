/*
 * moonflow/lua_uri.h — query strings as Lua tables, for C functions of the
 * host: the parser behind mf.uri.decode_args and the HTTP server's
 * req.query.
 *
 * Owns nothing: the table pushed belongs to the state.
 */
#ifndef MOONFLOW_LUA_URI_H
#define MOONFLOW_LUA_URI_H

#include <stdbool.h>
#include <stddef.h>

#include <moonflow/common.h>

MF_EXTERN_C_BEGIN

#include <lua.h>

/* Pushes the table of the query string s[0..n): each key %-decoded ('+'
 * as a space) maps to its decoded value, true for a key without '=', or a
 * list of them when the key repeats; a bad escape is kept as sent. At most
 * max pairs are read (0: all); returns true when some were left out. */
MF_API bool mf_lua_push_args(lua_State *L, const char *s, size_t n, size_t max);

/* t[key] = value, key and value on top of the stack (popped); a key
 * already in t becomes a list of its values, in order (OpenResty's shape
 * for repeated query keys and headers). t: an absolute index. */
MF_API void mf_lua_args_add(lua_State *L, int t);

MF_EXTERN_C_END

#endif
