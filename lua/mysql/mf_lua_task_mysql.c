/*
 * lua/mysql/mf_lua_task_mysql.c — the "mysql" task kind (mf.task.mysql):
 * {db = db, sql = "...", args = {n = , ...} | nil, rows = "name" | "array" |
 * "both" | nil} runs one query on the client's pool (with args: a prepared
 * statement); the result table gets what db:query's res has (rows and
 * res[i], fields, affected_rows, insert_id, warnings, server_status, sets),
 * converted as db:query does (mf_lua_mysql.c). A failure's error reads
 * "task error: mysql CODE SQLSTATE: message" when the server or the
 * connector explained.
 *
 * Owns: nothing past a call. The task's data keeps the rows mode and the
 * words of a failure (error_detail's string lives until the callback
 * returns).
 *
 * May call: the leaf helpers (mf_lua_leaf.h) and the binding's
 * conversions (mf_lua_mysql.h).
 */
#include <lauxlib.h>

#include "host/mf_lua_leaf.h"
#include "mf_lua_mysql.h"

typedef struct mf_lua_mysql_data {
    unsigned mode;
    char why[MF_LUA_MYSQL_ERR_MAX];
} mf_lua_mysql_data_t;

/* args.n, or #args. */
static size_t mf_lua__args_count(lua_State *L, int args)
{
    lua_getfield(L, args, "n");
    lua_Number n = lua_isnumber(L, -1) ? lua_tonumber(L, -1)
                                       : (lua_Number)lua_objlen(L, args);
    lua_pop(L, 1);
    if (n < 0 || n > 65535) /* the protocol's limit of '?' markers */
        luaL_error(L, "mysql task: args.n must be 0 to 65535");
    return (size_t)n;
}

static void mf_lua__mysql_check(lua_State *L, int idx)
{
    lua_getfield(L, idx, "db");
    if (!luaL_testudata(L, -1, MF_LUA_MYSQL))
        luaL_error(L, "mysql task: db must be an mf.mysql object");
    lua_getfield(L, idx, "sql");
    if (lua_type(L, -1) != LUA_TSTRING || lua_objlen(L, -1) == 0)
        luaL_error(L, "mysql task: sql must be a non-empty string");
    lua_pop(L, 2);
    mf_lua_desc_opt_field(L, idx, "args", LUA_TTABLE);
    lua_getfield(L, idx, "rows");
    if (!lua_isnil(L, -1))
        mf_lua_mysql_check_mode(L, lua_gettop(L), "mysql task");
    lua_getfield(L, idx, "args");
    if (lua_istable(L, -1)) { /* every parameter's type, before any task */
        int args = lua_gettop(L);
        mf_lua_mysql_params_t p;
        mf_lua_mysql_params_from_table(L, &p, args,
                                       mf_lua__args_count(L, args));
        mf_lua_mysql_params_close(L, &p);
    }
    lua_pop(L, 2);
}

static mf_task_t *mf_lua__mysql_create(lua_State *L, int idx, void *data,
                                       mf_loop_t *loop, mf_task_cb cb,
                                       void *user)
{
    (void)loop; /* the client's loop: the host's */
    mf_lua_mysql_data_t *d = data;
    lua_getfield(L, idx, "db");
    mf_lua_mysql_target_t t = mf_lua_mysql_target(L, lua_gettop(L));
    lua_getfield(L, idx, "rows");
    d->mode = lua_isnil(L, -1)
                  ? t.mode
                  : mf_lua_mysql_check_mode(L, lua_gettop(L), "mysql task");
    lua_getfield(L, idx, "sql");
    int sql = lua_gettop(L);
    lua_getfield(L, idx, "args");
    mf_lua_mysql_params_t p = {0};
    p.v = p.inline_v;
    if (lua_istable(L, -1)) {
        int args = lua_gettop(L);
        mf_lua_mysql_params_from_table(L, &p, args,
                                       mf_lua__args_count(L, args));
    }
    mf_task_t *task = mf_lua_mysql_task(L, &t, sql, &p, cb, user);
    mf_lua_mysql_params_close(L, &p);
    lua_pop(L, 4);
    return task;
}

static void mf_lua__mysql_result(lua_State *L, mf_task_t *task, void *data)
{
    const mf_lua_mysql_data_t *d = data;
    mf_lua_mysql_fill(L, -1, task, d->mode);
}

/* The server's or the connector's words (a timeout is ours: none). */
static const char *mf_lua__mysql_error_detail(const mf_task_t *task, void *data)
{
    mf_lua_mysql_data_t *d = data;
    const char *pool = mf_task_mysql_pool_error(task);
    if (pool)
        return pool;
    if (mf_task_state(task) == MF_STATE_TIMEOUT)
        return NULL;
    return mf_lua_mysql_explanation(task, d->why, sizeof d->why);
}

/* For reports: the statement. */
static void mf_lua__mysql_describe(lua_State *L, int idx)
{
    lua_getfield(L, idx, "sql");
}

const mf_lua_kind_t mf_lua_task_mysql_kind = {
    .name = "mysql",
    .data_size = sizeof(mf_lua_mysql_data_t),
    .check = mf_lua__mysql_check,
    .create = mf_lua__mysql_create,
    .result = mf_lua__mysql_result,
    .error_detail = mf_lua__mysql_error_detail,
    .describe = mf_lua__mysql_describe,
    .label = mf_lua_kind_label_verb,
};
