/*
 * lua/host/mf_lua_co.c — coroutine records: spawn, park, resume, and the one
 * exit path (done, error, abort) that runs the pending cleanup hook, calls
 * the owner back and releases the registry reference.
 *
 * Records come from the loop's free lists (mf_loop_alloc): a warm worker
 * spawns a handler coroutine without malloc for the record.
 */
#include <lauxlib.h>
#include <string.h>

#include <moonflow/common.h>

#include "mf_lua_int.h"

static const char mf_lua__bare_yield[] =
    "coroutine.yield() from a moonflow coroutine outside a moonflow call "
    "(use mf.sleep(0) to let other work run)";

static void mf_lua__co_cleanup(mf_lua_co_t *co)
{
    mf_lua_cleanup_fn cleanup = co->cleanup;
    void *op = co->op;
    co->cleanup = NULL;
    co->op = NULL;
    if (cleanup)
        cleanup(op);
}

/* What the coroutine opened and did not close (sockets) is closed as it
 * ends, whichever way. */
static void mf_lua__co_release_owned(mf_lua_co_t *co)
{
    while (!mf_list_empty(&co->owned)) {
        mf_lua_owned_t *o = mf_container_of(mf_list_pop_front(&co->owned),
                                            mf_lua_owned_t, link);
        o->release(o);
    }
}

void mf_lua_co_own(mf_lua_co_t *co, mf_lua_owned_t *o)
{
    mf_list_push_back(&co->owned, &o->link);
}

void mf_lua_owned_drop(mf_lua_owned_t *o)
{
    if (mf_list_linked(&o->link))
        mf_list_remove(&o->link);
}

/* A thread that returned normally can run a new function (status 0, empty
 * stack): its record is kept whole for the next spawn (true). Errored or
 * aborted ones cannot: their references go (false). DONE comes only from
 * a resume that returned 0, which leaves the thread's status 0. */
static bool mf_lua__co_keep_idle(mf_lua_host_t *host, mf_lua_co_t *co,
                                 mf_lua_co_status_t status)
{
    if (status == MF_LUA_CO_DONE &&
        host->nidle < MF_LUA_IDLE_THREADS) {
        host->idle[host->nidle++] = co;
        host->counts.refs--;
        host->counts.idle_threads++;
        return true;
    }
    mf_lua_unref(host, co->ref);
    for (int i = 0; i < MF_LUA_CO_KEEP; i++)
        luaL_unref(host->L, LUA_REGISTRYINDEX, co->keep[i]);
    return false;
}

/* A record with its thread: an idle one if there is one, else new. */
static mf_lua_co_t *mf_lua__co_acquire(mf_lua_host_t *host)
{
    if (host->nidle) {
        host->counts.refs++;
        host->counts.idle_threads--;
        return host->idle[--host->nidle];
    }
    mf_lua_co_t *co = mf_loop_alloc(host->loop, sizeof(*co));
    co->L = lua_newthread(host->L);
    co->ref = mf_lua_ref(host, host->L);
    for (int i = 0; i < MF_LUA_CO_KEEP; i++) {
        co->keep[i] = LUA_NOREF;
        co->keep_ptrs[i] = NULL;
    }
    return co;
}

void mf_lua_idle_free(mf_lua_host_t *host)
{
    while (host->nidle)
        mf_loop_free(host->loop, host->idle[--host->nidle],
                     sizeof(mf_lua_co_t));
}

/* Why an erroring coroutine ended: the watchdog stopped it, or one of its
 * allocations was refused (even if it caught that error and raised
 * another: the refusal is what a reader of the log needs). */
static mf_lua_co_cause_t mf_lua__co_cause(const mf_lua_co_t *co,
                                          mf_lua_co_status_t status)
{
    if (status != MF_LUA_CO_ERROR)
        return MF_LUA_CAUSE_NONE;
    if (co->cause != MF_LUA_CAUSE_NONE)
        return co->cause;
    return co->memory_refused ? MF_LUA_CAUSE_MEMORY : MF_LUA_CAUSE_NONE;
}

/* The one exit path of every coroutine: done, error, abort, shutdown. It
 * runs the pending cleanup, calls the owner back, releases the reference
 * and frees the record. Idempotent while it runs: an abort from inside the
 * exit callback finds the coroutine exiting and does nothing. A coroutine
 * that ran out of memory leaves garbage behind: collected at once, so the
 * next one starts under the cap. */
static void mf_lua__co_exit(mf_lua_co_t *co, mf_lua_co_status_t status,
                            const char *message, int nret)
{
    mf_lua_host_t *host = co->host;
    if (co->exiting)
        return;
    co->exiting = true;
    mf_lua__co_cleanup(co);
    mf_lua__co_release_owned(co);
    mf_list_remove(&co->link);
    if (status == MF_LUA_CO_ERROR)
        host->counts.errors++;
    mf_lua_co_exit_t ex = {status, co->L, nret, message,
                           mf_lua__co_cause(co, status)};
    if (co->cb)
        co->cb(co, &ex, co->data);
    else if (status == MF_LUA_CO_ERROR)
        mf_lua_host_log(host, "%s", message);
    if (lua_gettop(co->L)) /* a handler's thread most often ends empty */
        lua_settop(co->L, 0);
    host->counts.coroutines--;
    if (!mf_lua__co_keep_idle(host, co, status))
        mf_loop_free(host->loop, co, sizeof(*co));
    if (ex.cause == MF_LUA_CAUSE_MEMORY)
        lua_gc(host->L, LUA_GCCOLLECT, 0);
}

/* The error on top of the dead coroutine, with its traceback. */
static void mf_lua__co_error(mf_lua_co_t *co)
{
    lua_State *L = co->host->L;
    const char *msg = lua_tostring(co->L, -1);
    if (!msg)
        msg = lua_pushfstring(co->L, "(error object is a %s value)",
                              luaL_typename(co->L, -1));
    luaL_traceback(L, co->L, msg, 0);
    mf_lua__co_exit(co, MF_LUA_CO_ERROR, lua_tostring(L, -1), 0);
    lua_pop(L, 1);
}

/* A coroutine the watchdog stopped outside its own resume (in a flow
 * callback), or that parked after catching the stop: it ends now. */
static void mf_lua__co_stopped(mf_lua_co_t *co)
{
    char buf[96];
    mf_lua__co_exit(co, MF_LUA_CO_ERROR,
                    mf_lua_cause_message(co->host, co->cause, buf, sizeof buf),
                    0);
}

/* Resumes; true while the coroutine is parked, false once it has ended. */
static bool mf_lua__co_run(mf_lua_co_t *co, int nargs)
{
    mf_lua_host_t *host = co->host;
    if (co->cause != MF_LUA_CAUSE_NONE) {
        mf_lua__co_stopped(co);
        return false;
    }
    mf_lua_co_t *prev = host->current;
    host->current = co;
    host->counts.resumes++;
    co->running = true;
    mf_lua_slice_t outer = mf_lua_slice_enter(host, co);
    mf_task_trace_t *outer_trace =
        co->hooks.trace ? mf_loop_set_trace(host->loop, co->hooks.trace) : NULL;
    int rc = lua_resume(co->L, nargs);
    if (co->hooks.trace)
        mf_loop_set_trace(host->loop, outer_trace);
    mf_lua_slice_leave(host, outer);
    co->running = false;
    host->current = prev;
    if (rc == LUA_YIELD) {
        if (co->abort_reason)
            mf_lua__co_exit(co, MF_LUA_CO_ABORTED, co->abort_reason, 0);
        else if (co->cause != MF_LUA_CAUSE_NONE)
            mf_lua__co_stopped(co);
        else if (co->cleanup)
            return true;
        else
            mf_lua__co_exit(co, MF_LUA_CO_ERROR, mf_lua__bare_yield, 0);
        return false;
    }
    if (rc == 0)
        mf_lua__co_exit(co, MF_LUA_CO_DONE, NULL, lua_gettop(co->L));
    else
        mf_lua__co_error(co);
    return false;
}

mf_lua_co_t *mf_lua_host_prepare(mf_lua_host_t *host, mf_lua_co_exit_cb cb,
                                 void *data)
{
    return mf_lua_host_prepare_with(host, cb, data, NULL);
}

mf_lua_co_t *mf_lua_host_prepare_with(mf_lua_host_t *host,
                                      mf_lua_co_exit_cb cb, void *data,
                                      const mf_lua_co_hooks_t *hooks)
{
    mf_lua_co_t *co = mf_lua__co_acquire(host);
    co->host = host;
    co->cleanup = NULL;
    co->op = NULL;
    co->cb = cb;
    co->data = data;
    co->running = false;
    co->exiting = false;
    co->abort_reason = NULL;
    co->cause = MF_LUA_CAUSE_NONE;
    co->memory_refused = false;
    if (hooks) /* written once: no zeroing first, no copy at the start */
        co->hooks = *hooks;
    else
        co->hooks = (mf_lua_co_hooks_t){0};
    co->nested_wait = NULL;
    mf_list_init(&co->owned);
    mf_list_push_back(&host->coroutines, &co->link);
    host->counts.coroutines++;
    return co;
}

const char *mf_lua_host_request_id(const mf_lua_host_t *host)
{
    const mf_lua_co_t *co = host->current;
    return co && co->hooks.request_id
               ? co->hooks.request_id(co->hooks.request_id_ud)
               : NULL;
}

bool mf_lua_co_start(mf_lua_co_t *co, int nargs)
{
    return mf_lua__co_run(co, nargs);
}

void mf_lua_co_set_hooks(mf_lua_co_t *co, const mf_lua_co_hooks_t *hooks)
{
    co->hooks = *hooks;
}

bool mf_lua_co_start_with(mf_lua_co_t *co, int nargs,
                          const mf_lua_co_hooks_t *hooks)
{
    if (hooks)
        co->hooks = *hooks;
    return mf_lua__co_run(co, nargs);
}

mf_lua_co_t *mf_lua_host_spawn_with(mf_lua_host_t *host, int nargs,
                                    mf_lua_co_exit_cb cb, void *data,
                                    const mf_lua_co_hooks_t *hooks)
{
    mf_lua_co_t *co = mf_lua_host_prepare_with(host, cb, data, hooks);
    lua_xmove(host->L, co->L, nargs + 1);
    return mf_lua_co_start(co, nargs) ? co : NULL;
}

mf_lua_co_t *mf_lua_host_spawn(mf_lua_host_t *host, int nargs,
                               mf_lua_co_exit_cb cb, void *data)
{
    return mf_lua_host_spawn_with(host, nargs, cb, data, NULL);
}

mf_lua_co_t *mf_lua_host_current(const mf_lua_host_t *host)
{
    return host->current;
}

int *mf_lua_co_keep(mf_lua_co_t *co)
{
    return co->keep;
}

void **mf_lua_co_keep_ptrs(mf_lua_co_t *co)
{
    return co->keep_ptrs;
}

bool mf_lua_co_push_keeps(mf_lua_co_t *co)
{
    for (int i = 0; i < MF_LUA_CO_KEEP; i++)
        if (co->keep[i] == LUA_NOREF)
            return false;
    for (int i = 0; i < MF_LUA_CO_KEEP; i++)
        lua_rawgeti(co->L, LUA_REGISTRYINDEX, co->keep[i]);
    return true;
}

void *mf_lua_co_push_kept(mf_lua_co_t *co, int slot)
{
    if (co->keep[slot] == LUA_NOREF)
        return NULL;
    lua_rawgeti(co->L, LUA_REGISTRYINDEX, co->keep[slot]);
    return co->keep_ptrs[slot];
}

void mf_lua_co_abort(mf_lua_co_t *co, const char *reason)
{
    if (!reason)
        reason = "aborted";
    if (co->running) { /* from a C function it called: end at its yield */
        co->abort_reason = reason;
        return;
    }
    mf_lua__co_exit(co, MF_LUA_CO_ABORTED, reason, 0);
}

lua_State *mf_lua_co_thread(const mf_lua_co_t *co)
{
    return co->L;
}

mf_lua_host_t *mf_lua_co_host(const mf_lua_co_t *co)
{
    return co->host;
}

/* Whether L is a plain coroutine being resumed through moonflow's
 * coroutine.resume (moonflow/coroutine.lua marks it in a weak table). */
static bool mf_lua__managed(lua_State *L)
{
    lua_getfield(L, LUA_REGISTRYINDEX, MF_LUA_NESTED_KEY);
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        return false;
    }
    lua_pushthread(L);
    lua_rawget(L, -2);
    bool managed = lua_toboolean(L, -1);
    lua_pop(L, 2);
    return managed;
}

mf_lua_co_t *mf_lua_co_check(lua_State *L)
{
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    mf_lua_co_t *co = host ? host->current : NULL;
    if (co && co->L != L && mf_lua__managed(L)) {
        /* a plain coroutine inside co: its yield travels up to co's
         * resumer, and the results come back down the same way */
        co->nested_wait = L;
        return co;
    }
    if (!co || co->L != L)
        luaL_error(L, "cannot wait here: not in a moonflow coroutine "
                      "(the main chunk of a state, or a coroutine resumed "
                      "by other means than coroutine.resume/wrap)");
    return co;
}

void mf_lua_co_park(mf_lua_co_t *co, mf_lua_cleanup_fn cleanup, void *op)
{
    mf_lua__co_cleanup(co); /* left by a park whose yield raised */
    co->cleanup = cleanup;
    co->op = op;
}

void mf_lua_co_unpark(mf_lua_co_t *co)
{
    co->cleanup = NULL;
    co->op = NULL;
}

void mf_lua_co_resume(mf_lua_co_t *co, int nargs)
{
    mf_lua__co_run(co, nargs);
}
