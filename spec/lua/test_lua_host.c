/* The host's C API as the server will use it: spawn, exit callbacks for
 * done / error / abort, parking on a timer and on a flow, abort running the
 * cleanup hook (the task is canceled, the loop goes idle at once), host
 * shutdown with live coroutines and timers, counted references, task
 * kinds registered from C, the step observer of a coroutine's flows and
 * lean results. */
#include <lauxlib.h>
#include <time.h>
#include <unistd.h>

#include <moonflow/lua_host.h>
#include <moonflow/lua_kind.h>
#include <moonflow/moonflow.h>
#include "test.h"

static mf_loop_t *loop;
static mf_lua_host_t *host;

/* luaL_loadstring as user code: with loop checks in a watched host, whose
 * JIT is on (compiled loops are stopped by them). */
static int load_code(lua_State *L, const char *code)
{
    return mf_lua_load_buffer(L, code, strlen(code), code);
}

typedef struct seen {
    int calls;
    mf_lua_co_status_t status;
    char text[512];
} seen_t;

static void on_exit_cb(mf_lua_co_t *co, const mf_lua_co_exit_t *ex, void *data)
{
    seen_t *s = data;
    (void)co;
    s->calls++;
    s->status = ex->status;
    const char *t = ex->status == MF_LUA_CO_DONE
                        ? (ex->nret ? lua_tostring(ex->L, -1) : "")
                        : ex->message;
    snprintf(s->text, sizeof s->text, "%s", t ? t : "");
}

static void setup(void)
{
    loop = mf_loop_create();
    host = mf_lua_host_create(loop, NULL);
    ASSERT(host);
}

static void teardown(void)
{
    mf_lua_host_destroy(host);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    mf_loop_destroy(loop);
}

/* Compiles code as a function on the host's state and spawns it. */
static mf_lua_co_t *spawn(const char *code, seen_t *s)
{
    lua_State *L = mf_lua_host_state(host);
    ASSERT_EQ(load_code(L, code), 0);
    return mf_lua_host_spawn(host, 0, on_exit_cb, s);
}

static void assert_released(void)
{
    mf_lua_counts_t c;
    mf_lua_host_counts(host, &c);
    ASSERT_EQ(c.coroutines, 0);
    ASSERT_EQ(c.refs, 0);
    ASSERT_EQ(c.timers, 0);
    ASSERT_EQ(c.flows, 0);
    ASSERT_EQ(c.tasks, 0);
}

TEST(a_coroutine_that_does_not_wait_ends_inside_spawn)
{
    setup();
    seen_t s = {0};
    ASSERT(spawn("return 'done'", &s) == NULL);
    ASSERT_EQ(s.calls, 1);
    ASSERT_EQ(s.status, MF_LUA_CO_DONE);
    ASSERT_STR_EQ(s.text, "done");
    assert_released();
    teardown();
}

TEST(arguments_reach_the_function)
{
    setup();
    seen_t s = {0};
    lua_State *L = mf_lua_host_state(host);
    ASSERT_EQ(load_code(L, "local a, b = ... return a .. b"), 0);
    lua_pushstring(L, "req");
    lua_pushstring(L, "resp");
    ASSERT(mf_lua_host_spawn(host, 2, on_exit_cb, &s) == NULL);
    ASSERT_STR_EQ(s.text, "reqresp");
    ASSERT_EQ(lua_gettop(L), 0);
    teardown();
}

TEST(an_error_reaches_the_exit_callback_with_a_traceback)
{
    setup();
    seen_t s = {0};
    spawn("local function f() error('boom') end f()", &s);
    ASSERT_EQ(s.status, MF_LUA_CO_ERROR);
    ASSERT(strstr(s.text, "boom"));
    ASSERT(strstr(s.text, "stack traceback"));
    mf_lua_counts_t c;
    mf_lua_host_counts(host, &c);
    ASSERT_EQ(c.errors, 1);
    assert_released();
    teardown();
}

TEST(a_parked_coroutine_resumes_when_its_task_completes)
{
    setup();
    seen_t s = {0};
    mf_lua_co_t *co =
        spawn("local mf = require 'moonflow' mf.sleep(10) return 'woke'", &s);
    ASSERT(co != NULL);
    ASSERT_EQ(s.calls, 0);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(s.calls, 1);
    ASSERT_STR_EQ(s.text, "woke");
    assert_released();
    teardown();
}

TEST(abort_runs_the_cleanup_hook_and_releases_the_coroutine)
{
    setup();
    seen_t s = {0};
    mf_lua_co_t *co =
        spawn("require('moonflow').sleep(60000) return 'late'", &s);
    ASSERT(co != NULL);
    mf_lua_co_abort(co, "client gone");
    ASSERT_EQ(s.calls, 1);
    ASSERT_EQ(s.status, MF_LUA_CO_ABORTED);
    ASSERT_STR_EQ(s.text, "client gone");
    assert_released();
    uint64_t t0 = mf_loop_now(loop);
    mf_loop_run(loop, MF_RUN_DEFAULT); /* the timer is gone: idle now */
    ASSERT(mf_loop_now(loop) - t0 < 1000);
    ASSERT_EQ(s.calls, 1);
    teardown();
}

TEST(abort_of_a_flow_cancels_its_tasks)
{
    setup();
    seen_t s = {0};
    mf_lua_co_t *co = spawn("local mf = require 'moonflow'\n"
                            "mf.series{ mf.task.timer(60000, {callback = "
                            "  function() error('must not run') end}),\n"
                            "  mf.parallel{ mf.task.timer(60000) } }:wait()",
                            &s);
    ASSERT(co != NULL);
    mf_loop_run(loop, MF_RUN_NOWAIT); /* the flow is running */
    mf_lua_co_abort(co, "client gone");
    ASSERT_EQ(s.status, MF_LUA_CO_ABORTED);
    uint64_t t0 = mf_loop_now(loop);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT(mf_loop_now(loop) - t0 < 1000);
    assert_released(); /* the flow's C side too, once its tasks ended */
    ASSERT_EQ(s.calls, 1);
    teardown();
}

TEST(a_lone_task_is_waited_on_without_a_flow_or_a_reference)
{
    setup();
    seen_t s = {0};
    mf_lua_co_t *co = spawn("local r = require('moonflow').task.timer(5)"
                            ":wait() return r.state",
                            &s);
    ASSERT(co != NULL);
    mf_lua_counts_t c;
    mf_lua_host_counts(host, &c);
    ASSERT_EQ(c.tasks, 1);
    ASSERT_EQ(c.flows, 0);
    ASSERT_EQ(c.refs, 1); /* the coroutine's own */
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(s.calls, 1);
    ASSERT_STR_EQ(s.text, "success");
    assert_released();
    teardown();
}

TEST(abort_and_shutdown_cancel_a_lone_task_whose_end_touches_no_lua)
{
    setup();
    seen_t a = {0}, b = {0};
    const char *code = "require('moonflow').task.timer(60000):wait()";
    mf_lua_co_t *co = spawn(code, &a);
    spawn(code, &b);
    mf_lua_co_abort(co, "client gone");
    ASSERT_EQ(a.status, MF_LUA_CO_ABORTED);
    mf_lua_counts_t c;
    mf_lua_host_counts(host, &c);
    ASSERT_EQ(c.tasks, 1);
    mf_lua_host_destroy(host); /* the canceled tasks complete after it */
    host = NULL;
    ASSERT_EQ(b.status, MF_LUA_CO_ABORTED);
    uint64_t t0 = mf_loop_now(loop);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT(mf_loop_now(loop) - t0 < 1000);
    ASSERT_EQ(a.calls + b.calls, 2);
    mf_loop_destroy(loop);
}

static int abort_me(lua_State *L)
{
    mf_lua_co_abort(mf_lua_co_check(L), "client gone while running");
    return 0;
}

TEST(abort_while_running_ends_the_coroutine_at_its_next_park)
{
    setup();
    seen_t s = {0};
    lua_State *L = mf_lua_host_state(host);
    lua_register(L, "abort_me", abort_me);
    mf_lua_co_t *co = spawn("abort_me() ran_on = true\n"
                            "require('moonflow').sleep(60000)\n"
                            "ran_after = true",
                            &s);
    ASSERT(co == NULL);
    ASSERT_EQ(s.calls, 1);
    ASSERT_EQ(s.status, MF_LUA_CO_ABORTED);
    ASSERT_STR_EQ(s.text, "client gone while running");
    lua_getglobal(L, "ran_on");
    ASSERT(lua_toboolean(L, -1));
    lua_getglobal(L, "ran_after");
    ASSERT(!lua_toboolean(L, -1));
    lua_pop(L, 2);
    assert_released();
    uint64_t t0 = mf_loop_now(loop);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT(mf_loop_now(loop) - t0 < 1000);
    teardown();
}

static void abort_again(mf_lua_co_t *co, const mf_lua_co_exit_t *ex, void *data)
{
    on_exit_cb(co, ex, data);
    mf_lua_co_abort(co, "twice"); /* the exit path is idempotent */
}

TEST(abort_from_the_exit_callback_does_nothing)
{
    setup();
    seen_t s = {0};
    lua_State *L = mf_lua_host_state(host);
    ASSERT_EQ(load_code(L, "require('moonflow').sleep(60000)"), 0);
    mf_lua_co_t *co = mf_lua_host_spawn(host, 0, abort_again, &s);
    mf_lua_co_abort(co, "client gone");
    ASSERT_EQ(s.calls, 1);
    ASSERT_STR_EQ(s.text, "client gone");
    assert_released();
    teardown();
}

TEST(a_bare_coroutine_yield_ends_the_coroutine_with_an_error)
{
    setup();
    seen_t s = {0};
    ASSERT(spawn("coroutine.yield()", &s) == NULL);
    ASSERT_EQ(s.status, MF_LUA_CO_ERROR);
    ASSERT(strstr(s.text, "mf.sleep(0)"));
    assert_released();
    teardown();
}

TEST(destroy_aborts_live_coroutines_and_cancels_timers)
{
    setup();
    seen_t a = {0}, b = {0};
    spawn("require('moonflow').sleep(60000)", &a);
    spawn("local mf = require 'moonflow'\n"
          "mf.timer.every(5, function() end)\n"
          "mf.parallel{ mf.task.timer(60000), mf.task.go('sleep_ms', 1) }"
          ":wait()",
          &b);
    mf_lua_counts_t c;
    mf_lua_host_counts(host, &c);
    ASSERT_EQ(c.coroutines, 2);
    ASSERT_EQ(c.timers, 1);
    mf_lua_host_destroy(host);
    host = NULL;
    ASSERT_EQ(a.status, MF_LUA_CO_ABORTED);
    ASSERT_EQ(b.status, MF_LUA_CO_ABORTED);
    uint64_t t0 = mf_loop_now(loop);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT(mf_loop_now(loop) - t0 < 1000);
    mf_loop_destroy(loop);
}

TEST(the_host_is_found_from_any_thread_of_its_state)
{
    setup();
    lua_State *L = mf_lua_host_state(host);
    ASSERT(mf_lua_host_from_state(L) == host);
    lua_State *T = lua_newthread(L);
    ASSERT(mf_lua_host_from_state(T) == host);
    ASSERT(mf_lua_host_loop(host) == loop);
    ASSERT(mf_lua_host_of(loop) == host);
    lua_pop(L, 1);
    teardown();
}

TEST(a_loop_has_one_host_and_destroys_a_forgotten_one)
{
    setup();
    ASSERT(mf_lua_host_create(loop, NULL) == NULL);
    seen_t s = {0};
    spawn("require('moonflow').sleep(60000)", &s);
    mf_loop_destroy(loop); /* destroys the host: the coroutine is aborted */
    ASSERT_EQ(s.calls, 1);
    ASSERT_EQ(s.status, MF_LUA_CO_ABORTED);
    loop = mf_loop_create();
    host = mf_lua_host_create(loop, NULL);
    ASSERT(host && mf_lua_host_of(loop) == host);
    mf_lua_host_destroy(host);
    ASSERT(mf_lua_host_of(loop) == NULL);
    mf_loop_destroy(loop);
}

/* ---- a task kind registered from C ------------------------------------ */

/* {kind = "twice", n = N}: a 1 ms timer whose result is value = 2 * N,
 * N kept in the task's data; releases are counted. */
typedef struct twice_data {
    double n;
} twice_data_t;

static int twice_releases;

static void twice_check(lua_State *L, int idx)
{
    lua_getfield(L, idx, "n");
    if (lua_type(L, -1) != LUA_TNUMBER)
        luaL_error(L, "twice task: n must be a number");
    lua_pop(L, 1);
}

static mf_task_t *twice_create(lua_State *L, int idx, void *data, mf_loop_t *lp,
                               mf_task_cb cb, void *user)
{
    twice_data_t *d = data;
    ASSERT_EQ(d->n, 0); /* zeroed */
    lua_getfield(L, idx, "n");
    d->n = lua_tonumber(L, -1);
    lua_pop(L, 1);
    return mf_task_timer_create(lp, 1, cb, user);
}

static void twice_result(lua_State *L, mf_task_t *task, void *data)
{
    (void)task;
    lua_pushnumber(L, 2 * ((twice_data_t *)data)->n);
    lua_setfield(L, -2, "value");
}

static void twice_release(void *data)
{
    (void)data;
    twice_releases++;
}

static const mf_lua_kind_t twice_kind = {
    .name = "twice",
    .data_size = sizeof(twice_data_t),
    .check = twice_check,
    .create = twice_create,
    .result = twice_result,
    .release = twice_release,
};

/* ---- the step observer ------------------------------------------------ */

typedef struct steps_heard {
    unsigned n;
    unsigned step[32];
    uint64_t ms[32];
} steps_heard_t;

static uint64_t clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void on_step(void *ud, unsigned step)
{
    steps_heard_t *h = ud;
    if (h->n < 32) {
        h->step[h->n] = step;
        h->ms[h->n++] = clock_ms();
    }
}

static const char *fixed_id(void *ud)
{
    return ud;
}

/* rid(): the request id the host reports for the running coroutine. */
static int lua_rid(lua_State *L)
{
    const char *id = mf_lua_host_request_id(host);
    lua_pushstring(L, id ? id : "none");
    return 1;
}

TEST(a_coroutine_reports_its_request_id_while_it_runs)
{
    setup();
    lua_State *L = mf_lua_host_state(host);
    lua_register(L, "rid", lua_rid);
    ASSERT(mf_lua_host_request_id(host) == NULL); /* nothing runs */
    seen_t with = {0}, without = {0};
    mf_lua_co_t *co = mf_lua_host_prepare(host, on_exit_cb, &with);
    mf_lua_co_hooks_t hooks = {.request_id = fixed_id,
                               .request_id_ud = "req-7"};
    ASSERT_EQ(load_code(mf_lua_co_thread(co),
                              "require('moonflow').sleep(1) return rid()"),
              0);
    ASSERT(mf_lua_co_start_with(co, 0, &hooks));
    spawn("return rid()", &without);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_STR_EQ(with.text, "req-7"); /* after a wait too */
    ASSERT_STR_EQ(without.text, "none");
    teardown();
}

TEST(a_new_host_hands_out_the_registry_refs_it_reserved)
{
    setup();
    lua_State *L = mf_lua_host_state(host);
    lua_pushboolean(L, 1);
    int first = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pushboolean(L, 1);
    int second = luaL_ref(L, LUA_REGISTRYINDEX);
    /* from the free list the host made as it opened: low, lowest first */
    ASSERT(first >= 1 && first < 2048);
    ASSERT(second > first && second < 2048);
    luaL_unref(L, LUA_REGISTRYINDEX, second);
    luaL_unref(L, LUA_REGISTRYINDEX, first);
    teardown();
}

TEST(hooks_given_at_prepare_hold_from_the_start)
{
    setup();
    lua_State *L = mf_lua_host_state(host);
    lua_register(L, "rid", lua_rid);
    seen_t with = {0}, after = {0};
    mf_lua_co_hooks_t hooks = {.request_id = fixed_id,
                               .request_id_ud = "req-9"};
    mf_lua_co_t *co =
        mf_lua_host_prepare_with(host, on_exit_cb, &with, &hooks);
    ASSERT_EQ(load_code(mf_lua_co_thread(co),
                        "require('moonflow').sleep(1) return rid()"),
              0);
    ASSERT(mf_lua_co_start(co, 0));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_STR_EQ(with.text, "req-9");
    co = mf_lua_host_prepare_with(host, on_exit_cb, &after, NULL);
    ASSERT_EQ(load_code(mf_lua_co_thread(co), "return rid()"), 0);
    ASSERT(!mf_lua_co_start(co, 0)); /* the reused thread: no hooks left */
    ASSERT_STR_EQ(after.text, "none");
    teardown();
}

/* Runs code in co (prepared) to its end. */
static void run_in(mf_lua_co_t *co, const char *code)
{
    ASSERT_EQ(luaL_loadstring(mf_lua_co_thread(co), code), 0);
    ASSERT(!mf_lua_co_start_with(co, 0, NULL));
}

TEST(a_returned_coroutine_is_reused_whole_with_its_kept_values)
{
    setup();
    seen_t s = {0};
    mf_lua_co_t *co = mf_lua_host_prepare(host, on_exit_cb, &s);
    lua_State *T = mf_lua_co_thread(co);
    ASSERT(mf_lua_co_keep_ptrs(co)[1] == NULL); /* a new thread: none */
    void *ud = lua_newuserdata(T, 8);
    int ref = luaL_ref(T, LUA_REGISTRYINDEX);
    mf_lua_co_keep(co)[1] = ref;
    mf_lua_co_keep_ptrs(co)[1] = ud;
    run_in(co, "return 1");
    mf_lua_co_t *done = co;
    co = mf_lua_host_prepare(host, on_exit_cb, &s); /* the idle thread */
    ASSERT(co == done); /* its record too: no allocation */
    ASSERT(mf_lua_co_thread(co) == T);
    ASSERT_EQ(mf_lua_co_keep(co)[1], ref);
    ASSERT(mf_lua_co_keep_ptrs(co)[1] == ud);
    ASSERT(mf_lua_co_push_kept(co, 1) == ud); /* pushed on T, ptr back */
    ASSERT(lua_touserdata(T, -1) == ud);
    lua_pop(T, 1);
    ASSERT(mf_lua_co_push_kept(co, 0) == NULL); /* unset: nothing pushed */
    ASSERT(!mf_lua_co_push_keeps(co)); /* one unset: none pushed */
    ASSERT_EQ(lua_gettop(T), 0);
    lua_pushinteger(T, 7);
    mf_lua_co_keep(co)[0] = luaL_ref(T, LUA_REGISTRYINDEX);
    ASSERT(mf_lua_co_push_keeps(co)); /* slot 0 first */
    ASSERT_EQ(lua_gettop(T), 2);
    ASSERT_EQ(lua_tointeger(T, 1), 7);
    ASSERT(lua_touserdata(T, 2) == ud);
    lua_settop(T, 0);
    run_in(co, "error('no reuse')"); /* its thread and kept values go */
    co = mf_lua_host_prepare(host, on_exit_cb, &s);
    ASSERT(mf_lua_co_keep_ptrs(co)[1] == NULL);
    ASSERT_EQ(mf_lua_co_keep(co)[1], LUA_NOREF);
    ASSERT(mf_lua_co_push_kept(co, 1) == NULL);
    run_in(co, "return 1");
    ASSERT_EQ(s.calls, 3);
    assert_released();
    teardown();
}

TEST(the_step_observer_hears_each_flow_start_and_top_level_step_end)
{
    setup();
    seen_t s = {0};
    steps_heard_t h = {0};
    mf_lua_co_t *co = mf_lua_host_prepare(host, on_exit_cb, &s);
    mf_lua_co_hooks_t hooks = {.step = on_step, .step_ud = &h};
    lua_State *L = mf_lua_co_thread(co);
    ASSERT_EQ(
        load_code(L, "local mf = require 'moonflow'\n"
                           "local t = mf.task.timer\n"
                           "mf.series{ t(20), mf.parallel{ t(5), t(30) },\n"
                           "           mf.series{ t(1), t(1) } }:wait()\n"
                           "t(10):wait()\n"
                           "mf.parallel{ t(30), mf.series{ t(10) } }:wait()\n"
                           "return 'ok'"),
        0);
    ASSERT(mf_lua_co_start_with(co, 0, &hooks));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_STR_EQ(s.text, "ok");
    /* a series' steps in order; a lone task is step 1; a parallel's steps
     * as they complete (the 10 ms series before the 30 ms timer) */
    static const unsigned want[] = {0, 1, 2, 3, 0, 1, 0, 2, 1};
    ASSERT_EQ(h.n, sizeof want / sizeof want[0]);
    for (unsigned i = 0; i < h.n; i++)
        ASSERT_EQ(h.step[i], want[i]);
    /* ms timers may fire up to 1 ms early on the loop's cached clock */
    ASSERT(h.ms[1] - h.ms[0] >= 19);
    ASSERT(h.ms[2] - h.ms[1] >= 29);
    ASSERT(h.ms[5] - h.ms[4] >= 9);
    ASSERT(h.ms[7] - h.ms[6] >= 9);
    ASSERT(h.ms[8] - h.ms[6] >= 29);
    assert_released();
    teardown();
}

TEST(a_coroutine_without_an_observer_is_not_timed)
{
    setup();
    seen_t s = {0};
    steps_heard_t h = {0};
    mf_lua_co_t *co = mf_lua_host_prepare(host, on_exit_cb, &s);
    mf_lua_co_hooks_t none = {0}; /* no observer: nothing is heard */
    (void)on_step;
    ASSERT_EQ(load_code(mf_lua_co_thread(co),
                              "local mf = require 'moonflow'\n"
                              "mf.series{ mf.task.timer(1) }:wait()\n"
                              "return 'ok'"),
              0);
    ASSERT(mf_lua_co_start_with(co, 0, &none));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_STR_EQ(s.text, "ok");
    ASSERT_EQ(h.n, 0);
    teardown();
}

/* ---- lean results --------------------------------------------------- */

/* twice's answer "fails" for a negative n (as a Redis error reply would). */
static bool twice_answer_failed(const mf_task_t *task, void *data)
{
    (void)task;
    return ((twice_data_t *)data)->n < 0;
}

static bool always_lean(void *ud)
{
    (void)ud;
    return true;
}

TEST(lean_results_give_true_for_successes_and_whole_results_otherwise)
{
    setup();
    mf_lua_kind_t k = twice_kind;
    k.answer_failed = twice_answer_failed;
    ASSERT_EQ(mf_lua_kind_register(host, &k), 0);
    static const char code[] =
        "local mf = require 'moonflow'\n"
        "local function show(r)\n"
        "  if type(r) ~= 'table' then return tostring(r) end\n"
        "  if r.state then return r.state .. '=' .. tostring(r.value) end\n"
        "  local out = {}\n"
        "  for i = 1, #r do out[i] = show(r[i]) end\n"
        "  return '{' .. table.concat(out, ',') .. '}'\n"
        "end\n"
        "local heard\n"
        "local t = {\n"
        "  show(mf.task.twice{n = 1}:wait()),\n"
        "  show(mf.task.twice{n = -1}:wait()),\n"
        "  show(mf.task.timer(50, {timeout = 1}):wait()),\n"
        "  show(mf.series{ mf.task.twice{n = 1}, mf.task.twice{n = -2},\n"
        "    mf.parallel{ mf.task.twice{n = 2}, mf.series{ mf.task.timer(1) } "
        "},\n"
        "    mf.task.twice{n = 3, callback = function(r, flow)\n"
        "      heard = r.value\n"
        "      flow:push(mf.task.twice{n = 4})\n"
        "    end} }:wait()),\n"
        "  tostring(heard) }\n"
        "return table.concat(t, ' ')";
    const char *want[2] = {
        /* whole results */
        "success=2 success=-2 timeout=nil "
        "{success=2,success=-4,{success=4,{success=nil}},success=6,success=8} "
        "6",
        /* lean: true for a success without a callback */
        "true success=-2 timeout=nil "
        "{true,success=-4,{true,{true}},success=6,true} 6"};
    for (int lean = 1; lean >= 0; lean--) {
        seen_t s = {0};
        mf_lua_co_t *co = mf_lua_host_prepare(host, on_exit_cb, &s);
        mf_lua_co_hooks_t hooks = {.lean = lean ? always_lean : NULL};
        ASSERT_EQ(load_code(mf_lua_co_thread(co), code), 0);
        ASSERT(mf_lua_co_start_with(co, 0, &hooks));
        mf_loop_run(loop, MF_RUN_DEFAULT);
        ASSERT_EQ(s.status, MF_LUA_CO_DONE);
        ASSERT_STR_EQ(s.text, want[lean]);
    }
    assert_released();
    teardown();
}

TEST(a_kind_registered_from_c_runs_alone_and_in_flows_from_lua)
{
    setup();
    twice_releases = 0;
    ASSERT_EQ(mf_lua_kind_register(host, &twice_kind), 0);
    seen_t s = {0};
    spawn("local mf = require 'moonflow'\n"
          "local r = mf.task.twice{n = 21}:wait()\n"
          "local p = mf.parallel{ mf.task.twice{n = 1},\n"
          "  mf.series{ mf.task.timer(1), mf.task.twice{n = 2} } }:wait()\n"
          "assert(mf.task.not_a_kind == nil)\n"
          "return ('%d %s %d %d'):format(r.value, r.state, p[1].value,\n"
          "                              p[2][2].value)",
          &s);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(s.calls, 1);
    ASSERT_STR_EQ(s.text, "42 success 2 4");
    ASSERT_EQ(twice_releases, 3);
    assert_released();
    teardown();
}

TEST(a_kind_check_raises_before_anything_is_built)
{
    setup();
    twice_releases = 0;
    ASSERT_EQ(mf_lua_kind_register(host, &twice_kind), 0);
    seen_t s = {0};
    spawn("local mf = require 'moonflow'\n"
          "mf.series{ mf.task.twice{n = 1}, mf.task.twice{n = 'x'} }:wait()",
          &s);
    ASSERT_EQ(s.status, MF_LUA_CO_ERROR);
    ASSERT(strstr(s.text, "twice task: n must be a number"));
    ASSERT_EQ(twice_releases, 0);
    assert_released();
    teardown();
}

TEST(a_kind_is_refused_for_a_taken_name_or_missing_ops)
{
    setup();
    mf_lua_kind_t k = twice_kind;
    ASSERT_EQ(mf_lua_kind_register(host, &twice_kind), 0);
    ASSERT_EQ(mf_lua_kind_register(host, &twice_kind), MF_EEXIST);
    k.name = "timer";
    ASSERT_EQ(mf_lua_kind_register(host, &k), MF_EEXIST);
    k.name = "series";
    ASSERT_EQ(mf_lua_kind_register(host, &k), MF_EEXIST);
    k.name = "other";
    k.create = NULL;
    ASSERT_EQ(mf_lua_kind_register(host, &k), MF_EINVAL);
    k.name = NULL;
    ASSERT_EQ(mf_lua_kind_register(host, &k), MF_EINVAL);
    teardown();
}

/* ---- runaway code: the CPU budget, deadlines, the memory cap ---------- */

/* A watchdog that failed would leave a test spinning: SIGALRM ends the
 * process instead, long before ctest's timeout. */
#define RUNAWAY_GUARD_S 30

static char logged[4096];

static void log_cb(void *ud, const char *msg)
{
    (void)ud;
    snprintf(logged, sizeof logged, "%s", msg);
}

static void setup_watched(uint32_t budget_ms, size_t memory_limit)
{
    mf_lua_host_opts_t opts = {.log = log_cb,
                               .cpu_budget_ms = budget_ms,
                               .interruptible = true,
                               .memory_limit = memory_limit};
    loop = mf_loop_create();
    host = mf_lua_host_create(loop, &opts);
    ASSERT(host);
    logged[0] = '\0';
    alarm(RUNAWAY_GUARD_S);
}

static void teardown_watched(void)
{
    alarm(0);
    teardown();
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static mf_lua_co_cause_t last_cause;

static void on_exit_cause(mf_lua_co_t *co, const mf_lua_co_exit_t *ex,
                          void *data)
{
    last_cause = ex->cause;
    on_exit_cb(co, ex, data);
}

/* Spawns code and returns the milliseconds it took to end. */
static uint64_t spawn_timed(const char *code, seen_t *s)
{
    lua_State *L = mf_lua_host_state(host);
    ASSERT_EQ(load_code(L, code), 0);
    last_cause = MF_LUA_CAUSE_NONE;
    uint64_t t0 = now_ms();
    ASSERT(mf_lua_host_spawn(host, 0, on_exit_cause, s) == NULL);
    return now_ms() - t0;
}

/* Spawns code, which must park, and runs the loop until it is done. */
static void spawn_and_run(const char *code, seen_t *s)
{
    lua_State *L = mf_lua_host_state(host);
    ASSERT_EQ(load_code(L, code), 0);
    last_cause = MF_LUA_CAUSE_NONE;
    ASSERT(mf_lua_host_spawn(host, 0, on_exit_cause, s) != NULL);
    mf_loop_run(loop, MF_RUN_DEFAULT);
}

/* The coroutine ended with an error of this cause, its message saying so. */
static void assert_stopped(const seen_t *s, mf_lua_co_cause_t cause,
                           const char *text)
{
    ASSERT_EQ(s->calls, 1);
    ASSERT_EQ(s->status, MF_LUA_CO_ERROR);
    ASSERT_EQ(last_cause, cause);
    ASSERT(strstr(s->text, text));
}

static size_t interrupted(void)
{
    mf_lua_counts_t c;
    mf_lua_host_counts(host, &c);
    return c.interrupted;
}

TEST(a_loop_that_never_yields_is_stopped_by_the_cpu_budget)
{
    setup_watched(100, 0);
    const char *loops[] = {"while true do end",
                           "local x = 0 while true do x = (x + 3) % 7 end",
                           "local t = {} while true do t[1] = #t end"};
    for (size_t i = 0; i < MF_ARRAY_SIZE(loops); i++) {
        seen_t s = {0};
        uint64_t ms = spawn_timed(loops[i], &s);
        assert_stopped(&s, MF_LUA_CAUSE_CPU, "cpu budget exceeded: ran 100 ms");
        ASSERT(strstr(s.text, "stack traceback")); /* where it spun */
        ASSERT(ms >= 100 && ms < 2000);
        ASSERT_EQ(interrupted(), i + 1);
    }
    assert_released();
    teardown_watched();
}

TEST(the_budget_counts_each_run_without_yielding_not_the_whole_coroutine)
{
    setup_watched(100, 0);
    seen_t s = {0};
    /* 250 ms of work in 25 ms pieces, each followed by a yield */
    spawn_and_run("local mf = require 'moonflow'\n"
                  "for i = 1, 10 do\n"
                  "  local t0 = os.clock()\n"
                  "  while os.clock() - t0 < 0.025 do end\n"
                  "  mf.sleep(0)\n"
                  "end\n"
                  "return 'finished'",
                  &s);
    ASSERT_EQ(s.status, MF_LUA_CO_DONE);
    ASSERT_STR_EQ(s.text, "finished");
    ASSERT_EQ(interrupted(), 0);
    teardown_watched();
}

TEST(a_pcall_or_a_plain_coroutine_cannot_keep_a_stopped_slice_alive)
{
    setup_watched(50, 0);
    const char *loops[] = {
        "while true do pcall(function() while true do end end) end",
        "local c = coroutine.wrap(function() while true do end end)\n"
        "while true do pcall(c) end",
        "local n = 0 while true do\n"
        "  local ok = pcall(error, 'x') n = n + 1 end"};
    for (size_t i = 0; i < MF_ARRAY_SIZE(loops); i++) {
        seen_t s = {0};
        uint64_t ms = spawn_timed(loops[i], &s);
        assert_stopped(&s, MF_LUA_CAUSE_CPU, "cpu budget exceeded");
        ASSERT(ms < 2000);
    }
    teardown_watched();
}

TEST(the_hook_is_gone_once_the_stopped_coroutine_has_ended)
{
    setup_watched(100, 0);
    seen_t s = {0};
    spawn_timed("while true do end", &s);
    ASSERT_EQ(last_cause, MF_LUA_CAUSE_CPU);
    ASSERT(lua_gethook(mf_lua_host_state(host)) == NULL);
    /* the next coroutine runs its 50 ms of work to the end */
    seen_t next = {0};
    spawn_timed("local t0 = os.clock() while os.clock() - t0 < 0.05 do end "
                "return 'whole'",
                &next);
    ASSERT_EQ(next.status, MF_LUA_CO_DONE);
    ASSERT_STR_EQ(next.text, "whole");
    ASSERT_EQ(interrupted(), 1);
    teardown_watched();
}

TEST(a_deadline_stops_code_that_never_yields)
{
    setup_watched(0, 0); /* no budget: the deadline alone */
    seen_t s = {0};
    mf_lua_co_t *co = mf_lua_host_prepare(host, on_exit_cause, &s);
    lua_State *T = mf_lua_co_thread(co);
    ASSERT_EQ(load_code(T, "while true do end"), 0);
    mf_loop_update_time(loop);
    mf_lua_co_hooks_t hooks = {.deadline = mf_loop_now(loop) + 150};
    uint64_t t0 = now_ms();
    ASSERT(!mf_lua_co_start_with(co, 0, &hooks));
    uint64_t ms = now_ms() - t0;
    assert_stopped(&s, MF_LUA_CAUSE_DEADLINE, "deadline exceeded");
    ASSERT(ms >= 140 && ms < 2000);
    assert_released();
    teardown_watched();
}

TEST(a_runaway_flow_callback_ends_the_coroutine_that_waits_on_it)
{
    setup_watched(100, 0);
    seen_t s = {0};
    spawn_and_run("local mf = require 'moonflow'\n"
                  "local r, err = mf.series{ mf.task.timer(1, "
                  "{callback = function() while true do end end}) }:wait()\n"
                  "return 'resumed after the stop'",
                  &s);
    assert_stopped(&s, MF_LUA_CAUSE_CPU, "cpu budget exceeded");
    ASSERT_EQ(interrupted(), 1);
    assert_released();
    teardown_watched();
}

TEST(a_runaway_background_timer_is_stopped_and_logged)
{
    setup_watched(100, 0);
    seen_t s = {0};
    spawn("local mf = require 'moonflow'\n"
          "mf.timer.at(1, function() while true do end end)",
          &s);
    uint64_t t0 = now_ms();
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT(now_ms() - t0 < 2000);
    ASSERT(strstr(logged, "cpu budget exceeded"));
    ASSERT(strstr(logged, "stack traceback"));
    ASSERT_EQ(interrupted(), 1);
    assert_released();
    teardown_watched();
}

TEST(a_chunk_run_by_host_pcall_is_stopped_too)
{
    setup_watched(100, 0);
    lua_State *L = mf_lua_host_state(host);
    ASSERT_EQ(load_code(L, "while true do end"), 0);
    ASSERT(mf_lua_host_pcall(host, 0, 0, 0) != 0);
    ASSERT(strstr(lua_tostring(L, -1), "cpu budget exceeded"));
    lua_pop(L, 1);
    teardown_watched();
}

TEST(interrupt_all_stops_what_runs_and_can_be_turned_off)
{
    setup_watched(0, 0); /* neither budget nor deadline */
    mf_lua_host_interrupt_all(true);
    seen_t s = {0};
    uint64_t ms = spawn_timed("while true do end", &s);
    mf_lua_host_interrupt_all(false);
    assert_stopped(&s, MF_LUA_CAUSE_STOP, "interrupted");
    ASSERT(ms < 2000);
    seen_t next = {0};
    spawn_timed("local t0 = os.clock() while os.clock() - t0 < 0.1 do end "
                "return 'whole'",
                &next);
    ASSERT_EQ(next.status, MF_LUA_CO_DONE);
    teardown_watched();
}

TEST(the_jit_is_on_unless_asked_off_loop_checks_stop_compiled_loops)
{
    mf_lua_host_opts_t watched = {.interruptible = true};
    mf_lua_host_opts_t asked = {.interruptible = true, .jit = MF_LUA_JIT_ON};
    mf_lua_host_opts_t off = {.interruptible = true, .jit = MF_LUA_JIT_OFF};
    const mf_lua_host_opts_t *cases[] = {&watched, NULL, &asked, &off};
    const int jit_on[] = {1, 1, 1, 0};
    for (size_t i = 0; i < MF_ARRAY_SIZE(cases); i++) {
        loop = mf_loop_create();
        host = mf_lua_host_create(loop, cases[i]);
        lua_State *L = mf_lua_host_state(host);
        ASSERT_EQ(luaL_dostring(L, "return (jit.status())"), 0);
        ASSERT_EQ(lua_toboolean(L, -1), jit_on[i]);
        lua_pop(L, 1);
        teardown();
    }
}

TEST(past_the_memory_cap_the_coroutine_fails_and_the_host_serves_on)
{
    setup_watched(0, 16u << 20);
    size_t before = mf_lua_host_memory(host);
    ASSERT(before < (4u << 20));
    for (int round = 0; round < 3; round++) {
        seen_t s = {0};
        spawn_timed("local t = {}\n"
                    "while true do t[#t + 1] = string.rep('x', 4000) .. #t "
                    "end",
                    &s);
        assert_stopped(&s, MF_LUA_CAUSE_MEMORY, "not enough memory");
        /* collected when it ended: the next one starts under the cap */
        ASSERT(mf_lua_host_memory(host) < before + (1u << 20));
        seen_t ok = {0};
        spawn_timed("return ('ok'):rep(2)", &ok);
        ASSERT_EQ(ok.status, MF_LUA_CO_DONE);
        ASSERT_STR_EQ(ok.text, "okok");
    }
    assert_released();
    teardown_watched();
}

TEST(a_caught_memory_error_lets_the_coroutine_finish)
{
    setup_watched(0, 16u << 20);
    seen_t s = {0};
    spawn_timed("local ok, err = pcall(function()\n"
                "  local t = {} while true do t[#t + 1] = {} end end)\n"
                "t = nil collectgarbage()\n"
                "return tostring(ok) .. ' ' .. err",
                &s);
    ASSERT_EQ(s.status, MF_LUA_CO_DONE);
    ASSERT_STR_EQ(s.text, "false not enough memory");
    teardown_watched();
}
