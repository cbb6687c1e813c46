/*
 * lua/host/mf_lua_park.c — a coroutine parked on one task (mf.http.get,
 * mf.http.request, mf.go, and step:wait() on a lone task without a
 * callback): the task is created from its description through its kind's
 * ops and started, and the coroutine resumes with the result table when it
 * completes. No flow, no registry reference, no table before the result
 * (and none at all for a lean waiter's success: true).
 *
 * Owns: the parked record with the kind's data (loop memory), freed in the
 * task's callback. Its co is cleared by the coroutine's cleanup hook
 * (abort, shutdown), which then cancels the task: a completion after that
 * only frees, touching neither Lua nor the host.
 */
#include <string.h>

#include <lauxlib.h>

#include "mf_lua_leaf.h"

typedef struct mf_lua_parked {
    mf_lua_co_t *co; /* NULL once detached */
    mf_task_t *task; /* until its callback */
    const mf_lua_kind_t *kind;
    MF_LUA_LEAF_DATA;
} mf_lua_parked_t;

static size_t mf_lua__parked_size(const mf_lua_kind_t *kind)
{
    return sizeof(mf_lua_parked_t) + kind->data_size;
}

/* Cleanup hook of the coroutine: it stops waiting; the task is canceled
 * and still completes (then the record is freed). */
static void mf_lua__parked_detach(void *arg)
{
    mf_lua_parked_t *p = arg;
    mf_lua_co_host(p->co)->counts.tasks--;
    p->co = NULL;
    mf_task_cancel(p->task);
}

static void mf_lua__parked_done(mf_task_t *task)
{
    mf_lua_parked_t *p = task->user;
    mf_lua_co_t *co = p->co;
    if (co) {
        if (co->hooks.step) /* the flow is this one task: step 1 */
            co->hooks.step(co->hooks.step_ud, 1);
        mf_lua_co_host(co)->counts.tasks--;
        mf_lua_co_unpark(co);
        lua_State *L = mf_lua_co_thread(co);
        if (mf_lua_co_lean(co) && mf_lua_leaf_lean(p->kind, task, p->data)) {
            lua_pushboolean(L, 1);
        } else {
            lua_createtable(L, 0, 6);
            mf_lua_leaf_result(L, p->kind, task, p->data);
        }
    }
    mf_lua_leaf_release(p->kind, p->data);
    mf_loop_free(mf_task_loop(task), p, mf_lua__parked_size(p->kind));
    if (co)
        mf_lua_co_resume(co, 1);
}

int mf_lua_park_task(lua_State *L, mf_lua_co_t *co, int idx,
                     const mf_lua_kind_t *kind)
{
    mf_lua_host_t *host = mf_lua_co_host(co);
    mf_loop_t *loop = mf_lua_host_loop(host);
    size_t size = mf_lua__parked_size(kind);
    mf_lua_parked_t *p = mf_loop_alloc(loop, size);
    memset(p, 0, size);
    p->co = co;
    p->kind = kind;
    p->task =
        mf_lua_leaf_create(L, idx, kind, p->data, loop, mf_lua__parked_done, p);
    host->counts.tasks++;
    if (co->hooks.step)
        co->hooks.step(co->hooks.step_ud, 0);
    mf_task_start(p->task);
    mf_lua_co_park(co, mf_lua__parked_detach, p);
    return lua_yield(L, 0);
}
