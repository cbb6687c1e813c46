/*
 * moonflow/lua_arg.h — argument checks of C functions called from Lua,
 * in one wording that names the function as the script calls it:
 *
 *     mf.sleep(ms): a number expected, got string
 *     sock:connect(host, port [, opts]): port: a number expected, got nil
 *
 * A function is named where it is registered: mf_lua_register takes a
 * luaL_Reg table whose names are "FIELD USAGE" ("sleep mf.sleep(ms)"),
 * sets t.FIELD and remembers USAGE for that function value. A failed
 * check looks up the function running (nothing is spent until then) and
 * takes the parameter's name from USAGE: the Nth name in the parentheses,
 * after self for a method ("sock:connect": argument 1 is self). The
 * checks behave as lauxlib's (luaL_checknumber takes "5" too), and raise
 * at the caller's line as luaL_error does.
 */
#ifndef MOONFLOW_LUA_ARG_H
#define MOONFLOW_LUA_ARG_H

#include <stdbool.h>
#include <stddef.h>

#include <moonflow/common.h>

MF_EXTERN_C_BEGIN

#include <lauxlib.h>
#include <lua.h>

/* Sets the functions of regs (NULL-terminated) in the table on top of the
 * stack; a name "FIELD USAGE" sets FIELD and names the function USAGE, a
 * name without a space sets it unnamed (an internal helper). */
MF_API void mf_lua_register(lua_State *L, const luaL_Reg *regs);
/* The same with the nup values on top of the stack as upvalues of each
 * function (popped), the table below them (luaL_openlib(L, NULL, ...)). */
MF_API void mf_lua_register_up(lua_State *L, const luaL_Reg *regs, int nup);

/* Names the function on top of the stack usage (a closure, say). */
MF_API void mf_lua_name(lua_State *L, const char *usage);

/* Pushes fn named usage (lua_pushcfunction with a name). */
MF_API void mf_lua_push_named(lua_State *L, lua_CFunction fn,
                              const char *usage);

/* The usage of the C function running (NULL: unnamed). */
MF_API const char *mf_lua_usage(lua_State *L);

/* Raises "USAGE: [PARAM: ]msg" for argument arg; never returns. */
MF_API int mf_lua_arg_error(lua_State *L, int arg, const char *msg);

/* Raises "USAGE: [PARAM: ]a/an EXPECTED expected, got TYPE". */
MF_API int mf_lua_type_error(lua_State *L, int arg, const char *expected);

MF_API lua_Number mf_lua_check_number(lua_State *L, int arg);
MF_API lua_Integer mf_lua_check_integer(lua_State *L, int arg);
MF_API const char *mf_lua_check_lstring(lua_State *L, int arg, size_t *len);
MF_API lua_Number mf_lua_opt_number(lua_State *L, int arg, lua_Number def);
MF_API lua_Integer mf_lua_opt_integer(lua_State *L, int arg, lua_Integer def);
MF_API const char *mf_lua_opt_lstring(lua_State *L, int arg, const char *def,
                                      size_t *len);
MF_API void mf_lua_check_type(lua_State *L, int arg, int type);
MF_API void mf_lua_check_any(lua_State *L, int arg);
/* The userdata of metatable tname at arg, or raises naming tname. */
MF_API void *mf_lua_check_udata(lua_State *L, int arg, const char *tname);

#define mf_lua_check_string(L, arg) mf_lua_check_lstring((L), (arg), NULL)
#define mf_lua_opt_string(L, arg, def) \
    mf_lua_opt_lstring((L), (arg), (def), NULL)
#define mf_lua_arg_check(L, cond, arg, msg) \
    ((void)((cond) || mf_lua_arg_error((L), (arg), (msg))))

MF_EXTERN_C_END

#endif
