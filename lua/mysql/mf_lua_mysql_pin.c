/*
 * lua/mysql/mf_lua_mysql_pin.c — db:transaction(fn, ...) and db:session(fn,
 * ...): one pooled connection pinned (an mf_mysql_session_t) while fn runs with
 * a pinned object (tx or s: query, rows, quote on that connection).
 *
 * fn runs in a coroutine of its own (the child: pcall(fn, obj, ...)), and
 * the caller (the parent) parks until the pin is over. The child's exit
 * callback is the one place every ending passes through — fn returned,
 * raised, was stopped by the watchdog, or was aborted with its parent (a
 * client gone, a handler timeout, the host's shutdown) — so the session is
 * always closed there or right after the statement that ends the
 * transaction, and the connection goes back to the pool reset.
 *
 *   transaction: START TRANSACTION → fn → COMMIT when fn's first return is
 *     true-ish, else ROLLBACK → the parent gets true, fn's returns | nil, err
 *   session: (a deferred start) → fn → the parent gets true, fn's returns
 *     | false, the error (init.lua re-raises it)
 * A child stopped by the watchdog stops its parent the same way (its cause
 * passes on); an aborted child aborts its parent.
 *
 * Owns: the pin record (loop memory) and the registry reference of the
 * pinned object while fn runs. The record lives while anyone uses it: the
 * parent parked on it, the child, the session, and holds (tasks and
 * streams in flight on it, the deferred start); the last to let go frees
 * it. fn's results wait on the parent's stack (a parked thread) until the
 * COMMIT answered.
 *
 * May call: moonflow/mysql.h, the host's coroutine API, and its internals
 * (mf_lua_int.h) for the two fields a child passes on: the parent's
 * deadline (to the child) and the watchdog's cause (to the parent).
 */
#include <string.h>

#include <lauxlib.h>

#include <moonflow/lua_arg.h>

#include "host/mf_lua_int.h"
#include "mf_lua_mysql.h"

typedef enum mf_lua_pin_phase {
    MF_LUA_PIN_START,  /* START TRANSACTION, or the session's deferred start */
    MF_LUA_PIN_BODY,   /* fn runs */
    MF_LUA_PIN_FINISH, /* COMMIT or ROLLBACK in flight */
    MF_LUA_PIN_OVER
} mf_lua_pin_phase_t;

struct mf_lua_mysql_pin {
    mf_loop_t *loop;
    mf_lua_host_t *host;
    mf_mysql_client_t *client;
    mf_mysql_session_t *session;   /* NULL once closed */
    mf_lua_co_t *parent;           /* parked on the pin; NULL once answered */
    mf_lua_co_t *child;            /* runs fn; NULL once it ended */
    mf_lua_mysql_stream_t *stream; /* a stream open on the session */
    mf_lua_mysql_pinned_t *obj;    /* while fn runs */
    int obj_ref;
    int nargs; /* the child's: fn, obj and the caller's extra arguments */
    int nres;  /* the answer, waiting on the parent's stack */
    unsigned holds;
    mf_lua_pin_phase_t phase;
    bool transaction;
    bool commit;     /* fn's answer: COMMIT (else ROLLBACK) */
    mf_post_t start; /* a session's start, deferred */
    char failure[MF_LUA_MYSQL_ERR_MAX]; /* the first failure of a task */
};

/* ---- the record's life -------------------------------------------------- */

mf_mysql_session_t *mf_lua_mysql_pin_session(const mf_lua_mysql_pin_t *pin)
{
    return pin->session;
}

static void mf_lua__pin_maybe_free(mf_lua_mysql_pin_t *pin)
{
    if (pin->holds || pin->parent || pin->child || pin->session ||
        pin->phase != MF_LUA_PIN_OVER)
        return;
    mf_loop_free(pin->loop, pin, sizeof *pin);
}

void mf_lua_mysql_pin_hold(mf_lua_mysql_pin_t *pin)
{
    pin->holds++;
}

void mf_lua_mysql_pin_release(mf_lua_mysql_pin_t *pin)
{
    pin->holds--;
    mf_lua__pin_maybe_free(pin);
}

void mf_lua_mysql_pin_set_stream(mf_lua_mysql_pin_t *pin,
                                 mf_lua_mysql_stream_t *s, bool open)
{
    if (open)
        pin->stream = s;
    else if (pin->stream == s)
        pin->stream = NULL;
}

void mf_lua_mysql_pin_before_task(mf_lua_mysql_pin_t *pin)
{
    if (pin->stream)
        mf_lua_mysql_stream_discard(pin->stream, true);
}

void mf_lua_mysql_pin_failed(mf_lua_mysql_pin_t *pin, const char *why)
{
    if (!pin->failure[0])
        snprintf(pin->failure, sizeof pin->failure, "%s", why);
}

/* The connection goes back (reset, or closed if it broke). A stream still
 * open there is canceled: nobody will read it, and a session cannot be
 * given back mid-result. */
static void mf_lua__pin_close(mf_lua_mysql_pin_t *pin)
{
    pin->phase = MF_LUA_PIN_OVER;
    if (pin->stream)
        mf_lua_mysql_stream_discard(pin->stream, false);
    if (pin->session) {
        mf_mysql_session_close(pin->session);
        pin->session = NULL;
    }
}

/* The pinned object dies with fn: its methods raise from now on. */
static void mf_lua__pin_kill_obj(mf_lua_mysql_pin_t *pin)
{
    if (!pin->obj)
        return;
    pin->obj->pin = NULL;
    pin->obj = NULL;
    mf_lua_unref(pin->host, pin->obj_ref);
    pin->obj_ref = LUA_NOREF;
}

/* Resumes the parent with the pin->nres values on its stack. */
static void mf_lua__pin_answer(mf_lua_mysql_pin_t *pin)
{
    mf_lua_co_t *co = pin->parent;
    if (!co)
        return;
    pin->parent = NULL;
    mf_lua_co_unpark(co);
    mf_lua_co_resume(co, pin->nres);
}

/* Replaces the answer waiting on the parent's stack with nil, err. */
static void mf_lua__pin_fail_answer(mf_lua_mysql_pin_t *pin, const char *err)
{
    if (!pin->parent)
        return;
    lua_State *P = mf_lua_co_thread(pin->parent);
    lua_pop(P, pin->nres);
    lua_pushnil(P);
    lua_pushstring(P, err);
    pin->nres = 2;
}

/* ---- the end of a transaction -------------------------------------------- */

static void mf_lua__finish_done(mf_task_t *task)
{
    mf_lua_mysql_pin_t *pin = task->user;
    char buf[MF_LUA_MYSQL_ERR_MAX];
    const char *err = mf_lua_mysql_error(task, buf, sizeof buf);
    /* A failed COMMIT committed nothing; a failed ROLLBACK keeps the
     * answer (the connection is reset or closed: rolled back anyway). */
    if (err && pin->commit)
        mf_lua__pin_fail_answer(pin, err);
    mf_lua__pin_close(pin);
    mf_lua__pin_answer(pin);
    mf_lua_mysql_pin_release(pin);
}

/* COMMIT (pin->commit) or ROLLBACK on the session, then the answer. A
 * broken connection is only given back (the server rolled back). */
static void mf_lua__pin_finish(mf_lua_mysql_pin_t *pin)
{
    pin->phase = MF_LUA_PIN_FINISH;
    const char *sql = pin->commit ? "COMMIT" : "ROLLBACK";
    mf_task_t *task = NULL;
    int err = MF_ECLOSED;
    if (!mf_mysql_session_broken(pin->session)) {
        mf_lua_mysql_pin_before_task(pin); /* a stream left open: drained */
        task = mf_task_mysql_create(pin->client, mf_lua__finish_done, pin);
        err = mf_task_mysql_set_query(task, sql, strlen(sql));
    }
    if (err < 0) {
        if (task)
            mf_task_destroy(task);
        if (pin->commit)
            mf_lua__pin_fail_answer(pin, pin->failure[0]
                                             ? pin->failure
                                             : "mysql: the connection broke");
        mf_lua__pin_close(pin);
        mf_lua__pin_answer(pin);
        return;
    }
    mf_task_mysql_set_session(task, pin->session);
    mf_lua_mysql_pin_hold(pin);
    mf_task_start(task);
}

/* ---- the child's end ------------------------------------------------------
 */

/* fn returned (the child ran pcall: C holds ok and fn's returns, or false
 * and the error). Moves the answer onto the parent's stack; returns
 * whether a transaction commits. */
static bool mf_lua__pin_collect(mf_lua_mysql_pin_t *pin, lua_State *C, int nret)
{
    lua_State *P = mf_lua_co_thread(pin->parent);
    lua_checkstack(P, nret + 3);
    int first = lua_gettop(C) - nret + 1;
    bool ok = lua_toboolean(C, first);
    if (!pin->transaction) {
        lua_pushboolean(P, ok);
        lua_xmove(C, P, nret - 1);
        pin->nres = nret;
        return false;
    }
    if (ok && nret >= 2 && lua_toboolean(C, first + 1)) {
        lua_pushboolean(P, 1);
        lua_xmove(C, P, nret - 1);
        pin->nres = nret;
        return true;
    }
    lua_pushnil(P);
    if (!ok)
        lua_pushvalue(C, first + 1);
    else if (nret >= 3 && !lua_isnil(C, first + 2))
        lua_pushvalue(C, first + 2);
    else
        lua_pushliteral(C, "rolled back");
    lua_xmove(C, P, 1);
    pin->nres = 2;
    return false;
}

/* The child ended without returning: aborted (with its parent, or at the
 * host's shutdown), stopped by the watchdog, or raised outside fn (never
 * expected under pcall). The session goes back (its reset rolls back);
 * the parent is aborted, stopped, or answered with the error. */
static void mf_lua__pin_cut(mf_lua_mysql_pin_t *pin, const mf_lua_co_exit_t *ex,
                            mf_lua_co_cause_t cause)
{
    mf_lua__pin_close(pin);
    mf_lua_co_t *parent = pin->parent;
    if (!parent)
        return;
    if (ex->status == MF_LUA_CO_ABORTED) {
        mf_lua_co_abort(parent, "aborted with its transaction's function");
        return;
    }
    pin->nres = 0;
    if (cause != MF_LUA_CAUSE_NONE) {
        parent->cause = cause; /* it stops as it resumes */
    } else {
        lua_State *P = mf_lua_co_thread(parent);
        if (pin->transaction)
            lua_pushnil(P);
        else
            lua_pushboolean(P, 0);
        lua_pushstring(P, ex->message ? ex->message : "error");
        pin->nres = 2;
    }
    mf_lua__pin_answer(pin);
}

static void mf_lua__child_exit(mf_lua_co_t *co, const mf_lua_co_exit_t *ex,
                               void *data)
{
    mf_lua_mysql_pin_t *pin = data;
    mf_lua_co_cause_t cause = co->cause; /* set even if a pcall caught it */
    mf_lua_mysql_pin_hold(pin);
    pin->child = NULL;
    mf_lua__pin_kill_obj(pin);
    if (pin->phase == MF_LUA_PIN_OVER) { /* START failed: not run */
    } else if (pin->phase != MF_LUA_PIN_BODY || !pin->parent ||
               ex->status != MF_LUA_CO_DONE || cause != MF_LUA_CAUSE_NONE) {
        mf_lua__pin_cut(pin, ex, cause);
    } else {
        pin->commit = mf_lua__pin_collect(pin, ex->L, ex->nret);
        if (pin->transaction) {
            mf_lua__pin_finish(pin);
        } else {
            mf_lua__pin_close(pin);
            mf_lua__pin_answer(pin);
        }
    }
    mf_lua_mysql_pin_release(pin);
}

/* ---- the start --------------------------------------------------------------
 */

static void mf_lua__pin_run(mf_lua_mysql_pin_t *pin)
{
    pin->phase = MF_LUA_PIN_BODY;
    mf_lua_co_start(pin->child, pin->nargs);
}

/* START TRANSACTION answered. */
static void mf_lua__start_done(mf_task_t *task)
{
    mf_lua_mysql_pin_t *pin = task->user;
    char buf[MF_LUA_MYSQL_ERR_MAX];
    const char *err = mf_lua_mysql_error(task, buf, sizeof buf);
    if (pin->phase == MF_LUA_PIN_START && pin->parent && !err) {
        mf_lua__pin_run(pin);
    } else if (pin->phase == MF_LUA_PIN_START && pin->parent) {
        pin->phase = MF_LUA_PIN_OVER; /* the child's exit: nothing to do */
        mf_lua_co_abort(pin->child, "not started");
        mf_lua__pin_close(pin);
        lua_State *P = mf_lua_co_thread(pin->parent);
        lua_pushnil(P);
        lua_pushstring(P, err);
        pin->nres = 2;
        mf_lua__pin_answer(pin);
    }
    mf_lua_mysql_pin_release(pin);
}

/* A session's deferred start. */
static void mf_lua__start_post(mf_post_t *post)
{
    mf_lua_mysql_pin_t *pin = post->data;
    if (pin->phase == MF_LUA_PIN_START && pin->parent && pin->child)
        mf_lua__pin_run(pin);
    mf_lua_mysql_pin_release(pin);
}

/* Cleanup hook of the parked parent (abort, shutdown): the child is
 * aborted (its exit closes the session); a COMMIT or ROLLBACK in flight
 * finishes and closes it. */
static void mf_lua__pin_abandon(void *arg)
{
    mf_lua_mysql_pin_t *pin = arg;
    mf_lua_mysql_pin_hold(pin);
    pin->parent = NULL;
    if (pin->child)
        mf_lua_co_abort(pin->child, "aborted with its caller");
    mf_lua_mysql_pin_release(pin);
}

/* The pinned object on top of L, anchored by the pin. */
static void mf_lua__pin_obj(lua_State *L, mf_lua_mysql_pin_t *pin,
                            const mf_lua_mysql_t *db)
{
    mf_lua_mysql_pinned_t *obj = lua_newuserdata(L, sizeof *obj);
    obj->pin = pin;
    obj->client = db->client;
    obj->mode = db->mode;
    obj->transaction = pin->transaction;
    luaL_getmetatable(L, MF_LUA_MYSQL_PINNED);
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    pin->obj = obj;
    pin->obj_ref = mf_lua_ref(pin->host, L);
}

/* The child, ready to run pcall(fn, obj, ...) with the values of L from
 * index 2 (fn) on; obj is on top of L. */
static void mf_lua__pin_child(lua_State *L, mf_lua_mysql_pin_t *pin,
                              mf_lua_co_t *parent)
{
    int top = lua_gettop(L) - 1; /* without obj */
    pin->child = mf_lua_host_prepare(pin->host, mf_lua__child_exit, pin);
    pin->child->hooks.deadline = parent->hooks.deadline;
    lua_State *C = mf_lua_co_thread(pin->child);
    luaL_checkstack(L, top + 2, "mysql pinned function");
    lua_checkstack(C, top + 2);
    lua_pushvalue(L, lua_upvalueindex(1)); /* pcall */
    lua_pushvalue(L, 2);
    lua_pushvalue(L, top + 1);
    for (int i = 3; i <= top; i++)
        lua_pushvalue(L, i);
    pin->nargs = top; /* fn, obj, and the top - 2 extra arguments */
    lua_xmove(L, C, pin->nargs + 1);
}

static int mf_lua__pin_begin(lua_State *L, bool transaction)
{
    const char *what = transaction ? "db:transaction" : "db:session";
    mf_lua_mysql_t *db = mf_lua_check_udata(L, 1, MF_LUA_MYSQL);
    if (lua_type(L, 2) != LUA_TFUNCTION)
        return luaL_error(L, "%s(fn, ...): fn must be a function, got %s", what,
                          luaL_typename(L, 2));
    mf_lua_co_t *co = mf_lua_co_check(L);
    mf_lua_host_t *host = mf_lua_co_host(co);
    mf_mysql_session_t *session = mf_mysql_session_open(db->client);
    if (!session)
        return luaL_error(L, "%s: out of memory", what);
    mf_lua_mysql_pin_t *pin =
        mf_loop_alloc(mf_lua_host_loop(host), sizeof *pin);
    memset(pin, 0, sizeof *pin);
    pin->loop = mf_lua_host_loop(host);
    pin->host = host;
    pin->client = db->client;
    pin->session = session;
    pin->transaction = transaction;
    pin->phase = MF_LUA_PIN_START;
    pin->parent = co;
    mf_lua__pin_obj(L, pin, db);
    mf_lua__pin_child(L, pin, co);
    mf_lua_mysql_pin_hold(pin); /* the start */
    if (transaction) {
        static const char start[] = "START TRANSACTION";
        mf_task_t *task =
            mf_task_mysql_create(db->client, mf_lua__start_done, pin);
        /* A refused copy leaves the task without a query: it fails in its
         * completion (MF_EINVAL), and the caller gets nil, err. */
        (void)mf_task_mysql_set_query(task, start, sizeof start - 1);
        mf_task_mysql_set_session(task, session);
        mf_task_start(task);
    } else {
        mf_post_init(&pin->start, mf_lua__start_post, pin);
        mf_loop_defer(pin->loop, &pin->start);
    }
    mf_lua_co_park(co, mf_lua__pin_abandon, pin);
    return lua_yield(L, 0);
}

int mf_lua_mysql_transaction(lua_State *L)
{
    return mf_lua__pin_begin(L, true);
}

int mf_lua_mysql_session(lua_State *L)
{
    return mf_lua__pin_begin(L, false);
}

/* The methods that need pcall as an upvalue (the original one: a script
 * that replaced the global does not change how fn is run). */
void mf_lua_mysql_pin_init(lua_State *L)
{
    lua_getfield(L, -1, "db_methods");
    lua_getglobal(L, "pcall");
    lua_pushcclosure(L, mf_lua_mysql_transaction, 1);
    mf_lua_name(L, "db:transaction(fn, ...)");
    lua_setfield(L, -2, "transaction");
    lua_pop(L, 1);
    lua_getglobal(L, "pcall");
    lua_pushcclosure(L, mf_lua_mysql_session, 1);
    mf_lua_name(L, "db:session(fn, ...)");
    lua_setfield(L, -2, "session");
}
