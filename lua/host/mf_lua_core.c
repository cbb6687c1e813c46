/*
 * lua/host/mf_lua_core.c — moonflow.core, the private C side of require
 * "moonflow": sleep (the model of a parking call), now, the loop's time
 * on the wall clock (moonflow.ngx's ngx.now), debug counters, and the
 * stable error strings every result uses.
 */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>

#include <moonflow/lua_arg.h>
#include <moonflow/common.h>
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
        if (error == MF_ENOUPSTREAM) /* every server of a group is out */
            return "no live upstream";
        if (error == MF_ETOOMANYREDIRECTS || error == MF_EINSECUREREDIRECT)
            return mf_strerror(error); /* the http task's redirect policy */
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
    lua_Number ms = mf_lua_check_number(L, 1);
    mf_lua_arg_check(L, ms >= 0, 1, "negative duration");
    mf_lua_co_t *co = mf_lua_co_check(L);
    mf_loop_t *loop = mf_lua_host_loop(mf_lua_co_host(co));
    mf_lua_sleep_t *op = mf_loop_alloc(loop, sizeof(*op));
    op->co = co;
    mf_timer_init(&op->timer, mf_lua__sleep_fired, op);
    mf_timer_start(loop, &op->timer, (uint64_t)ms);
    mf_lua_co_park(co, mf_lua__sleep_cancel, op);
    return lua_yield(L, 0);
}

/* nested_take(thread): whether thread just yielded for a moonflow wait
 * (clearing the mark); the resumer must then yield the same way. */
static int mf_lua__nested_take(lua_State *L)
{
    mf_lua_check_type(L, 1, LUA_TTHREAD);
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    mf_lua_co_t *co = host ? host->current : NULL;
    bool waited =
        co && co->nested_wait && co->nested_wait == lua_tothread(L, 1);
    if (waited)
        co->nested_wait = NULL;
    lua_pushboolean(L, waited);
    return 1;
}

/* nested_mark(thread): thread (a plain coroutine itself) yields for the
 * wait of one it resumed: its own resumer passes it on. */
static int mf_lua__nested_mark(lua_State *L)
{
    mf_lua_check_type(L, 1, LUA_TTHREAD);
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    if (host && host->current)
        host->current->nested_wait = lua_tothread(L, 1);
    return 0;
}

static int mf_lua__now(lua_State *L)
{
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    lua_pushnumber(L, (lua_Number)mf_loop_now(mf_lua_host_loop(host)));
    return 1;
}

/* epoch_ms(): the loop's time (cached at the turn's start, as nginx's is)
 * in milliseconds since the epoch: the wall clock now, less how long ago
 * the loop read its clock; worked out once per clock read of the loop. */
static int mf_lua__epoch_ms(lua_State *L)
{
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    uint64_t loop_ns = mf_loop_now_ns(host->loop);
    if (host->epoch_read_ns != loop_ns) {
        struct timespec real;
        clock_gettime(CLOCK_REALTIME, &real);
        uint64_t mono_ns = mf_monotonic_ns();
        int64_t ago = mono_ns > loop_ns ? (int64_t)(mono_ns - loop_ns) : 0;
        int64_t real_ns = (int64_t)real.tv_sec * 1000000000 + real.tv_nsec;
        host->epoch_ms = (real_ns - ago) / 1000000;
        host->epoch_read_ns = loop_ns;
    }
    lua_pushnumber(L, (lua_Number)host->epoch_ms);
    return 1;
}

/* update_time(): the loop reads its clock now (ngx.update_time). */
static int mf_lua__update_time(lua_State *L)
{
    mf_loop_update_time(mf_lua_host_loop(mf_lua_host_from_state(L)));
    return 0;
}

/* The fields of mf_lua_counts_t by name, for mf.debug.counts(). */
static const struct mf_lua_count_field {
    const char *name;
    size_t offset;
} mf_lua__count_fields[] = {
    {"coroutines", offsetof(mf_lua_counts_t, coroutines)},
    {"refs", offsetof(mf_lua_counts_t, refs)},
    {"timers", offsetof(mf_lua_counts_t, timers)},
    {"flows", offsetof(mf_lua_counts_t, flows)},
    {"errors", offsetof(mf_lua_counts_t, errors)},
    {"resumes", offsetof(mf_lua_counts_t, resumes)},
    {"idle_threads", offsetof(mf_lua_counts_t, idle_threads)},
    {"tasks", offsetof(mf_lua_counts_t, tasks)},
    {"interrupted", offsetof(mf_lua_counts_t, interrupted)},
};

static int mf_lua__counts(lua_State *L)
{
    mf_lua_counts_t c;
    mf_lua_host_counts(mf_lua_host_from_state(L), &c);
    lua_createtable(L, 0, (int)MF_ARRAY_SIZE(mf_lua__count_fields));
    for (size_t i = 0; i < MF_ARRAY_SIZE(mf_lua__count_fields); i++) {
        const struct mf_lua_count_field *f = &mf_lua__count_fields[i];
        size_t value;
        memcpy(&value, (const char *)&c + f->offset, sizeof value);
        lua_pushinteger(L, (lua_Integer)value);
        lua_setfield(L, -2, f->name);
    }
    return 1;
}

void mf_lua_call_logged(mf_lua_host_t *host, int nargs, const char *what)
{
    lua_State *L = mf_lua_host_state(host);
    if (mf_lua_host_pcall(host, nargs, 0, 0) != 0) {
        mf_lua_host_log(host, "%s: %s", what, lua_tostring(L, -1));
        lua_pop(L, 1);
    }
}

void mf_lua_pack(lua_State *L, int first, int n)
{
    lua_createtable(L, n, 1);
    for (int i = 0; i < n; i++) {
        lua_pushvalue(L, first + i);
        lua_rawseti(L, -2, i + 1);
    }
    lua_pushinteger(L, n);
    lua_setfield(L, -2, "n");
}

int mf_lua_push_packed(lua_State *L, int ref, int extra)
{
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    lua_getfield(L, -1, "n");
    int n = (int)lua_tointeger(L, -1) + extra;
    lua_pop(L, 1);
    luaL_checkstack(L, n + 1, "packed values");
    for (int i = 1; i <= n; i++)
        lua_rawgeti(L, -i, i);
    lua_remove(L, -(n + 1));
    return n;
}

char *mf_lua_scratch(lua_State *L, char *small, size_t cap, size_t n,
                     bool *pushed)
{
    *pushed = n > cap;
    return *pushed ? lua_newuserdata(L, n ? n : 1) : small;
}

void mf_lua_push_scratch(lua_State *L, const char *s, size_t n, bool pushed)
{
    lua_pushlstring(L, s, n);
    if (pushed)
        lua_remove(L, -2);
}

void mf_lua_class(lua_State *L, const char *name, const luaL_Reg *methods,
                  lua_CFunction gc, lua_CFunction tostring)
{
    if (!luaL_newmetatable(L, name))
        return;
    lua_newtable(L);
    mf_lua_register(L, methods);
    lua_setfield(L, -2, "__index");
    if (gc) {
        lua_pushcfunction(L, gc);
        lua_setfield(L, -2, "__gc");
    }
    if (tostring) {
        lua_pushcfunction(L, tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pushstring(L, name);
    lua_setfield(L, -2, "__metatable");
}

int mf_lua_open_core(lua_State *L)
{
    static const luaL_Reg funcs[] = {
        {"sleep mf.sleep(ms)", mf_lua__sleep},
        {"now mf.now()", mf_lua__now},
        {"epoch_ms", mf_lua__epoch_ms},
        {"update_time", mf_lua__update_time},
        {"counts mf.debug.counts()", mf_lua__counts},
        {"nested_take", mf_lua__nested_take},
        {"nested_mark", mf_lua__nested_mark},
        {NULL, NULL}};
    lua_newtable(L);
    mf_lua_register(L, funcs);
    return 1;
}
