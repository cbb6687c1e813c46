/*
 * lua/kafka/mf_lua_kafka.c — moonflow.kafka, the C side of mf.kafka: producer
 * objects (one per property list and host, each holding one reference to
 * the process's mf_kafka_t), k:produce, k:produce_batch, k:metadata,
 * k:create_topic, k:consumer (opened by mf_lua_kafka_consumer.c), and what the
 * "kafka_produce" task kind shares: message tables, error strings.
 *
 * Owns: the producer objects (the host's cache table keeps them until the
 * host closes; their __gc closes the handle with a bounded flush). A call
 * that waits starts its task straight from C and parks the coroutine on
 * it (task->user names the coroutine; the cleanup hook clears it and
 * cancels the task, so a late completion touches no Lua).
 *
 * May call: moonflow/kafka.h, the engine's public headers and the host's
 * coroutine API.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include <moonflow/lua_arg.h>
#include <moonflow/common.h>

#include "host/mf_lua_int.h"
#include "mf_lua_kafka.h"

/* Handles still flushing at host close wait at most this long. */
#define MF_LUA_KAFKA_CLOSE_MS 5000

mf_lua_kafka_t *mf_lua_kafka_check(lua_State *L, int idx)
{
    return mf_lua_check_udata(L, idx, MF_LUA_KAFKA);
}

const char *mf_lua_kafka_error(const mf_task_t *task, char *buf, size_t len)
{
    int state = mf_task_state(task);
    if (state == MF_STATE_SUCCESS)
        return NULL;
    const char *text = mf_task_kafka_error(task);
    if (text)
        snprintf(buf, len, "kafka %s", text);
    else
        snprintf(buf, len, "%s: %s", mf_state_name(state),
                 mf_strerror(mf_task_error(task)));
    return buf;
}

/* ---- properties ------------------------------------------------------- */

/* The value at -1 as librdkafka wants it; raises naming the key. */
static const char *mf_lua__prop_value(lua_State *L, const char *name, char *tmp,
                                      size_t len)
{
    switch (lua_type(L, -1)) {
    case LUA_TSTRING:
        return lua_tostring(L, -1);
    case LUA_TBOOLEAN:
        return lua_toboolean(L, -1) ? "true" : "false";
    case LUA_TNUMBER: {
        lua_Number d = lua_tonumber(L, -1);
        if (d == floor(d) && fabs(d) < 9.2e18)
            snprintf(tmp, len, "%lld", (long long)d);
        else
            snprintf(tmp, len, "%.17g", d);
        return tmp;
    }
    default:
        luaL_error(L,
                   "mf.kafka: property '%s' must be a string, number or "
                   "boolean, got %s",
                   name, luaL_typename(L, -1));
        return NULL;
    }
}

static int mf_lua__prop_cmp(const void *a, const void *b)
{
    return strcmp(((const mf_kafka_prop_t *)a)->name,
                  ((const mf_kafka_prop_t *)b)->name);
}

static char *mf_lua__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(mf_xmalloc(n), s, n);
}

static void mf_lua__props_free(mf_kafka_prop_t *props, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        mf_free((void *)props[i].name);
        mf_free((void *)props[i].value);
    }
    mf_free(props);
}

/* Raises unless every key of the conf table at idx is a string and every
 * value a string, number or boolean. */
static void mf_lua__props_check(lua_State *L, int idx, size_t *n)
{
    char tmp[64];
    *n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            luaL_error(L, "mf.kafka: property names must be strings");
        mf_lua__prop_value(L, lua_tostring(L, -2), tmp, sizeof tmp);
        (*n)++;
        lua_pop(L, 1);
    }
}

/* The checked conf table at idx as a property list sorted by name
 * (copied; brokers is bootstrap.servers). */
static mf_kafka_prop_t *mf_lua__props(lua_State *L, int idx, size_t *n)
{
    mf_lua__props_check(L, idx, n);
    mf_kafka_prop_t *props = mf_xcalloc(*n ? *n : 1, sizeof *props);
    size_t i = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const char *name = lua_tostring(L, -2);
        char tmp[64];
        props[i].value =
            mf_lua__strdup(mf_lua__prop_value(L, name, tmp, sizeof tmp));
        props[i].name = mf_lua__strdup(
            strcmp(name, "brokers") == 0 ? "bootstrap.servers" : name);
        i++;
        lua_pop(L, 1);
    }
    qsort(props, *n, sizeof *props, mf_lua__prop_cmp);
    for (size_t j = 1; j < *n; j++)
        if (strcmp(props[j - 1].name, props[j].name) == 0) {
            mf_lua__props_free(props, *n);
            luaL_error(L, "mf.kafka: brokers and bootstrap.servers both given");
        }
    return props;
}

/* ---- messages --------------------------------------------------------------
 */

/* ---- the names a message and its outcome use ----------------------------
 *
 * LuaJIT interns every string: while this state keeps its own copy of a
 * name alive, any string with that name is that very object. So a message
 * table's keys are told apart by their addresses (no strlen, no hashing,
 * no compare per key), and outcome tables are filled with rawset of the
 * interned names (no lookup of the name per field).
 */

enum {
    MF_LUA__K_TOPIC,
    MF_LUA__K_VALUE,
    MF_LUA__K_KEY,
    MF_LUA__K_PARTITION,
    MF_LUA__K_HEADERS,
    MF_LUA__K_TIMESTAMP,
    MF_LUA__K_MESSAGE_KEYS, /* the keys a message may have end here */
    MF_LUA__K_OFFSET = MF_LUA__K_MESSAGE_KEYS,
    MF_LUA__K_ERROR,
    MF_LUA__K_COUNT
};

static const char *const mf_lua__names[MF_LUA__K_COUNT] = {
    "topic",   "value",     "key",    "partition",
    "headers", "timestamp", "offset", "error"};

/* A userdata of the state's registry: the interned names' addresses; its
 * environment (the table of the names, 1-based) keeps them alive. */
typedef struct mf_lua__names {
    const char *at[MF_LUA__K_COUNT];
} mf_lua__names_t;

static const char mf_lua__names_key = 0;

static const mf_lua__names_t *mf_lua__names_new(lua_State *L)
{
    mf_lua__names_t *ns = lua_newuserdata(L, sizeof *ns);
    lua_createtable(L, MF_LUA__K_COUNT, 0);
    for (int i = 0; i < MF_LUA__K_COUNT; i++) {
        lua_pushstring(L, mf_lua__names[i]);
        ns->at[i] = lua_tostring(L, -1);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfenv(L, -2);
    lua_pushlightuserdata(L, (void *)&mf_lua__names_key);
    lua_pushvalue(L, -2);
    lua_rawset(L, LUA_REGISTRYINDEX);
    return ns;
}

/* This state's names, their userdata pushed. */
static const mf_lua__names_t *mf_lua__names_push(lua_State *L)
{
    lua_pushlightuserdata(L, (void *)&mf_lua__names_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
    const mf_lua__names_t *ns = lua_touserdata(L, -1);
    if (ns)
        return ns;
    lua_pop(L, 1);
    return mf_lua__names_new(L);
}

/* Which of the message's keys the key at -2 is; MF_LUA__K_MESSAGE_KEYS:
 * none of them. */
static int mf_lua__msg_key(lua_State *L, const mf_lua__names_t *ns)
{
    if (lua_type(L, -2) != LUA_TSTRING)
        return MF_LUA__K_MESSAGE_KEYS;
    const char *k = lua_tostring(L, -2);
    int i = 0;
    while (i < MF_LUA__K_MESSAGE_KEYS && ns->at[i] != k)
        i++;
    return i;
}

/* ---- messages --------------------------------------------------------------
 */

/* The string at -1 (the message's value for key); the table keeps it. */
static const char *mf_lua__msg_string(lua_State *L, const char *key,
                                      size_t *len)
{
    if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "kafka message: %s must be a string, got %s", key,
                   luaL_typename(L, -1));
    return lua_tolstring(L, -1, len);
}

/* The integer at -1 (the message's value for key), min..max. */
static lua_Number mf_lua__msg_integer(lua_State *L, const char *key,
                                      lua_Number min, lua_Number max)
{
    lua_Number d = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER || d != floor(d) || d < min || d > max)
        luaL_error(L, "kafka message: %s must be an integer from %.0f to %.0f",
                   key, min, max);
    return d;
}

/* Raises naming the key at -2, none of a message's. */
static void mf_lua__msg_unknown_key(lua_State *L)
{
    luaL_error(L, "kafka message: unknown key '%s'",
               lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2)
                                              : luaL_typename(L, -2));
}

/* The message's field at -1 (key at -2) into m; false for headers (read
 * after the walk: reading them pushes). */
static bool mf_lua__msg_field(lua_State *L, const mf_lua__names_t *ns,
                              mf_kafka_message_t *m)
{
    switch (mf_lua__msg_key(L, ns)) {
    case MF_LUA__K_TOPIC:
        m->topic = mf_lua__msg_string(L, "topic", NULL);
        return true;
    case MF_LUA__K_VALUE:
        m->value = mf_lua__msg_string(L, "value", &m->value_len);
        return true;
    case MF_LUA__K_KEY:
        m->key = mf_lua__msg_string(L, "key", &m->key_len);
        return true;
    case MF_LUA__K_PARTITION:
        m->partition =
            (int32_t)mf_lua__msg_integer(L, "partition", 0, INT32_MAX);
        return true;
    case MF_LUA__K_TIMESTAMP:
        m->timestamp_ms =
            (int64_t)mf_lua__msg_integer(L, "timestamp", 0, 9.2e18);
        return true;
    case MF_LUA__K_HEADERS:
        return false;
    default:
        mf_lua__msg_unknown_key(L);
        return true;
    }
}

/* {name, value|nil} at -1 into h; raises naming the entry. */
static void mf_lua__header_pair(lua_State *L, size_t i, mf_kafka_header_t *h)
{
    if (!lua_istable(L, -1))
        luaL_error(L, "kafka message: headers[%d] must be {name, value}",
                   (int)i);
    lua_rawgeti(L, -1, 1);
    lua_rawgeti(L, -2, 2);
    if (lua_type(L, -2) != LUA_TSTRING ||
        (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TSTRING))
        luaL_error(L, "kafka message: headers[%d] must be {name, value}",
                   (int)i);
    h->name = lua_tostring(L, -2); /* the pair table keeps both */
    h->value = lua_tolstring(L, -1, &h->len);
    lua_pop(L, 2);
}

/* Raises: the headers table holds a key of neither form. */
static void mf_lua__headers_bad(lua_State *L)
{
    luaL_error(L, "kafka message: headers must map names to strings or list "
                  "{name, value} pairs");
}

/* Counts the named entries of the headers table at idx (string keys); any
 * key but a name or an index of its list part raises. */
static size_t mf_lua__headers_named(lua_State *L, int idx, size_t listed)
{
    size_t named = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) == LUA_TSTRING) {
            if (lua_type(L, -1) != LUA_TSTRING)
                mf_lua__headers_bad(L);
            named++;
        } else if (lua_type(L, -2) != LUA_TNUMBER || lua_tonumber(L, -2) < 1 ||
                   lua_tonumber(L, -2) > (lua_Number)listed ||
                   lua_tonumber(L, -2) != floor(lua_tonumber(L, -2))) {
            mf_lua__headers_bad(L);
        }
        lua_pop(L, 1);
    }
    return named;
}

/* The headers table at idx into a userdata array pushed on the stack: its
 * list of {name, value} pairs first, in order, then its name = value
 * entries (both forms may share one table). */
static mf_kafka_header_t *mf_lua__headers(lua_State *L, int idx, size_t *n)
{
    size_t listed = lua_objlen(L, idx);
    size_t count = listed + mf_lua__headers_named(L, idx, listed);
    mf_kafka_header_t *hs =
        lua_newuserdata(L, (count ? count : 1) * sizeof *hs);
    for (size_t i = 0; i < listed; i++) {
        lua_rawgeti(L, idx, (int)i + 1);
        mf_lua__header_pair(L, i + 1, &hs[i]);
        lua_pop(L, 1);
    }
    size_t i = listed;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) == LUA_TSTRING) {
            hs[i].name = lua_tostring(L, -2);
            hs[i].value = lua_tolstring(L, -1, &hs[i].len);
            i++;
        }
        lua_pop(L, 1);
    }
    *n = count;
    return hs;
}

/* The message's headers (present at -1) into m; the array's userdata
 * stays on the stack. */
static void mf_lua__msg_headers(lua_State *L, mf_kafka_message_t *m)
{
    if (!lua_istable(L, -1))
        luaL_error(L, "kafka message: headers must be a table, got %s",
                   luaL_typename(L, -1));
    /* The headers table stays referenced by the message table. */
    int hidx = lua_gettop(L);
    m->headers = mf_lua__headers(L, hidx, &m->nheaders);
    lua_remove(L, hidx);
}

/* The message table at idx (absolute) into m; topic: the topic of a
 * message that names none (NULL: it must name one). Pushes the headers'
 * array when it has headers. */
static void mf_lua__check_table(lua_State *L, int idx,
                                const mf_lua__names_t *ns, const char *topic,
                                mf_kafka_message_t *m)
{
    memset(m, 0, sizeof *m);
    m->partition = MF_KAFKA_PARTITION_ANY;
    bool headers = false;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        headers |= !mf_lua__msg_field(L, ns, m);
        lua_pop(L, 1);
    }
    if (!m->topic)
        m->topic = topic;
    if (!m->topic)
        luaL_error(L, "kafka message: topic (a string) is required");
    if (headers) {
        lua_getfield(L, idx, "headers");
        mf_lua__msg_headers(L, m);
    }
}

void mf_lua_kafka_check_message(lua_State *L, int idx, mf_kafka_message_t *m)
{
    if (!lua_istable(L, idx))
        luaL_error(L, "kafka message: a table expected, got %s",
                   luaL_typename(L, idx));
    idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
    const mf_lua__names_t *ns = mf_lua__names_push(L);
    lua_pop(L, 1); /* the registry keeps them */
    mf_lua__check_table(L, idx, ns, NULL, m);
}

/* ---- producer objects ---------------------------------------------------- */

static const char mf_lua__kafka_cache_key = 0;

/* The host's cache (registry) pushed; created on first use. */
static void mf_lua__cache_push(lua_State *L)
{
    lua_pushlightuserdata(L, (void *)&mf_lua__kafka_cache_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
    if (!lua_isnil(L, -1))
        return;
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushlightuserdata(L, (void *)&mf_lua__kafka_cache_key);
    lua_pushvalue(L, -2);
    lua_rawset(L, LUA_REGISTRYINDEX);
}

/* The cache key: names and values, NUL-separated (sorted already). */
static void mf_lua__cache_key(lua_State *L, const mf_kafka_prop_t *props,
                              size_t n)
{
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (size_t i = 0; i < n; i++) {
        luaL_addstring(&b, props[i].name);
        luaL_addchar(&b, '\0');
        luaL_addstring(&b, props[i].value);
        luaL_addchar(&b, '\0');
    }
    luaL_pushresult(&b);
}

/* open(conf) -> the producer object for conf on this host. */
static int mf_lua__open(lua_State *L)
{
    mf_lua_check_type(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    size_t n = 0;
    mf_kafka_prop_t *props = mf_lua__props(L, 1, &n);
    mf_lua__cache_push(L);          /* 2 */
    mf_lua__cache_key(L, props, n); /* 3 */
    lua_pushvalue(L, 3);
    lua_rawget(L, 2);
    if (!lua_isnil(L, -1)) {
        mf_lua__props_free(props, n);
        return 1;
    }
    lua_pop(L, 1);
    char err[512];
    mf_kafka_t *k = mf_kafka_open(props, n, err, sizeof err);
    if (!k) {
        mf_lua__props_free(props, n);
        return luaL_error(L, "mf.kafka: %s", err);
    }
    mf_lua_kafka_t *obj = lua_newuserdata(L, sizeof *obj);
    *obj = (mf_lua_kafka_t){k, props, n};
    luaL_getmetatable(L, MF_LUA_KAFKA);
    lua_setmetatable(L, -2);
    lua_pushvalue(L, 3);
    lua_pushvalue(L, -2);
    lua_rawset(L, 2);
    return 1;
}

/* At host close: the last reference flushes (bounded) and destroys. */
static int mf_lua__gc(lua_State *L)
{
    mf_lua_kafka_t *obj = mf_lua_check_udata(L, 1, MF_LUA_KAFKA);
    if (obj->k)
        mf_kafka_close(obj->k, MF_LUA_KAFKA_CLOSE_MS);
    obj->k = NULL;
    mf_lua__props_free(obj->props, obj->nprops);
    obj->props = NULL;
    obj->nprops = 0;
    return 0;
}

static int mf_lua__tostring(lua_State *L)
{
    lua_pushfstring(L, "mf.kafka: %p", lua_touserdata(L, 1));
    return 1;
}

/* ---- waiting on a task ----------------------------------------------------
 */

/* Cleanup hook (abort, shutdown): the task forgets the coroutine and is
 * canceled; its callback still runs, with nothing to resume. */
static void mf_lua__task_detach(void *op)
{
    mf_task_t *task = op;
    task->user = NULL;
    mf_task_cancel(task);
}

static int mf_lua__park_on(lua_State *L, mf_lua_co_t *co, mf_task_t *task)
{
    task->user = co;
    mf_task_start(task);
    mf_lua_co_park(co, mf_lua__task_detach, task);
    return lua_yield(L, 0);
}

/* Pushes nil, err for a failed task and returns 2; 0 on success. */
static int mf_lua__push_failure(lua_State *L, const mf_task_t *task)
{
    char buf[MF_LUA_KAFKA_ERR_MAX];
    const char *err = mf_lua_kafka_error(task, buf, sizeof buf);
    if (!err)
        return 0;
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
}

/* A waiting call's task completed: resumes its coroutine (if it still
 * waits) with push's value, or nil, err. */
typedef void (*mf_lua__push_fn)(lua_State *L, const mf_task_t *task);
static void mf_lua__resume_with(mf_task_t *task, mf_lua__push_fn push)
{
    mf_lua_co_t *co = task->user;
    if (!co)
        return;
    mf_lua_co_unpark(co);
    lua_State *L = mf_lua_co_thread(co);
    int n = mf_lua__push_failure(L, task);
    if (n == 0) {
        push(L, task);
        n = 1;
    }
    mf_lua_co_resume(co, n);
}

/* ---- k:produce ------------------------------------------------------------
 */

/* The interned name pushed; nidx: the names' table. */
static void mf_lua__push_name(lua_State *L, int nidx, int name)
{
    lua_rawgeti(L, nidx, name + 1);
}

/* {partition=, offset=}, or {error=} for a failure; nidx: the names'
 * table. */
static void mf_lua__push_outcome(lua_State *L, int nidx, int err,
                                 int32_t partition, int64_t offset)
{
    if (err) {
        char text[MF_LUA_KAFKA_ERR_MAX];
        mf_kafka_error_text(err, text, sizeof text);
        lua_createtable(L, 0, 1);
        mf_lua__push_name(L, nidx, MF_LUA__K_ERROR);
        lua_pushfstring(L, "kafka %s", text);
        lua_rawset(L, -3);
        return;
    }
    lua_createtable(L, 0, 2);
    mf_lua__push_name(L, nidx, MF_LUA__K_PARTITION);
    lua_pushinteger(L, partition);
    lua_rawset(L, -3);
    mf_lua__push_name(L, nidx, MF_LUA__K_OFFSET);
    lua_pushnumber(L, (lua_Number)offset);
    lua_rawset(L, -3);
}

/* The names' table pushed; its index. */
static int mf_lua__names_table(lua_State *L)
{
    mf_lua__names_push(L);
    lua_getfenv(L, -1);
    lua_remove(L, -2);
    return lua_gettop(L);
}

static void mf_lua__push_delivery(lua_State *L, const mf_task_t *task)
{
    int nidx = mf_lua__names_table(L);
    mf_lua__push_outcome(L, nidx, 0, mf_task_kafka_partition(task),
                         mf_task_kafka_offset(task));
    lua_remove(L, nidx);
}

static void mf_lua__produced(mf_task_t *task)
{
    mf_lua__resume_with(task, mf_lua__push_delivery);
}

static int mf_lua__produce(lua_State *L)
{
    mf_lua_kafka_t *obj = mf_lua_kafka_check(L, 1);
    mf_lua_check_type(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    mf_kafka_message_t m;
    mf_lua_kafka_check_message(L, 2, &m);
    mf_lua_co_t *co = mf_lua_co_check(L);
    mf_loop_t *loop = mf_lua_host_loop(mf_lua_co_host(co));
    mf_task_t *task =
        mf_task_kafka_produce_create(loop, obj->k, &m, mf_lua__produced, co);
    return mf_lua__park_on(L, co, task);
}

/* ---- k:produce_batch -------------------------------------------------------
 */

/* More than librdkafka's default queue (queue.buffering.max.messages)
 * holds could only fail. */
#define MF_LUA_KAFKA_BATCH_MAX 100000

/* An array of n numbers from the deliveries, one field of each. */
static void mf_lua__push_column(lua_State *L, const mf_kafka_delivery_t *d,
                                size_t n, bool offsets)
{
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushnumber(L, offsets ? (lua_Number)d[i].offset
                                  : (lua_Number)d[i].partition);
        lua_rawseti(L, -2, (int)i + 1);
    }
}

/* {[i] = "kafka NAME: ..."} of the failed messages; their count. */
static size_t mf_lua__push_errors(lua_State *L, const mf_kafka_delivery_t *d,
                                  size_t n)
{
    size_t failed = 0;
    lua_newtable(L);
    for (size_t i = 0; i < n; i++) {
        if (!d[i].err)
            continue;
        char text[MF_LUA_KAFKA_ERR_MAX];
        mf_kafka_error_text(d[i].err, text, sizeof text);
        lua_pushfstring(L, "kafka %s", text);
        lua_rawseti(L, -2, (int)i + 1);
        failed++;
    }
    return failed;
}

/* The batch's outcome: {delivered=, failed=, errors=, partitions=,
 * offsets=}, a column per field rather than a table per message. */
static void mf_lua__push_batch_outcome(lua_State *L,
                                       const mf_kafka_delivery_t *d, size_t n)
{
    lua_createtable(L, 0, 5);
    size_t failed = mf_lua__push_errors(L, d, n);
    lua_setfield(L, -2, "errors");
    lua_pushinteger(L, (lua_Integer)failed);
    lua_setfield(L, -2, "failed");
    lua_pushinteger(L, (lua_Integer)(n - failed));
    lua_setfield(L, -2, "delivered");
    mf_lua__push_column(L, d, n, false);
    lua_setfield(L, -2, "partitions");
    mf_lua__push_column(L, d, n, true);
    lua_setfield(L, -2, "offsets");
}

static void mf_lua__push_deliveries(lua_State *L, const mf_task_t *task)
{
    size_t n = 0;
    const mf_kafka_delivery_t *d = mf_task_kafka_deliveries(task, &n);
    mf_lua__push_batch_outcome(L, d, n);
}

static void mf_lua__batch_produced(mf_task_t *task)
{
    mf_lua__resume_with(task, mf_lua__push_deliveries);
}

/* The messages of the array at 2 into ms: tables, or strings (a value for
 * opts.topic). Headers' arrays are anchored in the table at 5; the
 * message tables keep their strings. */
static void mf_lua__batch_check(lua_State *L, mf_kafka_message_t *ms, size_t n,
                                const char *topic)
{
    const mf_lua__names_t *ns = mf_lua__names_push(L);
    lua_pop(L, 1); /* the registry keeps them */
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, 2, (int)i + 1);
        int top = lua_gettop(L);
        switch (lua_type(L, top)) {
        case LUA_TSTRING:
            if (!topic)
                luaL_error(L,
                           "kafka message %d: a string message needs "
                           "opts.topic",
                           (int)i + 1);
            memset(&ms[i], 0, sizeof ms[i]);
            ms[i].partition = MF_KAFKA_PARTITION_ANY;
            ms[i].topic = topic;
            ms[i].value = lua_tolstring(L, top, &ms[i].value_len);
            break;
        case LUA_TTABLE:
            mf_lua__check_table(L, top, ns, topic, &ms[i]);
            if (lua_gettop(L) > top) /* the headers' array */
                lua_rawseti(L, 5, (int)i + 1);
            break;
        default:
            luaL_error(L,
                       "kafka message %d: a table or a string expected, "
                       "got %s",
                       (int)i + 1, luaL_typename(L, top));
        }
        lua_settop(L, top - 1);
    }
}

/* opts.topic of the options at 3 (none: NULL); the options table keeps
 * it. */
static const char *mf_lua__batch_topic(lua_State *L)
{
    if (lua_isnoneornil(L, 3))
        return NULL;
    mf_lua_check_type(L, 3, LUA_TTABLE);
    const char *topic = NULL;
    lua_pushnil(L);
    while (lua_next(L, 3)) {
        if (lua_type(L, -2) != LUA_TSTRING ||
            strcmp(lua_tostring(L, -2), "topic") != 0)
            luaL_error(L, "kafka produce_batch: unknown option '%s'",
                       lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2)
                                                      : luaL_typename(L, -2));
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "kafka produce_batch: topic must be a string");
        topic = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    return topic;
}

static int mf_lua__produce_batch(lua_State *L)
{
    mf_lua_kafka_t *obj = mf_lua_kafka_check(L, 1);
    mf_lua_check_type(L, 2, LUA_TTABLE);
    lua_settop(L, 3);
    const char *topic = mf_lua__batch_topic(L);
    mf_lua_co_t *co = mf_lua_co_check(L);
    size_t n = lua_objlen(L, 2);
    mf_lua_arg_check(L, n <= MF_LUA_KAFKA_BATCH_MAX, 2,
                     "at most 100000 messages");
    if (n == 0) {
        mf_lua__push_batch_outcome(L, NULL, 0);
        return 1;
    }
    mf_kafka_message_t *ms = lua_newuserdata(L, n * sizeof *ms); /* 4 */
    lua_newtable(L);                                             /* 5 */
    mf_lua__batch_check(L, ms, n, topic);
    mf_loop_t *loop = mf_lua_host_loop(mf_lua_co_host(co));
    mf_task_t *task = mf_task_kafka_produce_batch_create(
        loop, obj->k, ms, n, mf_lua__batch_produced, co);
    lua_settop(L, 3); /* the task has its copy */
    return mf_lua__park_on(L, co, task);
}

/* ---- k:metadata -----------------------------------------------------------
 */

static void mf_lua__push_ids(lua_State *L, const int32_t *ids, size_t n)
{
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushinteger(L, ids[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
}

static void mf_lua__push_partition(lua_State *L,
                                   const mf_kafka_partition_info_t *p)
{
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, p->id);
    lua_setfield(L, -2, "id");
    lua_pushinteger(L, p->leader);
    lua_setfield(L, -2, "leader");
    mf_lua__push_ids(L, p->replicas, p->nreplicas);
    lua_setfield(L, -2, "replicas");
    mf_lua__push_ids(L, p->isrs, p->nisrs);
    lua_setfield(L, -2, "isrs");
}

static void mf_lua__push_topic(lua_State *L, const mf_kafka_topic_info_t *t)
{
    lua_createtable(L, 0, 3);
    lua_pushstring(L, t->name);
    lua_setfield(L, -2, "name");
    if (t->err) {
        char text[MF_LUA_KAFKA_ERR_MAX];
        mf_kafka_error_text(t->err, text, sizeof text);
        lua_pushfstring(L, "kafka %s", text);
        lua_setfield(L, -2, "error");
    }
    lua_createtable(L, (int)t->npartitions, 0);
    for (size_t j = 0; j < t->npartitions; j++) {
        mf_lua__push_partition(L, &t->partitions[j]);
        lua_rawseti(L, -2, (int)j + 1);
    }
    lua_setfield(L, -2, "partitions");
}

static void mf_lua__push_metadata(lua_State *L, const mf_task_t *task)
{
    const mf_kafka_metadata_t *md = mf_task_kafka_metadata(task);
    lua_checkstack(L, 8);
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, md->controller_id);
    lua_setfield(L, -2, "controller");
    lua_createtable(L, (int)md->nbrokers, 0);
    for (size_t i = 0; i < md->nbrokers; i++) {
        lua_createtable(L, 0, 3);
        lua_pushinteger(L, md->brokers[i].id);
        lua_setfield(L, -2, "id");
        lua_pushstring(L, md->brokers[i].host);
        lua_setfield(L, -2, "host");
        lua_pushinteger(L, md->brokers[i].port);
        lua_setfield(L, -2, "port");
        lua_rawseti(L, -2, (int)i + 1);
    }
    lua_setfield(L, -2, "brokers");
    lua_createtable(L, 0, (int)md->ntopics);
    for (size_t i = 0; i < md->ntopics; i++) {
        mf_lua__push_topic(L, &md->topics[i]);
        lua_setfield(L, -2, md->topics[i].name);
    }
    lua_setfield(L, -2, "topics");
}

static void mf_lua__metadata_done(mf_task_t *task)
{
    mf_lua__resume_with(task, mf_lua__push_metadata);
}

static int mf_lua__metadata(lua_State *L)
{
    mf_lua_kafka_t *obj = mf_lua_kafka_check(L, 1);
    const char *topic = mf_lua_opt_string(L, 2, NULL);
    lua_Integer timeout = mf_lua_opt_integer(L, 3, 0);
    mf_lua_arg_check(L, timeout >= 0 && timeout <= INT32_MAX, 3,
                     "timeout_ms must be a number of ms");
    mf_lua_co_t *co = mf_lua_co_check(L);
    mf_loop_t *loop = mf_lua_host_loop(mf_lua_co_host(co));
    mf_task_t *task = mf_task_kafka_metadata_create(
        loop, obj->k, topic, (int)timeout, mf_lua__metadata_done, co);
    return mf_lua__park_on(L, co, task);
}

/* ---- k:create_topic ---------------------------------------------------------
 */

static void mf_lua__push_true(lua_State *L, const mf_task_t *task)
{
    (void)task;
    lua_pushboolean(L, 1);
}

static void mf_lua__created(mf_task_t *task)
{
    mf_lua__resume_with(task, mf_lua__push_true);
}

static int mf_lua__create_topic(lua_State *L)
{
    mf_lua_kafka_t *obj = mf_lua_kafka_check(L, 1);
    const char *name = mf_lua_check_string(L, 2);
    lua_Integer parts = mf_lua_check_integer(L, 3);
    lua_Integer repl = mf_lua_opt_integer(L, 4, -1);
    lua_Integer timeout = mf_lua_opt_integer(L, 5, 0);
    mf_lua_arg_check(L, parts > 0 && parts <= INT32_MAX, 3,
                     "partitions must be a positive number");
    mf_lua_arg_check(L, repl == -1 || (repl > 0 && repl <= INT16_MAX), 4,
                     "replication must be a positive number (or -1)");
    mf_lua_arg_check(L, timeout >= 0 && timeout <= INT32_MAX, 5,
                     "timeout_ms must be a number of ms");
    mf_lua_co_t *co = mf_lua_co_check(L);
    mf_loop_t *loop = mf_lua_host_loop(mf_lua_co_host(co));
    mf_task_t *task = mf_task_kafka_create_topic_create(
        loop, obj->k, name, (int)parts, (int)repl, (int)timeout,
        mf_lua__created, co);
    return mf_lua__park_on(L, co, task);
}

/* k:consumer(opts): mf_lua_kafka_consumer.c opens it. */
static int mf_lua__consumer(lua_State *L)
{
    mf_lua_kafka_check(L, 1);
    return mf_lua_kafka_consumer_new(L, 1, 2);
}

/* ---- the module ------------------------------------------------------------
 */

int mf_lua_open_kafka(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"produce k:produce(msg)", mf_lua__produce},
        {"produce_batch k:produce_batch(msgs [, opts])", mf_lua__produce_batch},
        {"metadata k:metadata([topic [, ms]])", mf_lua__metadata},
        {"create_topic k:create_topic(name, partitions [, replication [, ms]])",
         mf_lua__create_topic},
        {"consumer k:consumer(conf)", mf_lua__consumer},
        {NULL, NULL}};
    mf_lua_class(L, MF_LUA_KAFKA, methods, mf_lua__gc, mf_lua__tostring);
    lua_pop(L, 1);
    lua_newtable(L);
    mf_lua_push_named(L, mf_lua__open, "mf.kafka(conf)");
    lua_setfield(L, -2, "open");
    return 1;
}
