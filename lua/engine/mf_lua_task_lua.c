/*
 * lua/engine/mf_lua_task_lua.c — the "lua" task kind: {kind = "lua", fn = f,
 * args = {n = N, ...}} (mf.task.lua(fn, ...)) runs fn(...) in a coroutine
 * of its own as one step of a flow: it may wait, it runs beside the other
 * branches of an mf.parallel, and the step ends when fn returns
 * (success: result.values = {n = N, ...}) or raises (state "task_error",
 * error: the message with its traceback). A timeout or a canceled flow
 * aborts the coroutine. An optional `finally(how, thread)` runs once
 * however the coroutine ended — how is "done", "error" or "aborted",
 * thread the coroutine's — outside any coroutine: what must be given back
 * (a resource pool's unit) is given back even when the coroutine never
 * reaches its own code again. A step canceled before it started runs
 * neither fn nor finally.
 *
 * Owns the task record (loop memory): fn and its arguments in a registry
 * table ({n, fn, args...}) from create to destroy, the coroutine while it
 * runs, the results (a registry table) and the error text (malloc'd). The
 * coroutine starts on the loop's next turn after dispatch (never inside
 * the call that dispatched the flow); a record whose start is still
 * queued at destroy is freed by that start.
 */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include <moonflow/common.h>
#include <moonflow/error.h>

#include "host/mf_lua_int.h"
#include "host/mf_lua_leaf.h"

typedef struct mf_lua_task_lua {
    mf_task_t base;
    mf_lua_host_t *host;
    mf_lua_co_t *co; /* while fn runs */
    int call_ref;    /* {n = nargs, fn, args...} */
    int result_ref;  /* {n = N, values...} after a return */
    char *error;     /* the raise's message, with its traceback */
    mf_post_t start;
    bool start_pending;
    bool destroyed; /* destroy came while the start was queued */
    bool canceled;
    int finally_ref; /* finally(how), LUA_NOREF: none */
} mf_lua_task_lua_t;

static bool mf__lua_task_host_alive(const mf_lua_task_lua_t *t)
{
    return mf_lua_host_of(t->base._loop) == t->host;
}

/* finally(how, thread), once, right as the coroutine ends (its thread is
 * not yet back in the host's pool, so finally may key state on it). On
 * the host's own state, which runs no Lua of its own meanwhile (every
 * coroutine is resumed from C). */
static void mf__lua_task_finally(mf_lua_task_lua_t *t, lua_State *T,
                                 const char *how)
{
    if (t->finally_ref == LUA_NOREF)
        return;
    mf_lua_host_t *host = t->host;
    lua_State *L = mf_lua_host_state(host);
    lua_rawgeti(L, LUA_REGISTRYINDEX, t->finally_ref);
    mf_lua_unref(host, t->finally_ref);
    t->finally_ref = LUA_NOREF;
    lua_pushstring(L, how);
    lua_pushthread(T);
    lua_xmove(T, L, 1);
    mf_lua_call_logged(host, 2, "mf.task.lua: finally raised");
}

static void mf__lua_task_exit(mf_lua_co_t *co, const mf_lua_co_exit_t *ex,
                              void *data)
{
    mf_lua_task_lua_t *t = data;
    (void)co;
    t->co = NULL;
    if (ex->status == MF_LUA_CO_DONE) {
        lua_State *L = ex->L;
        mf_lua_pack(L, lua_gettop(L) - ex->nret + 1, ex->nret);
        t->result_ref = mf_lua_ref(t->host, L);
        mf__lua_task_finally(t, L, "done");
        mf_task_complete(&t->base, MF_STATE_SUCCESS, 0);
        return;
    }
    mf__lua_task_finally(t, ex->L,
                         ex->status == MF_LUA_CO_ABORTED ? "aborted" : "error");
    free(t->error);
    t->error = strdup(ex->message ? ex->message : "aborted");
    if (ex->status == MF_LUA_CO_ABORTED)
        mf_task_complete(&t->base, MF_STATE_CANCELED, MF_ECANCELED);
    else
        mf_task_complete(&t->base, MF_STATE_TASK_ERROR, MF_EINVAL);
}

static void mf__lua_task_free(mf_lua_task_lua_t *t)
{
    if (mf__lua_task_host_alive(t)) {
        mf_lua_unref(t->host, t->call_ref);
        mf_lua_unref(t->host, t->result_ref);
        mf_lua_unref(t->host, t->finally_ref); /* never ran */
    }
    free(t->error);
    mf_loop_free(t->base._loop, t, sizeof *t);
}

/* On the loop's next turn after dispatch: fn(...) in a new coroutine. */
static void mf__lua_task_start(mf_post_t *post)
{
    mf_lua_task_lua_t *t = post->data;
    t->start_pending = false;
    if (t->destroyed) {
        mf__lua_task_free(t);
        return;
    }
    if (t->canceled || !mf__lua_task_host_alive(t))
        return; /* cancel completed it */
    t->co = mf_lua_host_prepare(t->host, mf__lua_task_exit, t);
    int n = mf_lua_push_packed(mf_lua_co_thread(t->co), t->call_ref, 1) - 1;
    mf_lua_co_start(t->co, n); /* may end at once: mf__lua_task_exit */
}

static void mf__lua_task_dispatch(mf_task_t *task)
{
    mf_lua_task_lua_t *t = (mf_lua_task_lua_t *)task;
    t->start_pending = true;
    mf_loop_defer(task->_loop, &t->start);
}

static void mf__lua_task_cancel(mf_task_t *task)
{
    mf_lua_task_lua_t *t = (mf_lua_task_lua_t *)task;
    t->canceled = true;
    if (t->co)
        mf_lua_co_abort(t->co, "canceled"); /* its exit completes the task */
    else if (t->start_pending)
        mf_task_complete(task, MF_STATE_CANCELED, MF_ECANCELED);
}

static void mf__lua_task_destroy(mf_task_t *task)
{
    mf_lua_task_lua_t *t = (mf_lua_task_lua_t *)task;
    if (t->start_pending) {
        t->destroyed = true; /* the queued start frees it */
        return;
    }
    mf__lua_task_free(t);
}

static const mf_task_ops_t mf__lua_task_ops = {
    "lua", mf__lua_task_dispatch, mf__lua_task_cancel, mf__lua_task_destroy};

static void mf__lua_task_check(lua_State *L, int idx)
{
    lua_getfield(L, idx, "fn");
    if (!lua_isfunction(L, -1))
        luaL_error(L, "lua task: fn must be a function");
    lua_getfield(L, idx, "args");
    if (!lua_isnil(L, -1) && !lua_istable(L, -1))
        luaL_error(L, "lua task: args must be a table {n = N, ...}");
    lua_getfield(L, idx, "finally");
    if (!lua_isnil(L, -1) && !lua_isfunction(L, -1))
        luaL_error(L, "lua task: finally must be a function");
    lua_pop(L, 3);
}

/* The call table {n = nargs, fn, args...}, referenced. */
static int mf__lua_task_call_ref(lua_State *L, int idx, mf_lua_host_t *host)
{
    lua_getfield(L, idx, "args");
    int n = 0;
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "n");
        n = lua_isnumber(L, -1) ? (int)lua_tointeger(L, -1)
                                : (int)lua_objlen(L, -2);
        lua_pop(L, 1);
    }
    int args = lua_gettop(L);
    lua_createtable(L, n + 1, 1);
    lua_getfield(L, idx, "fn");
    lua_rawseti(L, -2, 1);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, args, i);
        lua_rawseti(L, -2, i + 1);
    }
    lua_pushinteger(L, n);
    lua_setfield(L, -2, "n");
    int ref = mf_lua_ref(host, L);
    lua_pop(L, 1); /* args */
    return ref;
}

static mf_task_t *mf__lua_task_create(lua_State *L, int idx, void *data,
                                      mf_loop_t *loop, mf_task_cb cb,
                                      void *user)
{
    (void)data;
    mf_lua_task_lua_t *t = mf_loop_alloc(loop, sizeof *t);
    memset(t, 0, sizeof *t);
    mf_task_init(&t->base, &mf__lua_task_ops, loop, cb, user);
    t->host = mf_lua_host_from_state(L);
    t->result_ref = LUA_NOREF;
    t->call_ref = mf__lua_task_call_ref(L, idx, t->host);
    lua_getfield(L, idx, "finally");
    t->finally_ref =
        lua_isnil(L, -1) ? (lua_pop(L, 1), LUA_NOREF) : mf_lua_ref(t->host, L);
    mf_post_init(&t->start, mf__lua_task_start, t);
    return &t->base;
}

static void mf__lua_task_result(lua_State *L, mf_task_t *task, void *data)
{
    mf_lua_task_lua_t *t = (mf_lua_task_lua_t *)task;
    (void)data;
    lua_rawgeti(L, LUA_REGISTRYINDEX, t->result_ref);
    lua_setfield(L, -2, "values");
}

static const char *mf__lua_task_error(const mf_task_t *task, void *data,
                                      char *buf, size_t len)
{
    const mf_lua_task_lua_t *t = (const mf_lua_task_lua_t *)task;
    (void)data;
    if (!t->error || mf_task_state(task) != MF_STATE_TASK_ERROR)
        return NULL; /* a timeout or a cancel: the stable words */
    snprintf(buf, len, "%s", t->error);
    return buf;
}

const mf_lua_kind_t mf_lua_task_lua_kind = {
    .name = "lua",
    .check = mf__lua_task_check,
    .create = mf__lua_task_create,
    .result = mf__lua_task_result,
    .error = mf__lua_task_error,
};
