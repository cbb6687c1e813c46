/*
 * lua/bench/bench_scenario.c — scenario mode of `moonflow bench`: the script
 * defines iteration(ctx), which returns a flow (a task, mf.series or
 * mf.parallel of Redis, HTTP, MySQL, Kafka ... tasks), and virtual users run
 * those flows in a loop for the duration.
 *
 * Each of -t threads owns a loop, a compute pool (mf.go) and a Lua host on
 * that loop; it loads the script, runs its main chunk and init(args) in a
 * host coroutine, then starts its share of -c users. A user is one host
 * coroutine running a short Lua loop (SCEN_RUNNER) that calls back into C:
 * begin() paces it (closed loop, or -R: the user's share of the rate, each
 * iteration due at a fixed time and measured from it as wrk2 does, a late
 * one starting at once), prep() names the flow's top-level steps and arms
 * the step observer (the user's hooks, moonflow/lua_co.h), the flow is
 * waited on as any handler's but with lean results (true for a task that
 * succeeded: the hooks' lean answers yes while armed; iteration() itself
 * waits as any code does), and finish() records the iteration and its steps.
 * Iterations completing after the warm-up and before the end are recorded;
 * those in flight at the end are aborted and not counted.
 *
 * Owns: the threads, their loops, hosts and users, each thread's histograms
 * and step series (written by that thread only, merged into the
 * bench_result_t after it stopped), the counters published for the
 * progress line (relaxed atomics). Calls the Lua host API, the loop, hdr.h
 * and bench.h's result and progress functions.
 */
#include "bench.h"
#include "bench_http.h"
#include "bench_scenario.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include <moonflow/loop.h>
#include <moonflow/lua_host.h>
#include <moonflow/lua_wrk.h>
#include <moonflow/pool.h>

#define SCEN_MAX_STEPS 16  /* top-level steps timed per flow */
#define SCEN_MAX_SERIES 32 /* distinct steps named per thread */
#define SCEN_TICK_MS 100   /* per-thread rate samples and progress */

typedef struct scen_run scen_run_t;
typedef struct scen_thread scen_thread_t;

/* One named step ("1 redis SET") of one thread. kind and detail are the
 * Lua strings it was named from (anchored, so pointers identify them). */
typedef struct scen_series {
    unsigned index;
    const void *kind, *detail;
    char name[80];
    uint64_t count, errors;
    mf_hdr_t *latency;
} scen_series_t;

typedef struct scen_user {
    scen_thread_t *t;
    mf_lua_co_t *co; /* NULL once ended */
    mf_timer_t timer;
    uint64_t iterations;
    uint64_t due_ns, start_ns; /* the iteration's start (or due time) */
    uint64_t flow0_ns, prev_ns;
    uint64_t step_ns[SCEN_MAX_STEPS + 1]; /* UINT64_MAX: not completed */
    int slot[SCEN_MAX_STEPS + 1];         /* series of each step; -1 none */
    unsigned nsteps;
    bool in_series; /* steps run one after another (a series flow) */
    bool single;    /* the flow is one task: its result is the step's */
    bool armed;
    bool yield_first; /* the last iteration failed: let the loop run */
} scen_user_t;

struct scen_thread {
    scen_run_t *run;
    unsigned index;
    pthread_t tid;
    mf_loop_t *loop;
    mf_pool_t *pool;
    mf_lua_host_t *host;
    scen_user_t *users;
    unsigned first_user, nusers, live;
    uint64_t interval_ns; /* -R: between one user's iterations */
    uint64_t start_ns, warm_ns, end_ns, stopped_ns;
    bool setup_done, stopping;
    bool main_only; /* done()'s state: the main chunk, no init() */
    mf_hdr_t *latency, *rate;
    uint64_t requests, errors, timeouts, tick_requests, tick_ns;
    unsigned ticks;
    scen_series_t series[SCEN_MAX_SERIES];
    unsigned nseries;
    int anchor_ref; /* a table anchoring the strings steps are named by */
    bench_checks_t checks; /* bench.check's counts (bench_check.c) */
    mf_timer_t tick, end;
    _Atomic uint64_t pub_requests, pub_errors, pub_p99;
    char err[512];
};

struct scen_run {
    const bench_opts_t *o;
    scen_thread_t *threads;
    unsigned nthreads;
    /* the start gate: threads arrive set up, the main thread opens it */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned arrived;
    bool open;
    atomic_bool failed;        /* a thread could not set up */
    atomic_bool reported;      /* the first Lua error was printed */
    atomic_bool step_reported; /* the first failed step was printed */
};

/* ---- the Lua side -------------------------------------------------------
 * The setup runs the main chunk with the script's arguments, then init. The
 * runner is each user's loop; the C functions are upvalues-free closures
 * taking the user as a light userdata. */
static const char SCEN_SETUP[] =
    "local chunk, args, main_only, dir = ...\n"
    "-- modules beside the script are found, as `moonflow run` finds them\n"
    "package.path = dir .. '/?.lua;' .. dir .. '/?/init.lua;' .. package.path\n"
    "chunk(unpack(args))\n"
    "if main_only then return end\n"
    "if type(init) == 'function' then init(args) end\n"
    "if type(iteration) ~= 'function' then\n"
    "  error('the script defines no iteration(ctx) function', 0)\n"
    "end\n";

static const char SCEN_RUNNER[] =
    "local begin, prep, finish, cwait, iteration = ...\n"
    "local pcall, xpcall, traceback = pcall, xpcall, debug.traceback\n"
    "return function(u, ctx)\n"
    "  while begin(u, ctx) do\n"
    "    local ok, flow = xpcall(iteration, traceback, ctx)\n"
    "    if ok and prep(u, flow) then\n"
    "      local ok2, res, err = pcall(cwait, flow)\n"
    "      if ok2 then finish(u, res, err)\n"
    "      else finish(u, nil, res, true) end\n"
    "    elseif ok then\n"
    "      finish(u, nil, 'iteration() returned no flow (a task, series '\n"
    "        .. 'or parallel) but ' .. type(flow), true)\n"
    "    else finish(u, nil, flow, true) end\n"
    "  end\n"
    "end\n";

/* A Lua error of a script (iteration(), a flow callback, a bad flow): the
 * first one is printed with its traceback, every one is counted. */
static void scen_lua_error(scen_thread_t *t, const char *msg)
{
    if (!atomic_exchange(&t->run->reported, true))
        fprintf(stderr,
                "moonflow bench: error in the scenario (only the first is "
                "printed; all are counted as errors):\n%s\n",
                msg ? msg : "(error object is not a string)");
}

/* A failed step (a task error, a Redis error reply, an HTTP status >=
 * 400), its result at idx: the first one is printed, every one is
 * counted. */
static void scen_step_error(scen_thread_t *t, lua_State *L, int idx,
                            const char *step)
{
    if (atomic_exchange(&t->run->step_reported, true))
        return;
    char why[256];
    bench_scen_result_why(L, idx, 0, why, sizeof why);
    fprintf(stderr,
            "moonflow bench: step '%s' failed (only the first failure is "
            "printed; all are counted as errors): %s\n",
            step, why[0] ? why : "it did not complete");
}

/* ---- naming the steps ---------------------------------------------------- */

/* The thread's series of step index of the description at d (a new one
 * the first time), or -1 when there are too many. Its kind is on top of
 * the stack (popped here). */
static int scen_slot(scen_thread_t *t, lua_State *L, int d, unsigned index)
{
    const char *kind = lua_tostring(L, -1);
    if (!kind) {
        lua_pop(L, 1);
        return -1;
    }
    const mf_lua_kind_t *kd = mf_lua_kind_find(L, kind);
    bench_scen_push_detail(L, d, kd);
    /* interned strings: equal ones share their bytes */
    const void *kp = kind, *dp = lua_tostring(L, -1);
    for (unsigned i = 0; i < t->nseries; i++) {
        const scen_series_t *s = &t->series[i];
        if (s->index == index && s->kind == kp && s->detail == dp) {
            lua_pop(L, 2);
            return (int)i;
        }
    }
    if (t->nseries == SCEN_MAX_SERIES ||
        !(t->series[t->nseries].latency = mf_hdr_create())) {
        lua_pop(L, 2);
        return -1;
    }
    scen_series_t *s = &t->series[t->nseries];
    s->index = index;
    s->kind = kp;
    s->detail = dp;
    bench_scen_step_name(s->name, sizeof s->name, index, kind, kd,
                         lua_tostring(L, -1));
    lua_rawgeti(L, LUA_REGISTRYINDEX, t->anchor_ref);
    for (int k = -3; k <= -2; k++) { /* the kind and the detail */
        if (!lua_isnil(L, k)) {
            lua_pushvalue(L, k);
            lua_pushboolean(L, 1);
            lua_rawset(L, -3);
        }
    }
    lua_pop(L, 3);
    return (int)t->nseries++;
}

/* The steps of the flow at idx: a series' or parallel's children, or the
 * flow itself when it is a task. Read each iteration (a few lookups per
 * step): a flow may change between iterations, even a prebuilt one. */
static void scen_name_steps(scen_user_t *u, lua_State *L, int idx)
{
    bench_scen_field(L, idx, "kind");
    const char *kind = lua_tostring(L, -1);
    bool series = kind && !strcmp(kind, "series");
    bool list = series || (kind && !strcmp(kind, "parallel"));
    u->in_series = series;
    u->single = !list;
    if (!list) {
        u->nsteps = 1;
        u->slot[1] = scen_slot(u->t, L, idx, 1);
        return;
    }
    lua_pop(L, 1);
    size_t n = lua_objlen(L, idx);
    u->nsteps = n > SCEN_MAX_STEPS ? SCEN_MAX_STEPS : (unsigned)n;
    for (unsigned i = 1; i <= u->nsteps; i++) {
        lua_rawgeti(L, idx, (int)i);
        bench_scen_field(L, -1, "kind");
        u->slot[i] = scen_slot(u->t, L, lua_gettop(L) - 1, i);
        lua_pop(L, 1);
    }
}

/* ---- one user's iterations ------------------------------------------------
 */

/* The user's lean hook: whole results except for the armed flow. */
static bool scen_lean(void *ud)
{
    const scen_user_t *u = ud;
    return u->armed;
}

static void scen_on_step(void *ud, unsigned step)
{
    scen_user_t *u = ud;
    if (!u->armed)
        return;
    uint64_t now = mf_monotonic_ns();
    if (step == 0) {
        u->flow0_ns = u->prev_ns = now;
        return;
    }
    if (step <= u->nsteps)
        u->step_ns[step] = now - (u->in_series ? u->prev_ns : u->flow0_ns);
    u->prev_ns = now;
}

static void scen_begin_cleanup(void *op)
{
    scen_user_t *u = op;
    mf_timer_stop(u->t->loop, &u->timer);
}

static void scen_begin_due(mf_timer_t *timer)
{
    scen_user_t *u = timer->data;
    uint64_t now = mf_monotonic_ns();
    if (u->start_ns > now) /* woken early (ms timers): measured from now */
        u->start_ns = now;
    mf_lua_co_unpark(u->co);
    lua_pushboolean(mf_lua_co_thread(u->co), 1);
    mf_lua_co_resume(u->co, 1);
}

static void scen_set_iteration(lua_State *L, scen_user_t *u)
{
    lua_pushinteger(L, (lua_Integer)++u->iterations);
    lua_setfield(L, 2, "iteration");
}

/* begin(u, ctx) -> true, or false when the run is over. Waits for the
 * iteration's due time (-R), or lets the loop run after a failed one. */
static int scen_l_begin(lua_State *L)
{
    scen_user_t *u = lua_touserdata(L, 1);
    scen_thread_t *t = u->t;
    uint64_t now = mf_monotonic_ns();
    if (t->stopping || now >= t->end_ns) {
        lua_pushboolean(L, 0);
        return 1;
    }
    scen_set_iteration(L, u);
    uint64_t wait_ms = 0;
    if (t->interval_ns) {
        u->start_ns = u->due_ns;
        u->due_ns += t->interval_ns;
        if (u->start_ns > now) /* late ones start now, timed from due */
            wait_ms = (u->start_ns - now) / 1000000u;
    } else {
        u->start_ns = now;
    }
    if (!wait_ms && !u->yield_first) {
        lua_pushboolean(L, 1);
        return 1;
    }
    u->yield_first = false;
    mf_lua_co_t *co = mf_lua_co_check(L);
    mf_timer_start(t->loop, &u->timer, wait_ms);
    mf_lua_co_park(co, scen_begin_cleanup, u);
    return lua_yield(L, 0);
}

/* prep(u, flow) -> whether flow is a flow; names its steps, arms timing. */
static int scen_l_prep(lua_State *L)
{
    scen_user_t *u = lua_touserdata(L, 1);
    if (lua_type(L, 2) != LUA_TTABLE) {
        lua_pushboolean(L, 0);
        return 1;
    }
    scen_name_steps(u, L, 2);
    for (unsigned i = 1; i <= u->nsteps; i++)
        u->step_ns[i] = UINT64_MAX;
    /* Armed: the step observer times this flow, and its results are only
     * told apart (lean: no table for a success). Only this wait:
     * iteration() itself may wait and read what it gets. */
    u->armed = true;
    lua_pushboolean(L, 1);
    return 1;
}

/* Records each step of a flow that completed (res at index 2). */
static bool scen_record_steps(scen_user_t *u, lua_State *L, bool record,
                              bool *timeout)
{
    bool all = true;
    for (unsigned i = 1; i <= u->nsteps; i++) {
        if (u->single)
            lua_pushvalue(L, 2);
        else
            lua_rawgeti(L, 2, (int)i);
        bool ok = bench_scen_result_ok(L, lua_gettop(L), 0, timeout) &&
                  u->step_ns[i] != UINT64_MAX;
        if (!ok && record)
            scen_step_error(u->t, L, lua_gettop(L),
                            u->slot[i] >= 0 ? u->t->series[u->slot[i]].name
                                            : "?");
        lua_pop(L, 1);
        all &= ok;
        if (!record || u->slot[i] < 0)
            continue;
        scen_series_t *s = &u->t->series[u->slot[i]];
        if (ok) {
            s->count++;
            mf_hdr_record(s->latency, u->step_ns[i]);
        } else {
            s->errors++;
        }
    }
    return all;
}

/* finish(u, res, err, lua_error): records the iteration. */
static int scen_l_finish(lua_State *L)
{
    scen_user_t *u = lua_touserdata(L, 1);
    scen_thread_t *t = u->t;
    uint64_t now = mf_monotonic_ns();
    bool record = u->start_ns >= t->warm_ns && now <= t->end_ns;
    bool ok = false, timeout = false;
    u->armed = false;
    if (lua_toboolean(L, 4) || lua_isnil(L, 2)) {
        scen_lua_error(t, lua_tostring(L, 3));
        u->yield_first = true;
    } else {
        ok = scen_record_steps(u, L, record, &timeout);
    }
    if (!record)
        return 0;
    if (ok) {
        t->requests++;
        mf_hdr_record(t->latency, now - u->start_ns);
    } else {
        t->errors++;
        t->timeouts += timeout;
    }
    return 0;
}

/* ---- a thread ------------------------------------------------------------ */

static void scen_user_exit(mf_lua_co_t *co, const mf_lua_co_exit_t *ex,
                           void *data)
{
    scen_user_t *u = data;
    scen_thread_t *t = u->t;
    (void)co;
    u->co = NULL;
    if (ex->status == MF_LUA_CO_ERROR)
        scen_lua_error(t, ex->message);
    if (--t->live == 0) {
        mf_timer_stop(t->loop, &t->tick);
        mf_timer_stop(t->loop, &t->end);
        if (!t->stopped_ns)
            t->stopped_ns = mf_monotonic_ns();
    }
}

/* Samples the thread's rate (Req/Sec) and publishes its counters. */
static void scen_on_tick(mf_timer_t *timer)
{
    scen_thread_t *t = timer->data;
    uint64_t now = mf_monotonic_ns();
    if (now > t->warm_ns && now - t->tick_ns > 0) {
        double per_s = (double)(t->requests - t->tick_requests) * 1e9 /
                       (double)(now - t->tick_ns);
        mf_hdr_record(t->rate, (uint64_t)(per_s + 0.5));
    }
    t->tick_ns = now;
    t->tick_requests = t->requests;
    atomic_store_explicit(&t->pub_requests, t->requests, memory_order_relaxed);
    atomic_store_explicit(&t->pub_errors, t->errors, memory_order_relaxed);
    if (++t->ticks % 5 == 0)
        atomic_store_explicit(&t->pub_p99, mf_hdr_percentile(t->latency, 99),
                              memory_order_relaxed);
    mf_timer_start(t->loop, &t->tick, SCEN_TICK_MS);
}

/* The end: users in flight are aborted (their iteration is not counted). */
static void scen_on_end(mf_timer_t *timer)
{
    scen_thread_t *t = timer->data;
    t->stopping = true;
    t->stopped_ns = mf_monotonic_ns();
    for (unsigned i = 0; i < t->nusers; i++)
        if (t->users[i].co)
            mf_lua_co_abort(t->users[i].co, "the run ended");
}

static void scen_setup_exit(mf_lua_co_t *co, const mf_lua_co_exit_t *ex,
                            void *data)
{
    scen_thread_t *t = data;
    (void)co;
    t->setup_done = true;
    if (ex->status != MF_LUA_CO_DONE)
        snprintf(t->err, sizeof t->err, "%s", ex->message);
}

/* Loads the script and runs its main chunk and init(args) in a coroutine,
 * running the loop until that ends. 0, or -1 with t->err set. */
static int scen_setup(scen_thread_t *t)
{
    const bench_opts_t *o = t->run->o;
    lua_State *L = mf_lua_host_state(t->host);
    if (luaL_loadbuffer(L, SCEN_SETUP, sizeof SCEN_SETUP - 1,
                        "=[moonflow bench]") != 0 ||
        luaL_loadfile(L, o->script) != 0) {
        snprintf(t->err, sizeof t->err, "%s", lua_tostring(L, -1));
        return -1;
    }
    lua_createtable(L, (int)o->nscript_args, 0);
    for (size_t i = 0; i < o->nscript_args; i++) {
        lua_pushstring(L, o->script_args[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
    lua_pushboolean(L, t->main_only);
    const char *slash = strrchr(o->script, '/');
    if (slash)
        lua_pushlstring(L, o->script, (size_t)(slash - o->script));
    else
        lua_pushliteral(L, ".");
    mf_lua_host_spawn(t->host, 4, scen_setup_exit, t);
    while (!t->setup_done && mf_loop_run(t->loop, MF_RUN_ONCE) == 1)
        ;
    if (!t->setup_done)
        snprintf(t->err, sizeof t->err,
                 "the script's main chunk or init() "
                 "never finished");
    return t->err[0] ? -1 : 0;
}

/* Pushes the runner of the users (SCEN_RUNNER over the C functions). */
static int scen_push_runner(scen_thread_t *t, lua_State *L)
{
    if (luaL_loadbuffer(L, SCEN_RUNNER, sizeof SCEN_RUNNER - 1,
                        "=[moonflow bench]") != 0)
        return -1;
    lua_pushcfunction(L, scen_l_begin);
    lua_pushcfunction(L, scen_l_prep);
    lua_pushcfunction(L, scen_l_finish);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "moonflow.flow");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "wait");
    lua_remove(L, -2);
    lua_getglobal(L, "iteration");
    if (lua_pcall(L, 5, 1, 0) != 0) {
        snprintf(t->err, sizeof t->err, "%s", lua_tostring(L, -1));
        return -1;
    }
    return 0;
}

/* Starts the users: each runs runner(u, {thread=, user=, iteration=}). */
static int scen_start_users(scen_thread_t *t)
{

    lua_State *L = mf_lua_host_state(t->host);
    if (scen_push_runner(t, L) < 0)
        return -1;
    int runner = lua_gettop(L);
    for (unsigned i = 0; i < t->nusers; i++) {
        scen_user_t *u = &t->users[i];
        u->t = t;
        mf_timer_init(&u->timer, scen_begin_due, u);
        /* the users' first iterations spread over one interval */
        u->due_ns = t->start_ns + t->interval_ns * i / t->nusers;
        lua_pushvalue(L, runner);
        lua_pushlightuserdata(L, u);
        lua_createtable(L, 0, 3);
        lua_pushinteger(L, t->index + 1);
        lua_setfield(L, -2, "thread");
        lua_pushinteger(L, t->first_user + i + 1);
        lua_setfield(L, -2, "user");
        lua_pushinteger(L, 0);
        lua_setfield(L, -2, "iteration");
        u->co = mf_lua_host_prepare(t->host, scen_user_exit, u);
        t->live++;
        lua_xmove(L, mf_lua_co_thread(u->co), 3);
        const mf_lua_co_hooks_t hooks = {.step = scen_on_step,
                                         .step_ud = u,
                                         .lean = scen_lean,
                                         .lean_ud = u};
        mf_lua_co_start_with(u->co, 2, &hooks);
    }
    lua_settop(L, runner - 1);
    return 0;
}

static void scen_run_thread(scen_thread_t *t)
{
    const bench_opts_t *o = t->run->o;
    t->start_ns = mf_monotonic_ns();
    t->warm_ns = t->start_ns + o->warmup_ns;
    t->end_ns = t->warm_ns + o->duration_ns;
    t->checks.from_ns = t->warm_ns; /* checks count as iterations do */
    t->checks.until_ns = t->end_ns;
    t->tick_ns = t->start_ns;
    mf_timer_init(&t->tick, scen_on_tick, t);
    mf_timer_init(&t->end, scen_on_end, t);
    mf_timer_start(t->loop, &t->tick, SCEN_TICK_MS);
    mf_timer_start(t->loop, &t->end,
                   (o->warmup_ns + o->duration_ns) / 1000000u);
    if (scen_start_users(t) < 0) {
        scen_on_end(&t->end);
        mf_timer_stop(t->loop, &t->tick);
        mf_timer_stop(t->loop, &t->end);
    }
    while (t->live && mf_loop_run(t->loop, MF_RUN_ONCE) == 1)
        ;
    mf_timer_stop(t->loop, &t->tick);
    mf_timer_stop(t->loop, &t->end);
    atomic_store(&t->pub_requests, t->requests);
    atomic_store(&t->pub_errors, t->errors);
}

static int scen_open(scen_thread_t *t)
{
    t->loop = mf_loop_create();
    t->pool = t->loop ? mf_pool_create(1) : NULL;
    t->latency = mf_hdr_create();
    t->rate = mf_hdr_create();
    t->users = calloc(t->nusers ? t->nusers : 1, sizeof *t->users);
    if (!t->pool || !t->latency || !t->rate || !t->users) {
        snprintf(t->err, sizeof t->err, "out of memory");
        return -1;
    }
    mf_loop_set_pool(t->loop, t->pool);
    t->host = mf_lua_host_create(t->loop, NULL);
    if (!t->host) {
        snprintf(t->err, sizeof t->err, "cannot create the Lua state");
        return -1;
    }
    lua_State *L = mf_lua_host_state(t->host);
    lua_newtable(L);
    t->anchor_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    t->checks.from_ns = UINT64_MAX; /* nothing counts before the window */
    bench_checks_open(L, &t->checks);
    return 0;
}

static void scen_close(scen_thread_t *t)
{
    if (t->host) {
        mf_lua_host_destroy(t->host);
        mf_loop_run(t->loop, MF_RUN_DEFAULT);
    }
    if (t->pool)
        mf_pool_destroy(t->pool);
    if (t->loop)
        mf_loop_destroy(t->loop);
    free(t->users);
    t->users = NULL;
}

static void *scen_thread_main(void *arg)
{
    scen_thread_t *t = arg;
    if (scen_open(t) < 0 || scen_setup(t) < 0)
        atomic_store(&t->run->failed, true);
    scen_run_t *run = t->run;
    pthread_mutex_lock(&run->lock);
    run->arrived++;
    pthread_cond_broadcast(&run->cond);
    while (!run->open)
        pthread_cond_wait(&run->cond, &run->lock);
    pthread_mutex_unlock(&run->lock);
    if (!atomic_load(&t->run->failed))
        scen_run_thread(t);
    scen_close(t);
    return NULL;
}

/* ---- the run ------------------------------------------------------------- */

static void scen_sample(void *user, bench_progress_sample_t *out)
{
    const scen_run_t *run = user;
    uint64_t now = mf_monotonic_ns();
    memset(out, 0, sizeof *out);
    for (unsigned i = 0; i < run->nthreads; i++) {
        scen_thread_t *t = &run->threads[i];
        out->requests +=
            atomic_load_explicit(&t->pub_requests, memory_order_relaxed);
        out->errors +=
            atomic_load_explicit(&t->pub_errors, memory_order_relaxed);
        uint64_t p99 = atomic_load_explicit(&t->pub_p99, memory_order_relaxed);
        if (p99 > out->p99_ns)
            out->p99_ns = p99;
    }
    out->warming_up =
        run->o->warmup_ns && now < run->threads[0].start_ns + run->o->warmup_ns;
}

/* The result's series for a step name (steps of the same name on several
 * threads merge), appended when new. */
static bench_series_t *scen_result_series(bench_series_t *all, size_t *n,
                                          const char *name)
{
    for (size_t i = 0; i < *n; i++)
        if (!strcmp(all[i].name, name))
            return &all[i];
    bench_series_t *s = &all[(*n)++];
    s->name = strdup(name);
    if (!s->latency)
        s->latency = mf_hdr_create();
    return s->name && s->latency ? s : NULL;
}

static int scen_series_cmp(const void *a, const void *b)
{
    const bench_series_t *x = a, *y = b;
    long ix = strtol(x->name, NULL, 10), iy = strtol(y->name, NULL, 10);
    return ix < iy ? -1 : ix > iy ? 1 : strcmp(x->name, y->name);
}

/* Merges the threads' stats into a new result. */
static bench_result_t *scen_merge(const scen_run_t *run)
{
    size_t total = 0;
    for (unsigned i = 0; i < run->nthreads; i++)
        total += run->threads[i].nseries;
    bench_result_t *r = bench_result_new("scenario", total);
    if (!r)
        return NULL;
    size_t n = 0;
    for (unsigned i = 0; i < run->nthreads; i++) {
        const scen_thread_t *t = &run->threads[i];
        uint64_t window =
            (t->stopped_ns > t->warm_ns ? t->stopped_ns : t->warm_ns) -
            t->warm_ns;
        if (window > r->duration_ns)
            r->duration_ns = window;
        r->requests += t->requests;
        r->errors.status += t->errors - t->timeouts;
        r->errors.timeout += t->timeouts;
        mf_hdr_merge(r->latency, t->latency);
        mf_hdr_merge(r->rate, t->rate);
        for (unsigned k = 0; k < t->nseries; k++) {
            bench_series_t *s =
                scen_result_series(r->series, &n, t->series[k].name);
            if (!s)
                continue;
            s->count += t->series[k].count;
            s->errors += t->series[k].errors;
            mf_hdr_merge(s->latency, t->series[k].latency);
        }
        bench_checks_merge(&r->checks, &t->checks);
    }
    for (size_t i = n; i < r->nseries; i++) { /* steps named alike */
        mf_hdr_destroy(r->series[i].latency);
        r->series[i].latency = NULL;
    }
    r->nseries = n;
    if (n > 1) /* no series at all when every iteration failed early */
        qsort(r->series, n, sizeof *r->series, scen_series_cmp);
    return r;
}

static void scen_free_threads(scen_run_t *run)
{
    for (unsigned i = 0; i < run->nthreads; i++) {
        scen_thread_t *t = &run->threads[i];
        mf_hdr_destroy(t->latency);
        mf_hdr_destroy(t->rate);
        for (unsigned k = 0; k < t->nseries; k++)
            mf_hdr_destroy(t->series[k].latency);
        bench_checks_free(&t->checks);
    }
    free(run->threads);
}

/* Splits -c users and -R over the threads. */
static void scen_plan(scen_run_t *run)
{
    const bench_opts_t *o = run->o;
    unsigned first = 0;
    for (unsigned i = 0; i < run->nthreads; i++) {
        scen_thread_t *t = &run->threads[i];
        t->run = run;
        t->index = i;
        t->first_user = first;
        t->nusers = o->connections / run->nthreads +
                    (i < o->connections % run->nthreads);
        first += t->nusers;
        if (o->rate > 0)
            t->interval_ns = (uint64_t)(1e9 * o->connections / o->rate);
    }
}

/* Starts the threads, waits for them; 0 or -1 with err set. */
static int scen_run_threads(scen_run_t *run, char *err, size_t errlen)
{
    unsigned started = 0;
    for (; started < run->nthreads; started++)
        if (pthread_create(&run->threads[started].tid, NULL, scen_thread_main,
                           &run->threads[started]) != 0)
            break;
    pthread_mutex_lock(&run->lock);
    while (run->arrived < started)
        pthread_cond_wait(&run->cond, &run->lock);
    if (started < run->nthreads)
        atomic_store(&run->failed, true);
    if (!atomic_load(&run->failed)) { /* wrk's lines as the load starts */
        bench_report_header(stdout, run->o);
        fflush(stdout);
    }
    run->open = true;
    pthread_cond_broadcast(&run->cond);
    pthread_mutex_unlock(&run->lock);
    bench_progress_t *p = NULL;
    if (!atomic_load(&run->failed)) {
        p = bench_progress_start(run->o);
        if (p)
            bench_progress_source(p, scen_sample, run);
    }
    for (unsigned i = 0; i < started; i++)
        pthread_join(run->threads[i].tid, NULL);
    if (p)
        bench_progress_stop(p);
    if (started < run->nthreads) {
        snprintf(err, errlen, "cannot start %u threads", run->nthreads);
        return -1;
    }
    for (unsigned i = 0; i < run->nthreads; i++)
        if (run->threads[i].err[0]) {
            snprintf(err, errlen, "%s: %s", run->o->script,
                     run->threads[i].err);
            return -1;
        }
    return 0;
}

int bench_scenario_run(const bench_opts_t *o, bench_result_t **r, char *err,
                       size_t errlen)
{
    *r = NULL;
    if (!o->script) {
        snprintf(err, errlen, "scenario mode needs a script (-s FILE)");
        return -1;
    }
    scen_run_t run = {.o = o,
                      .nthreads = o->threads ? o->threads : 1,
                      .lock = PTHREAD_MUTEX_INITIALIZER,
                      .cond = PTHREAD_COND_INITIALIZER};
    if (run.nthreads > o->connections)
        run.nthreads = o->connections ? o->connections : 1;
    run.threads = calloc(run.nthreads, sizeof *run.threads);
    if (!run.threads) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    scen_plan(&run);
    int rc = scen_run_threads(&run, err, errlen);
    if (rc == 0 && !(*r = scen_merge(&run))) {
        snprintf(err, errlen, "out of memory (the result)");
        rc = -1;
    }
    scen_free_threads(&run);
    return rc;
}

bool bench_script_is_scenario(const char *path)
{
    return bench_scen_script_defines(path, "iteration");
}

int bench_scenario_done(const bench_opts_t *o, const bench_result_t *r,
                        char *err, size_t errlen)
{
    if (!o->script || !bench_scen_script_defines(o->script, "done"))
        return 0;
    scen_run_t run = {.o = o};
    scen_thread_t *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    t->run = &run;
    t->main_only = true;
    static const mf_lua_wrk_url_t no_url = {NULL, NULL, NULL, NULL};
    int rc = scen_open(t);
    /* wrk's table, with the statistics objects done() is given */
    if (rc == 0 &&
        mf_lua_wrk_open(mf_lua_host_state(t->host), &no_url, NULL, 0) < 0) {
        snprintf(t->err, sizeof t->err, "%s",
                 lua_tostring(mf_lua_host_state(t->host), -1));
        rc = -1;
    }
    if (rc == 0)
        rc = scen_setup(t);
    if (rc < 0)
        snprintf(err, errlen, "%s: %s", o->script, t->err);
    else
        rc = bench_lua_done(mf_lua_host_state(t->host), r, err, errlen);
    scen_close(t);
    mf_hdr_destroy(t->latency);
    mf_hdr_destroy(t->rate);
    free(t);
    return rc;
}
