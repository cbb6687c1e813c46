/*
 * lua/host/mf_lua_int.h — internals shared by the lua/ files: the host and
 * coroutine records, and the openers of the C modules behind
 * require "moonflow". Not installed, not for the server.
 */
#ifndef MF_LUA_INT_H
#define MF_LUA_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>

#include <moonflow/list.h>

#include <moonflow/lua_go.h>
#include <moonflow/lua_host.h>

#define MF_LUA_IDLE_THREADS 64

/* A host's place in the watchdog (mf_lua_watchdog.c): written by the loop
 * thread at every slice, read by the watchdog thread, the signal handler
 * and the hook. One cache line of its own per host. */
typedef struct mf_lua_watch {
    /* the loop thread's: the slice running now (0: none; numbers never
     * repeat for a slot), and its coroutine's deadline (loop ms, 0: none) */
    _Atomic uint64_t slice;
    _Atomic uint64_t deadline;
    uint64_t next;
    /* the watchdog's verdict: the slice to stop and why */
    _Atomic uint64_t condemned;
    _Atomic int cause; /* mf_lua_co_cause_t */
    uint64_t counted;  /* the last condemned slice counted as interrupted */
    /* The stop word that loop checks compiled into Lua code read
     * (mf_lua_load.c): set by the watchdog with condemned, cleared when
     * the slice ends or by the halt function when it finds it stale. The
     * scratch word is the loop thread's, written by every check. */
    _Atomic int32_t stop;
    int32_t scratch;
    /* the watchdog thread's own */
    uint64_t seen;        /* the slice of its last pass */
    uint64_t seen_cpu;    /* the thread's CPU time then (ns) */
    uint64_t signaled_at; /* ms, the last signal for condemned */
    /* set at registration */
    struct mf_lua_host *host; /* NULL: a free slot */
    lua_State *L;
    pthread_t thread;
    clockid_t cpu_clock;
    uint32_t budget_ms;
} __attribute__((aligned(64))) mf_lua_watch_t;

struct mf_lua_host {
    lua_State *L;
    mf_loop_t *loop;
    mf_lua_log_fn log;
    void *log_ud;
    int log_level;                    /* mf.log's threshold (MF_LUA_LOG_*) */
    unsigned worker_id, worker_count; /* mf.worker */
    mf_metrics_t *metrics; /* mf.metrics' registry; shard worker_id */
    bool own_metrics;      /* made for this host alone: freed with it */
    mf_lua_co_t *current;  /* the coroutine being resumed, if any */
    mf_list_t coroutines;  /* live mf_lua_co_t */
    mf_list_t timers;      /* armed background timers */
    mf_lua_counts_t counts;
    /* epoch_ms()'s answer for the loop's clock read at epoch_read_ns: one
     * answer per turn, as nginx's cached time (two clock reads per call
     * would let the answer move with the gap between them). */
    uint64_t epoch_read_ns;
    int64_t epoch_ms;
    mf_lua_watch_t *watch; /* NULL: not interruptible */
    unsigned depth;        /* slices running (nested ones count) */
    /* memory cap (memory_limit > 0): LuaJIT's allocator, wrapped */
    lua_Alloc mem_allocf;
    void *mem_ud;
    size_t mem_used, mem_limit;
    /* Coroutines that returned normally, kept whole for the next spawn
     * (their record with its thread, its reference and its kept values):
     * a handler per request then costs no record, no new thread, no
     * registry reference and no garbage. Their references are not in
     * counts.refs (they anchor no live work); counts.idle_threads counts
     * them. */
    mf_lua_co_t *idle[MF_LUA_IDLE_THREADS];
    unsigned nidle;
};

struct mf_lua_co {
    mf_list_t link; /* host->coroutines */
    mf_lua_host_t *host;
    lua_State *L;
    int ref;                  /* anchors the thread; LUA_NOREF once released */
    int keep[MF_LUA_CO_KEEP]; /* travel with the thread (mf_lua_co_keep) */
    void *keep_ptrs[MF_LUA_CO_KEEP]; /* and so do these */
    mf_lua_cleanup_fn cleanup;
    void *op;
    mf_lua_co_exit_cb cb;
    void *data;
    bool running;             /* inside lua_resume */
    bool exiting;             /* in the exit path: abort is a no-op */
    const char *abort_reason; /* an abort asked for while running */
    mf_lua_co_cause_t cause;  /* set when the watchdog stopped it */
    bool memory_refused;      /* an allocation of its slice was refused */
    /* the owner's, copied at start (moonflow/lua_co.h); zeroed: none */
    mf_lua_co_hooks_t hooks;
    /* A plain coroutine resumed (through moonflow's coroutine.resume) from
     * this one parked on a wait: the thread whose yield the wrapper of its
     * resumer must pass on upward (mf_lua_co_check, moonflow.core's
     * nested_take / nested_mark). */
    lua_State *nested_wait;
    mf_list_t owned; /* mf_lua_owned_t: closed when the coroutine ends */
};

/* Frees the records of the idle coroutines (their threads go with the
 * state), as the host is destroyed. */
void mf_lua_idle_free(mf_lua_host_t *host);

/* The host made last on the calling thread and not destroyed, or NULL:
 * for C code that Lua reaches without its state (FFI calls, lua/ngx_ffi). */
mf_lua_host_t *mf_lua_host_on_thread(void);

/* Whether co's waiter wants lean results for the wait starting now. */
static inline bool mf_lua_co_lean(const mf_lua_co_t *co)
{
    return co->hooks.lean && co->hooks.lean(co->hooks.lean_ud);
}

/* Something a coroutine opened that must not outlive it (a socket): its
 * release runs in the coroutine's exit path unless it was dropped first.
 * The owner embeds the record (link initialised with mf_list_init). */
typedef struct mf_lua_owned {
    mf_list_t link;
    void (*release)(struct mf_lua_owned *o);
} mf_lua_owned_t;
void mf_lua_co_own(mf_lua_co_t *co, mf_lua_owned_t *o);
/* No longer owned (closed by hand, pooled); safe when it is not. */
void mf_lua_owned_drop(mf_lua_owned_t *o);

/* ---- the watchdog (mf_lua_watchdog.c) -------------------------------- */

/* A slot for host (on its loop thread), or NULL when every slot is taken.
 * Starts the watchdog thread with the first one. */
mf_lua_watch_t *mf_lua_watch_register(mf_lua_host_t *host, lua_State *L,
                                      uint32_t budget_ms);
/* Frees the slot (before the state closes); the last one stops the
 * watchdog thread. */
void mf_lua_watch_unregister(mf_lua_watch_t *w);
/* Removes the stopping hook once its slice has ended. */
void mf_lua_watch_disarm(mf_lua_host_t *host);
/* The halt function of loop checks (a lua_CFunction): raises the
 * watchdog's error when the running slice is condemned, else clears a
 * stale stop word and returns. */
int mf_lua_watch_halt(lua_State *L);
/* Loop checks for the loads of a watched host (mf_lua_load.c): load,
 * loadstring, loadfile, dofile and require's Lua searcher replaced. 0, or
 * -1 (logged: no checks, and the host runs with the JIT off). */
int mf_lua_load_install(mf_lua_host_t *host);
/* The error message of a cause (a literal, or the budget's in buf). */
const char *mf_lua_cause_message(const mf_lua_host_t *host,
                                 mf_lua_co_cause_t cause, char *buf,
                                 size_t len);

/* ---- slices (see lua_host.h, "runaway code") ----------------------- */

typedef struct mf_lua_slice {
    uint64_t slice, deadline; /* the enclosing slice's, restored at leave */
} mf_lua_slice_t;

/* Lua code starts running for co (NULL: for nobody in particular). Two
 * relaxed stores; the release orders the deadline before the slice. */
static inline mf_lua_slice_t mf_lua_slice_enter(mf_lua_host_t *host,
                                                const mf_lua_co_t *co)
{
    mf_lua_slice_t prev = {0, 0};
    mf_lua_watch_t *w = host->watch;
    host->depth++;
    if (!w)
        return prev;
    prev.slice = atomic_load_explicit(&w->slice, memory_order_relaxed);
    prev.deadline = atomic_load_explicit(&w->deadline, memory_order_relaxed);
    atomic_store_explicit(&w->deadline, co ? co->hooks.deadline : 0,
                          memory_order_relaxed);
    atomic_store_explicit(&w->slice, ++w->next, memory_order_release);
    return prev;
}

/* The slice's end: the enclosing one (if any) runs on. A stopped slice
 * takes its hook away with it (mf_lua_watch_disarm). */
static inline void mf_lua_slice_leave(mf_lua_host_t *host, mf_lua_slice_t prev)
{
    mf_lua_watch_t *w = host->watch;
    host->depth--;
    if (!w)
        return;
    uint64_t s = atomic_load_explicit(&w->slice, memory_order_relaxed);
    atomic_store_explicit(&w->deadline, prev.deadline, memory_order_relaxed);
    atomic_store_explicit(&w->slice, prev.slice, memory_order_release);
    if (atomic_load_explicit(&w->condemned, memory_order_relaxed) == s) {
        atomic_store_explicit(&w->stop, 0, memory_order_relaxed);
        mf_lua_watch_disarm(host);
    }
}

/* The registry field of the weak-keyed table of plain coroutines being
 * resumed through moonflow's coroutine.resume / wrap. */
#define MF_LUA_NESTED_KEY "moonflow.nested"

/* The registry key of the host pointer (a light userdata). */
extern const char mf_lua_host_key;

/* Pushes the metatable `name` of a userdata class, made on first use:
 * __index a table of the methods, __gc and __tostring when not NULL, and
 * __metatable the name (scripts can neither read nor replace it). */
/* Calls the function below nargs values on the host's state as a slice
 * (mf_lua_host_pcall) with no result; a raise is logged as "WHAT: error". */
void mf_lua_call_logged(mf_lua_host_t *host, int nargs, const char *what);
/* mf_lua_stdio.c: print, io.write and file:write of the state write their
 * arguments as one piece (whole lines when many threads share stdout and
 * stderr). */
void mf_lua_stdio_whole(lua_State *L);
/* Writes text[0..len) to fd, in one write() unless the kernel takes less
 * (a log line from one thread never meets another's). */
void mf_lua_write_all(int fd, const char *text, size_t len);
/* Pushes a table {n = n, L[first] .. L[first + n - 1]} (values kept in
 * place); for results and arguments that must wait in the registry. */
void mf_lua_pack(lua_State *L, int first, int n);
/* Pushes t[1] .. t[t.n + extra] of the table referenced by ref (t.n counts
 * its values after `extra` leading ones: a function before its arguments);
 * returns how many were pushed. */
int mf_lua_push_packed(lua_State *L, int ref, int extra);
/* Room for n bytes: small (cap bytes, on the caller's stack) when it fits,
 * else a scratch userdata pushed on L that the collector takes (*pushed
 * says so: the caller removes it once the bytes are copied out). */
char *mf_lua_scratch(lua_State *L, char *small, size_t cap, size_t n,
                     bool *pushed);
/* Pushes s[0..n) as a string, then drops the scratch below it if any. */
void mf_lua_push_scratch(lua_State *L, const char *s, size_t n, bool pushed);

void mf_lua_class(lua_State *L, const char *name, const luaL_Reg *methods,
                  lua_CFunction gc, lua_CFunction tostring);

/* Openers of the host's own C modules, each pushing one table; every
 * binding folder declares its modules' openers in its own header. */
int mf_lua_open_core(lua_State *L);  /* moonflow.core: sleep, now, debug */
int mf_lua_open_timer(lua_State *L); /* moonflow.timer: at, every */
int mf_lua_open_wait(lua_State *L);  /* moonflow.wait: waiters, spawn */

/* The C modules every host preloads (package.preload name → opener), ended
 * by {NULL, NULL}. Defined by lua/builtin/mf_lua_builtin.c, the binding's
 * roof, which names every folder: the host names none above it. */
extern const luaL_Reg mf_lua_builtin_modules[];

/* Host teardown of background timers (mf_lua_timer.c). */
void mf_lua_timers_shutdown(mf_lua_host_t *host);

/* Embedded Lua modules (generated mf_lua_modules.c). */
typedef struct mf_lua_module {
    const char *name; /* "moonflow", "moonflow.test" ... */
    const char *source;
    size_t len;
} mf_lua_module_t;
extern const mf_lua_module_t mf_lua_modules[];
extern const size_t mf_lua_modules_count;

/* The stable lowercase error string of a task result ("timeout",
 * "connection refused" ...). */
const char *mf_lua_errstr(int state, int error);

#endif /* MF_LUA_INT_H */
