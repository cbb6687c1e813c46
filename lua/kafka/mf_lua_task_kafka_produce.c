/*
 * lua/kafka/mf_lua_task_kafka_produce.c — the "kafka_produce" task kind
 * (mf.task.kafka_produce(k, msg)): {producer = k, message = msg} produces
 * the message through k; the result has partition and offset, as
 * k:produce returns them, and a failure the same error string
 * (mf_lua_kafka.c).
 *
 * Owns: nothing past a call (the task copies the message when created).
 */
#include <lauxlib.h>

#include "mf_lua_kafka.h"
#include "host/mf_lua_leaf.h"

static void mf_lua__kafka_produce_check(lua_State *L, int idx)
{
    lua_getfield(L, idx, "producer");
    if (!luaL_testudata(L, -1, MF_LUA_KAFKA))
        luaL_error(L, "kafka_produce task: producer must be an mf.kafka "
                      "object");
    lua_getfield(L, idx, "message");
    int top = lua_gettop(L);
    mf_kafka_message_t m;
    mf_lua_kafka_check_message(L, top, &m);
    lua_settop(L, top - 2);
}

static mf_task_t *mf_lua__kafka_produce_create(lua_State *L, int idx,
                                               void *data, mf_loop_t *loop,
                                               mf_task_cb cb, void *user)
{
    (void)data;
    int top = lua_gettop(L);
    lua_getfield(L, idx, "producer");
    const mf_lua_kafka_t *k = lua_touserdata(L, -1);
    lua_getfield(L, idx, "message");
    mf_kafka_message_t m;
    mf_lua_kafka_check_message(L, top + 2, &m);
    mf_task_t *task = mf_task_kafka_produce_create(loop, k->k, &m, cb, user);
    lua_settop(L, top); /* the task has its copy */
    return task;
}

static void mf_lua__kafka_produce_result(lua_State *L, mf_task_t *task,
                                         void *data)
{
    (void)data;
    lua_pushinteger(L, mf_task_kafka_partition(task));
    lua_setfield(L, -2, "partition");
    lua_pushnumber(L, (lua_Number)mf_task_kafka_offset(task));
    lua_setfield(L, -2, "offset");
}

static const char *mf_lua__kafka_produce_error(const mf_task_t *task,
                                               void *data, char *buf,
                                               size_t len)
{
    (void)data;
    return mf_lua_kafka_error(task, buf, len);
}

/* For reports: the message's topic. */
static void mf_lua__kafka_produce_describe(lua_State *L, int idx)
{
    lua_getfield(L, idx, "message");
    if (lua_type(L, -1) == LUA_TTABLE)
        lua_getfield(L, -1, "topic");
    else
        lua_pushnil(L);
    lua_remove(L, -2);
}

const mf_lua_kind_t mf_lua_task_kafka_produce_kind = {
    .name = "kafka_produce",
    .check = mf_lua__kafka_produce_check,
    .create = mf_lua__kafka_produce_create,
    .result = mf_lua__kafka_produce_result,
    .error = mf_lua__kafka_produce_error,
    .describe = mf_lua__kafka_produce_describe,
};
