/*
 * moonflow/lua_json.h — Lua values as JSON text, in C: the encoder behind
 * mf.json.encode and the HTTP server's resp:json, usable by any C function
 * of the host (an embedding program's too).
 *
 * Owns: one scratch buffer per lua_State (the main state and all its
 * coroutines share it), made on first use from the state's allocator —
 * so it counts against the host's Lua memory cap — and freed when the
 * state closes. The text returned stays valid until the next encode on the
 * same state; a buffer grown past 1 MiB is given back at the next encode.
 *
 * The mapping (lua-cjson's, so documents keep their shape):
 *   nil, mf.json.null (any NULL light userdata)  null
 *   boolean                                      true / false
 *   number   an integer up to 2^53 in full, others as "%.14g" (Lua's
 *            tostring); NaN and ±infinity raise (JSON has none)
 *   string   bytes as they are, with '"', '\\', the control bytes and DEL
 *            escaped (\n \r \t \b \f or \u00XX); no UTF-8 check
 *   table    an array when its keys are exactly integers >= 1 (holes
 *            become null, unless the array is more than half holes past
 *            index 10: that raises), otherwise an object; number keys of
 *            an object become strings; other key types raise; an empty
 *            table is {}; nesting past 1000 (a table holding itself) raises
 *   others   (functions, userdata, threads) raise
 * Metamethods are not consulted (raw access): encoding never runs Lua code
 * and never yields.
 *
 * Errors are raised as Lua errors ("json: ...", with the caller's line),
 * as for any misuse of a Lua API; a refused allocation raises "not enough
 * memory".
 */
#ifndef MOONFLOW_LUA_JSON_H
#define MOONFLOW_LUA_JSON_H

#include <stddef.h>

#include <moonflow/common.h>

MF_EXTERN_C_BEGIN

#include <lua.h>

/* The value at idx as JSON: *len bytes (NUL-terminated) in the state's
 * scratch buffer, valid until the next encode on L's state. Raises on a
 * value JSON cannot carry. */
MF_API const char *mf_lua_json_encode(lua_State *L, int idx, size_t *len);

MF_EXTERN_C_END

#endif
