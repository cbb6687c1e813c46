/*
 * lua/mf_lua_task_redis.c — the "redis" task kind (mf.task.redis):
 * {client = r, cmds = {{cmd, ...}, ...}, list = true|nil} sends the
 * commands on the client's connections; the result has value (one
 * command's reply) or values (list: every reply), converted as r:call
 * does (mf_lua_redis.c).
 *
 * Owns: nothing past a call. The task's data keeps the reply flags (list,
 * the client's status_table option).
 */
#include <lauxlib.h>

#include "mf_lua_leaf.h"
#include "mf_lua_redis.h"

typedef struct mf_lua_redis_data {
    unsigned flags; /* MF_LUA_REDIS_LIST, MF_LUA_REDIS_STATUS */
} mf_lua_redis_data_t;

static void mf_lua__redis_check(lua_State *L, int idx)
{
    lua_getfield(L, idx, "client");
    if (!luaL_testudata(L, -1, MF_LUA_REDIS))
        luaL_error(L, "redis task: client must be an mf.redis object");
    lua_getfield(L, idx, "cmds");
    if (!lua_istable(L, -1) ||
        mf_lua_redis_check_cmds(L, lua_gettop(L), "redis task") == 0)
        luaL_error(L, "redis task: a command expected");
    lua_pop(L, 2);
}

static mf_task_t *mf_lua__redis_create(lua_State *L, int idx, void *data,
                                       mf_loop_t *loop, mf_task_cb cb,
                                       void *user)
{
    (void)loop; /* the client's loop: the host's */
    mf_lua_redis_data_t *d = data;
    lua_getfield(L, idx, "list");
    lua_getfield(L, idx, "client");
    const mf_lua_redis_t *r = lua_touserdata(L, -1);
    d->flags = (lua_toboolean(L, -2) ? MF_LUA_REDIS_LIST : 0) | r->flags;
    mf_task_t *task = mf_task_redis_create(r->client, cb, user);
    lua_getfield(L, idx, "cmds");
    int cmds = lua_gettop(L);
    int n = (int)lua_objlen(L, cmds);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, cmds, i);
        mf_lua_redis_add_table(L, task, cmds + 1);
        lua_pop(L, 1);
    }
    lua_pop(L, 3);
    return task;
}

/* result.value (one command) or result.values (a list of commands). */
static void mf_lua__redis_result(lua_State *L, mf_task_t *task, void *data)
{
    const mf_lua_redis_data_t *d = data;
    if (mf_task_redis_nreplies(task) == 0)
        return;
    if (d->flags & MF_LUA_REDIS_LIST) {
        mf_lua_redis_push_replies(L, task, d->flags);
        lua_setfield(L, -2, "values");
    } else {
        mf_lua_redis_push_reply(L, mf_task_redis_reply(task, 0), d->flags);
        lua_setfield(L, -2, "value");
    }
}

/* Redis's own refusal of AUTH/SELECT, after "permission denied". */
static const char *mf_lua__redis_error_detail(const mf_task_t *task, void *data)
{
    (void)data;
    return mf_task_redis_error_message(task);
}

const mf_lua_kind_t mf_lua_task_redis_kind = {
    .name = "redis",
    .data_size = sizeof(mf_lua_redis_data_t),
    .check = mf_lua__redis_check,
    .create = mf_lua__redis_create,
    .result = mf_lua__redis_result,
    .error_detail = mf_lua__redis_error_detail,
};
