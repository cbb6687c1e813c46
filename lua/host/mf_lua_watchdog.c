/*
 * lua/host/mf_lua_watchdog.c — stops runaway Lua code (lua_host.h, "runaway
 * code"): one watchdog thread for the process, a slot per interruptible
 * host, the signal that reaches a loop thread stuck in Lua, and the hook
 * that raises in the stuck slice.
 *
 * Why a thread and a signal: a loop thread that runs Lua code which never
 * yields never returns to its loop, so no timer of that loop can fire.
 * Something outside must notice (the watchdog reads each slot's slice
 * number every tick) and something on that thread must act: a signal
 * handler may call lua_sethook (LuaJIT's interpreter reads the hook mask
 * at every instruction once the dispatch table is switched, which is what
 * lua_sethook does), and the hook, running at a safe point of the
 * interpreter, raises a Lua error. Compiled code never checks hooks: the
 * watchdog also sets the slot's stop word, which the loop checks written
 * into loaded code read (mf_lua_load.c), and their halt function raises
 * the hook's error. luaJIT_profile_start could not do it:
 * its state is one per process, so it serves one lua_State only.
 *
 * Owns: the slots (static, so a late signal never points to freed memory),
 * the watchdog thread (started with the first slot, joined with the last)
 * and the signal's handler (installed once). The slots' hosts are their
 * registrants'. Locks: one mutex between the watchdog's passes and
 * (un)registration, never taken on a loop thread's hot path.
 */
#include <errno.h>
#include <lauxlib.h>
#include <stdio.h>
#include <string.h>

#include <moonflow/common.h>

#include "mf_lua_int.h"

#define MF_LUA_WATCH_SLOTS 1024
/* A stopped slice that has not ended (stuck in C, or its hook lost to a
 * race with LuaJIT's own updates of the hook mask) is signaled again. */
#define MF_LUA_WATCH_RESIGNAL_MS 100
/* The watchdog's tick: an eighth of the smallest budget, within bounds. */
#define MF_LUA_WATCH_TICK_MIN_MS 2
#define MF_LUA_WATCH_TICK_MAX_MS 50

static mf_lua_watch_t mf_lua__slots[MF_LUA_WATCH_SLOTS];

static struct {
    pthread_mutex_t lock; /* the slots and the passes */
    pthread_mutex_t life; /* the thread's start and join */
    pthread_cond_t wake;  /* stop, or a new budget */
    pthread_t thread;
    bool running;
    bool stopping;
    bool handler_installed;
    unsigned nslots;
    size_t top; /* slots in use are below it: a pass reads no further */
    uint32_t tick_ms;
    atomic_bool interrupt_all;
} mf_lua__wd = {.lock = PTHREAD_MUTEX_INITIALIZER,
                .life = PTHREAD_MUTEX_INITIALIZER};

/* ---- on the loop thread: the signal and the hook ------------------------ */

static void mf_lua__watch_hook(lua_State *L, lua_Debug *ar);

static bool mf_lua__is_slot(const void *p)
{
    const char *c = p, *first = (const char *)mf_lua__slots;
    return c >= first && c < first + sizeof mf_lua__slots &&
           (size_t)(c - first) % sizeof(mf_lua_watch_t) == 0;
}

/* Async-signal-safe: atomics, pthread_self and lua_sethook (which writes
 * the hook fields and the dispatch table, and allocates nothing). The hook
 * is set only while the condemned slice is the one running on this very
 * thread; a signal that arrives late finds another slice and does nothing. */
static void mf_lua__watch_signal(int sig, siginfo_t *si, void *uctx)
{
    (void)sig;
    (void)uctx;
    mf_lua_watch_t *w = si->si_value.sival_ptr;
    if (si->si_code != SI_QUEUE || !mf_lua__is_slot(w))
        return;
    int saved = errno;
    uint64_t c = atomic_load_explicit(&w->condemned, memory_order_acquire);
    if (c && atomic_load_explicit(&w->slice, memory_order_relaxed) == c &&
        w->L && pthread_equal(w->thread, pthread_self()))
        lua_sethook(w->L, mf_lua__watch_hook, LUA_MASKCOUNT, 1);
    errno = saved;
}

void mf_lua_watch_disarm(mf_lua_host_t *host)
{
    lua_State *L = host->L;
    if (lua_gethook(L) != mf_lua__watch_hook)
        return; /* a debug.sethook of the script's own: not ours to clear */
    /* The signal must not land inside this lua_sethook and re-set half of
     * what it clears. A syscall pair, after a stop only. */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, MF_LUA_WATCHDOG_SIGNAL);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    lua_sethook(L, NULL, 0, 0);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

const char *mf_lua_cause_message(const mf_lua_host_t *host,
                                 mf_lua_co_cause_t cause, char *buf, size_t len)
{
    switch (cause) {
    case MF_LUA_CAUSE_CPU:
        snprintf(buf, len,
                 "cpu budget exceeded: ran %u ms without yielding (stopped)",
                 host->watch ? host->watch->budget_ms : 0);
        return buf;
    case MF_LUA_CAUSE_DEADLINE:
        return "deadline exceeded: still running at its deadline (stopped)";
    case MF_LUA_CAUSE_STOP:
        return "interrupted: the host is stopping";
    case MF_LUA_CAUSE_MEMORY:
        return "not enough memory";
    case MF_LUA_CAUSE_NONE:
        break;
    }
    return "error";
}

/* Raises the watchdog's error for condemned slice c of host: counted
 * once, the coroutine's cause set, the message placed at the Lua function
 * `level` names (0 in a hook, which adds no frame; 1 in a C function). */
static int mf_lua__watch_raise(lua_State *L, mf_lua_host_t *host,
                               mf_lua_watch_t *w, uint64_t c, int level)
{
    mf_lua_co_cause_t cause = atomic_load(&w->cause);
    if (w->counted != c) {
        w->counted = c;
        host->counts.interrupted++;
    }
    if (host->current && host->current->cause == MF_LUA_CAUSE_NONE)
        host->current->cause = cause; /* never resumed again */
    char buf[96];
    const char *msg = mf_lua_cause_message(host, cause, buf, sizeof buf);
    luaL_where(L, level);
    lua_pushfstring(L, "%s%s", lua_tostring(L, -1), msg);
    return lua_error(L);
}

/* The slice condemned and running now, or 0. */
static uint64_t mf_lua__condemned_now(const mf_lua_watch_t *w)
{
    uint64_t c =
        w ? atomic_load_explicit(&w->condemned, memory_order_acquire) : 0;
    if (!c || atomic_load_explicit(&w->slice, memory_order_relaxed) != c)
        return 0;
    return c;
}

/* Runs at every instruction while set: raises while the condemned slice
 * runs (again after a pcall caught it), removes itself otherwise. */
static void mf_lua__watch_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    uint64_t c = mf_lua__condemned_now(host ? host->watch : NULL);
    if (!c) {
        if (host)
            mf_lua_watch_disarm(host);
        return;
    }
    mf_lua__watch_raise(L, host, host->watch, c, 0);
}

/* Called by a loop check that found the stop word set. The word stays
 * set while the condemned slice runs (a pcall that catches the error is
 * stopped again at its next check); a word left from a slice that has
 * ended is cleared first, then the verdict is read again, so that a
 * condemnation racing with the clear is not lost (the watchdog sets the
 * word after condemned). */
int mf_lua_watch_halt(lua_State *L)
{
    mf_lua_host_t *host = mf_lua_host_from_state(L);
    mf_lua_watch_t *w = host ? host->watch : NULL;
    uint64_t c = mf_lua__condemned_now(w);
    if (!c && w) {
        atomic_store(&w->stop, 0);
        c = mf_lua__condemned_now(w);
    }
    if (c)
        return mf_lua__watch_raise(L, host, w, c, 1);
    return 0;
}

/* ---- the watchdog thread ------------------------------------------------ */

static uint64_t mf_lua__clock_ns(clockid_t clock)
{
    struct timespec ts;
    if (clock_gettime(clock, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Why slice s of w must stop, or NONE. CPU time counts from the pass that
 * first saw the slice (at most a tick late: never early). */
static mf_lua_co_cause_t mf_lua__watch_verdict(mf_lua_watch_t *w, uint64_t s,
                                               uint64_t now_ms)
{
    uint64_t deadline =
        atomic_load_explicit(&w->deadline, memory_order_relaxed);
    if (atomic_load(&mf_lua__wd.interrupt_all))
        return MF_LUA_CAUSE_STOP;
    if (deadline && now_ms >= deadline)
        return MF_LUA_CAUSE_DEADLINE;
    if (!w->budget_ms)
        return MF_LUA_CAUSE_NONE;
    uint64_t cpu = mf_lua__clock_ns(w->cpu_clock);
    if (s != w->seen) {
        w->seen = s;
        w->seen_cpu = cpu;
        return MF_LUA_CAUSE_NONE;
    }
    return cpu - w->seen_cpu >= (uint64_t)w->budget_ms * 1000000u
               ? MF_LUA_CAUSE_CPU
               : MF_LUA_CAUSE_NONE;
}

/* Condemns slice s and signals its thread; again every RESIGNAL_MS while
 * it runs on. */
static void mf_lua__watch_condemn(mf_lua_watch_t *w, uint64_t s,
                                  mf_lua_co_cause_t cause, uint64_t now_ms)
{
    if (atomic_load_explicit(&w->condemned, memory_order_relaxed) == s) {
        if (now_ms - w->signaled_at < MF_LUA_WATCH_RESIGNAL_MS)
            return;
    } else {
        atomic_store(&w->cause, (int)cause);
        atomic_store_explicit(&w->condemned, s, memory_order_release);
    }
    w->signaled_at = now_ms;
    /* compiled loops read the word; interpreted code gets the hook */
    atomic_store(&w->stop, 1);
    union sigval v = {.sival_ptr = w};
    pthread_sigqueue(w->thread, MF_LUA_WATCHDOG_SIGNAL, v);
}

static void mf_lua__watch_pass(uint64_t now_ms)
{
    for (size_t i = 0; i < mf_lua__wd.top; i++) {
        mf_lua_watch_t *w = &mf_lua__slots[i];
        if (!w->host)
            continue;
        uint64_t s = atomic_load_explicit(&w->slice, memory_order_acquire);
        mf_lua_co_cause_t cause =
            s ? mf_lua__watch_verdict(w, s, now_ms) : MF_LUA_CAUSE_NONE;
        if (!s)
            w->seen = 0;
        if (cause != MF_LUA_CAUSE_NONE)
            mf_lua__watch_condemn(w, s, cause, now_ms);
    }
}

static void mf_lua__add_ms(struct timespec *ts, uint32_t ms)
{
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    ts->tv_sec += ms / 1000 + ts->tv_nsec / 1000000000L;
    ts->tv_nsec %= 1000000000L;
}

static void *mf_lua__watchdog_main(void *arg)
{
    (void)arg;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    pthread_mutex_lock(&mf_lua__wd.lock);
    while (!mf_lua__wd.stopping) {
        mf_lua__add_ms(&next, mf_lua__wd.tick_ms);
        pthread_cond_timedwait(&mf_lua__wd.wake, &mf_lua__wd.lock, &next);
        if (mf_lua__wd.stopping)
            break;
        mf_lua__watch_pass(mf_lua__clock_ns(CLOCK_MONOTONIC) / 1000000u);
    }
    pthread_mutex_unlock(&mf_lua__wd.lock);
    return NULL;
}

/* Once: the handler of MF_LUA_WATCHDOG_SIGNAL. SA_RESTART, so that a
 * system call it interrupts (in a C function the slice called) goes on. */
static int mf_lua__install_handler(void)
{
    if (mf_lua__wd.handler_installed)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = mf_lua__watch_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(MF_LUA_WATCHDOG_SIGNAL, &sa, NULL) != 0)
        return -1;
    mf_lua__wd.handler_installed = true;
    return 0;
}

static int mf_lua__watchdog_start(void)
{
    if (mf_lua__wd.running)
        return 0;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&mf_lua__wd.wake, &attr);
    pthread_condattr_destroy(&attr);
    mf_lua__wd.stopping = false;
    /* The watchdog never runs Lua: it keeps the signal away from itself. */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, MF_LUA_WATCHDOG_SIGNAL);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    int rc =
        pthread_create(&mf_lua__wd.thread, NULL, mf_lua__watchdog_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&mf_lua__wd.wake);
        return -1;
    }
    mf_lua__wd.running = true;
    return 0;
}

/* The tick for the budgets registered now, and the top of the slots in
 * use (under the lock). */
static void mf_lua__watch_retick(void)
{
    uint32_t tick = MF_LUA_WATCH_TICK_MAX_MS;
    mf_lua__wd.top = 0;
    for (size_t i = 0; i < MF_LUA_WATCH_SLOTS; i++) {
        if (!mf_lua__slots[i].host)
            continue;
        uint32_t b = mf_lua__slots[i].budget_ms;
        if (b && b / 8 < tick)
            tick = b / 8;
        mf_lua__wd.top = i + 1;
    }
    mf_lua__wd.tick_ms =
        tick < MF_LUA_WATCH_TICK_MIN_MS ? MF_LUA_WATCH_TICK_MIN_MS : tick;
}

static mf_lua_watch_t *mf_lua__watch_take(mf_lua_host_t *host, lua_State *L,
                                          uint32_t budget_ms)
{
    for (size_t i = 0; i < MF_LUA_WATCH_SLOTS; i++) {
        mf_lua_watch_t *w = &mf_lua__slots[i];
        if (w->host)
            continue;
        /* slice numbers go on from the slot's last user: a late signal
         * meant for it never matches the new one's slices */
        atomic_store(&w->condemned, 0);
        atomic_store(&w->slice, 0);
        atomic_store(&w->deadline, 0);
        atomic_store(&w->stop, 0);
        w->seen = w->seen_cpu = w->signaled_at = 0;
        w->L = L;
        w->thread = pthread_self();
        w->budget_ms = budget_ms;
        if (pthread_getcpuclockid(w->thread, &w->cpu_clock) != 0)
            w->budget_ms = 0;
        w->host = host;
        return w;
    }
    return NULL;
}

mf_lua_watch_t *mf_lua_watch_register(mf_lua_host_t *host, lua_State *L,
                                      uint32_t budget_ms)
{
    mf_lua_watch_t *w = NULL;
    pthread_mutex_lock(&mf_lua__wd.life);
    pthread_mutex_lock(&mf_lua__wd.lock);
    if (mf_lua__install_handler() == 0 && mf_lua__watchdog_start() == 0)
        w = mf_lua__watch_take(host, L, budget_ms);
    if (w) {
        mf_lua__wd.nslots++;
        mf_lua__watch_retick();
        pthread_cond_signal(&mf_lua__wd.wake);
    }
    pthread_mutex_unlock(&mf_lua__wd.lock);
    pthread_mutex_unlock(&mf_lua__wd.life);
    return w;
}

void mf_lua_watch_unregister(mf_lua_watch_t *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&mf_lua__wd.life);
    pthread_mutex_lock(&mf_lua__wd.lock);
    w->host = NULL;
    w->L = NULL;
    bool last = --mf_lua__wd.nslots == 0;
    mf_lua__watch_retick();
    if (last) {
        mf_lua__wd.stopping = true;
        pthread_cond_signal(&mf_lua__wd.wake);
    }
    pthread_mutex_unlock(&mf_lua__wd.lock);
    if (last) {
        pthread_join(mf_lua__wd.thread, NULL);
        pthread_cond_destroy(&mf_lua__wd.wake);
        mf_lua__wd.running = false;
    }
    pthread_mutex_unlock(&mf_lua__wd.life);
}

void mf_lua_host_interrupt_all(bool on)
{
    atomic_store(&mf_lua__wd.interrupt_all, on);
    if (!on)
        return;
    /* A pass now, not at the next tick: a stop's grace is short, and on a
     * busy machine every tick of it counts. */
    pthread_mutex_lock(&mf_lua__wd.life);
    pthread_mutex_lock(&mf_lua__wd.lock);
    if (mf_lua__wd.running)
        pthread_cond_signal(&mf_lua__wd.wake);
    pthread_mutex_unlock(&mf_lua__wd.lock);
    pthread_mutex_unlock(&mf_lua__wd.life);
}
