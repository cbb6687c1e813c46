/*
 * moonflow/lua_co.h — coroutine control, for the owner of a coroutine that
 * runs on behalf of some work (a server's request, a load generator's
 * virtual user) and for C functions that park a coroutine on I/O.
 * moonflow/lua_host.h (which includes this header) is the embedding API:
 * create a host, spawn code, read its state; an embedder that only runs
 * scripts needs nothing here.
 *
 * Hooks: what the owner wants told or applied while the coroutine runs
 * (its flows' step times, lean results, a label and a request id for what
 * it does, a trace for its tasks, a deadline) is ONE mf_lua_co_hooks_t
 * given when the coroutine is made or starts (mf_lua_host_spawn_with,
 * mf_lua_host_prepare_with, mf_lua_co_start_with). The host copies it
 * into the coroutine record; the owner keeps every ud and the trace
 * alive while the coroutine may run, and the coroutine reads them on the
 * loop thread only. A zeroed struct (or NULL) is no hook at all, the
 * default of every coroutine.
 *
 * C functions that need I/O follow one pattern (OpenResty's sleep/socket):
 *
 *   static int l_sleep(lua_State *L) {
 *       uint64_t ms = luaL_checkinteger(L, 1);    // raise on misuse
 *       mf_lua_co_t *co = mf_lua_co_check(L);    // raise outside a coroutine
 *       op_t *op = ...;                          // start the C task
 *       mf_lua_co_park(co, op_cancel, op);       // the cleanup hook
 *       return lua_yield(L, 0);
 *   }
 *   // completion, on the loop: if the op was detached by its cleanup hook
 *   // (abort, shutdown), free it and stop; otherwise
 *   mf_lua_co_unpark(co);  push results on mf_lua_co_thread(co);
 *   mf_lua_co_resume(co, nresults);
 *
 * Owns: nothing; the coroutine record is the host's (lua_host.h).
 * Threads: the loop's thread only.
 */
#ifndef MOONFLOW_LUA_CO_H
#define MOONFLOW_LUA_CO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <moonflow/common.h>
#include <moonflow/task.h>

MF_EXTERN_C_BEGIN

#include <lua.h>

typedef struct mf_lua_host mf_lua_host_t;
typedef struct mf_lua_co mf_lua_co_t;

/* ---- hooks, given at start ------------------------------------------- */

/* Timing the steps of the flows a coroutine waits on (step:wait() of a
 * task, a series or a parallel), for a load generator: fn hears step 0
 * when a flow starts, then step i when its i-th top-level step completes:
 * each child of the flow's series or parallel (a task, or a nested series
 * or parallel as a whole), or the flow itself (step 1) when it is a single
 * task. A series' step starts when the one before it completes, a
 * parallel's steps all start with the flow; steps pushed by callbacks
 * (flow:push) are not counted. Called on the loop thread outside Lua (it
 * must not touch the state), before the step's result reaches Lua. The
 * cost without one is one test per step. */
typedef void (*mf_lua_step_fn)(void *ud, unsigned step);
/* Lean results, for a waiter that only tells outcomes apart (a load
 * generator): asked each time the coroutine waits on a flow or a task;
 * when it answers true, a task of that wait that succeeded, whose answer
 * reports no failure (its kind's answer_failed, lua_kind.h) and that has
 * no callback gives true in place of its result table, so no table is
 * built for it. A task that failed, or whose answer did (a Redis error
 * reply, an HTTP status >= 400), gives its whole result; a callback is
 * always given the whole result. */
typedef bool (*mf_lua_lean_fn)(void *ud);
/* What a coroutine works for, for the log lines its Lua code writes
 * (mf.log): fn(ud, buf, cap) writes a short NUL-terminated label ("GET
 * /route") into buf when a line is written. Without one, lines carry no
 * label. */
typedef void (*mf_lua_describe_fn)(void *ud, char *buf, size_t cap);
/* The id of the request a coroutine serves (serve's req.id): the HTTP
 * tasks its Lua code starts send it as X-Request-Id (unless their headers
 * name one). fn(ud) returns a NUL-terminated id, valid while the coroutine
 * runs, or NULL. */
typedef const char *(*mf_lua_request_id_fn)(void *ud);

/* What an owner follows of a coroutine's family (one table of functions
 * for all its coroutines, given with its ud in mf_lua_co_hooks_t):
 * adopt(ud, child) runs as the coroutine's Lua code spawns a thread
 * (mf.spawn, ngx.thread.spawn: moonflow.wait's spawn), in the spawner's
 * turn and before the thread runs, and may give the thread hooks
 * (mf_lua_co_set_hooks), so that it works for the same owner; ended(ud,
 * co) runs once as such a thread ends (whichever way), in its exit path,
 * given by the hooks adopt gave it. Either may be NULL. */
typedef struct mf_lua_co_family {
    void (*adopt)(void *ud, mf_lua_co_t *child);
    void (*ended)(void *ud, mf_lua_co_t *co);
} mf_lua_co_family_t;

typedef struct mf_lua_co_hooks {
    mf_lua_step_fn step; /* NULL: none */
    void *step_ud;
    mf_lua_lean_fn lean; /* NULL: whole results always */
    void *lean_ud;
    mf_lua_describe_fn describe; /* NULL: no label */
    void *describe_ud;
    mf_lua_request_id_fn request_id; /* NULL: no request id */
    void *request_id_ud;
    /* Every task the coroutine's Lua code makes (its flows, its waits)
     * holds trace (moonflow/task.h: set on the loop while the coroutine
     * runs), so an observer can tell that work's tasks apart. Tasks a
     * flow's per-task callback makes are not the coroutine's. NULL: none. */
    mf_task_trace_t *trace;
    /* Loop time (mf_loop_now) at which Lua code the coroutine runs is
     * stopped (MF_LUA_CAUSE_DEADLINE, lua_host.h "runaway code"); a parked
     * coroutine is not touched (the owner's own timer aborts it). Needs an
     * interruptible host; ignored otherwise. 0: none. */
    uint64_t deadline;
    /* The owner's family functions (mf_lua_co_family_t) and their ud.
     * NULL: a spawned thread starts without hooks, no end is told. */
    const mf_lua_co_family_t *family;
    void *family_ud;
} mf_lua_co_hooks_t;

/* Gives a coroutine that has not started yet its hooks (copied), for an
 * adopt hook. */
MF_API void mf_lua_co_set_hooks(mf_lua_co_t *co,
                                const mf_lua_co_hooks_t *hooks);

/* mf_lua_co_start (lua_host.h) with hooks: the coroutine made by
 * mf_lua_host_prepare gets *hooks (copied; NULL keeps what it has), then
 * runs. Returns true if it parked (the handle lives on), false if it
 * ended. */
MF_API bool mf_lua_co_start_with(mf_lua_co_t *co, int nargs,
                                 const mf_lua_co_hooks_t *hooks);

/* The request id of the coroutine the host is running, or NULL. */
MF_API const char *mf_lua_host_request_id(const mf_lua_host_t *host);

/* ---- what travels with a coroutine's thread ---------------------------- */

/* Values kept with a coroutine's thread: MF_LUA_CO_KEEP registry refs that
 * follow the thread when it is reused for a later spawn (LUA_NOREF until the
 * owner sets them), released with the thread. An owner that makes the same
 * objects for every spawn (the server's request and response) makes them
 * once per thread. Not counted in mf_lua_counts_t.refs: like idle threads,
 * they are bounded by the thread pool. */
#define MF_LUA_CO_KEEP 2
MF_API int *mf_lua_co_keep(mf_lua_co_t *co);
/* Beside each kept ref, the address of the value it holds when that is a
 * userdata (whose memory never moves), noted by the owner as it sets the
 * ref (NULL until then), travelling and released with it: the owner tells
 * a userdata is one the running coroutine keeps by a pointer compare,
 * with no registry lookup nor metatable check. */
MF_API void **mf_lua_co_keep_ptrs(mf_lua_co_t *co);
/* Pushes the value of keep[slot] on the coroutine's thread and returns
 * keep_ptrs[slot]: one call for what a spawn reuses. A slot with no ref
 * yet: NULL, nothing pushed. */
MF_API void *mf_lua_co_push_kept(mf_lua_co_t *co, int slot);
/* Pushes every kept value, slot 0 first, when all are set (true); else
 * pushes nothing (false). */
MF_API bool mf_lua_co_push_keeps(mf_lua_co_t *co);

/* ---- for C functions that park (see lua_host.h's pattern) --------------- */

/* The running host coroutine whose thread is L; raises a Lua error when L
 * is not one (the main chunk of a plain state, a user coroutine). */
MF_API mf_lua_co_t *mf_lua_co_check(lua_State *L);
/* Cancels a pending operation; it must stop touching the coroutine. */
typedef void (*mf_lua_cleanup_fn)(void *op);
/* Records the pending operation's cleanup hook. A hook still set from an
 * earlier, failed park runs first. */
MF_API void mf_lua_co_park(mf_lua_co_t *co, mf_lua_cleanup_fn cleanup,
                           void *op);
/* The operation completed: forget its hook (it must not run any more). */
MF_API void mf_lua_co_unpark(mf_lua_co_t *co);
/* Resumes a parked coroutine with nargs values pushed on its thread. Runs
 * the exit callback and releases the handle if the coroutine ends. */
MF_API void mf_lua_co_resume(mf_lua_co_t *co, int nargs);

MF_EXTERN_C_END

#endif /* MOONFLOW_LUA_CO_H */
