/*
 * lua/engine/mf_lua_task_go.c — the "go" task kind (mf.task.go, and mf.go
 * waiting on one): {kind = "go", name =, args = {n =, ...}} runs the C function
 * registered under name (mf_lua_go.c) on the compute pool with copies of
 * its arguments; the result's value is the string it returned.
 *
 * Owns: the task (loop memory) and its argument and result buffers, freed
 * by the task's destroy, which the engine calls after both the callback and
 * the pool job are done (a timed-out call still runs to its end).
 */
#include <string.h>

#include <lauxlib.h>

#include <moonflow/common.h>
#include <moonflow/pool.h>

#include "host/mf_lua_leaf.h"
#include "mf_lua_go.h"

/* ---- the C task on the pool --------------------------------------------- */

typedef struct mf_lua_go_task {
    mf_task_t base;
    mf_pool_job_t job;
    mf_lua_go_fn fn;
    mf_lua_go_args_t args; /* point into data */
    char *data;
    char *out;
    size_t out_len;
    int rc;
} mf_lua_go_task_t;

static void mf_lua__go_run(mf_pool_job_t *job)
{
    mf_lua_go_task_t *t = mf_container_of(job, mf_lua_go_task_t, job);
    t->rc = t->fn(&t->args, &t->out, &t->out_len);
}

static void mf_lua__go_done(mf_pool_job_t *job)
{
    mf_lua_go_task_t *t = mf_container_of(job, mf_lua_go_task_t, job);
    mf_task_complete(&t->base, t->rc ? MF_STATE_TASK_ERROR : MF_STATE_SUCCESS,
                     t->rc);
}

static void mf_lua__go_dispatch(mf_task_t *task)
{
    mf_lua_go_task_t *t = (mf_lua_go_task_t *)task;
    mf_loop_t *loop = mf_task_loop(task);
    mf_pool_t *pool = mf_loop_pool(loop);
    if (!pool) {
        mf_task_complete(task, MF_STATE_SYS_ERROR, MF_ENOPOOL);
        return;
    }
    t->job.fn = mf_lua__go_run;
    t->job.done = mf_lua__go_done;
    mf_pool_submit(pool, loop, &t->job);
}

static void mf_lua__go_destroy(mf_task_t *task)
{
    mf_lua_go_task_t *t = (mf_lua_go_task_t *)task;
    mf_free(t->data);
    mf_free(t->out);
    mf_loop_free(mf_task_loop(task), t, sizeof(*t));
}

static const mf_task_ops_t mf_lua__go_ops = {"go", mf_lua__go_dispatch, NULL,
                                             mf_lua__go_destroy};

/* ---- from a description {kind="go", name=, args={n=, ...}} ----------- */

/* args.n of the args table on top (0 when absent). */
static int mf_lua__go_nargs(lua_State *L)
{
    if (!lua_istable(L, -1))
        return 0;
    lua_getfield(L, -1, "n");
    int n = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    return n;
}

static void mf_lua__go_check(lua_State *L, int idx)
{
    lua_getfield(L, idx, "name");
    const char *name = lua_tostring(L, -1);
    if (!name || !mf_lua_go_find(name))
        luaL_error(L, "go task: no C function named '%s'", name ? name : "?");
    lua_getfield(L, idx, "args");
    int n = mf_lua__go_nargs(L);
    if (n > MF_LUA_GO_MAX_ARGS)
        luaL_error(L, "go task: at most %d arguments", MF_LUA_GO_MAX_ARGS);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        if (!lua_isstring(L, -1))
            luaL_error(L, "go task: argument %d must be a string or number", i);
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
}

/* Copies the arguments into one buffer owned by the task. */
static void mf_lua__go_copy_args(lua_State *L, mf_lua_go_task_t *t)
{
    int n = mf_lua__go_nargs(L);
    size_t total = 0;
    for (int i = 1; i <= n; i++) {
        size_t len;
        lua_rawgeti(L, -1, i);
        lua_tolstring(L, -1, &len);
        total += len + 1;
        lua_pop(L, 1);
    }
    t->data = mf_xmalloc(total ? total : 1);
    char *p = t->data;
    t->args.n = (size_t)n;
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        size_t len;
        const char *s = lua_tolstring(L, -1, &len);
        memcpy(p, s, len + 1);
        t->args.v[i - 1] = p;
        t->args.len[i - 1] = len;
        p += len + 1;
        lua_pop(L, 1);
    }
}

static mf_task_t *mf_lua__go_create(lua_State *L, int idx, void *data,
                                    mf_loop_t *loop, mf_task_cb cb, void *user)
{
    (void)data;
    mf_lua_go_task_t *t = mf_loop_alloc(loop, sizeof(*t));
    memset(t, 0, sizeof(*t));
    mf_task_init(&t->base, &mf_lua__go_ops, loop, cb, user);
    lua_getfield(L, idx, "name");
    t->fn = mf_lua_go_find(lua_tostring(L, -1));
    lua_getfield(L, idx, "args");
    mf_lua__go_copy_args(L, t);
    lua_pop(L, 2);
    return &t->base;
}

/* result.value: the function's string (absent when it returned none). */
static void mf_lua__go_result(lua_State *L, mf_task_t *task, void *data)
{
    (void)data;
    mf_lua_go_task_t *t = (mf_lua_go_task_t *)task;
    if (t->out)
        lua_pushlstring(L, t->out, t->out_len);
    else
        lua_pushnil(L);
    lua_setfield(L, -2, "value");
}

const mf_lua_kind_t mf_lua_task_go_kind = {
    .name = "go",
    .check = mf_lua__go_check,
    .create = mf_lua__go_create,
    .result = mf_lua__go_result,
};
