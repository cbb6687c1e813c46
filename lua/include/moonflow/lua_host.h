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
 * Coroutine control (hooks given at start, values kept with a thread, and
 * the calls of C functions that park) is moonflow/lua_co.h, included here.
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

#include <moonflow/lua_co.h>

typedef struct mf_lua_host mf_lua_host_t;
typedef struct mf_lua_co mf_lua_co_t;

/* Receives error reports of coroutines nobody waits for (background timers)
 * with their traceback. NULL: written to stderr. */
typedef void (*mf_lua_log_fn)(void *ud, const char *msg);

/* LuaJIT's trace compiler for a host (mf_lua_host_opts_t.jit). */
typedef enum mf_lua_jit {
    MF_LUA_JIT_AUTO, /* on (the default) */
    MF_LUA_JIT_ON,   /* on: loop checks stop compiled loops of watched hosts */
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
/* mf_lua_host_spawn with the coroutine's hooks (moonflow/lua_co.h: step
 * observer, lean results, describer, request id, trace, deadline), copied
 * before it runs; NULL: none, as mf_lua_host_spawn. */
MF_API mf_lua_co_t *mf_lua_host_spawn_with(mf_lua_host_t *host, int nargs,
                                           mf_lua_co_exit_cb cb, void *data,
                                           const mf_lua_co_hooks_t *hooks);
/* Spawn in two steps, for an owner that wants the thread first: prepare
 * gives a coroutine whose thread (mf_lua_co_thread) is ready; push the
 * function and nargs arguments on that thread, then start it. start returns
 * true if the coroutine parked (the handle lives on), false if it ended. */
MF_API mf_lua_co_t *mf_lua_host_prepare(mf_lua_host_t *host,
                                        mf_lua_co_exit_cb cb, void *data);
/* prepare with the coroutine's hooks (lua_co.h; copied, NULL: none), for
 * an owner that knows them first: start it with mf_lua_co_start. */
MF_API mf_lua_co_t *mf_lua_host_prepare_with(mf_lua_host_t *host,
                                             mf_lua_co_exit_cb cb, void *data,
                                             const mf_lua_co_hooks_t *hooks);
MF_API bool mf_lua_co_start(mf_lua_co_t *co, int nargs);
/* (mf_lua_co_start_with, in lua_co.h, starts it with hooks.) */
/* The coroutine being resumed right now (or whose flow callback runs), NULL
 * when the loop runs plain C. */
MF_API mf_lua_co_t *mf_lua_host_current(const mf_lua_host_t *host);

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
 * Loops compiled by the JIT never check hooks (LuaJIT checks them only
 * when built with LUAJIT_ENABLE_CHECKHOOK). So an interruptible host loads
 * user code with loop checks written into its source (mf_lua_load_buffer,
 * and load, loadstring, loadfile, dofile and require in Lua): at the start
 * of every loop body, before every goto and at the start of every
 * function, a load of the host's stop word, which the watchdog sets with
 * the signal; a check that finds it set raises the hook's error. Lines
 * keep their numbers. Bytecode, and a chunk whose checked text passes
 * LuaJIT's limits (its 120 upvalues a function, say) when its own does
 * not, load as they are with the JIT off for them (jit.off(fn, true)),
 * so the hook still stops them.
 *
 * What cannot be stopped: code inside a C function (a pathological
 * string.find, a blocking call) until it returns; __gc finalizers (hooks
 * do not run there); code the script compiles by other means than the
 * loaders above (none in LuaJIT's standard library). A process that must
 * end anyway ends its loop threads' work some other way (the server exits
 * after a grace period).
 */
#define MF_LUA_WATCHDOG_SIGNAL (SIGRTMIN + 5)

/* A coroutine's deadline is one of its hooks (moonflow/lua_co.h). */
/* lua_pcall on the host's state as a slice: the budget and the memory cap
 * apply to the code it runs (a script's main chunk, say). */
MF_API int mf_lua_host_pcall(mf_lua_host_t *host, int nargs, int nresults,
                             int errfunc);
/* luaL_loadbuffer / luaL_loadfile for user code: in an interruptible
 * host, with the loop checks above (the chunk on top, or a message, with
 * luaL_loadbuffer's codes); in any other, exactly those two. */
MF_API int mf_lua_load_buffer(lua_State *L, const char *text, size_t len,
                              const char *chunkname);
MF_API int mf_lua_load_file(lua_State *L, const char *path);
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
