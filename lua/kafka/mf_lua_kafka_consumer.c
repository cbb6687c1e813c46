/*
 * lua/kafka/mf_lua_kafka_consumer.c — the Kafka consumer object of k:consumer
 * ("moonflow.kafka.consumer"): c:messages(), c:poll, c:commit, c:pause,
 * c:resume, c:seek, c:assignment, c:lag, c:errors, c:close, and the
 * on_assign / on_revoke callbacks.
 *
 * Owns the consumer record (loop memory), which has two owners: the Lua
 * object (a userdata holding a pointer to it) and the C consumer (its
 * closed callback's user). It is freed by whichever lets go second: __gc
 * (which starts the close) or the closed callback. A coroutine that waits
 * holds the object on its stack, so a record with a waiter is never
 * collected; a waiter's operation carries its coroutine (NULL once the
 * cleanup hook let it go: the completion then touches no Lua).
 *
 * messages(): one poll task per batch of `batch` records, converted to
 * tables at once (the task's records die with it) and handed out one by
 * one; a record's offset is stored for auto commit when the loop asks for
 * the next one or ends, at c:commit() and at close
 * (mf_kafka_consumer_store): a loop left with break never commits what its
 * body did not get to. c:poll's records count as
 * done at the next poll, commit or close (moonflow/kafka.h).
 *
 * Rebalances reach on_assign / on_revoke from a deferred step on the loop,
 * outside any coroutine (the C callback may run inside a coroutine's call,
 * when it starts a poll task); a raise is logged and ignored.
 *
 * May call: moonflow/kafka.h, the engine's public headers, the host's
 * coroutine API, mf_lua_kafka.h.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include <moonflow/lua_arg.h>
#include <moonflow/common.h>

#include "host/mf_lua_int.h"
#include "mf_lua_kafka.h"

#define MF_LUA_KC_BATCH 100

typedef struct mf_lua_kc {
    mf_kafka_consumer_t *c; /* NULL once closed */
    mf_loop_t *loop;
    mf_lua_host_t *host;      /* NULL once the object is collected */
    int on_assign, on_revoke; /* function refs, LUA_NOREF: none */
    size_t batch;
    bool closing;
    mf_list_t closers; /* coroutines waiting in c:close() */
    /* messages(): the batch being handed out (a table of messages) */
    int batch_ref;
    int next, count;
    bool has_prev; /* the last message handed out, stored at the next */
    /* The wait of messages(wait_ms) counts from the first assignment: a
     * poll that ended empty before it, or that began before it, is
     * followed by one more for the rest of the wait. */
    bool joined;         /* assigned once (an empty assignment too) */
    uint64_t joined_at;  /* loop time of the first assignment */
    uint64_t wait_began; /* loop time the current poll began */
    int wait_ms;         /* of the loop's wait; -1: none */
    char prev_topic[256];
    int32_t prev_partition;
    int64_t prev_offset;
    /* rebalances waiting for the deferred step */
    struct mf_lua_kc_event *events, **events_tail;
    bool posted;
    bool free_after_post;
    mf_post_t post;
} mf_lua_kc_t;

/* A coroutine waiting for a task of the consumer, or for its close. */
typedef struct mf_lua_kc_op {
    mf_lua_co_t *co; /* NULL once it let go */
    mf_lua_kc_t *kc;
    mf_task_t *task; /* NULL for c:close() */
    mf_list_t link;  /* kc->closers */
} mf_lua_kc_op_t;

static mf_lua_kc_t *mf_lua__kc_check(lua_State *L)
{
    mf_lua_kc_t **ud = mf_lua_check_udata(L, 1, MF_LUA_KAFKA_CONSUMER);
    return *ud;
}

/* The record of an open consumer; raises once it is closed. */
static mf_lua_kc_t *mf_lua__kc_open(lua_State *L, const char *method)
{
    mf_lua_kc_t *kc = mf_lua__kc_check(L);
    if (!kc->c || kc->closing)
        luaL_error(L, "c:%s: the consumer is closed", method);
    return kc;
}

static void mf_lua__events_free(mf_lua_kc_t *kc);

static void mf_lua__kc_free(mf_lua_kc_t *kc)
{
    if (kc->posted) { /* the deferred step frees it */
        kc->free_after_post = true;
        return;
    }
    mf_lua__events_free(kc);
    mf_loop_free(kc->loop, kc, sizeof *kc);
}

/* ---- waiting ---------------------------------------------------------- */

static void mf_lua__op_detach(void *arg)
{
    mf_lua_kc_op_t *op = arg;
    op->co = NULL;
    if (op->task) { /* its completion frees op */
        mf_task_cancel(op->task);
        return;
    }
    mf_list_remove(&op->link);
    mf_loop_free(op->kc->loop, op, sizeof *op);
}

/* Starts task for co, which waits (parked) for its completion. */
static void mf_lua__start_for(mf_lua_co_t *co, mf_lua_kc_t *kc, mf_task_t *task)
{
    mf_lua_kc_op_t *op = mf_loop_alloc(kc->loop, sizeof *op);
    *op = (mf_lua_kc_op_t){co, kc, task, {NULL, NULL}};
    task->user = op;
    mf_task_start(task);
    mf_lua_co_park(co, mf_lua__op_detach, op);
}

static int mf_lua__park_on(lua_State *L, mf_lua_kc_t *kc, mf_task_t *task)
{
    mf_lua__start_for(mf_lua_co_check(L), kc, task);
    return lua_yield(L, 0);
}

/* The coroutine a finished task resumes (unparked), or NULL; frees op. */
static mf_lua_co_t *mf_lua__op_done(mf_task_t *task, mf_lua_kc_t **kc)
{
    mf_lua_kc_op_t *op = task->user;
    mf_lua_co_t *co = op->co;
    *kc = op->kc;
    mf_loop_free(mf_task_loop(task), op, sizeof *op);
    if (co)
        mf_lua_co_unpark(co);
    return co;
}

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

/* ---- records as tables ------------------------------------------------ */

static void mf_lua__push_bytes(lua_State *L, const void *p, size_t len)
{
    if (p)
        lua_pushlstring(L, p, len);
    else
        lua_pushnil(L);
}

static void mf_lua__push_record(lua_State *L, const mf_kafka_record_t *r)
{
    lua_createtable(L, 0, 8);
    lua_pushstring(L, r->topic);
    lua_setfield(L, -2, "topic");
    lua_pushinteger(L, r->partition);
    lua_setfield(L, -2, "partition");
    lua_pushnumber(L, (lua_Number)r->offset);
    lua_setfield(L, -2, "offset");
    mf_lua__push_bytes(L, r->key, r->key_len);
    lua_setfield(L, -2, "key");
    mf_lua__push_bytes(L, r->value, r->value_len);
    lua_setfield(L, -2, "value");
    if (r->timestamp_ms >= 0) {
        lua_pushnumber(L, (lua_Number)r->timestamp_ms);
        lua_setfield(L, -2, "timestamp");
    }
    lua_createtable(L, (int)r->nheaders, 0);
    for (size_t i = 0; i < r->nheaders; i++) {
        lua_createtable(L, 2, 0);
        lua_pushstring(L, r->headers[i].name);
        lua_rawseti(L, -2, 1);
        if (r->headers[i].value) {
            lua_pushlstring(L, r->headers[i].value, r->headers[i].len);
            lua_rawseti(L, -2, 2);
        }
        lua_rawseti(L, -2, (int)i + 1);
    }
    lua_setfield(L, -2, "headers");
}

static void mf_lua__push_records(lua_State *L, const mf_task_t *task)
{
    size_t n;
    const mf_kafka_record_t *r = mf_task_kafka_records(task, &n);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        mf_lua__push_record(L, &r[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
}

/* ---- c:poll([max [, wait_ms]]) ---------------------------------------- */

/* Resumes the task's coroutine (if it still waits) with nil, err, or with
 * what push leaves on its thread. */
static void mf_lua__answer(mf_task_t *task,
                           void (*push)(lua_State *, const mf_task_t *))
{
    mf_lua_kc_t *kc;
    mf_lua_co_t *co = mf_lua__op_done(task, &kc);
    if (!co)
        return;
    lua_State *L = mf_lua_co_thread(co);
    int n = mf_lua__push_failure(L, task);
    if (n == 0) {
        push(L, task);
        n = 1;
    }
    mf_lua_co_resume(co, n);
}

static void mf_lua__polled(mf_task_t *task)
{
    mf_lua__answer(task, mf_lua__push_records);
}

static int mf_lua__wait_arg(lua_State *L, int idx, int dflt)
{
    lua_Number ms = mf_lua_opt_number(L, idx, dflt);
    if (ms < 0 || ms != floor(ms) || ms > 2147483647)
        mf_lua_arg_error(L, idx, "wait_ms must be an integer >= 0");
    return (int)ms;
}

static int mf_lua__poll(lua_State *L)
{
    mf_lua_kc_t *kc = mf_lua__kc_open(L, "poll");
    lua_Number max = mf_lua_opt_number(L, 2, MF_LUA_KC_BATCH);
    if (max < 1 || max > 100000 || max != floor(max))
        mf_lua_arg_error(L, 2, "max must be an integer from 1 to 100000");
    int wait_ms = mf_lua__wait_arg(L, 3, 1000);
    mf_task_t *task = mf_task_kafka_poll_create(kc->c, (size_t)max, wait_ms,
                                                mf_lua__polled, NULL);
    return mf_lua__park_on(L, kc, task);
}

/* ---- for msg in c:messages([wait_ms]) --------------------------------- */

static void mf_lua__batch_release(mf_lua_kc_t *kc)
{
    if (kc->batch_ref != LUA_NOREF && kc->host)
        mf_lua_unref(kc->host, kc->batch_ref);
    kc->batch_ref = LUA_NOREF;
    kc->next = kc->count = 0;
}

/* The last message handed out is done: its offset is stored. */
static void mf_lua__store_prev(mf_lua_kc_t *kc)
{
    if (!kc->has_prev || !kc->c)
        return;
    kc->has_prev = false;
    mf_kafka_tp_t tp = {kc->prev_topic, kc->prev_partition,
                        kc->prev_offset + 1};
    mf_kafka_consumer_store(kc->c, &tp, 1); /* revoked since: no matter */
}

/* Pushes the next message of the batch on L and remembers it. */
static void mf_lua__hand_out(mf_lua_kc_t *kc, lua_State *L)
{
    lua_rawgeti(L, LUA_REGISTRYINDEX, kc->batch_ref);
    lua_rawgeti(L, -1, kc->next++);
    lua_remove(L, -2);
    lua_getfield(L, -1, "topic");
    snprintf(kc->prev_topic, sizeof kc->prev_topic, "%s", lua_tostring(L, -1));
    lua_getfield(L, -2, "partition");
    kc->prev_partition = (int32_t)lua_tointeger(L, -1);
    lua_getfield(L, -3, "offset");
    kc->prev_offset = (int64_t)lua_tonumber(L, -1);
    lua_pop(L, 3);
    kc->has_prev = true;
    if (kc->next > kc->count)
        mf_lua__batch_release(kc);
}

/* A new batch: none of it is done yet, whatever the poll task stores. */
static void mf_lua__batch_unstore(mf_lua_kc_t *kc, const mf_task_t *task)
{
    size_t n;
    const mf_kafka_record_t *r = mf_task_kafka_records(task, &n);
    for (size_t i = 0; i < n; i++) {
        bool first = true;
        for (size_t j = 0; j < i && first; j++)
            first = r[j].partition != r[i].partition ||
                    strcmp(r[j].topic, r[i].topic) != 0;
        if (first) {
            mf_kafka_tp_t tp = {r[i].topic, r[i].partition, r[i].offset};
            mf_kafka_consumer_store(kc->c, &tp, 1);
        }
    }
}

static void mf_lua__fetched(mf_task_t *task);

/* What is left of the loop's wait after a poll that ended empty: all of it
 * before the first assignment, the part after it when the poll began
 * before it, 0 otherwise. */
static int mf_lua__wait_left(const mf_lua_kc_t *kc)
{
    if (kc->wait_ms <= 0)
        return 0;
    if (!kc->joined)
        return kc->wait_ms;
    if (kc->joined_at <= kc->wait_began)
        return 0;
    uint64_t since = mf_loop_now(kc->loop) - kc->joined_at;
    return since >= (uint64_t)kc->wait_ms ? 0 : kc->wait_ms - (int)since;
}

/* The next poll task of the loop, waiting up to wait_ms. */
static mf_task_t *mf_lua__fetch(mf_lua_kc_t *kc, int wait_ms)
{
    kc->wait_began = mf_loop_now(kc->loop);
    return mf_task_kafka_poll_create(kc->c, kc->batch, wait_ms, mf_lua__fetched,
                                     NULL);
}

static void mf_lua__fetched(mf_task_t *task)
{
    mf_lua_kc_t *kc;
    mf_lua_co_t *co = mf_lua__op_done(task, &kc);
    if (!co)
        return;
    lua_State *L = mf_lua_co_thread(co);
    size_t n = 0;
    mf_task_kafka_records(task, &n);
    if (mf_task_state(task) != MF_STATE_SUCCESS) {
        if (mf_task_error(task) == MF_ECLOSED) {
            lua_pushnil(L); /* the loop ends */
            mf_lua_co_resume(co, 1);
        } else {
            mf_lua_co_resume(co, mf_lua__push_failure(L, task));
        }
        return;
    }
    int left = n == 0 && kc->c && !kc->closing ? mf_lua__wait_left(kc) : 0;
    if (left > 0) { /* the wait has not (all) passed since the assignment */
        mf_lua__start_for(co, kc, mf_lua__fetch(kc, left));
        return;
    }
    if (n == 0) { /* wait_ms passed with nothing: the loop ends */
        lua_pushnil(L);
        mf_lua_co_resume(co, 1);
        return;
    }
    mf_lua__batch_unstore(kc, task);
    mf_lua__push_records(L, task);
    kc->batch_ref = mf_lua_ref(kc->host, L);
    kc->next = 1;
    kc->count = (int)n;
    mf_lua__hand_out(kc, L);
    mf_lua_co_resume(co, 1);
}

/* The raw step: the next message, nil at the end, or nil, err. */
static int mf_lua__next_raw(lua_State *L)
{
    mf_lua_kc_t *kc = mf_lua__kc_check(L);
    int wait_ms = lua_isnil(L, 2) ? -1 : mf_lua__wait_arg(L, 2, 0);
    mf_lua__store_prev(kc);
    if (kc->batch_ref != LUA_NOREF) {
        mf_lua__hand_out(kc, L);
        return 1;
    }
    if (!kc->c || kc->closing) {
        lua_pushnil(L);
        return 1;
    }
    kc->wait_ms = wait_ms;
    return mf_lua__park_on(L, kc, mf_lua__fetch(kc, wait_ms));
}

/* The iterator raises what the raw step returns as an error (a C function
 * that yielded cannot raise when resumed). */
static const char mf_lua__iter_src[] =
    "local next_raw, c, wait_ms = ...\n"
    "return function()\n"
    "  local m, err = next_raw(c, wait_ms)\n"
    "  if m == nil and err then error(err, 2) end\n"
    "  return m\n"
    "end\n";

static int mf_lua__messages(lua_State *L)
{
    mf_lua__kc_check(L);
    if (!lua_isnoneornil(L, 2))
        mf_lua__wait_arg(L, 2, 0);
    lua_settop(L, 2);
    if (luaL_loadbuffer(L, mf_lua__iter_src, sizeof mf_lua__iter_src - 1,
                        "=c:messages") != 0)
        return lua_error(L);
    lua_pushcfunction(L, mf_lua__next_raw);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 2);
    lua_call(L, 3, 1);
    return 1;
}

/* ---- c:commit([parts]), pause, resume, seek --------------------------- */

/* parts = { {topic=, partition=, offset=}, ... } → *out (strings point
 * into the table: keep it on the stack). */
static size_t mf_lua__parts(lua_State *L, int idx, bool offsets,
                            mf_kafka_tp_t **out)
{
    mf_lua_check_type(L, idx, LUA_TTABLE);
    size_t n = lua_objlen(L, idx);
    if (n == 0)
        mf_lua_arg_error(L, idx, "parts must be a non-empty array");
    mf_kafka_tp_t *tp = lua_newuserdata(L, n * sizeof *tp);
    lua_replace(L, idx + 1); /* anchored in the slot after parts */
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, idx, (int)i + 1);
        if (!lua_istable(L, -1))
            mf_lua_arg_error(L, idx, "each part must be a table");
        lua_getfield(L, -1, "topic");
        lua_getfield(L, -2, "partition");
        lua_getfield(L, -3, "offset");
        if (lua_type(L, -3) != LUA_TSTRING || !lua_isnumber(L, -2))
            mf_lua_arg_error(L, idx, "each part needs topic= and partition=");
        tp[i].topic = lua_tostring(L, -3);
        tp[i].partition = (int32_t)lua_tointeger(L, -2);
        tp[i].offset = MF_KAFKA_OFFSET_INVALID;
        if (offsets && lua_type(L, -1) == LUA_TSTRING) {
            const char *o = lua_tostring(L, -1);
            if (strcmp(o, "beginning") == 0)
                tp[i].offset = MF_KAFKA_OFFSET_BEGINNING;
            else if (strcmp(o, "end") == 0)
                tp[i].offset = MF_KAFKA_OFFSET_END;
            else
                mf_lua_arg_error(L, idx,
                                 "offset must be a number, "
                                 "\"beginning\" or \"end\"");
        } else if (offsets) {
            if (!lua_isnumber(L, -1) || lua_tonumber(L, -1) < 0)
                mf_lua_arg_error(L, idx,
                                 "each part needs offset= (a number >= "
                                 "0, \"beginning\" or \"end\")");
            tp[i].offset = (int64_t)lua_tonumber(L, -1);
        }
        lua_pop(L, 4);
    }
    *out = tp;
    return n;
}

static void mf_lua__push_true(lua_State *L, const mf_task_t *task)
{
    (void)task;
    lua_pushboolean(L, 1);
}

static void mf_lua__committed(mf_task_t *task)
{
    mf_lua__answer(task, mf_lua__push_true);
}

static int mf_lua__commit(lua_State *L)
{
    mf_lua_kc_t *kc = mf_lua__kc_open(L, "commit");
    mf_kafka_tp_t *tp = NULL;
    size_t n = 0;
    lua_settop(L, 3);
    if (!lua_isnil(L, 2))
        n = mf_lua__parts(L, 2, true, &tp);
    else /* the current positions: after the message being handled */
        mf_lua__store_prev(kc);
    mf_task_t *task =
        mf_task_kafka_commit_create(kc->c, tp, n, mf_lua__committed, NULL);
    return mf_lua__park_on(L, kc, task);
}

typedef int (*mf_lua__tp_fn)(mf_kafka_consumer_t *, const mf_kafka_tp_t *,
                             size_t, char *, size_t);

static int mf_lua__tp_call(lua_State *L, const char *method, mf_lua__tp_fn fn,
                           bool offsets)
{
    mf_lua_kc_t *kc = mf_lua__kc_open(L, method);
    lua_settop(L, 3);
    mf_kafka_tp_t *tp;
    size_t n = mf_lua__parts(L, 2, offsets, &tp);
    char err[MF_LUA_KAFKA_ERR_MAX];
    int rc = fn(kc->c, tp, n, err, sizeof err);
    if (rc == 0) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushnil(L);
    lua_pushfstring(L, "kafka %s", err);
    return 2;
}

static int mf_lua__pause(lua_State *L)
{
    return mf_lua__tp_call(L, "pause", mf_kafka_consumer_pause, false);
}

static int mf_lua__resume(lua_State *L)
{
    return mf_lua__tp_call(L, "resume", mf_kafka_consumer_resume, false);
}

static int mf_lua__seek(lua_State *L)
{
    mf_lua_kc_t *kc = mf_lua__kc_check(L);
    kc->has_prev = false; /* the replay decides what is done */
    return mf_lua__tp_call(L, "seek", mf_kafka_consumer_seek, true);
}

/* ---- assignment, lag, errors ------------------------------------------ */

static void mf_lua__push_parts(lua_State *L, const mf_kafka_tp_t *parts,
                               size_t n)
{
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, parts[i].topic);
        lua_setfield(L, -2, "topic");
        lua_pushinteger(L, parts[i].partition);
        lua_setfield(L, -2, "partition");
        lua_rawseti(L, -2, (int)i + 1);
    }
}

static int mf_lua__assignment(lua_State *L)
{
    mf_lua_kc_t *kc = mf_lua__kc_check(L);
    const mf_kafka_tp_t *parts = NULL;
    size_t n = kc->c ? mf_kafka_consumer_assignment(kc->c, &parts) : 0;
    mf_lua__push_parts(L, parts, n);
    return 1;
}

static int mf_lua__lag(lua_State *L)
{
    mf_lua_kc_t *kc = mf_lua__kc_open(L, "lag");
    const char *topic = mf_lua_check_string(L, 2);
    lua_Number part = mf_lua_check_number(L, 3);
    mf_kafka_lag_t lag;
    if (mf_kafka_consumer_lag(kc->c, topic, (int32_t)part, &lag) != 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "kafka %s [%d]: not assigned to this consumer",
                        topic, (int)part);
        return 2;
    }
    lua_createtable(L, 0, 4);
    lua_pushnumber(L, (lua_Number)lag.position);
    lua_setfield(L, -2, "position");
    lua_pushnumber(L, (lua_Number)lag.committed);
    lua_setfield(L, -2, "committed");
    lua_pushnumber(L, (lua_Number)lag.high);
    lua_setfield(L, -2, "high");
    lua_pushnumber(L, (lua_Number)lag.lag);
    lua_setfield(L, -2, "lag");
    return 1;
}

static int mf_lua__errors(lua_State *L)
{
    mf_lua_kc_t *kc = mf_lua__kc_check(L);
    const char *last = NULL;
    uint64_t n = kc->c ? mf_kafka_consumer_errors(kc->c, &last) : 0;
    lua_pushnumber(L, (lua_Number)n);
    if (last)
        lua_pushfstring(L, "kafka %s", last);
    else
        lua_pushnil(L);
    return 2;
}

/* ---- close ------------------------------------------------------------ */

/* The C consumer lets go of kc: it is freed now if the object is gone,
 * else by __gc; a collection while a closer resumes may free it, so the
 * closers are taken out first and kc is not touched after. */
static void mf_lua__closed(void *user)
{
    mf_lua_kc_t *kc = user;
    mf_loop_t *loop = kc->loop;
    mf_list_t closers;
    mf_list_init(&closers);
    mf_list_splice_back(&closers, &kc->closers);
    kc->c = NULL;
    if (!kc->host)
        mf_lua__kc_free(kc);
    while (!mf_list_empty(&closers)) {
        mf_lua_kc_op_t *op =
            mf_container_of(closers.next, mf_lua_kc_op_t, link);
        mf_list_remove(&op->link);
        mf_lua_co_t *co = op->co;
        mf_loop_free(loop, op, sizeof *op);
        mf_lua_co_unpark(co);
        lua_pushboolean(mf_lua_co_thread(co), 1);
        mf_lua_co_resume(co, 1);
    }
}

static void mf_lua__start_close(mf_lua_kc_t *kc)
{
    if (kc->closing || !kc->c)
        return;
    kc->closing = true;
    mf_lua__store_prev(kc);
    mf_kafka_consumer_close(kc->c, mf_lua__closed, kc);
}

static int mf_lua__close(lua_State *L)
{
    mf_lua_kc_t *kc = mf_lua__kc_check(L);
    if (!kc->c) {
        lua_pushboolean(L, 1);
        return 1;
    }
    mf_lua_co_t *co = mf_lua_co_check(L);
    mf_lua__start_close(kc);
    mf_lua_kc_op_t *op = mf_loop_alloc(kc->loop, sizeof *op);
    *op = (mf_lua_kc_op_t){co, kc, NULL, {NULL, NULL}};
    mf_list_push_back(&kc->closers, &op->link);
    mf_lua_co_park(co, mf_lua__op_detach, op);
    return lua_yield(L, 0);
}

static int mf_lua__gc(lua_State *L)
{
    mf_lua_kc_t *kc = *(mf_lua_kc_t **)lua_touserdata(L, 1);
    mf_lua__batch_release(kc);
    mf_lua_unref(kc->host, kc->on_assign);
    mf_lua_unref(kc->host, kc->on_revoke);
    kc->on_assign = kc->on_revoke = LUA_NOREF;
    kc->host = NULL;
    if (kc->c)
        mf_lua__start_close(kc); /* its closed callback frees kc */
    else
        mf_lua__kc_free(kc);
    return 0;
}

static int mf_lua__tostring(lua_State *L)
{
    mf_lua_kc_t *kc = mf_lua__kc_check(L);
    lua_pushfstring(L, "mf.kafka consumer: %p%s", (void *)kc,
                    kc->c ? "" : " (closed)");
    return 1;
}

/* ---- rebalances ------------------------------------------------------- */

/* A rebalance waiting for the deferred step: the parts copied (topics in
 * the same block). */
typedef struct mf_lua_kc_event {
    struct mf_lua_kc_event *next;
    size_t size;
    mf_kafka_rebalance_t what;
    size_t n;
    mf_kafka_tp_t parts[];
} mf_lua_kc_event_t;

static void mf_lua__events_free(mf_lua_kc_t *kc)
{
    while (kc->events) {
        mf_lua_kc_event_t *ev = kc->events;
        kc->events = ev->next;
        mf_loop_free(kc->loop, ev, ev->size);
    }
    kc->events_tail = &kc->events;
}

/* Runs the callback of one event in a coroutine of its own (a raise is
 * logged by the host). on_revoke's second argument tells a lost assignment
 * (the group went on without this member: another one may already have
 * consumed past what was committed) from a clean hand-over. */
static void mf_lua__call_event(mf_lua_kc_t *kc, const mf_lua_kc_event_t *ev)
{
    bool assigned = ev->what == MF_KAFKA_ASSIGNED;
    int fn = assigned ? kc->on_assign : kc->on_revoke;
    if (fn == LUA_NOREF)
        return;
    lua_State *L = mf_lua_host_state(kc->host);
    lua_rawgeti(L, LUA_REGISTRYINDEX, fn);
    mf_lua__push_parts(L, ev->parts, ev->n);
    if (assigned) {
        mf_lua_host_spawn(kc->host, 1, NULL, NULL);
        return;
    }
    lua_pushboolean(L, ev->what == MF_KAFKA_LOST);
    mf_lua_host_spawn(kc->host, 2, NULL, NULL);
}

static void mf_lua__run_events(mf_post_t *post)
{
    mf_lua_kc_t *kc = post->data;
    while (kc->events && kc->host) {
        mf_lua_kc_event_t *ev = kc->events;
        kc->events = ev->next;
        if (!kc->events)
            kc->events_tail = &kc->events;
        mf_lua__call_event(kc, ev);
        mf_loop_free(kc->loop, ev, ev->size);
    }
    mf_lua__events_free(kc);
    kc->posted = false; /* a collection during a callback waited for this */
    if (kc->free_after_post)
        mf_lua__kc_free(kc);
}

/* On the loop, maybe inside a coroutine's call (a poll task starting):
 * the parts are copied, the callbacks run from a deferred step. */
static void mf_lua__rebalanced(mf_kafka_consumer_t *c,
                               mf_kafka_rebalance_t what,
                               const mf_kafka_tp_t *parts, size_t n, void *user)
{
    (void)c;
    mf_lua_kc_t *kc = user;
    if (what != MF_KAFKA_ASSIGNED) /* those records go to the next owner */
        kc->has_prev = false;
    else if (!kc->joined) {
        kc->joined = true;
        kc->joined_at = mf_loop_now(kc->loop);
    }
    int fn = what == MF_KAFKA_ASSIGNED ? kc->on_assign : kc->on_revoke;
    if (!kc->host || fn == LUA_NOREF)
        return;
    size_t size = sizeof(mf_lua_kc_event_t) + n * sizeof(mf_kafka_tp_t);
    for (size_t i = 0; i < n; i++)
        size += strlen(parts[i].topic) + 1;
    mf_lua_kc_event_t *ev = mf_loop_alloc(kc->loop, size);
    ev->next = NULL;
    ev->size = size;
    ev->what = what;
    ev->n = n;
    char *names = (char *)&ev->parts[n];
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(parts[i].topic) + 1;
        ev->parts[i] = parts[i];
        ev->parts[i].topic = memcpy(names, parts[i].topic, len);
        names += len;
    }
    *kc->events_tail = ev;
    kc->events_tail = &ev->next;
    if (!kc->posted) {
        kc->posted = true;
        mf_post_init(&kc->post, mf_lua__run_events, kc);
        mf_loop_defer(kc->loop, &kc->post);
    }
}

/* ---- k:consumer(opts) ------------------------------------------------- */

/* Properties of a producer that a consumer would only warn about. */
static bool mf_lua__producer_only(const char *name)
{
    static const char *const names[] = {
        "acks",
        "request.required.acks",
        "enable.idempotence",
        "message.timeout.ms",
        "delivery.timeout.ms",
        "linger.ms",
        "queue.buffering.max.ms",
        "queue.buffering.max.messages",
        "queue.buffering.max.kbytes",
        "batch.num.messages",
        "batch.size",
        "compression.codec",
        "compression.type",
        "compression.level",
        "partitioner",
        "retries",
        "message.send.max.retries",
        "transactional.id",
        "enable.gapless.guarantee",
        "sticky.partitioning.linger.ms",
        "request.timeout.ms",
        "delivery.report.only.error",
        "queue.buffering.backpressure.threshold",
        "transaction.timeout.ms",
        "message.copy.max.bytes",
        NULL};
    for (int i = 0; names[i]; i++)
        if (strcmp(name, names[i]) == 0)
            return true;
    return false;
}

/* The options as librdkafka properties. The arrays are Lua userdata on
 * the stack (a raise midway leaks nothing); the strings are the opts
 * table's, k's, or written into num. */
typedef struct mf_lua__copts {
    mf_kafka_prop_t *props;
    char (*num)[32]; /* numbers written out */
    size_t n, cap;
    const char **topics;
    size_t ntopics;
} mf_lua__copts_t;

static void mf_lua__copts_init(lua_State *L, mf_lua__copts_t *o, size_t cap)
{
    o->cap = cap;
    o->props = lua_newuserdata(L, cap * sizeof *o->props);
    o->num = lua_newuserdata(L, cap * sizeof *o->num);
}

static void mf_lua__copts_add(mf_lua__copts_t *o, const char *name,
                              const char *value)
{
    o->props[o->n++] = (mf_kafka_prop_t){name, value};
}

static const char *mf_lua__copts_value(lua_State *L, mf_lua__copts_t *o,
                                       const char *key)
{
    switch (lua_type(L, -1)) {
    case LUA_TSTRING:
        return lua_tostring(L, -1);
    case LUA_TBOOLEAN:
        return lua_toboolean(L, -1) ? "true" : "false";
    case LUA_TNUMBER: {
        lua_Number d = lua_tonumber(L, -1);
        char *buf = o->num[o->n];
        if (d == floor(d) && fabs(d) < 9.2e18)
            snprintf(buf, 32, "%lld", (long long)d);
        else
            snprintf(buf, 32, "%.17g", d);
        return buf;
    }
    default:
        luaL_error(L,
                   "k:consumer: option '%s' must be a string, number or "
                   "boolean, got %s",
                   key, luaL_typename(L, -1));
        return NULL;
    }
}

static void mf_lua__copts_topics(lua_State *L, mf_lua__copts_t *o)
{
    size_t n = lua_istable(L, -1) ? lua_objlen(L, -1) : 0;
    if (n == 0)
        luaL_error(L, "k:consumer: topics must be a non-empty array of "
                      "topic names");
    o->topics = lua_newuserdata(L, n * sizeof *o->topics);
    lua_insert(L, -3); /* below the key and value: kept to the end */
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, -1, (int)i + 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "k:consumer: topics[%d] must be a string",
                       (int)i + 1);
        o->topics[i] = lua_tostring(L, -1); /* held by the opts table */
        lua_pop(L, 1);
    }
    o->ntopics = n;
}

/* One key of opts (at -2, its value at -1). */
static void mf_lua__copts_key(lua_State *L, mf_lua__copts_t *o, mf_lua_kc_t *kc,
                              int optsidx)
{
    if (lua_type(L, -2) != LUA_TSTRING)
        luaL_error(L, "k:consumer: option keys must be strings");
    const char *key = lua_tostring(L, -2);
    if (strcmp(key, "topics") == 0) {
        mf_lua__copts_topics(L, o);
    } else if (strcmp(key, "on_assign") == 0 || strcmp(key, "on_revoke") == 0) {
        if (!lua_isfunction(L, -1))
            luaL_error(L, "k:consumer: %s must be a function", key);
    } else if (strcmp(key, "batch") == 0) {
        lua_Number b = lua_tonumber(L, -1);
        if (!lua_isnumber(L, -1) || b < 1 || b > 100000 || b != floor(b))
            luaL_error(L, "k:consumer: batch must be an integer from 1 to "
                          "100000");
        kc->batch = (size_t)b;
    } else {
        const char *name = strcmp(key, "group") == 0     ? "group.id"
                           : strcmp(key, "brokers") == 0 ? "bootstrap.servers"
                                                         : key;
        mf_lua__copts_add(o, name, mf_lua__copts_value(L, o, key));
    }
    (void)optsidx;
}

static void mf_lua__kc_metatable(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"messages c:messages([wait_ms])", mf_lua__messages},
        {"poll c:poll([max [, wait_ms]])", mf_lua__poll},
        {"commit c:commit([parts])", mf_lua__commit},
        {"pause c:pause(parts)", mf_lua__pause},
        {"resume c:resume(parts)", mf_lua__resume},
        {"seek c:seek(parts)", mf_lua__seek},
        {"assignment c:assignment()", mf_lua__assignment},
        {"lag c:lag(topic, partition)", mf_lua__lag},
        {"errors c:errors()", mf_lua__errors},
        {"close c:close()", mf_lua__close},
        {NULL, NULL}};
    mf_lua_class(L, MF_LUA_KAFKA_CONSUMER, methods, mf_lua__gc,
                 mf_lua__tostring);
}

static mf_lua_kc_t *mf_lua__kc_new(lua_State *L, mf_loop_t *loop)
{
    mf_lua_kc_t *kc = mf_loop_alloc(loop, sizeof *kc);
    memset(kc, 0, sizeof *kc);
    kc->loop = loop;
    kc->host = mf_lua_host_from_state(L);
    kc->on_assign = kc->on_revoke = LUA_NOREF;
    kc->batch_ref = LUA_NOREF;
    kc->events_tail = &kc->events;
    kc->batch = MF_LUA_KC_BATCH;
    mf_list_init(&kc->closers);
    return kc;
}

static int mf_lua__fn_ref(lua_State *L, mf_lua_kc_t *kc, int optsidx,
                          const char *key)
{
    lua_getfield(L, optsidx, key);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return LUA_NOREF;
    }
    return mf_lua_ref(kc->host, L);
}

int mf_lua_kafka_consumer_new(lua_State *L, int kidx, int optsidx)
{
    if (optsidx < 0)
        optsidx = lua_gettop(L) + optsidx + 1;
    mf_lua_kafka_t *k = mf_lua_kafka_check(L, kidx);
    mf_lua_check_type(L, optsidx, LUA_TTABLE);
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    if (!host)
        return luaL_error(L, "k:consumer: no moonflow host runs this state");
    mf_loop_t *loop = mf_lua_host_loop(host);
    size_t nkeys = 0;
    lua_pushnil(L);
    while (lua_next(L, optsidx) != 0) {
        nkeys++;
        lua_pop(L, 1);
    }
    mf_lua__copts_t o = {0};
    mf_lua__copts_init(L, &o, k->nprops + nkeys + 1);
    mf_lua_kc_t tmp = {.batch = MF_LUA_KC_BATCH};
    for (size_t i = 0; i < k->nprops; i++)
        if (!mf_lua__producer_only(k->props[i].name))
            mf_lua__copts_add(&o, k->props[i].name, k->props[i].value);
    lua_pushnil(L);
    while (lua_next(L, optsidx) != 0) {
        mf_lua__copts_key(L, &o, &tmp, optsidx);
        lua_pop(L, 1);
    }
    if (o.ntopics == 0)
        return luaL_error(L, "k:consumer: topics must be a non-empty array "
                             "of topic names");
    mf_lua_kc_t *kc = mf_lua__kc_new(L, loop);
    kc->batch = tmp.batch;
    mf_kafka_consumer_opts_t co = {
        o.props, o.n, o.topics, o.ntopics, mf_lua__rebalanced, kc};
    char err[512];
    kc->c = mf_kafka_consumer_open(loop, &co, err, sizeof err);
    if (!kc->c) {
        mf_loop_free(loop, kc, sizeof *kc);
        return luaL_error(L, "k:consumer: %s", err);
    }
    kc->on_assign = mf_lua__fn_ref(L, kc, optsidx, "on_assign");
    kc->on_revoke = mf_lua__fn_ref(L, kc, optsidx, "on_revoke");
    mf_lua_kc_t **ud = lua_newuserdata(L, sizeof *ud);
    *ud = kc;
    mf_lua__kc_metatable(L);
    lua_setmetatable(L, -2);
    return 1;
}
