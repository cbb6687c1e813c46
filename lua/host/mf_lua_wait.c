/*
 * lua/host/mf_lua_wait.c — the module moonflow.wait: the one C primitive under
 * mf.spawn, mf.semaphore and mf.queue (written in Lua on top of it, in
 * moonflow/init.lua), and the spawning of Lua threads.
 *
 *   w = wait.waiter()          a one-shot waiter
 *   wait.park(w [, ms])        parks the running coroutine until
 *                              wait.wake(w, ...) (returns true, ...) or ms
 *                              pass (returns false, "timeout"); returns at
 *                              once when the wake came first
 *   wait.wake(w, ...)          true if this woke (or will wake) a waiter;
 *                              false when it already woke, timed out or its
 *                              coroutine ended. Never yields, never runs the
 *                              parked code inside the caller: the resume is
 *                              deferred to the loop's next turn
 *   wait.spawn(done, fn, ...)  runs fn(...) in a new coroutine from the
 *                              loop's next turn; done(ok, ...) is called
 *                              when it ends (ok false: the error, with its
 *                              traceback, or why it was aborted); the
 *                              spawner's family's adopt (lua_co.h) runs
 *                              first
 *
 * Owns the waiter records (mf_lua_waiter_t, loop memory): the userdata
 * holds a pointer; a record is freed once its userdata is collected and no
 * deferred resume is pending (the loop frees what is left at its end).
 * While parked, the waiter is on the parked thread's stack (park's
 * argument), so it cannot be collected. Values given by wake wait in a
 * registry table until they are handed over.
 */
#include <lauxlib.h>
#include <stdbool.h>
#include <string.h>

#include <moonflow/lua_arg.h>
#include <moonflow/common.h>
#include <moonflow/loop.h>

#include "mf_lua_int.h"

#define MF_LUA_WAITER "moonflow.waiter"

typedef enum {
    MF_WAITER_IDLE,   /* made, not parked, not woken */
    MF_WAITER_PARKED, /* a coroutine waits */
    MF_WAITER_WOKEN,  /* wake came: values wait (a resume may be deferred) */
    MF_WAITER_DONE    /* handed over, timed out or its coroutine ended */
} mf_waiter_state_t;

typedef struct mf_lua_waiter {
    mf_lua_host_t *host;
    mf_lua_co_t *co; /* while parked */
    mf_waiter_state_t state;
    int values_ref; /* {n = N, ...} from wake, LUA_NOREF otherwise */
    mf_timer_t timer;
    bool timing;
    mf_post_t post; /* the deferred resume */
    bool post_pending;
    bool collected; /* the userdata is gone */
} mf_lua_waiter_t;

static mf_loop_t *mf__waiter_loop(const mf_lua_waiter_t *w)
{
    return mf_lua_host_loop(w->host);
}

static void mf__waiter_free_if_unused(mf_lua_waiter_t *w)
{
    if (w->collected && !w->post_pending)
        mf_loop_free(mf__waiter_loop(w), w, sizeof *w);
}

static void mf__waiter_stop_timer(mf_lua_waiter_t *w)
{
    if (w->timing)
        mf_timer_stop(mf__waiter_loop(w), &w->timer);
    w->timing = false;
}

/* Pushes true and wake's values on L; returns how many. */
static int mf__waiter_push_values(lua_State *L, mf_lua_waiter_t *w)
{
    lua_pushboolean(L, 1);
    if (w->values_ref == LUA_NOREF)
        return 1;
    int n = mf_lua_push_packed(L, w->values_ref, 0);
    mf_lua_unref(w->host, w->values_ref);
    w->values_ref = LUA_NOREF;
    return n + 1;
}

/* The parked coroutine ended first (abort, shutdown): forget it. */
static void mf__waiter_cleanup(void *op)
{
    mf_lua_waiter_t *w = op;
    mf__waiter_stop_timer(w);
    w->co = NULL;
    w->state = MF_WAITER_DONE;
    mf_lua_unref(w->host, w->values_ref);
    w->values_ref = LUA_NOREF;
}

static void mf__waiter_resume(mf_post_t *post)
{
    mf_lua_waiter_t *w = post->data;
    w->post_pending = false;
    mf_lua_co_t *co = w->co;
    if (!co) { /* its coroutine ended meanwhile */
        mf__waiter_free_if_unused(w);
        return;
    }
    w->co = NULL;
    w->state = MF_WAITER_DONE;
    mf_lua_co_unpark(co);
    mf_lua_co_resume(co, mf__waiter_push_values(mf_lua_co_thread(co), w));
}

static void mf__waiter_timed_out(mf_timer_t *timer)
{
    mf_lua_waiter_t *w = timer->data;
    mf_lua_co_t *co = w->co;
    w->timing = false;
    w->co = NULL;
    w->state = MF_WAITER_DONE;
    mf_lua_co_unpark(co);
    lua_State *T = mf_lua_co_thread(co);
    lua_pushboolean(T, 0);
    lua_pushliteral(T, "timeout");
    mf_lua_co_resume(co, 2);
}

static mf_lua_waiter_t *mf__waiter_check(lua_State *L, int idx)
{
    mf_lua_waiter_t **box = mf_lua_check_udata(L, idx, MF_LUA_WAITER);
    return *box;
}

static int mf__waiter_gc(lua_State *L)
{
    mf_lua_waiter_t **box = mf_lua_check_udata(L, 1, MF_LUA_WAITER);
    mf_lua_waiter_t *w = *box;
    *box = NULL;
    if (!w)
        return 0;
    mf_lua_unref(w->host, w->values_ref);
    w->values_ref = LUA_NOREF;
    w->collected = true;
    mf__waiter_free_if_unused(w);
    return 0;
}

static int mf__waiter_new(lua_State *L)
{
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    mf_lua_waiter_t **box = lua_newuserdata(L, sizeof *box);
    *box = NULL;
    luaL_getmetatable(L, MF_LUA_WAITER);
    lua_setmetatable(L, -2);
    mf_lua_waiter_t *w = mf_loop_alloc(mf_lua_host_loop(host), sizeof *w);
    memset(w, 0, sizeof *w);
    w->host = host;
    w->values_ref = LUA_NOREF;
    mf_timer_init(&w->timer, mf__waiter_timed_out, w);
    mf_post_init(&w->post, mf__waiter_resume, w);
    *box = w;
    return 1;
}

static int mf__waiter_park(lua_State *L)
{
    mf_lua_waiter_t *w = mf__waiter_check(L, 1);
    lua_Number ms = mf_lua_opt_number(L, 2, -1);
    if (w->state == MF_WAITER_WOKEN) { /* the wake came first */
        w->state = MF_WAITER_DONE;
        return mf__waiter_push_values(L, w);
    }
    if (w->state != MF_WAITER_IDLE)
        return luaL_error(L, "this waiter was already used");
    mf_lua_co_t *co = mf_lua_co_check(L);
    w->co = co;
    w->state = MF_WAITER_PARKED;
    if (ms >= 0) {
        w->timing = true;
        mf_timer_start(mf__waiter_loop(w), &w->timer, (uint64_t)ms);
    }
    mf_lua_co_park(co, mf__waiter_cleanup, w);
    return lua_yield(L, 0);
}

static int mf__waiter_wake(lua_State *L)
{
    mf_lua_waiter_t *w = mf__waiter_check(L, 1);
    if (w->state != MF_WAITER_IDLE && w->state != MF_WAITER_PARKED) {
        lua_pushboolean(L, 0);
        return 1;
    }
    int n = lua_gettop(L) - 1;
    if (n > 0) {
        mf_lua_pack(L, 2, n);
        w->values_ref = mf_lua_ref(w->host, L);
    }
    if (w->state == MF_WAITER_PARKED) {
        mf__waiter_stop_timer(w);
        w->post_pending = true;
        mf_loop_defer(mf__waiter_loop(w), &w->post);
    }
    w->state = MF_WAITER_WOKEN;
    lua_pushboolean(L, 1);
    return 1;
}

/* ---- spawn ------------------------------------------------------------- */

typedef struct mf_lua_spawn {
    mf_lua_host_t *host;
    mf_loop_t *loop;
    mf_post_t post; /* first the start, then the report of the end */
    mf_lua_co_t *co;
    int nargs;
    int done_ref;   /* done(ok, ...) */
    int result_ref; /* {n = N, ok, values...} once the coroutine ended */
    bool started;   /* the start post has run (the post is free again) */
} mf_lua_spawn_t;

static void mf__spawn_free(mf_lua_spawn_t *s)
{
    mf_loop_free(s->loop, s, sizeof *s);
}

/* On the loop's next turn after the end: done(ok, ...), outside any
 * coroutine. A host destroyed meanwhile took the references with it. */
static void mf__spawn_report(mf_post_t *post)
{
    mf_lua_spawn_t *s = post->data;
    mf_lua_host_t *host = s->host;
    if (mf_lua_host_of(s->loop) != host) {
        mf__spawn_free(s);
        return;
    }
    lua_State *L = mf_lua_host_state(host);
    lua_rawgeti(L, LUA_REGISTRYINDEX, s->done_ref);
    int n = mf_lua_push_packed(L, s->result_ref, 0);
    mf_lua_unref(host, s->done_ref);
    mf_lua_unref(host, s->result_ref);
    mf__spawn_free(s);
    mf_lua_call_logged(host, n, "mf.spawn: reporting a thread's end");
}

/* The coroutine ended: its outcome goes into a table (true and its
 * results, or false and the error) reported on the next turn. */
static void mf__spawn_exit(mf_lua_co_t *co, const mf_lua_co_exit_t *ex,
                           void *data)
{
    mf_lua_spawn_t *s = data;
    lua_State *L = ex->L;
    if (co->hooks.family && co->hooks.family->ended) /* its owner's */
        co->hooks.family->ended(co->hooks.family_ud, co);
    /* {true, results...} or {false, the error}: pushed in a row, packed */
    if (ex->status == MF_LUA_CO_DONE) {
        lua_pushboolean(L, 1);
        lua_insert(L, -(ex->nret + 1));
        mf_lua_pack(L, lua_gettop(L) - ex->nret, ex->nret + 1);
    } else {
        lua_pushboolean(L, 0);
        lua_pushstring(L, ex->message ? ex->message : "aborted");
        mf_lua_pack(L, lua_gettop(L) - 1, 2);
    }
    s->result_ref = mf_lua_ref(s->host, L);
    s->co = NULL;
    if (!s->started) /* aborted before its start: the start post reports */
        return;
    mf_post_init(&s->post, mf__spawn_report, s);
    mf_loop_defer(s->loop, &s->post);
}

static void mf__spawn_start(mf_post_t *post)
{
    mf_lua_spawn_t *s = post->data;
    s->started = true;
    if (!s->co) { /* aborted before it could start */
        mf_post_init(&s->post, mf__spawn_report, s);
        mf_loop_defer(s->loop, &s->post);
        return;
    }
    mf_lua_co_start(s->co, s->nargs); /* may end at once: mf__spawn_exit */
}

static int mf__spawn(lua_State *L)
{
    mf_lua_check_type(L, 1, LUA_TFUNCTION); /* done */
    mf_lua_check_type(L, 2, LUA_TFUNCTION); /* fn */
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    mf_loop_t *loop = mf_lua_host_loop(host);
    mf_lua_spawn_t *s = mf_loop_alloc(loop, sizeof *s);
    memset(s, 0, sizeof *s);
    s->host = host;
    s->loop = loop;
    s->nargs = lua_gettop(L) - 2;
    s->co = mf_lua_host_prepare(host, mf__spawn_exit, s);
    mf_lua_co_t *spawner = mf_lua_host_current(host);
    if (spawner && spawner->hooks.family && spawner->hooks.family->adopt)
        spawner->hooks.family->adopt(spawner->hooks.family_ud, s->co);
    lua_State *T = mf_lua_co_thread(s->co);
    luaL_checkstack(T, s->nargs + 1, "mf.spawn's arguments");
    lua_xmove(L, T, s->nargs + 1); /* fn and its arguments */
    s->done_ref = mf_lua_ref(host, L);
    mf_post_init(&s->post, mf__spawn_start, s);
    mf_loop_defer(loop, &s->post);
    return 0;
}

int mf_lua_open_wait(lua_State *L)
{
    static const luaL_Reg funcs[] = {{"waiter", mf__waiter_new},
                                     {"park", mf__waiter_park},
                                     {"wake", mf__waiter_wake},
                                     {"spawn mf.spawn(fn, ...)", mf__spawn},
                                     {NULL, NULL}};
    if (luaL_newmetatable(L, MF_LUA_WAITER)) {
        lua_pushcfunction(L, mf__waiter_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    lua_newtable(L);
    mf_lua_register(L, funcs);
    return 1;
}
