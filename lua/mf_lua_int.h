/*
 * lua/mf_lua_int.h — internals shared by the lua/ files: the host and
 * coroutine records, and the openers of the C modules behind
 * require "moonflow". Not installed, not for the server.
 */
#ifndef MF_LUA_INT_H
#define MF_LUA_INT_H

#include <stdbool.h>

#include <lauxlib.h>
#include <lua.h>

#include <moonflow/list.h>

#include <moonflow/lua_go.h>
#include <moonflow/lua_host.h>

#define MF_LUA_IDLE_THREADS 64

struct mf_lua_host {
    lua_State *L;
    mf_loop_t *loop;
    mf_lua_log_fn log;
    void *log_ud;
    mf_lua_co_t *current; /* the coroutine being resumed, if any */
    mf_list_t coroutines; /* live mf_lua_co_t */
    mf_list_t timers;     /* armed background timers */
    mf_lua_counts_t counts;
    /* Threads of coroutines that returned normally, kept for the next
     * spawn: a handler per request then costs no new thread, no registry
     * reference and no garbage. Their references are not in counts.refs
     * (they anchor no live work); counts.idle_threads counts them. */
    struct mf_lua_idle_thread {
        lua_State *L;
        int ref;
        int keep[MF_LUA_CO_KEEP];
    } idle[MF_LUA_IDLE_THREADS];
    unsigned nidle;
};

struct mf_lua_co {
    mf_list_t link; /* host->coroutines */
    mf_lua_host_t *host;
    lua_State *L;
    int ref;                  /* anchors the thread; LUA_NOREF once released */
    int keep[MF_LUA_CO_KEEP]; /* travel with the thread (mf_lua_co_keep) */
    mf_lua_cleanup_fn cleanup;
    void *op;
    mf_lua_co_exit_cb cb;
    void *data;
    bool running;             /* inside lua_resume */
    bool exiting;             /* in the exit path: abort is a no-op */
    const char *abort_reason; /* an abort asked for while running */
};

/* The registry key of the host pointer (a light userdata). */
extern const char mf_lua_host_key;

/* Openers of the private C modules, each pushing one table. */
int mf_lua_open_core(lua_State *L);  /* moonflow.core: sleep, now, debug */
int mf_lua_open_flow(lua_State *L);  /* moonflow.flow: wait, push */
int mf_lua_open_timer(lua_State *L); /* moonflow.timer: at, every */
int mf_lua_open_redis(lua_State *L); /* moonflow.redis: client, null */

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

/* The C function mf.go knows by name (built-ins first), or NULL
 * (mf_lua_go.c). */
mf_lua_go_fn mf_lua_go_find(const char *name);

/* The stable lowercase error string of a task result ("timeout",
 * "connection refused" ...). */
const char *mf_lua_errstr(int state, int error);

#endif /* MF_LUA_INT_H */
