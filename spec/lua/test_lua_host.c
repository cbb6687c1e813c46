/* The host's C API as the server will use it: spawn, exit callbacks for
 * done / error / abort, parking on a timer and on a flow, abort running the
 * cleanup hook (the task is canceled, the loop goes idle at once), host
 * shutdown with live coroutines and timers, counted references, and task
 * kinds registered from C. */
#include <lauxlib.h>

#include <moonflow/lua_host.h>
#include <moonflow/lua_kind.h>
#include <moonflow/moonflow.h>
#include "test.h"

static mf_loop_t *loop;
static mf_lua_host_t *host;

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
    ASSERT_EQ(luaL_loadstring(L, code), 0);
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
    ASSERT_EQ(luaL_loadstring(L, "local a, b = ... return a .. b"), 0);
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
    ASSERT_EQ(luaL_loadstring(L, "require('moonflow').sleep(60000)"), 0);
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
