/*
 * lua/engine/mf_lua_task_timer.c — the "timer" task kind: {kind = "timer", ms =
 * N} (mf.task.timer(ms [, opts])) succeeds after N milliseconds.
 */
#include <lauxlib.h>

#include <moonflow/tasks.h>

#include "host/mf_lua_leaf.h"

static void mf_lua__timer_check(lua_State *L, int idx)
{
    lua_getfield(L, idx, "ms");
    if (lua_type(L, -1) != LUA_TNUMBER || lua_tonumber(L, -1) < 0)
        luaL_error(L, "timer task: ms must be a number >= 0");
    lua_pop(L, 1);
}

static mf_task_t *mf_lua__timer_create(lua_State *L, int idx, void *data,
                                       mf_loop_t *loop, mf_task_cb cb,
                                       void *user)
{
    (void)data;
    uint64_t ms = (uint64_t)mf_lua_desc_number(L, idx, "ms", 0);
    return mf_task_timer_create(loop, ms, cb, user);
}

const mf_lua_kind_t mf_lua_task_timer_kind = {
    .name = "timer",
    .check = mf_lua__timer_check,
    .create = mf_lua__timer_create,
};
