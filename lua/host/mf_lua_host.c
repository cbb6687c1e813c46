/*
 * lua/host/mf_lua_host.c — the host's state: creation (with the module loaders,
 * the registry of task kinds, the JIT mode, the memory cap, the
 * watchdog's slot and the loop checks of loads), logging, counted registry references, shutdown.
 * Coroutines live in mf_lua_co.c, the watchdog in mf_lua_watchdog.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <luajit.h>
#include <lualib.h>

#include <moonflow/common.h>

#include "mf_lua_leaf.h"
#include "mf_lua_paths.h" /* generated: the system's module folders */

const char mf_lua_host_key;

/* The host made last on this thread (mf_lua_host_on_thread). */
static _Thread_local mf_lua_host_t *mf_lua__thread_host;

/* One write() per line: the workers share stderr. */
static void mf_lua__log_stderr(void *ud, const char *msg)
{
    char line[4200];
    (void)ud;
    int n = snprintf(line, sizeof line, "moonflow: %s\n", msg);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line) { /* cut: the line still ends */
        n = (int)sizeof line - 1;
        line[n - 1] = '\n';
    }
    mf_lua_write_all(2, line, (size_t)n);
}

/* package.path = prefix .. ";" .. package.path (same for cpath). */
static void mf_lua__prepend_path(lua_State *L, const char *field,
                                 const char *prefix)
{
    if (!prefix || !*prefix)
        return;
    lua_getglobal(L, "package");
    lua_pushstring(L, prefix);
    lua_pushliteral(L, ";");
    lua_getfield(L, -3, field);
    lua_concat(L, 3);
    lua_setfield(L, -2, field);
    lua_pop(L, 1);
}

/* References the host hands out (handlers, threads, the req and resp a
 * thread keeps) are read on every request: lua_rawgeti finds a key of the
 * registry's array part at once, one of its hash part only through a hash
 * chain (some 35 instructions more). luaL_ref numbers its keys from 1 up,
 * past the array part of a registry that grew as refs came and went; so
 * the first MF_LUA_REF_ROOM keys are taken and given back at once, as the
 * state opens: they move to the array part as it grows, and the free list
 * hands them out again, lowest first (a freed key holds the next free one,
 * a number: the array part never thins out). */
#define MF_LUA_REF_ROOM 2048

static void mf_lua__ref_room(lua_State *L)
{
    int *refs = mf_xmalloc(MF_LUA_REF_ROOM * sizeof(*refs));
    for (int i = 0; i < MF_LUA_REF_ROOM; i++) {
        lua_pushboolean(L, 1);
        refs[i] = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    for (int i = MF_LUA_REF_ROOM - 1; i >= 0; i--)
        luaL_unref(L, LUA_REGISTRYINDEX, refs[i]);
    mf_free(refs);
}

/* package.preload: the C modules and the embedded Lua sources. Fails only
 * if an embedded source does not compile (a defect of the build). */
static int mf_lua__preload(lua_State *L)
{
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "preload");
    for (const luaL_Reg *m = mf_lua_builtin_modules; m->name; m++) {
        lua_pushcfunction(L, m->func);
        lua_setfield(L, -2, m->name);
    }
    for (size_t i = 0; i < mf_lua_modules_count; i++) {
        const mf_lua_module_t *m = &mf_lua_modules[i];
        char chunkname[128];
        snprintf(chunkname, sizeof chunkname, "=[moonflow] %s", m->name);
        if (luaL_loadbuffer(L, m->source, m->len, chunkname) != 0) {
            fprintf(stderr, "moonflow: embedded %s: %s\n", m->name,
                    lua_tostring(L, -1));
            return -1;
        }
        lua_setfield(L, -2, m->name);
    }
    lua_pop(L, 2);
    return 0;
}

/* The embedded modules every state runs at its start: moonflow.ffi_guard
 * (ffi.cdef and ffi.metatype that a hot reload may run again) and
 * moonflow.resty_core (lua-resty-core's modules that moonflow.ngx stands
 * for). A failure is a defect of the build: logged, the state goes on. */
static void mf_lua__run_startup_modules(mf_lua_host_t *host)
{
    static const char *const names[] = {"moonflow.ffi_guard",
                                        "moonflow.resty_core"};
    lua_State *L = host->L;
    for (size_t i = 0; i < MF_ARRAY_SIZE(names); i++) {
        lua_getglobal(L, "require");
        lua_pushstring(L, names[i]);
        if (lua_pcall(L, 1, 0, 0) != 0) {
            mf_lua_host_log(host, "moonflow: %s: %s", names[i],
                            lua_tostring(L, -1));
            lua_pop(L, 1);
        }
    }
}

/* ---- the memory cap ------------------------------------------------------
 *
 * LuaJIT's own allocator (fast, one arena per state), wrapped to count
 * bytes: a growth past the cap is refused while a slice runs, so that the
 * error lands in Lua code that can take it; the host's own calls between
 * slices (a new coroutine thread, a registry reference) are C code that a
 * Lua error would unwind, and always get their bytes. */

static void *mf_lua__alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    mf_lua_host_t *host = ud;
    size_t old = ptr ? osize : 0;
    if (nsize > old && host->depth &&
        host->mem_used - old + nsize > host->mem_limit) {
        if (host->current)
            host->current->memory_refused = true;
        return NULL;
    }
    void *p = host->mem_allocf(host->mem_ud, ptr, osize, nsize);
    if (p || nsize == 0)
        host->mem_used = host->mem_used - old + nsize;
    return p;
}

static void mf_lua__cap_memory(mf_lua_host_t *host, size_t limit)
{
    lua_State *L = host->L;
    host->mem_limit = limit;
    host->mem_allocf = lua_getallocf(L, &host->mem_ud);
    host->mem_used = (size_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024 +
                     (size_t)lua_gc(L, LUA_GCCOUNTB, 0);
    lua_setallocf(L, mf_lua__alloc, host);
}

/* The state goes back to the allocator it was made with before it closes
 * (LuaJIT frees its arena whole only then). */
static void mf_lua__uncap_memory(mf_lua_host_t *host)
{
    if (host->mem_allocf)
        lua_setallocf(host->L, host->mem_allocf, host->mem_ud);
}

size_t mf_lua_host_memory(const mf_lua_host_t *host)
{
    return (size_t)lua_gc(host->L, LUA_GCCOUNT, 0) * 1024 +
           (size_t)lua_gc(host->L, LUA_GCCOUNTB, 0);
}

/* ---- runaway code -------------------------------------------------------- */

/* An interruptible host's slot in the watchdog, and the loop checks of
 * its loads (which stop compiled loops too); the JIT off when asked, or
 * when the checks could not be set up. A host that asked for a slot and
 * got none is told why. */
static void mf_lua__host_watch(mf_lua_host_t *host,
                               const mf_lua_host_opts_t *opts)
{
    bool watched = opts && (opts->interruptible || opts->cpu_budget_ms);
    bool jit = !opts || opts->jit != MF_LUA_JIT_OFF;
    if (watched) {
        host->watch =
            mf_lua_watch_register(host, host->L, opts->cpu_budget_ms);
        if (!host->watch)
            mf_lua_host_log(host, "moonflow: no watchdog for this Lua state "
                                  "(every slot taken, or no thread): runaway "
                                  "code will not be stopped");
        else if (mf_lua_load_install(host) < 0)
            jit = false;
    }
    if (!jit)
        luaJIT_setmode(host->L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
}

int mf_lua_host_pcall(mf_lua_host_t *host, int nargs, int nresults, int errfunc)
{
    mf_lua_slice_t prev = mf_lua_slice_enter(host, NULL);
    int rc = lua_pcall(host->L, nargs, nresults, errfunc);
    mf_lua_slice_leave(host, prev);
    return rc;
}

/* ---- the host ------------------------------------------------------------ */

static void mf_lua__host_ext_dtor(mf_loop_t *loop, void *ext)
{
    (void)loop;
    mf_lua_host_destroy(ext);
}

/* A binding: first to go, it drives everything below (loop.h). */
#define MF_LUA_HOST_LOOP_RANK 40
static mf_loop_key_t mf_lua__host_loop_key =
    MF_LOOP_KEY_INIT(MF_LUA_HOST_LOOP_RANK, mf_lua__host_ext_dtor);

mf_lua_host_t *mf_lua_host_create(mf_loop_t *loop,
                                  const mf_lua_host_opts_t *opts)
{
    if (mf_loop_get(loop, &mf_lua__host_loop_key))
        return NULL;
    lua_State *L = luaL_newstate();
    if (!L)
        return NULL;
    mf_lua__ref_room(L);
    mf_lua_host_t *host = mf_xcalloc(1, sizeof(*host));
    host->L = L;
    host->loop = loop;
    host->log = opts && opts->log ? opts->log : mf_lua__log_stderr;
    host->log_ud = opts ? opts->log_ud : NULL;
    host->log_level =
        opts && opts->log_level ? opts->log_level : MF_LUA_LOG_INFO;
    host->worker_id = opts ? opts->worker_id : 0;
    host->worker_count = opts && opts->worker_count ? opts->worker_count : 1;
    host->metrics = opts ? opts->metrics : NULL;
    mf_list_init(&host->coroutines);
    mf_list_init(&host->timers);
    if (opts && opts->memory_limit)
        mf_lua__cap_memory(host, opts->memory_limit);
    lua_pushlightuserdata(L, (void *)&mf_lua_host_key);
    lua_pushlightuserdata(L, host);
    lua_rawset(L, LUA_REGISTRYINDEX);
    luaL_openlibs(L);
    mf_lua_stdio_whole(L);
    mf_lua__host_watch(host, opts);
    mf_lua__prepend_path(L, "path",
                         opts && opts->package_path ? opts->package_path
                                                    : MF_LUA_SYSTEM_PATH);
    mf_lua__prepend_path(L, "cpath",
                         opts && opts->package_cpath ? opts->package_cpath
                                                     : MF_LUA_SYSTEM_CPATH);
    if (mf_lua__preload(L) < 0) {
        mf_lua_watch_unregister(host->watch);
        mf_lua__uncap_memory(host);
        lua_close(L);
        mf_free(host);
        return NULL;
    }
    mf_lua_kinds_init(host);
    mf_lua__run_startup_modules(host);
    mf_loop_set(loop, &mf_lua__host_loop_key, host);
    mf_lua__thread_host = host;
    return host;
}

void mf_lua_host_destroy(mf_lua_host_t *host)
{
    if (!host)
        return;
    while (!mf_list_empty(&host->coroutines))
        mf_lua_co_abort(
            mf_container_of(host->coroutines.next, mf_lua_co_t, link),
            "host shutdown");
    mf_lua_timers_shutdown(host);
    mf_lua_idle_free(host);
    mf_loop_set(host->loop, &mf_lua__host_loop_key, NULL);
    if (mf_lua__thread_host == host)
        mf_lua__thread_host = NULL;
    mf_lua_watch_unregister(host->watch);
    mf_lua__uncap_memory(host);
    lua_close(host->L);
    if (host->own_metrics)
        mf_metrics_free(host->metrics);
    mf_free(host);
}

lua_State *mf_lua_host_state(const mf_lua_host_t *host)
{
    return host->L;
}

mf_loop_t *mf_lua_host_loop(const mf_lua_host_t *host)
{
    return host->loop;
}

mf_lua_host_t *mf_lua_host_from_state(lua_State *L)
{
    lua_pushlightuserdata(L, (void *)&mf_lua_host_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
    mf_lua_host_t *host = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return host;
}

mf_lua_host_t *mf_lua_host_on_thread(void)
{
    return mf_lua__thread_host;
}

mf_lua_host_t *mf_lua_host_of(const mf_loop_t *loop)
{
    return mf_loop_get(loop, &mf_lua__host_loop_key);
}

void mf_lua_host_log(mf_lua_host_t *host, const char *fmt, ...)
{
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    host->log(host->log_ud, msg);
}

void mf_lua_host_counts(const mf_lua_host_t *host, mf_lua_counts_t *out)
{
    *out = host->counts;
}

int mf_lua_ref(mf_lua_host_t *host, lua_State *L)
{
    int ref = luaL_ref(L, LUA_REGISTRYINDEX);
    if (ref != LUA_REFNIL)
        host->counts.refs++;
    return ref;
}

void mf_lua_unref(mf_lua_host_t *host, int ref)
{
    if (ref == LUA_NOREF || ref == LUA_REFNIL)
        return;
    luaL_unref(host->L, LUA_REGISTRYINDEX, ref);
    host->counts.refs--;
}
