/*
 * moonflow/lua_uri.h — query strings and cookies as Lua tables, for C
 * functions of the host: the parsers behind mf.uri.decode_args and the
 * HTTP server's req.query and req.cookies.
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

/* Adds the cookies of a Cookie header's value s[0..n) to the table at t
 * (absolute index) as name = value; a name already in t keeps its value
 * (RFC 6265 §5.4: the first wins). */
MF_API void mf_lua_cookies_add(lua_State *L, int t, const char *s, size_t n);

/* t[key] = value, key and value on top of the stack (popped); a key
 * already in t becomes a list of its values, in order (OpenResty's shape
 * for repeated query keys and headers). t: an absolute index. */
MF_API void mf_lua_args_add(lua_State *L, int t);

MF_EXTERN_C_END

#endif
