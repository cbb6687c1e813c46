/*
 * lua/mf_lua_core.c — moonflow.core, the private C side of require
 * "moonflow": sleep (the model of a parking call), now, debug counters,
 * and the stable error strings every result uses.
 */
#include <lauxlib.h>

#include <moonflow/error.h>
#include <moonflow/loop.h>

#include "mf_lua_int.h"

const char *mf_lua_errstr(int state, int error)
{
    switch (state) {
    case MF_STATE_SUCCESS:
        return NULL;
    case MF_STATE_SYS_ERROR:
        if (error == MF_ECONNREFUSED)
            return "connection refused";
        if (error == MF_ECONNRESET)
            return "connection reset";
        if (error == MF_ECLOSED || error == MF_EOF) /* the peer closed */
            return "connection closed";
        return "system error";
    case MF_STATE_TASK_ERROR:
        if (error == MF_EINVAL)
            return "invalid argument";
        if (error == MF_EACCES) /* e.g. Redis refused AUTH or SELECT */
            return "permission denied";
        if (error == MF_EMSGSIZE) /* a reply over the client's limit */
            return "message too long";
        if (error == MF_ENOMEM) /* e.g. a user-sized buffer was refused */
            return "out of memory";
        return "task error";
    default:
        return mf_state_name(state);
    }
}

/* ---- mf.sleep(ms): a timer owned by the parked coroutine ------------- */

typedef struct mf_lua_sleep {
    mf_timer_t timer;
    mf_lua_co_t *co;
} mf_lua_sleep_t;

static void mf_lua__sleep_free(mf_lua_sleep_t *op)
{
    mf_loop_free(mf_lua_host_loop(mf_lua_co_host(op->co)), op, sizeof(*op));
}

/* Cleanup hook (abort, shutdown): the timer stops at once. */
static void mf_lua__sleep_cancel(void *arg)
{
    mf_lua_sleep_t *op = arg;
    mf_timer_stop(mf_lua_host_loop(mf_lua_co_host(op->co)), &op->timer);
    mf_lua__sleep_free(op);
}

static void mf_lua__sleep_fired(mf_timer_t *timer)
{
    mf_lua_sleep_t *op = timer->data;
    mf_lua_co_t *co = op->co;
    mf_lua_co_unpark(co);
    mf_lua__sleep_free(op);
    mf_lua_co_resume(co, 0);
}

static int mf_lua__sleep(lua_State *L)
{
    lua_Number ms = luaL_checknumber(L, 1);
    luaL_argcheck(L, ms >= 0, 1, "negative duration");
    mf_lua_co_t *co = mf_lua_co_check(L);
    mf_loop_t *loop = mf_lua_host_loop(mf_lua_co_host(co));
    mf_lua_sleep_t *op = mf_loop_alloc(loop, sizeof(*op));
    op->co = co;
    mf_timer_init(&op->timer, mf_lua__sleep_fired, op);
    mf_timer_start(loop, &op->timer, (uint64_t)ms);
    mf_lua_co_park(co, mf_lua__sleep_cancel, op);
    return lua_yield(L, 0);
}

static int mf_lua__now(lua_State *L)
{
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    lua_pushnumber(L, (lua_Number)mf_loop_now(mf_lua_host_loop(host)));
    return 1;
}

static int mf_lua__counts(lua_State *L)
{
    mf_lua_counts_t c;
    mf_lua_host_counts(mf_lua_host_from_state(L), &c);
    lua_createtable(L, 0, 8);
    lua_pushinteger(L, (lua_Integer)c.coroutines);
    lua_setfield(L, -2, "coroutines");
    lua_pushinteger(L, (lua_Integer)c.refs);
    lua_setfield(L, -2, "refs");
    lua_pushinteger(L, (lua_Integer)c.timers);
    lua_setfield(L, -2, "timers");
    lua_pushinteger(L, (lua_Integer)c.flows);
    lua_setfield(L, -2, "flows");
    lua_pushinteger(L, (lua_Integer)c.errors);
    lua_setfield(L, -2, "errors");
    lua_pushinteger(L, (lua_Integer)c.resumes);
    lua_setfield(L, -2, "resumes");
    lua_pushinteger(L, (lua_Integer)c.idle_threads);
    lua_setfield(L, -2, "idle_threads");
    lua_pushinteger(L, (lua_Integer)c.tasks);
    lua_setfield(L, -2, "tasks");
    return 1;
}

int mf_lua_open_core(lua_State *L)
{
    static const luaL_Reg funcs[] = {{"sleep", mf_lua__sleep},
                                     {"now", mf_lua__now},
                                     {"counts", mf_lua__counts},
                                     {NULL, NULL}};
    lua_newtable(L);
    luaL_register(L, NULL, funcs);
    return 1;
}
