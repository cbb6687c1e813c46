/*
 * lua/engine/mf_lua_flow.c — flow:wait(): builds the whole C series/parallel
 * tree from a Lua description, starts it and parks the coroutine once; the C
 * scheduler runs every step, and the coroutine resumes when the root series
 * completes, with the results as Lua tables. A lone task without a callback
 * is waited on alone instead (mf_lua_park.c): same result, no flow.
 *
 * Owns: the flow record and its nodes with their kinds' data (loop memory,
 * released and freed when the root series completes, which is after every
 * task's callback), the state table {results, callbacks, error} (one
 * registry reference, released when the coroutine resumes or is aborted).
 * After an abort the tasks are canceled and their completions no longer
 * touch Lua.
 *
 * Result placement is decided when a node is built: a series' tasks append
 * to its array, a parallel's branches fill their index. A waiter with lean
 * results gets no table for a task without a callback: its place holds
 * false until it completes, then true, or its whole result when it failed.
 * Per-task callbacks run as plain Lua calls on the host's main thread (they
 * cannot yield); they may push steps onto their series or cancel the rest of
 * it; one that raises fails the flow: the rest is canceled and wait() raises.
 *
 * The flow knows no task kind: a task step is checked, created and turned
 * into its result table through its kind's ops (mf_lua_leaf.c), its data
 * allocated with its node.
 *
 * Cancellation goes through mf_task_cancel on leaf tasks only (a canceled
 * leaf still completes and is called back, so no node is left pointing at a
 * task the engine dropped); mf_series_cancel is never used.
 */
#include <string.h>

#include <lauxlib.h>

#include <moonflow/lua_arg.h>
#include <moonflow/common.h>
#include <moonflow/parallel.h>

#include "mf_lua_flow.h"

static void mf_lua__series_done(mf_series_t *series);
static void mf_lua__leaf_done(mf_task_t *task);

/* A top-level step completed: the waiter's observer hears it (not after an
 * abort: nobody waits any more). */
void mf_lua_flow_step_report(const mf_lua_node_t *n)
{
    if (n->step && n->flow->co)
        n->flow->step_fn(n->flow->step_ud, n->step);
}

/* The callback of a parallel that is a top-level step. */
static void mf_lua__step_done(mf_task_t *task)
{
    mf_lua_flow_step_report(task->user);
}

/* ---- checking a description (nothing is built before it passes) ------ */

/* Raises on a malformed step at idx; for a task without a callback
 * returns its kind (it can be waited on alone), else NULL. */
static const mf_lua_kind_t *mf_lua__check(lua_State *L, int idx, int depth)
{
    luaL_checkstack(L, 4, "flow nested too deeply");
    if (depth > 200)
        luaL_error(L, "flow nested too deeply");
    if (lua_type(L, idx) != LUA_TTABLE)
        luaL_error(L, "flow step %d: expected a task, series or parallel",
                   depth);
    const mf_lua_kind_t *kind;
    mf_lua_step_t step = mf_lua_desc_step(L, idx, &kind);
    if (step == MF_LUA_STEP_TASK)
        return mf_lua_leaf_check(L, idx, kind) ? NULL : kind;
    if (step == MF_LUA_STEP_GRAPH)
        mf_lua_graph_check(L, idx);
    int n = (int)lua_objlen(L, idx);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, idx, i);
        mf_lua__check(L, lua_gettop(L), depth + 1);
        lua_pop(L, 1);
    }
    return NULL;
}

/* ---- result slots ------------------------------------------------------ */

void mf_lua_flow_push_slot(lua_State *L, int st, int slot)
{
    lua_rawgeti(L, st, MF_LUA_FLOW_RESULTS);
    lua_rawgeti(L, -1, slot);
    lua_remove(L, -2);
}

/* A new result table, stored in results[slot] and placed in its parent:
 * at index pos, or appended when pos is 0; parent 0: not placed. */
static int mf_lua__slot_new(mf_lua_build_t *b, int parent, int pos)
{
    lua_State *L = b->L;
    int slot = ++b->flow->nslots;
    lua_rawgeti(L, b->st, MF_LUA_FLOW_RESULTS);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawseti(L, -3, slot);
    if (parent) {
        lua_rawgeti(L, -2, parent);
        lua_pushvalue(L, -2);
        lua_rawseti(L, -2, pos ? pos : (int)lua_objlen(L, -2) + 1);
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
    return slot;
}

/* A lean task's place in its parent, held by false until it completes;
 * pos 0: appended. Returns the position. */
static int mf_lua__slot_reserve(mf_lua_build_t *b, int parent, int pos)
{
    lua_State *L = b->L;
    lua_rawgeti(L, b->st, MF_LUA_FLOW_RESULTS);
    lua_rawgeti(L, -1, parent);
    if (!pos)
        pos = (int)lua_objlen(L, -1) + 1;
    lua_pushboolean(L, 0);
    lua_rawseti(L, -2, pos);
    lua_pop(L, 2);
    return pos;
}

static size_t mf_lua__node_size(const mf_lua_kind_t *kind)
{
    return sizeof(mf_lua_node_t) + (kind ? kind->data_size : 0);
}

/* A node; kind NULL: a series or parallel. A lean task (lean) gets no
 * result table: a place in its parent's. */
mf_lua_node_t *mf_lua_flow_node_new(mf_lua_build_t *b,
                                    const mf_lua_kind_t *kind,
                                    mf_lua_node_t *owner, int parent, int pos,
                                    bool lean)
{
    mf_lua_flow_t *flow = b->flow;
    mf_loop_t *loop = flow->loop;
    size_t size = mf_lua__node_size(kind);
    mf_lua_node_t *n = mf_loop_alloc(loop, size);
    memset(n, 0, size);
    n->flow = flow;
    n->kind = kind;
    n->owner = owner;
    if (lean) {
        n->parent = parent;
        n->pos = mf_lua__slot_reserve(b, parent, pos);
    } else {
        n->slot = mf_lua__slot_new(b, parent, pos);
    }
    n->step = b->step;
    b->step = 0;
    mf_list_push_back(&flow->nodes, &n->link);
    return n;
}

/* Stores desc.callback (if a function) in callbacks[node->slot]. */
static void mf_lua__node_callback(mf_lua_build_t *b, int d, mf_lua_node_t *n)
{
    lua_State *L = b->L;
    lua_getfield(L, d, "callback");
    if (lua_isfunction(L, -1)) {
        lua_rawgeti(L, b->st, MF_LUA_FLOW_CALLBACKS);
        lua_pushvalue(L, -2);
        lua_rawseti(L, -2, n->slot);
        lua_pop(L, 1);
        n->has_cb = true;
    }
    lua_pop(L, 1);
}

/* ---- building the C tree ----------------------------------------------- */

static mf_series_t *mf_lua__series_new(mf_lua_build_t *b, mf_lua_node_t *n)
{
    mf_series_t *s = mf_series_create(b->flow->loop, mf_lua__series_done);
    mf_series_set_context(s, n);
    n->series = s;
    return s;
}

/* Whether node n is the root and its children are counted as steps. */
static bool mf_lua__counts_steps(const mf_lua_build_t *b,
                                 const mf_lua_node_t *n)
{
    return b->flow->step_fn && n->slot == b->flow->root_slot;
}

/* The series of description d, its tasks appended to node n's results. */
static mf_series_t *mf_lua__build_series(mf_lua_build_t *b, int d,
                                         mf_lua_node_t *n)
{
    mf_series_t *s = mf_lua__series_new(b, n);
    int count = (int)lua_objlen(b->L, d);
    bool steps = mf_lua__counts_steps(b, n);
    for (int i = 1; i <= count; i++) {
        b->step = steps ? (unsigned)i : 0;
        lua_rawgeti(b->L, d, i);
        mf_series_push_back(
            s, mf_lua_flow_build_task(b, lua_gettop(b->L), n, n->slot, 0));
        lua_pop(b->L, 1);
    }
    return s;
}

/* Branch pos of a parallel: a series gives its array; a lone task runs in
 * a series of its own whose array is not placed (the task's result is). */
static void mf_lua__build_branch(mf_lua_build_t *b, int d, mf_parallel_t *par,
                                 mf_lua_node_t *pnode, int pos)
{
    int parent = pnode->slot;
    const mf_lua_kind_t *kind;
    if (mf_lua_desc_step(b->L, d, &kind) == MF_LUA_STEP_SERIES) {
        mf_lua_node_t *n =
            mf_lua_flow_node_new(b, NULL, pnode, parent, pos, false);
        mf_parallel_add_series(par, mf_lua__build_series(b, d, n));
        return;
    }
    mf_lua_node_t *n = mf_lua_flow_node_new(b, NULL, pnode, 0, 0, false);
    mf_series_t *s = mf_lua__series_new(b, n);
    mf_series_push_back(s, mf_lua_flow_build_task(b, d, n, parent, pos));
    mf_parallel_add_series(par, s);
}

static mf_task_t *mf_lua__build_parallel(mf_lua_build_t *b, int d,
                                         mf_lua_node_t *owner, int parent,
                                         int pos)
{
    mf_lua_node_t *n = mf_lua_flow_node_new(b, NULL, owner, parent, pos, false);
    mf_parallel_t *par = mf_parallel_create(
        b->flow->loop, n->step ? mf_lua__step_done : NULL, n);
    int count = (int)lua_objlen(b->L, d);
    bool steps = mf_lua__counts_steps(b, owner) && b->flow->unwrap;
    for (int i = 1; i <= count; i++) {
        b->step = steps ? (unsigned)i : 0;
        lua_rawgeti(b->L, d, i);
        mf_lua__build_branch(b, lua_gettop(b->L), par, n, i);
        lua_pop(b->L, 1);
    }
    return mf_parallel_task(par);
}

/* A series inside a series runs as a parallel of one branch. */
static mf_task_t *mf_lua__build_nested(mf_lua_build_t *b, int d,
                                       mf_lua_node_t *owner, int parent,
                                       int pos)
{
    mf_lua_node_t *n = mf_lua_flow_node_new(b, NULL, owner, parent, pos, false);
    mf_parallel_t *par = mf_parallel_create(b->flow->loop, NULL, NULL);
    mf_parallel_add_series(par, mf_lua__build_series(b, d, n));
    return mf_parallel_task(par);
}

mf_task_t *mf_lua_flow_build_task(mf_lua_build_t *b, int d,
                                  mf_lua_node_t *owner, int parent, int pos)
{
    luaL_checkstack(b->L, 8, "flow nested too deeply");
    const mf_lua_kind_t *kind;
    mf_lua_step_t step = mf_lua_desc_step(b->L, d, &kind);
    if (step == MF_LUA_STEP_SERIES)
        return mf_lua__build_nested(b, d, owner, parent, pos);
    if (step == MF_LUA_STEP_PARALLEL)
        return mf_lua__build_parallel(b, d, owner, parent, pos);
    if (step == MF_LUA_STEP_GRAPH)
        return mf_lua_graph_build(b, d, owner, parent, pos);
    lua_getfield(b->L, d, "callback");
    bool lean = b->flow->lean && !lua_isfunction(b->L, -1);
    lua_pop(b->L, 1);
    mf_lua_node_t *n = mf_lua_flow_node_new(b, kind, owner, parent, pos, lean);
    if (!lean)
        mf_lua__node_callback(b, d, n);
    n->task = mf_lua_leaf_create(b->L, d, kind, n->data, b->flow->loop,
                                 mf_lua__leaf_done, n);
    return n->task;
}

/* The root: a series node; a lone task or parallel goes in one. */
static mf_series_t *mf_lua__build_root(mf_lua_build_t *b, int d)
{
    mf_lua_flow_t *flow = b->flow;
    mf_lua_node_t *root = mf_lua_flow_node_new(b, NULL, NULL, 0, 0, false);
    flow->root_slot = root->slot;
    const mf_lua_kind_t *kind;
    if (mf_lua_desc_step(b->L, d, &kind) == MF_LUA_STEP_SERIES)
        return mf_lua__build_series(b, d, root);
    flow->unwrap = true;
    mf_series_t *s = mf_lua__series_new(b, root);
    if (flow->step_fn &&
        mf_lua_desc_step(b->L, d, &kind) != MF_LUA_STEP_PARALLEL)
        b->step = 1; /* a task or a graph: one step */
    mf_series_push_back(s, mf_lua_flow_build_task(b, d, root, root->slot, 0));
    return s;
}

/* ---- the flow's life ----------------------------------------------------- */

static void mf_lua__flow_cancel(mf_lua_flow_t *flow)
{
    mf_list_t *pos;
    mf_list_foreach(pos, &flow->nodes)
    {
        mf_lua_node_t *n = mf_container_of(pos, mf_lua_node_t, link);
        if (n->task)
            mf_task_cancel(n->task);
    }
}

/* The flow's Lua side ends here (resumed or aborted); its C side goes on
 * until the root series completes, touching neither Lua nor the host. */
static void mf_lua__flow_release_lua(mf_lua_flow_t *flow)
{
    mf_lua_unref(flow->host, flow->ref);
    flow->host->counts.flows--;
    flow->host = NULL;
    flow->ref = LUA_NOREF;
    flow->co = NULL;
}

/* Cleanup hook of the waiting coroutine (abort, shutdown). */
static void mf_lua__flow_detach(void *arg)
{
    mf_lua_flow_t *flow = arg;
    mf_lua__flow_release_lua(flow);
    mf_lua__flow_cancel(flow);
}

static void mf_lua__flow_free(mf_lua_flow_t *flow)
{
    mf_loop_t *loop = flow->loop;
    mf_list_t *pos;
    while ((pos = mf_list_pop_front(&flow->nodes)) != NULL) {
        mf_lua_node_t *n = mf_container_of(pos, mf_lua_node_t, link);
        if (n->kind)
            mf_lua_leaf_release(n->kind, n->data);
        mf_loop_free(loop, n, mf_lua__node_size(n->kind));
    }
    mf_loop_free(loop, flow, sizeof(*flow));
}

/* The root series is done: resume the waiter with (results) or
 * (nil, message) when a callback raised. */
static void mf_lua__flow_done(mf_lua_flow_t *flow)
{
    mf_lua_co_t *co = flow->co;
    if (!co) {
        mf_lua__flow_free(flow);
        return;
    }
    lua_State *L = mf_lua_co_thread(co);
    lua_rawgeti(L, LUA_REGISTRYINDEX, flow->ref);
    int st = lua_gettop(L);
    if (flow->failed) {
        lua_pushnil(L);
        lua_rawgeti(L, st, MF_LUA_FLOW_ERROR);
    } else {
        mf_lua_flow_push_slot(L, st, flow->root_slot);
        if (flow->unwrap) {
            lua_rawgeti(L, -1, 1);
            lua_remove(L, -2);
        }
        lua_pushnil(L);
    }
    lua_remove(L, st);
    mf_lua__flow_release_lua(flow);
    mf_lua__flow_free(flow);
    mf_lua_co_unpark(co);
    mf_lua_co_resume(co, 2);
}

static void mf_lua__series_done(mf_series_t *series)
{
    mf_lua_node_t *n = mf_series_context(series);
    n->series = NULL;
    mf_lua_flow_step_report(n);
    if (n->slot == n->flow->root_slot)
        mf_lua__flow_done(n->flow);
}

/* ---- per-task callbacks, flow:push and flow:cancel -------------------- */

static int mf_lua__traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    luaL_traceback(L, L, msg ? msg : "(error object is not a string)", 1);
    return 1;
}

/* Calls callbacks[slot](result, flowref) on the host's main thread with
 * the state table at st. Returns false (message on the stack) on error. */
static bool mf_lua__call_back(lua_State *L, int st, mf_lua_node_t *n)
{
    lua_pushcfunction(L, mf_lua__traceback);
    lua_rawgeti(L, st, MF_LUA_FLOW_CALLBACKS);
    lua_rawgeti(L, -1, n->slot);
    lua_remove(L, -2);
    mf_lua_flow_push_slot(L, st, n->slot);
    mf_lua_node_t **ref = lua_newuserdata(L, sizeof(*ref));
    *ref = n->owner;
    luaL_getmetatable(L, MF_LUA_FLOWREF);
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_insert(L, st + 1); /* keep the flowref to invalidate it */
    /* The callback runs for the waiting coroutine: what belongs to that
     * coroutine (a server handler's req and resp) may be used in it. */
    mf_lua_host_t *host = n->flow->host;
    mf_lua_co_t *prev = host->current;
    host->current = n->flow->co;
    /* A slice of the waiting coroutine: its budget and deadline apply, and
     * stopped here, the coroutine ends when the flow resumes it. */
    mf_lua_slice_t outer = mf_lua_slice_enter(host, n->flow->co);
    int rc = lua_pcall(L, 2, 0, st + 2);
    mf_lua_slice_leave(host, outer);
    host->current = prev;
    *ref = NULL; /* the flow object is valid during the callback only */
    lua_remove(L, st + 1);
    lua_remove(L, st + 1); /* the traceback function */
    return rc == 0;
}

/* A lean task's result in its place: true, or its whole result when it
 * failed or its answer did. */
static void mf_lua__place_lean(lua_State *L, int st, mf_lua_node_t *n,
                               mf_task_t *task)
{
    mf_lua_flow_push_slot(L, st, n->parent);
    if (mf_lua_leaf_lean(n->kind, task, n->data)) {
        lua_pushboolean(L, 1);
    } else {
        lua_createtable(L, 0, 6);
        mf_lua_leaf_result(L, n->kind, task, n->data);
    }
    lua_rawseti(L, -2, n->pos);
    lua_pop(L, 1);
}

static void mf_lua__leaf_done(mf_task_t *task)
{
    mf_lua_node_t *n = task->user;
    mf_lua_flow_t *flow = n->flow;
    n->task = NULL;
    mf_lua_flow_step_report(n);
    if (!flow->co || flow->failed)
        return;
    lua_State *L = mf_lua_host_state(flow->host);
    lua_rawgeti(L, LUA_REGISTRYINDEX, flow->ref);
    int st = lua_gettop(L);
    if (n->slot) {
        mf_lua_flow_push_slot(L, st, n->slot);
        mf_lua_leaf_result(L, n->kind, task, n->data);
        lua_pop(L, 1);
    } else {
        mf_lua__place_lean(L, st, n, task);
    }
    if (n->has_cb && !n->canceled && !mf_lua__call_back(L, st, n)) {
        flow->failed = true;
        lua_rawseti(L, st, MF_LUA_FLOW_ERROR);
        mf_lua__flow_cancel(flow);
    }
    lua_settop(L, st - 1);
}

static int mf_lua__push(lua_State *L)
{
    mf_lua_node_t **ref = mf_lua_check_udata(L, 1, MF_LUA_FLOWREF);
    mf_lua_check_type(L, 2, LUA_TTABLE);
    mf_lua_node_t *n = *ref;
    if (!n || !n->series)
        return luaL_error(L, "flow:push outside the task's callback");
    if (n->canceled)
        return luaL_error(L, "flow:push after flow:cancel");
    lua_settop(L, 2);
    mf_lua__check(L, 2, 0);
    mf_lua_build_t b = {L, n->flow, 0, 0};
    lua_rawgeti(L, LUA_REGISTRYINDEX, n->flow->ref);
    b.st = lua_gettop(L);
    mf_series_push_back(n->series,
                        mf_lua_flow_build_task(&b, 2, n, n->slot, 0));
    return 0;
}

bool mf_lua_flow_node_within(const mf_lua_node_t *n,
                             const mf_lua_node_t *series)
{
    for (; n; n = n->owner)
        if (n == series)
            return true;
    return false;
}

/* flow:cancel(): every task of the series not done yet (those queued, and
 * those running in its parallels) ends "canceled" without its callback; the
 * series ends, and the flow goes on after it. */
static int mf_lua__cancel(lua_State *L)
{
    mf_lua_node_t **ref = mf_lua_check_udata(L, 1, MF_LUA_FLOWREF);
    mf_lua_node_t *s = *ref;
    if (!s || !s->series)
        return luaL_error(L, "flow:cancel outside the task's callback");
    s->canceled = true;
    mf_list_t *pos;
    mf_list_foreach(pos, &s->flow->nodes)
    {
        mf_lua_node_t *n = mf_container_of(pos, mf_lua_node_t, link);
        if (n->task && mf_lua_flow_node_within(n, s)) {
            n->canceled = true;
            mf_task_cancel(n->task);
        }
    }
    return 0;
}

/* flow.wait(desc) -> results | nil, message */
static int mf_lua__wait(lua_State *L)
{
    mf_lua_check_type(L, 1, LUA_TTABLE);
    mf_lua_co_t *co = mf_lua_co_check(L);
    lua_settop(L, 1);
    /* a lone task without a callback needs no flow: it is waited on alone */
    const mf_lua_kind_t *lone = mf_lua__check(L, 1, 0);
    if (lone)
        return mf_lua_park_task(L, co, 1, lone);
    mf_lua_host_t *host = mf_lua_co_host(co);
    mf_lua_flow_t *flow = mf_loop_alloc(mf_lua_host_loop(host), sizeof(*flow));
    memset(flow, 0, sizeof(*flow));
    flow->loop = mf_lua_host_loop(host);
    flow->host = host;
    flow->co = co;
    mf_list_init(&flow->nodes);
    flow->step_fn = co->hooks.step;
    flow->step_ud = co->hooks.step_ud;
    flow->lean = mf_lua_co_lean(co);
    host->counts.flows++;
    lua_createtable(L, 3, 0);
    lua_newtable(L);
    lua_rawseti(L, 2, MF_LUA_FLOW_RESULTS);
    lua_newtable(L);
    lua_rawseti(L, 2, MF_LUA_FLOW_CALLBACKS);
    mf_lua_build_t b = {L, flow, 2, 0};
    mf_series_t *root = mf_lua__build_root(&b, 1);
    flow->ref = mf_lua_ref(host, L);
    if (flow->step_fn)
        flow->step_fn(flow->step_ud, 0);
    mf_series_start(root);
    mf_lua_co_park(co, mf_lua__flow_detach, flow);
    return lua_yield(L, 0);
}

int mf_lua_open_flow(lua_State *L)
{
    static const luaL_Reg funcs[] = {
        {"wait step:wait()", mf_lua__wait},
        {"has_kind", mf_lua_has_kind},
        {"graph mf.graph(nodes [, opts])", mf_lua_graph_describe},
        {NULL, NULL}};
    if (luaL_newmetatable(L, MF_LUA_FLOWREF)) {
        lua_newtable(L);
        lua_pushcfunction(L, mf_lua__push);
        lua_setfield(L, -2, "push");
        lua_pushcfunction(L, mf_lua__cancel);
        lua_setfield(L, -2, "cancel");
        lua_setfield(L, -2, "__index");
        lua_pushliteral(L, "moonflow.flowref");
        lua_setfield(L, -2, "__metatable");
    }
    lua_pop(L, 1);
    lua_newtable(L);
    mf_lua_register(L, funcs);
    return 1;
}
