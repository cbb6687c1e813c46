/*
 * lua/host/mf_lua_timer.c — background timers: mf.timer.at(ms, fn, ...) and
 * mf.timer.every(ms, fn, ...) run fn(...) in a fresh coroutine (so it may
 * wait), like ngx.timer.at/every. Errors are logged with a traceback.
 *
 * Owns: the handle is a userdata ("moonflow.timer") embedding the mf_timer_t;
 * while armed it anchors itself and its {fn, args} table with registry
 * references, released when it fires for the last time, on :cancel() and at
 * host shutdown.
 */
#include <lauxlib.h>

#include <moonflow/lua_arg.h>
#include <moonflow/common.h>

#include "mf_lua_int.h"

#define MF_LUA_TIMER "moonflow.timer"

typedef struct mf_lua_timer {
    mf_timer_t timer;
    mf_list_t link; /* host->timers while armed */
    mf_lua_host_t *host;
    uint64_t ms;
    bool every;
    bool armed;
    int self_ref; /* the userdata */
    int call_ref; /* {n = nargs, fn, args...} */
} mf_lua_timer_t;

static void mf_lua__timer_release(mf_lua_timer_t *t)
{
    if (!t->armed)
        return;
    t->armed = false;
    mf_timer_stop(t->host->loop, &t->timer);
    mf_list_remove(&t->link);
    t->host->counts.timers--;
    mf_lua_unref(t->host, t->call_ref);
    mf_lua_unref(t->host, t->self_ref);
    t->call_ref = t->self_ref = LUA_NOREF;
}

/* Pushes fn and its arguments on the host's state; returns nargs. */
static int mf_lua__timer_push_call(mf_lua_timer_t *t)
{
    return mf_lua_push_packed(t->host->L, t->call_ref, 1) - 1;
}

static void mf_lua__timer_fired(mf_timer_t *timer)
{
    mf_lua_timer_t *t = timer->data;
    mf_lua_host_t *host = t->host;
    int nargs = mf_lua__timer_push_call(t);
    /* The handle stays on the stack through the call: not collected. */
    lua_rawgeti(host->L, LUA_REGISTRYINDEX, t->self_ref);
    lua_insert(host->L, -(nargs + 2));
    if (t->every)
        mf_timer_start(host->loop, &t->timer, t->ms);
    else
        mf_lua__timer_release(t);
    mf_lua_host_spawn(host, nargs, NULL, NULL);
    lua_pop(host->L, 1);
}

static int mf_lua__timer_start(lua_State *L, bool every)
{
    lua_Number ms = mf_lua_check_number(L, 1);
    mf_lua_arg_check(L, ms >= 0 && (!every || ms >= 1), 1,
                     every ? "interval must be >= 1 ms" : "negative delay");
    mf_lua_check_type(L, 2, LUA_TFUNCTION);
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    int n = lua_gettop(L) - 2;
    lua_createtable(L, n + 1, 1);
    for (int i = 0; i <= n; i++) {
        lua_pushvalue(L, 2 + i);
        lua_rawseti(L, -2, i + 1);
    }
    lua_pushinteger(L, n);
    lua_setfield(L, -2, "n");
    mf_lua_timer_t *t = lua_newuserdata(L, sizeof(*t));
    luaL_getmetatable(L, MF_LUA_TIMER);
    lua_setmetatable(L, -2);
    t->host = host;
    t->ms = (uint64_t)ms;
    t->every = every;
    t->armed = true;
    lua_pushvalue(L, -1);
    t->self_ref = mf_lua_ref(host, L);
    lua_pushvalue(L, -2);
    t->call_ref = mf_lua_ref(host, L);
    mf_list_push_back(&host->timers, &t->link);
    host->counts.timers++;
    mf_timer_init(&t->timer, mf_lua__timer_fired, t);
    mf_timer_start(host->loop, &t->timer, t->ms);
    return 1;
}

static int mf_lua__timer_at(lua_State *L)
{
    return mf_lua__timer_start(L, false);
}

static int mf_lua__timer_every(lua_State *L)
{
    return mf_lua__timer_start(L, true);
}

/* handle:cancel() -> true if it was still pending */
static int mf_lua__timer_cancel(lua_State *L)
{
    mf_lua_timer_t *t = mf_lua_check_udata(L, 1, MF_LUA_TIMER);
    lua_pushboolean(L, t->armed);
    mf_lua__timer_release(t);
    return 1;
}

static int mf_lua__timer_pending(lua_State *L)
{
    mf_lua_timer_t *t = mf_lua_check_udata(L, 1, MF_LUA_TIMER);
    lua_pushboolean(L, t->armed);
    return 1;
}

/* Armed handles are anchored, so this only runs on released ones; kept
 * so that no path can free an armed mf_timer_t. */
static int mf_lua__timer_gc(lua_State *L)
{
    mf_lua__timer_release(lua_touserdata(L, 1));
    return 0;
}

void mf_lua_timers_shutdown(mf_lua_host_t *host)
{
    while (!mf_list_empty(&host->timers))
        mf_lua__timer_release(
            mf_container_of(host->timers.next, mf_lua_timer_t, link));
}

int mf_lua_open_timer(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"cancel handle:cancel()", mf_lua__timer_cancel},
        {"pending handle:pending()", mf_lua__timer_pending},
        {NULL, NULL}};
    static const luaL_Reg funcs[] = {
        {"at mf.timer.at(ms, fn, ...)", mf_lua__timer_at},
        {"every mf.timer.every(ms, fn, ...)", mf_lua__timer_every},
        {NULL, NULL}};
    if (luaL_newmetatable(L, MF_LUA_TIMER)) {
        lua_newtable(L);
        mf_lua_register(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, mf_lua__timer_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    lua_newtable(L);
    mf_lua_register(L, funcs);
    return 1;
}
