/*
 * moonflow/lua_wrk.h — wrk's Lua API for a plain lua_State, as wrk's
 * SCRIPTING documents it: the global `wrk` table (scheme, host, port,
 * method, path, headers, body, thread), wrk.format, wrk.request,
 * wrk.lookup, wrk.connect, address userdata ("ip:port"), thread objects
 * (thread.addr, thread:get, thread:set, thread:stop) and the statistics
 * objects given to done() (.min .max .mean .stdev, :percentile(p),
 * stats(i), #stats).
 *
 * `moonflow bench` (lua/bench/bench_http.c) makes one state for setup()
 * and done() and one per thread; it owns the states, the thread records
 * and the histograms. This module owns only the userdata it creates.
 *
 * wrk.lookup and wrk.connect block (getaddrinfo, a connect bounded by one
 * second): for the setup phase on the main thread, never a loop thread.
 */
#ifndef MOONFLOW_LUA_WRK_H
#define MOONFLOW_LUA_WRK_H

#include <stdbool.h>
#include <stddef.h>

#include <lua.h>

#include <moonflow/dns.h>
#include <moonflow/hdr.h>

MF_EXTERN_C_BEGIN

/* The target as wrk's table holds it; port NULL when the URL has none. */
typedef struct mf_lua_wrk_url {
    const char *scheme, *host, *port, *path;
} mf_lua_wrk_url_t;

/* One thread as scripts see it. The caller embeds it and keeps it alive as
 * long as the states that hold its userdata. */
typedef struct mf_lua_wrk_thread {
    lua_State *L;       /* the thread's own state: thread:get/set */
    mf_sockaddr_t addr; /* thread.addr */
    /* thread:stop(): 0, or -1 when the thread is not running (wrk allows
     * it only then; the call raises). */
    int (*stop)(struct mf_lua_wrk_thread *t);
} mf_lua_wrk_thread_t;

/* Sets the global `wrk` in L for url, with headers ("Name: value" lines,
 * e.g. -H flags) in wrk.headers. 0, or -1 with a message on the stack. */
MF_API int mf_lua_wrk_open(lua_State *L, const mf_lua_wrk_url_t *url,
                           char *const *headers, size_t nheaders);
/* A thread's state after its script was loaded: sets wrk.thread, the Host
 * header when the script did not, calls init(args) when defined (args[0]
 * is the URL, then the script's own), and freezes wrk.request() to the
 * request wrk.format() then builds (wrk's order). 0, or -1 with the
 * error and its traceback on the stack. */
MF_API int mf_lua_wrk_thread_init(lua_State *L, mf_lua_wrk_thread_t *t,
                                  const char *url, char *const *args,
                                  size_t nargs);
/* The push functions work on any state, opened with mf_lua_wrk_open or
 * not. Pushes the userdata of t (setup(thread), wrk.thread). */
MF_API void mf_lua_wrk_push_thread(lua_State *L, mf_lua_wrk_thread_t *t);
/* Pushes an address object. */
MF_API void mf_lua_wrk_push_addr(lua_State *L, const mf_sockaddr_t *addr);
/* Pushes a statistics object over h (borrowed: it must outlive L's use of
 * it); every value read is divided by div (1000: ns to wrk's µs). */
MF_API void mf_lua_wrk_push_stats(lua_State *L, const mf_hdr_t *h, double div);
/* The addresses of host:service that accept a connection, in
 * getaddrinfo's order (wrk resolves its URL so); the count, or -1 with a
 * message in err ("unable to resolve ...", "unable to connect to ..."). */
MF_API int mf_lua_wrk_resolve(const char *host, const char *service,
                              mf_sockaddr_t *out, size_t max, char *err,
                              size_t errlen);
/* Copies the value at idx of from onto to's stack (booleans, nil, numbers,
 * strings, tables of those: wrk's thread:get/set). 0, or -1 with a
 * message in err when a value cannot cross (a function, a cycle ...). */
MF_API int mf_lua_wrk_copy(lua_State *from, int idx, lua_State *to, char *err,
                           size_t errlen);
/* Calls the global function name in L with the traceback handler: 0, 1
 * when it is not a function, -1 with the message on the stack. */
MF_API int mf_lua_wrk_call(lua_State *L, const char *name, int nargs,
                           int nresults);

MF_EXTERN_C_END

#endif /* MOONFLOW_LUA_WRK_H */
