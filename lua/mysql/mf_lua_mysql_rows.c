/*
 * lua/mysql/mf_lua_mysql_rows.c — db:rows(sql, ...): a streaming MySQL task
 * read batch by batch. The C iterator (rows_next, wrapped by init.lua's
 * for-loop function) hands out the rows of the current batch without yielding;
 * at the end of a batch it asks for the next one and parks, and the socket is
 * not read while a batch is consumed, so memory stays bounded whatever the
 * row count.
 *
 * Owns: the stream record (loop memory), which has two owners: the Lua
 * object (a "moonflow.mysql.rows" userdata pointing to it; its environment
 * table holds the field names) and the task until its callback. It is freed
 * by whichever lets go second. An object collected before the stream ended
 * (the loop was broken out of) discards the rest: canceled (its connection
 * is closed, never pooled mid-result), or drained when it runs on a pinned
 * connection the function still uses. A query on a pin with a stream left
 * open there discards that stream the same way (draining), so `break` and
 * a next tx:query work; reading a discarded stream returns its error.
 *
 * A coroutine aborted while parked for a batch cancels the stream.
 *
 * May call: moonflow/mysql.h (mf_task_mysql_stream, next_batch), the
 * host's coroutine API, and the pin of a pinned stream
 * (mf_lua_mysql_pin.c, through mf_lua_mysql.h).
 */
#include <string.h>

#include <lauxlib.h>

#include <moonflow/lua_arg.h>

#include "host/mf_lua_int.h"
#include "mf_lua_mysql.h"

#define MF_LUA_MYSQL_BATCH 256

/* Streams broken out of hold their connection until the collector finds
 * their object. With this many streams unfinished on the host, starting
 * another runs a full collection first, so a loop that breaks out of
 * streams again and again cannot take every pooled connection (a stream
 * still read is reachable and survives it). */
#define MF_LUA_MYSQL_GC_STREAMS 4

struct mf_lua_mysql_stream {
    mf_task_t *task; /* until its callback (or destroyed unstarted) */
    mf_lua_co_t *co; /* parked for the next batch */
    mf_lua_mysql_pin_t *pin;
    const mf_mysql_result_t *batch; /* being read; NULL between batches */
    size_t next;                    /* its next row */
    unsigned mode;
    bool started;
    bool done;      /* the task's callback ran (or it never will) */
    bool failed;    /* done with an error: err */
    bool discarded; /* nobody reads the rest */
    bool orphan;    /* the Lua object was collected */
    bool names;     /* the object's environment holds the field names */
    unsigned *live; /* the host's count of unfinished streams; NULL once
                       this one is no longer counted */
    char err[MF_LUA_MYSQL_ERR_MAX];
};

typedef struct mf_lua_mysql_rows_obj {
    mf_lua_mysql_stream_t *s;
} mf_lua_mysql_rows_obj_t;

/* The stream no longer counts as unfinished (done, or its object gone:
 * the count lives in the state, never touched after that). */
static void mf_lua__stream_uncount(mf_lua_mysql_stream_t *s)
{
    if (s->live) {
        (*s->live)--;
        s->live = NULL;
    }
}

static void mf_lua__stream_free(mf_lua_mysql_stream_t *s, mf_loop_t *loop)
{
    if (s->pin)
        mf_lua_mysql_pin_release(s->pin);
    mf_loop_free(loop, s, sizeof *s);
}

/* Resumes the parked reader (it calls rows_next again). */
static void mf_lua__stream_wake(mf_lua_mysql_stream_t *s)
{
    mf_lua_co_t *co = s->co;
    if (!co)
        return;
    s->co = NULL;
    mf_lua_co_host(co)->counts.tasks--;
    mf_lua_co_unpark(co);
    lua_pushboolean(mf_lua_co_thread(co), 1);
    mf_lua_co_resume(co, 1);
}

static void mf_lua__stream_batch(mf_task_t *task,
                                 const mf_mysql_result_t *batch, void *user)
{
    mf_lua_mysql_stream_t *s = user;
    if (s->discarded || batch->nrows == 0) {
        mf_task_mysql_next_batch(task);
        return;
    }
    s->batch = batch;
    s->next = 0;
    mf_lua__stream_wake(s);
}

static void mf_lua__stream_done(mf_task_t *task)
{
    mf_lua_mysql_stream_t *s = task->user;
    s->task = NULL;
    s->batch = NULL;
    s->done = true;
    mf_lua__stream_uncount(s);
    if (mf_lua_mysql_error(task, s->err, sizeof s->err)) {
        s->failed = true;
        if (s->pin)
            mf_lua_mysql_pin_failed(s->pin, s->err);
    }
    if (s->pin)
        mf_lua_mysql_pin_set_stream(s->pin, s, false);
    if (s->orphan) {
        mf_lua__stream_free(s, mf_task_loop(task));
        return;
    }
    mf_lua__stream_wake(s);
}

void mf_lua_mysql_stream_discard(mf_lua_mysql_stream_t *s, bool drain)
{
    if (s->done)
        return;
    if (!s->started) { /* never sent: nothing to read */
        mf_task_destroy(s->task);
        s->task = NULL;
        s->done = true;
        s->discarded = true;
        mf_lua__stream_uncount(s);
        return;
    }
    if (s->discarded && drain)
        return;
    s->discarded = true;
    if (!drain) {
        mf_task_cancel(s->task);
        return;
    }
    if (s->batch && !s->co) { /* a batch nobody will read */
        s->batch = NULL;
        mf_task_mysql_next_batch(s->task);
    }
}

/* Cleanup hook of a reader parked for a batch (abort, shutdown). */
static void mf_lua__stream_detach(void *arg)
{
    mf_lua_mysql_stream_t *s = arg;
    mf_lua_co_host(s->co)->counts.tasks--;
    s->co = NULL;
    mf_lua_mysql_stream_discard(s, false);
}

/* db:rows(sql, ...) -> the stream object (init.lua puts it in a for-loop
 * with its iterator). Nothing is sent before the first row is asked for. */
int mf_lua_mysql_rows(lua_State *L)
{
    mf_lua_mysql_target_t t = mf_lua_mysql_target(L, 1);
    mf_lua_check_type(L, 2, LUA_TSTRING);
    mf_lua_co_check(L);
    unsigned *live = lua_touserdata(L, lua_upvalueindex(1));
    if (*live >= MF_LUA_MYSQL_GC_STREAMS)
        lua_gc(L, LUA_GCCOLLECT, 0);
    mf_lua_mysql_params_t p;
    mf_lua_mysql_params_from_stack(L, &p, 3, lua_gettop(L));
    mf_task_t *task =
        mf_lua_mysql_task(L, &t, 2, &p, mf_lua__stream_done, NULL);
    mf_lua_mysql_params_close(L, &p);
    mf_lua_mysql_rows_obj_t *obj = lua_newuserdata(L, sizeof *obj);
    mf_lua_mysql_stream_t *s = mf_loop_alloc(mf_task_loop(task), sizeof *s);
    memset(s, 0, sizeof *s);
    s->task = task;
    s->pin = t.pin;
    s->mode = t.mode;
    s->live = live;
    (*live)++;
    if (s->pin)
        mf_lua_mysql_pin_hold(s->pin);
    obj->s = s;
    task->user = s;
    mf_task_mysql_stream(task, MF_LUA_MYSQL_BATCH, mf_lua__stream_batch, s);
    luaL_getmetatable(L, MF_LUA_MYSQL_ROWS);
    lua_setmetatable(L, -2);
    return 1;
}

/* The next row of the current batch (the object at 1). */
static int mf_lua__push_next_row(lua_State *L, mf_lua_mysql_stream_t *s)
{
    if (!s->names && (s->mode & MF_LUA_MYSQL_BY_NAME)) {
        mf_lua_mysql_push_names(L, s->batch);
        lua_setfenv(L, 1);
        s->names = true;
    }
    int names = 0;
    if (s->mode & MF_LUA_MYSQL_BY_NAME) {
        lua_getfenv(L, 1);
        names = lua_gettop(L);
    }
    mf_lua_mysql_push_row(L, s->batch, s->next++, s->mode, names);
    return 1;
}

/* rows_next(obj) -> row | nil (the end) | nil, err | true (a batch came:
 * ask again) */
int mf_lua_mysql_rows_next(lua_State *L)
{
    mf_lua_mysql_rows_obj_t *obj = mf_lua_check_udata(L, 1, MF_LUA_MYSQL_ROWS);
    mf_lua_mysql_stream_t *s = obj->s;
    if (s->co)
        return luaL_error(L, "mysql rows: another coroutine is reading "
                             "this stream");
    if (s->batch && s->next < s->batch->nrows)
        return mf_lua__push_next_row(L, s);
    if (s->discarded) {
        lua_pushnil(L);
        lua_pushstring(L, "mysql rows: the rest of this stream was discarded "
                          "(a later query on its connection)");
        return 2;
    }
    if (s->done) {
        lua_pushnil(L);
        if (!s->failed)
            return 1;
        lua_pushstring(L, s->err);
        return 2;
    }
    mf_lua_co_t *co = mf_lua_co_check(L);
    if (!s->started) {
        s->started = true;
        if (s->pin)
            mf_lua_mysql_pin_set_stream(s->pin, s, true);
        mf_task_start(s->task);
    } else {
        s->batch = NULL;
        mf_task_mysql_next_batch(s->task);
    }
    s->co = co;
    mf_lua_co_host(co)->counts.tasks++;
    mf_lua_co_park(co, mf_lua__stream_detach, s);
    return lua_yield(L, 0);
}

/* The object is gone: the record goes now, or the rest is discarded and it
 * goes in the task's callback. */
static int mf_lua__rows_gc(lua_State *L)
{
    mf_lua_mysql_rows_obj_t *obj = lua_touserdata(L, 1);
    mf_lua_mysql_stream_t *s = obj->s;
    if (!s)
        return 0;
    obj->s = NULL;
    mf_lua__stream_uncount(s);
    mf_loop_t *loop = mf_lua_host_loop(mf_lua_host_from_state(L));
    mf_lua_mysql_stream_discard(s, s->pin != NULL &&
                                       mf_lua_mysql_pin_session(s->pin));
    if (s->done) {
        if (s->pin)
            mf_lua_mysql_pin_set_stream(s->pin, s, false);
        mf_lua__stream_free(s, loop);
        return 0;
    }
    s->orphan = true;
    return 0;
}

/* The metatable, and the module's rows (at -1) with the host's count of
 * unfinished streams as its upvalue. */
void mf_lua_mysql_rows_init(lua_State *L)
{
    luaL_newmetatable(L, MF_LUA_MYSQL_ROWS);
    lua_pushcfunction(L, mf_lua__rows_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushliteral(L, MF_LUA_MYSQL_ROWS);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
    unsigned *live = lua_newuserdata(L, sizeof *live);
    *live = 0;
    lua_pushcclosure(L, mf_lua_mysql_rows, 1);
    mf_lua_name(L, "db:rows(sql, ...)");
    lua_setfield(L, -2, "rows");
}
