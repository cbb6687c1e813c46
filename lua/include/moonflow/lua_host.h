/*
 * moonflow/lua_host.h — the LuaJIT host: one lua_State per loop, Lua code
 * run in coroutines that park on C tasks and are resumed by their
 * completions. This is the embedding API: the moonflow binary (run, test,
 * serve) uses nothing else, and a C or C++ program can do the same.
 *
 * Owns: the lua_State (created and closed here), every coroutine record and
 * the registry references anchoring them, background timers, the registry
 * of task kinds (moonflow/lua_kind.h; the kind structs stay their
 * registrants'). Does not own the loop (the caller's; it must outlive the
 * host) nor the compute pool (mf_loop_set_pool; mf.go needs one).
 *
 * A caller (the HTTP server, `moonflow run`, the spec runner, an embedding
 * program) pushes a function and its arguments on mf_lua_host_state(host)
 * and calls mf_lua_host_spawn: the function runs at once in a new
 * coroutine, until it returns, raises, or parks on I/O. Its exit callback
 * runs exactly once, on the loop thread, whichever way it ends: done,
 * error, or aborted (the server aborts when the client goes away;
 * mf_lua_host_destroy aborts what is left). The mf_lua_co_t handle is valid
 * until that callback returns.
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
 * Threads: the loop's thread only. Lua never runs on two threads at once:
 * one host per worker loop.
 */
#ifndef MOONFLOW_LUA_HOST_H
#define MOONFLOW_LUA_HOST_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <moonflow/common.h>
#include <moonflow/loop.h>
#include <moonflow/metrics.h>
#include <moonflow/task.h>

MF_EXTERN_C_BEGIN

/* LuaJIT's headers declare no C linkage of their own (lua.hpp adds it):
 * included here, inside ours, they get it for C++ programs too. */
#include <lua.h>

typedef struct mf_lua_host mf_lua_host_t;
typedef struct mf_lua_co mf_lua_co_t;

/* Receives error reports of coroutines nobody waits for (background timers)
 * with their traceback. NULL: written to stderr. */
typedef void (*mf_lua_log_fn)(void *ud, const char *msg);

/* LuaJIT's trace compiler for a host (mf_lua_host_opts_t.jit). */
typedef enum mf_lua_jit {
    MF_LUA_JIT_AUTO, /* off for an interruptible host, on otherwise */
    MF_LUA_JIT_ON,   /* on: compiled loops cannot be interrupted */
    MF_LUA_JIT_OFF
} mf_lua_jit_t;

typedef struct mf_lua_host_opts {
    /* Prepended to package.path / package.cpath, so installed modules win
     * over the current directory. NULL: the system's Lua module folders
     * (those of the LuaJIT moonflow was built with, and /usr/local's);
     * "": nothing. */
    const char *package_path;
    const char *package_cpath;
    mf_lua_log_fn log;
    void *log_ud;
    /* Runaway code (see "runaway code" below). cpu_budget_ms: the CPU time
     * Lua code may run without yielding before it is stopped; 0: no
     * budget. interruptible: watched even without a budget, so that
     * coroutine deadlines and mf_lua_host_interrupt_all apply; a budget
     * implies it. */
    uint32_t cpu_budget_ms;
    bool interruptible;
    mf_lua_jit_t jit;
    /* Bytes the state may hold; 0: no cap. Past it, an allocation made
     * while Lua code runs for a coroutine (a slice, below) fails: that code
     * gets the error "not enough memory", its coroutine ends
     * MF_LUA_CO_ERROR with cause MF_LUA_CAUSE_MEMORY unless it catches it,
     * and a full collection runs when it ends. The host's own bookkeeping
     * between slices is never refused (it may pass the cap by a little). */
    size_t memory_limit;
    /* mf.log: the least severe level written (MF_LUA_LOG_*; 0: info). */
    int log_level;
    /* mf.worker.id / mf.worker.count: which of the process's workers this
     * host serves (0-based) and how many there are (0: one). */
    unsigned worker_id, worker_count;
    /* mf.metrics: the process's registry, written by this host as shard
     * worker_id (it must have worker_count shards at least; the registry
     * outlives the host). NULL: the host makes one of its own on first
     * use, freed with it. */
    mf_metrics_t *metrics;
} mf_lua_host_opts_t;

/* mf.log's levels, nginx's names and order: a host writes the lines of its
 * log_level and the more severe ones. */
enum {
    MF_LUA_LOG_EMERG = 1,
    MF_LUA_LOG_ALERT,
    MF_LUA_LOG_CRIT,
    MF_LUA_LOG_ERROR,
    MF_LUA_LOG_WARN,
    MF_LUA_LOG_NOTICE,
    MF_LUA_LOG_INFO,
    MF_LUA_LOG_DEBUG
};
/* The name of a level ("error", "warn" ...), or NULL. */
static inline const char *mf_lua_log_level_name(int level)
{
    static const char *const names[] = {NULL,     "emerg", "alert",
                                        "crit",   "error", "warn",
                                        "notice", "info",  "debug"};
    return level >= MF_LUA_LOG_EMERG && level <= MF_LUA_LOG_DEBUG ? names[level]
                                                                  : NULL;
}

/* The level named name, or 0. */
static inline int mf_lua_log_level(const char *name)
{
    for (int i = MF_LUA_LOG_EMERG; i <= MF_LUA_LOG_DEBUG; i++)
        if (!strcmp(name, mf_lua_log_level_name(i)))
            return i;
    return 0;
}

/* Creates the state, opens the standard libraries, preloads the embedded
 * moonflow modules (require "moonflow") and registers the built-in task
 * kinds (timer, http, go, redis). opts may be NULL (all defaults). The
 * host registers itself under the loop's Lua key (one host per
 * loop; a loop destroyed first destroys its host). Returns NULL if the loop
 * has a host already or LuaJIT cannot allocate a state. */
MF_API mf_lua_host_t *mf_lua_host_create(mf_loop_t *loop,
                                         const mf_lua_host_opts_t *opts);
/* Aborts every live coroutine (cleanup hooks run, exit callbacks see
 * MF_LUA_CO_ABORTED), cancels background timers, closes the state. Tasks
 * canceled here complete later on the loop without touching Lua: run the
 * loop until idle before destroying it. Call it from the loop, never from
 * inside Lua (a C function called by a coroutine). NULL: nothing. */
MF_API void mf_lua_host_destroy(mf_lua_host_t *host);

MF_API lua_State *mf_lua_host_state(const mf_lua_host_t *host);
MF_API mf_loop_t *mf_lua_host_loop(const mf_lua_host_t *host);
/* The host of any thread of its state. */
MF_API mf_lua_host_t *mf_lua_host_from_state(lua_State *L);
/* The loop's host, or NULL (e.g. from an exchange: mf_http_exchange_loop). */
MF_API mf_lua_host_t *mf_lua_host_of(const mf_loop_t *loop);
/* Reports through opts->log (printf-style). */
MF_API void mf_lua_host_log(mf_lua_host_t *host, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Leak accounting: live coroutines, registry references held by the host,
 * armed background timers, flows and single tasks waited on.
 * mf.debug.counts() in Lua. */
typedef struct mf_lua_counts {
    size_t coroutines;
    size_t refs;
    size_t timers;
    size_t flows;
    size_t errors;       /* coroutines that ended with an error, ever */
    size_t resumes;      /* lua_resume calls, ever (a flow costs one) */
    size_t idle_threads; /* finished coroutine threads kept for reuse */
    size_t tasks;        /* single tasks waited on (mf.http.get, mf.go) */
    size_t interrupted;  /* slices stopped by the watchdog, ever */
} mf_lua_counts_t;
MF_API void mf_lua_host_counts(const mf_lua_host_t *host, mf_lua_counts_t *out);
/* Bytes the state holds now (LuaJIT's own count). */
MF_API size_t mf_lua_host_memory(const mf_lua_host_t *host);

/* ---- coroutines ------------------------------------------------------ */

typedef enum mf_lua_co_status {
    MF_LUA_CO_DONE,   /* returned: L holds nret results on its stack */
    MF_LUA_CO_ERROR,  /* raised: message is the error with a traceback */
    MF_LUA_CO_ABORTED /* mf_lua_co_abort or host shutdown */
} mf_lua_co_status_t;

/* Why a coroutine ended MF_LUA_CO_ERROR, beyond the error itself. */
typedef enum mf_lua_co_cause {
    MF_LUA_CAUSE_NONE,     /* the code raised (or returned, or was aborted) */
    MF_LUA_CAUSE_CPU,      /* stopped: ran past the CPU budget unyielding */
    MF_LUA_CAUSE_DEADLINE, /* stopped: still running at its deadline */
    MF_LUA_CAUSE_STOP,     /* stopped: mf_lua_host_interrupt_all */
    MF_LUA_CAUSE_MEMORY    /* an allocation past memory_limit was refused */
} mf_lua_co_cause_t;

typedef struct mf_lua_co_exit {
    mf_lua_co_status_t status;
    lua_State *L; /* the coroutine's thread */
    int nret;
    const char *message;     /* ERROR and ABORTED; valid during the callback */
    mf_lua_co_cause_t cause; /* ERROR only; NONE otherwise */
} mf_lua_co_exit_t;

/* Runs once per coroutine, on the loop thread; the handle dies after it. */
typedef void (*mf_lua_co_exit_cb)(mf_lua_co_t *co, const mf_lua_co_exit_t *ex,
                                  void *data);

/* Pops a function and nargs arguments above it from mf_lua_host_state(host)
 * and runs the function in a new coroutine now. Returns the live handle if
 * the coroutine parked, NULL if it already ended (cb has run). cb may be
 * NULL (errors are then logged). */
MF_API mf_lua_co_t *mf_lua_host_spawn(mf_lua_host_t *host, int nargs,
                                      mf_lua_co_exit_cb cb, void *data);
/* Spawn in two steps, for an owner that wants the thread first: prepare
 * gives a coroutine whose thread (mf_lua_co_thread) is ready; push the
 * function and nargs arguments on that thread, then start it. start returns
 * true if the coroutine parked (the handle lives on), false if it ended. */
MF_API mf_lua_co_t *mf_lua_host_prepare(mf_lua_host_t *host,
                                        mf_lua_co_exit_cb cb, void *data);
MF_API bool mf_lua_co_start(mf_lua_co_t *co, int nargs);
/* The coroutine being resumed right now (or whose flow callback runs), NULL
 * when the loop runs plain C. */
MF_API mf_lua_co_t *mf_lua_host_current(const mf_lua_host_t *host);

/* Values kept with a coroutine's thread: MF_LUA_CO_KEEP registry refs that
 * follow the thread when it is reused for a later spawn (LUA_NOREF until the
 * owner sets them), released with the thread. An owner that makes the same
 * objects for every spawn (the server's request and response) makes them
 * once per thread. Not counted in mf_lua_counts_t.refs: like idle threads,
 * they are bounded by the thread pool. */
#define MF_LUA_CO_KEEP 2
MF_API int *mf_lua_co_keep(mf_lua_co_t *co);
/* Ends a parked coroutine: its cleanup hook runs (cancels the pending task),
 * then the exit callback with MF_LUA_CO_ABORTED, then the reference is
 * released. Called while the coroutine runs (from a C function it called,
 * e.g. a write that finds the client gone), it ends at its next park
 * instead; from its own exit callback it does nothing. reason must outlive
 * the coroutine (a literal). Never call it on a handle whose exit callback
 * has returned: clear your copy of the handle there. */
MF_API void mf_lua_co_abort(mf_lua_co_t *co, const char *reason);

MF_API lua_State *mf_lua_co_thread(const mf_lua_co_t *co);
MF_API mf_lua_host_t *mf_lua_co_host(const mf_lua_co_t *co);

/* Timing the steps of the flows a coroutine waits on (step:wait() of a
 * task, a series or a parallel), for a load generator: the observer hears
 * step 0 when a flow starts, then step i when its i-th top-level step
 * completes: each child of the flow's series or parallel (a task, or a
 * nested series or parallel as a whole), or the flow itself (step 1) when
 * it is a single task. A series' step starts when the one before it
 * completes, a parallel's steps all start with the flow; steps pushed by
 * callbacks (flow:push) are not counted. Called on the loop thread outside
 * Lua (it must not touch the state), before the step's result reaches
 * Lua. NULL (the default for every new coroutine): none; the cost is then
 * one test per step. */
typedef void (*mf_lua_step_fn)(void *ud, unsigned step);
MF_API void mf_lua_co_set_step_observer(mf_lua_co_t *co, mf_lua_step_fn fn,
                                        void *ud);
/* Lean results, for a waiter that only tells outcomes apart (a load
 * generator): in the flows this coroutine waits on, a task that succeeded,
 * whose answer reports no failure (its kind's answer_failed, lua_kind.h)
 * and that has no callback gives true in place of its result table, so
 * no table is built for it. A task that failed, or whose answer did (a
 * Redis error reply, an HTTP status >= 400), gives its whole result; a
 * callback is always given the whole result. Off for every new coroutine. */
MF_API void mf_lua_co_set_lean_results(mf_lua_co_t *co, bool lean);

/* ---- for C functions that park (see the pattern above) --------------- */

/* What a coroutine works for, for the log lines its Lua code writes
 * (mf.log): fn(ud, buf, cap) writes a short NUL-terminated label ("GET
 * /route") into buf when a line is written. The server sets one per
 * request; without one, lines carry no label. */
typedef void (*mf_lua_describe_fn)(void *ud, char *buf, size_t cap);
MF_API void mf_lua_co_set_describer(mf_lua_co_t *co, mf_lua_describe_fn fn,
                                    void *ud);

/* The id of the request a coroutine serves (serve's req.id): the HTTP
 * tasks its Lua code starts send it as X-Request-Id (unless their headers
 * name one). fn(ud) returns a NUL-terminated id, valid while the coroutine
 * runs; NULL: none (the default). */
typedef const char *(*mf_lua_request_id_fn)(void *ud);
MF_API void mf_lua_co_set_request_id(mf_lua_co_t *co, mf_lua_request_id_fn fn,
                                     void *ud);
/* The request id of the coroutine the host is running, or NULL. */
MF_API const char *mf_lua_host_request_id(const mf_lua_host_t *host);

/* Every task the coroutine's Lua code makes (its flows, its waits) holds
 * trace (moonflow/task.h: set on the loop while the coroutine runs), so an
 * observer can tell that work's tasks apart. The caller keeps trace alive
 * while the coroutine may run; NULL: none. Tasks a flow's per-task
 * callback makes are not the coroutine's. */
MF_API void mf_lua_co_set_trace(mf_lua_co_t *co, mf_task_trace_t *trace);

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

/* ---- runaway code ------------------------------------------------------
 *
 * A slice is one run of Lua code for a coroutine: a resume, one of its
 * flow callbacks, or mf_lua_host_pcall. An interruptible host is watched by
 * the process's watchdog thread (one for every host): the loop thread marks
 * a slice's start and end with two relaxed stores (no syscall, no lock),
 * and the watchdog, waking every few milliseconds, stops a slice that is
 * still running past the host's CPU budget (the loop thread's CPU time),
 * past its coroutine's deadline, or after mf_lua_host_interrupt_all. To
 * stop it, the watchdog sends the loop thread the signal
 * MF_LUA_WATCHDOG_SIGNAL (SIGRTMIN + 5: keep it unblocked and unused on
 * loop threads); its handler sets an instruction-count hook (lua_sethook
 * may be called from a signal handler), and the hook raises
 * "cpu budget exceeded ..." / "deadline exceeded ..." / "interrupted ..."
 * — and raises again at every instruction until the slice ends, so a
 * pcall cannot keep it alive. The coroutine ends MF_LUA_CO_ERROR with the
 * cause and a traceback, and is never resumed again (a coroutine stopped
 * in a flow callback ends when its flow completes); the loop serves on.
 *
 * What cannot be stopped, by design of LuaJIT: code inside a C function (a
 * pathological string.find, a blocking call) until it returns; the error
 * handler of an xpcall and __gc finalizers (hooks do not run there); loops
 * compiled by the JIT, which never check hooks (LuaJIT checks them only
 * when built with LUAJIT_ENABLE_CHECKHOOK): the JIT is off for an
 * interruptible host unless opts.jit is MF_LUA_JIT_ON, and jit.on() in Lua
 * turns it back on. A process that must end anyway ends its loop threads'
 * work some other way (the server exits after a grace period).
 */
#define MF_LUA_WATCHDOG_SIGNAL (SIGRTMIN + 5)

/* The coroutine's deadline in loop time (mf_loop_now), 0: none. Lua code
 * it runs at that time is stopped (MF_LUA_CAUSE_DEADLINE); a parked
 * coroutine is not touched (the owner's own timer aborts it). Needs an
 * interruptible host; ignored otherwise. */
MF_API void mf_lua_co_set_deadline(mf_lua_co_t *co, uint64_t at);
/* lua_pcall on the host's state as a slice: the budget and the memory cap
 * apply to the code it runs (a script's main chunk, say). */
MF_API int mf_lua_host_pcall(mf_lua_host_t *host, int nargs, int nresults,
                             int errfunc);
/* Any thread, for the process's shutdown: while on, every slice of every
 * interruptible host is stopped at the watchdog's next tick
 * (MF_LUA_CAUSE_STOP), those running now and those to come. */
MF_API void mf_lua_host_interrupt_all(bool on);

/* ---- registry references, counted (leak checks) ---------------------- */

/* luaL_ref/luaL_unref on the registry, counted in mf_lua_counts_t.refs.
 * mf_lua_unref accepts LUA_NOREF/LUA_REFNIL and does nothing then. */
MF_API int mf_lua_ref(mf_lua_host_t *host, lua_State *L);
MF_API void mf_lua_unref(mf_lua_host_t *host, int ref);

MF_EXTERN_C_END

#endif /* MOONFLOW_LUA_HOST_H */
