/*
 * lua/serve/capture.c — subrequests (mf.capture, mf.capture_multi, like
 * nginx's ngx.location.capture): another route of the same site run in the
 * same worker, in-process, its answer returned to the caller as a table.
 *
 * The C side gives moonflow/capture.lua what only the server knows: the
 * route's compiled handler and timeout (routes.h), which coroutine is
 * running and, when it is a request's handler, that request's `req` object
 * (the handler keeps it in its thread's keep slot MF_SERVE_KEEP_REQ), and
 * the form parser for a subrequest's body. The Lua side builds the
 * subrequest's req and resp, runs the handler in a coroutine of its own
 * (mf.spawn), waits and turns the end into {status, headers, body}.
 *
 * Owns nothing past a call; the functions are closures over the worker.
 * May call: routes.h, the Lua host's public API, moonflow/lua_uri.h.
 */
#include <lauxlib.h>

#include <moonflow/lua_arg.h>
#include <moonflow/lua_uri.h>

#include "serve.h"

static mf_serve_worker_t *mf__capture_worker(lua_State *L)
{
    return lua_touserdata(L, lua_upvalueindex(1));
}

/* route(path) -> handler, timeout_ms [, phases] | nil, 404 | nil, 500. Of
 * a route with phases, its content (as nginx's subrequests skip access),
 * and its table, whose filters apply to the subrequest's answer (as
 * nginx's output filters do). */
static int mf__capture_route(lua_State *L)
{
    size_t len;
    const char *path = mf_lua_check_lstring(L, 1, &len);
    mf_serve_worker_t *w = mf__capture_worker(L);
    uint32_t timeout = 0;
    switch (mf_serve_routes_push_handler(w->routes, L, path, len, &timeout)) {
    case MF_SERVE_ROUTE_PHASES: /* the content, the timeout, the table */
        lua_getfield(L, -1, "content");
        lua_insert(L, -2);
        lua_pushinteger(L, timeout ? timeout : w->config->handler_timeout_ms);
        lua_insert(L, -2);
        return 3;
    case MF_SERVE_ROUTE_FOUND:
        lua_pushinteger(L, timeout ? timeout : w->config->handler_timeout_ms);
        return 2;
    case MF_SERVE_ROUTE_MISSING:
        lua_pushnil(L);
        lua_pushinteger(L, 404);
        return 2;
    default:
        lua_pushnil(L);
        lua_pushinteger(L, 500);
        return 2;
    }
}

/* current() -> the running moonflow coroutine's thread (nil outside one),
 * and the req and resp objects its handler keeps when it has them. Whether that
 * req still belongs to this coroutine, reading it tells (it raises if not). */
static int mf__capture_current(lua_State *L)
{
    mf_serve_worker_t *w = mf__capture_worker(L);
    mf_lua_co_t *co = mf_lua_host_current(w->host);
    if (!co) {
        lua_pushnil(L);
        return 1;
    }
    lua_State *T = mf_lua_co_thread(co);
    if (T == L) {
        lua_pushthread(L);
    } else {
        lua_pushthread(T);
        lua_xmove(T, L, 1);
    }
    int ref = mf_lua_co_keep(co)[MF_SERVE_KEEP_REQ];
    if (ref == LUA_NOREF || ref == LUA_REFNIL)
        return 1;
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    if (!luaL_testudata(L, -1, MF_SERVE_REQUEST_MT)) {
        lua_pop(L, 1);
        return 1;
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, mf_lua_co_keep(co)[MF_SERVE_KEEP_RESP]);
    return 3;
}

/* form(content_type, body [, max]) -> table | nil, err (req:form's) */
static int mf__capture_form(lua_State *L)
{
    size_t tlen = 0, n;
    const char *type = mf_lua_opt_lstring(L, 1, NULL, &tlen);
    const char *body = mf_lua_check_lstring(L, 2, &n);
    lua_Integer max = mf_lua_opt_integer(L, 3, 100);
    if (max < 0)
        return mf_lua_arg_error(L, 3, "a count >= 0 expected");
    return mf_lua_push_form(L, type, tlen, body, n, (unsigned)max);
}

void mf_serve_capture_open(mf_serve_worker_t *w)
{
    static const luaL_Reg funcs[] = {{"route", mf__capture_route},
                                     {"current", mf__capture_current},
                                     {"form", mf__capture_form},
                                     {NULL, NULL}};
    lua_State *L = mf_lua_host_state(w->host);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "moonflow.capture");
    lua_call(L, 1, 1); /* install(c): sets mf.capture, mf.capture_multi */
    lua_newtable(L);
    lua_pushlightuserdata(L, w);
    luaL_openlib(L, NULL, funcs, 1);
    lua_call(L, 1, 0);
}
