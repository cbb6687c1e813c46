/*
 * lua/engine/mf_lua_graph.c — mf.graph: a DAG of flow steps described in Lua
 * and run as one C graph (core's mf_graph_*), waited on like any flow.
 *
 * mf.graph(nodes [, opts]) checks the description once, when it is made:
 * names are strings, each entry a step or {step, after = names}, every
 * `after` name a node of the graph, no cycle (found by the engine's own
 * mf_graph_seal on a graph with no task, named node by node). It returns
 * the steps in the order of their sorted names and a plan: a userdata
 * holding the checked edges, with the names as its environment, which Lua
 * code cannot alter, so the build at wait() never fails halfway and the
 * results' keys are the names checked.
 *
 * At wait() a graph step becomes an mf_graph_t. Each node is a series of
 * the graph: a series step's tasks go straight into it (one of them failing
 * fails the node), any other step is its one task. Results are filled by
 * index while the graph runs and keyed by name when it ends; a node skipped
 * because one it comes after failed gets {state = "skipped", error =
 * "skipped: 'NAME' failed"}.
 *
 * Owns: the plan userdata (Lua memory, its metatable "moonflow.graph_plan").
 * The graph's C task and its nodes belong to the flow (mf_lua_flow.h); the
 * node names live in the flow's state table (MF_LUA_FLOW_NAMES) until the
 * flow ends.
 */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include <moonflow/lua_arg.h>
#include <moonflow/graph.h>

#include "mf_lua_flow.h"

#define MF_LUA_GRAPH_PLAN "moonflow.graph_plan"
#define MF_LUA_GRAPH_MAX 100000 /* nodes, and edges */

/* The checked shape of a graph: edge k runs from edges[2k] to edges[2k+1]
 * (0-based node indices). */
typedef struct mf_lua_graph_plan {
    uint32_t nnodes;
    uint32_t nedges;
    bool run_after_failure;
    uint32_t edges[];
} mf_lua_graph_plan_t;

/* ---- describing: mf.graph(nodes [, opts]) ------------------------------ */

static int mf_lua__name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The names of the nodes table at 1, sorted, as a new list at the top;
 * returns their count. Raises on a key that is not a string. */
static int mf_lua__graph_names(lua_State *L)
{
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "mf.graph: node names are strings, got a %s key",
                       luaL_typename(L, -1));
        if (++n > MF_LUA_GRAPH_MAX)
            luaL_error(L, "mf.graph: more than %d nodes", MF_LUA_GRAPH_MAX);
    }
    const char **names = lua_newuserdata(L, (size_t)n * sizeof(*names) + 1);
    int i = 0;
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        lua_pop(L, 1);
        names[i++] = lua_tostring(L, -1); /* anchored by the nodes table */
    }
    qsort(names, (size_t)n, sizeof(*names), mf_lua__name_cmp);
    lua_createtable(L, n, 0);
    for (i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_remove(L, -2);
    return n;
}

/* Whether the value at idx is a flow step (a table with a string kind). */
static bool mf_lua__is_step(lua_State *L, int idx)
{
    if (lua_type(L, idx) != LUA_TTABLE)
        return false;
    lua_getfield(L, idx, "kind");
    bool step = lua_type(L, -1) == LUA_TSTRING;
    lua_pop(L, 1);
    return step;
}

/* Node `name`'s entry at e: a step, or {step, after = name | {names}}.
 * Pushes the step and its after list (nil when none). */
static void mf_lua__graph_entry(lua_State *L, int e, const char *name)
{
    if (mf_lua__is_step(L, e)) {
        lua_getfield(L, e, "after");
        if (!lua_isnil(L, -1))
            luaL_error(L,
                       "mf.graph: node '%s': a step has no after field: "
                       "write {step, after = {names}}",
                       name);
        lua_pushvalue(L, e);
        lua_replace(L, -2);
        lua_pushnil(L);
        return;
    }
    if (lua_type(L, e) == LUA_TTABLE) {
        lua_rawgeti(L, e, 1);
        lua_getfield(L, e, "after");
        lua_pushnil(L);
        while (lua_next(L, e)) {
            lua_pop(L, 1);
            bool known =
                (lua_type(L, -1) == LUA_TNUMBER && lua_tonumber(L, -1) == 1) ||
                (lua_type(L, -1) == LUA_TSTRING &&
                 strcmp(lua_tostring(L, -1), "after") == 0);
            if (!known) {
                lua_pushvalue(L, -1); /* tostring must not change the key */
                luaL_error(L, "mf.graph: node '%s': unknown field '%s'", name,
                           lua_tostring(L, -1) ? lua_tostring(L, -1) : "?");
            }
        }
        if (mf_lua__is_step(L, -2))
            return;
    }
    luaL_error(L,
               "mf.graph: node '%s': a step (mf.task.*, mf.series, "
               "mf.parallel, mf.graph) or {step, after = {names}} expected",
               name);
}

/* The node index of the name at idx in the name → index table at map, or
 * raises naming the node that comes after it. */
static uint32_t mf_lua__graph_pred(lua_State *L, int map, int idx,
                                   const char *node)
{
    if (lua_type(L, idx) != LUA_TSTRING)
        luaL_error(L, "mf.graph: node '%s': after lists node names, got a %s",
                   node, luaL_typename(L, idx));
    lua_pushvalue(L, idx);
    lua_rawget(L, map);
    if (lua_isnil(L, -1))
        luaL_error(L,
                   "mf.graph: node '%s' comes after '%s', which is not a node "
                   "of this graph",
                   node, lua_tostring(L, idx));
    uint32_t i = (uint32_t)lua_tointeger(L, -1) - 1;
    lua_pop(L, 1);
    return i;
}

/* Appends the edges into node `to` from its after list at a (a name or a
 * list of names) to the growing edge list at list (flat pairs). */
/* How many names the after value at a holds: 1 for a name, the length of
 * a list; anything else (a list with holes or other keys) raises. */
static int mf_lua__graph_after_count(lua_State *L, int a, const char *name)
{
    if (lua_type(L, a) == LUA_TSTRING)
        return 1;
    int count = -1, entries = 0;
    if (lua_type(L, a) == LUA_TTABLE) {
        count = (int)lua_objlen(L, a);
        for (lua_pushnil(L); lua_next(L, a); lua_pop(L, 1))
            entries++;
    }
    if (entries != count)
        luaL_error(L, "mf.graph: node '%s': after is a name or a list of them",
                   name);
    return count;
}

static void mf_lua__graph_after(lua_State *L, int list, int map, int a,
                                uint32_t to, const char *name)
{
    int count = mf_lua__graph_after_count(L, a, name);
    for (int k = 1; k <= count; k++) {
        if (lua_type(L, a) == LUA_TTABLE)
            lua_rawgeti(L, a, k);
        else
            lua_pushvalue(L, a);
        uint32_t from = mf_lua__graph_pred(L, map, lua_gettop(L), name);
        lua_pop(L, 1);
        if (from == to)
            luaL_error(L, "mf.graph: a cycle: %s -> %s", name, name);
        int len = (int)lua_objlen(L, list);
        lua_pushinteger(L, from);
        lua_rawseti(L, list, len + 1);
        lua_pushinteger(L, to);
        lua_rawseti(L, list, len + 2);
    }
}

/* Raises "a cycle: a -> b -> a" when the plan's edges make one, found by
 * the engine on a graph with no task. */
static void mf_lua__graph_acyclic(lua_State *L, int names,
                                  const mf_lua_graph_plan_t *plan)
{
    mf_loop_t *loop = mf_lua_host_loop(mf_lua_host_from_state(L));
    mf_graph_t *g =
        mf_graph_create(loop, plan->nnodes, plan->nedges, NULL, NULL);
    for (uint32_t k = 0; k < plan->nedges; k++)
        mf_graph_add_edge(g, plan->edges[2 * k], plan->edges[2 * k + 1]);
    size_t at = 0;
    if (mf_graph_seal(g, &at) == 0) {
        mf_task_destroy(mf_graph_task(g));
        return;
    }
    luaL_Buffer buf;
    luaL_buffinit(L, &buf);
    luaL_addstring(&buf, "mf.graph: a cycle: ");
    size_t i = at;
    do {
        lua_rawgeti(L, names, (int)i + 1);
        luaL_addvalue(&buf);
        luaL_addstring(&buf, " -> ");
        i = mf_graph_cycle_next(g, i);
    } while (i != at);
    lua_rawgeti(L, names, (int)i + 1);
    luaL_addvalue(&buf);
    mf_task_destroy(mf_graph_task(g));
    luaL_pushresult(&buf);
    lua_error(L);
}

/* opts: on_failure = "skip" (the default) or "run". */
static bool mf_lua__graph_opts(lua_State *L, int idx)
{
    if (lua_isnoneornil(L, idx))
        return false;
    mf_lua_check_type(L, idx, LUA_TTABLE);
    bool run = false;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const char *key =
            lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
        if (strcmp(key, "on_failure") != 0)
            luaL_error(L, "mf.graph: unknown option '%s'", key);
        const char *v = lua_tostring(L, -1);
        if (!v || (strcmp(v, "skip") != 0 && strcmp(v, "run") != 0))
            luaL_error(L, "mf.graph: on_failure is \"skip\" or \"run\"");
        run = strcmp(v, "run") == 0;
        lua_pop(L, 1);
    }
    return run;
}

/* Copies the flat edge list at list into a new plan, pushed. */
static mf_lua_graph_plan_t *mf_lua__graph_plan(lua_State *L, int list, int n,
                                               bool run)
{
    int flat = (int)lua_objlen(L, list);
    if (flat / 2 > MF_LUA_GRAPH_MAX)
        luaL_error(L, "mf.graph: more than %d edges", MF_LUA_GRAPH_MAX);
    mf_lua_graph_plan_t *plan =
        lua_newuserdata(L, sizeof(*plan) + (size_t)flat * sizeof(uint32_t));
    plan->nnodes = (uint32_t)n;
    plan->nedges = (uint32_t)(flat / 2);
    plan->run_after_failure = run;
    for (int k = 0; k < flat; k++) {
        lua_rawgeti(L, list, k + 1);
        plan->edges[k] = (uint32_t)lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    if (luaL_newmetatable(L, MF_LUA_GRAPH_PLAN)) {
        lua_pushliteral(L, MF_LUA_GRAPH_PLAN);
        lua_setfield(L, -2, "__metatable");
    }
    lua_setmetatable(L, -2);
    return plan;
}

int mf_lua_graph_describe(lua_State *L)
{
    mf_lua_check_type(L, 1, LUA_TTABLE);
    bool run = mf_lua__graph_opts(L, 2);
    lua_settop(L, 1);
    int n = mf_lua__graph_names(L); /* 2: names */
    lua_createtable(L, n, 3);       /* 3: the description */
    lua_createtable(L, 0, n);       /* 4: name → index */
    lua_newtable(L);                /* 5: edges, flat */
    for (int i = 1; i <= n; i++) {  /* the steps, and each name's index */
        lua_rawgeti(L, 2, i);
        const char *name = lua_tostring(L, -1); /* anchored by the names */
        lua_pushvalue(L, -1);
        lua_pushinteger(L, i);
        lua_rawset(L, 4);
        lua_rawget(L, 1);
        mf_lua__graph_entry(L, lua_gettop(L), name);
        lua_pop(L, 1);
        lua_rawseti(L, 3, i);
        lua_pop(L, 1);
    }
    for (int i = 1; i <= n; i++) { /* then the edges, every name known */
        lua_rawgeti(L, 2, i);
        const char *name = lua_tostring(L, -1);
        lua_rawget(L, 1);
        mf_lua__graph_entry(L, lua_gettop(L), name);
        if (!lua_isnil(L, -1))
            mf_lua__graph_after(L, 5, 4, lua_gettop(L), (uint32_t)i - 1, name);
        lua_pop(L, 3);
    }
    mf_lua_graph_plan_t *plan = mf_lua__graph_plan(L, 5, n, run);
    mf_lua__graph_acyclic(L, 2, plan);
    /* The names live with the plan, out of the script's reach (a name
     * changed or removed would break the results' keys at the end). */
    lua_pushvalue(L, 2);
    lua_setfenv(L, -2);
    lua_setfield(L, 3, "plan");
    lua_pushvalue(L, 3);
    return 1;
}

/* ---- building at wait() ------------------------------------------------- */

void mf_lua_graph_check(lua_State *L, int d)
{
    lua_getfield(L, d, "plan");
    const mf_lua_graph_plan_t *plan = luaL_testudata(L, -1, MF_LUA_GRAPH_PLAN);
    if (!plan || plan->nnodes != lua_objlen(L, d))
        luaL_error(L, "not a graph made by mf.graph (its steps were changed)");
    lua_pop(L, 1);
}

/* Results by name once the graph is done: t[name] = t[i]. */
static void mf_lua__graph_name_results(lua_State *L, int st,
                                       const mf_lua_node_t *gn)
{
    mf_lua_flow_push_slot(L, st, gn->slot);
    lua_rawgeti(L, st, MF_LUA_FLOW_NAMES);
    lua_rawgeti(L, -1, gn->slot);
    int t = lua_gettop(L) - 2, names = t + 2;
    int n = (int)lua_objlen(L, names);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, names, i);
        lua_rawgeti(L, t, i);
        lua_rawset(L, t);
        lua_pushnil(L);
        lua_rawseti(L, t, i);
    }
    lua_pop(L, 3);
}

static void mf_lua__graph_done(mf_task_t *task)
{
    mf_lua_node_t *gn = task->user;
    mf_lua_flow_t *flow = gn->flow;
    mf_lua_flow_step_report(gn);
    if (!flow->co || flow->failed)
        return;
    lua_State *L = mf_lua_host_state(flow->host);
    lua_rawgeti(L, LUA_REGISTRYINDEX, flow->ref);
    mf_lua__graph_name_results(L, lua_gettop(L), gn);
    lua_pop(L, 1);
}

/* A skipped node's result: {state = "skipped", error = why}. */
static void mf_lua__graph_skipped_result(lua_State *L, mf_graph_t *g,
                                         size_t index, const mf_lua_node_t *gn)
{
    mf_lua_flow_t *flow = gn->flow;
    lua_rawgeti(L, LUA_REGISTRYINDEX, flow->ref);
    int st = lua_gettop(L);
    mf_lua_flow_push_slot(L, st, gn->slot);
    lua_createtable(L, 0, 2);
    lua_pushliteral(L, "skipped");
    lua_setfield(L, -2, "state");
    size_t by = mf_graph_skipped_by(g, index);
    if (by == SIZE_MAX) {
        lua_pushliteral(L, "skipped: the graph was canceled");
    } else {
        lua_rawgeti(L, st, MF_LUA_FLOW_NAMES);
        lua_rawgeti(L, -1, gn->slot);
        lua_rawgeti(L, -1, (int)by + 1);
        lua_pushfstring(L, "skipped: '%s' failed", lua_tostring(L, -1));
        lua_replace(L, -4);
        lua_pop(L, 2);
    }
    lua_setfield(L, -2, "error");
    lua_rawseti(L, -2, (int)index + 1);
    lua_settop(L, st - 1);
}

/* A node of the graph has ended. Its series is gone; if it was skipped,
 * its tasks are about to be released unrun: the flow forgets them. */
static void mf_lua__graph_node_ended(mf_graph_t *g, size_t index)
{
    mf_lua_node_t *gn = mf_graph_task(g)->user;
    mf_lua_node_t *cn = mf_series_context(mf_graph_series_at(g, index));
    cn->series = NULL;
    if (!mf_graph_node_skipped(g, index))
        return;
    mf_list_t *pos;
    mf_list_foreach(pos, &gn->flow->nodes)
    {
        mf_lua_node_t *n = mf_container_of(pos, mf_lua_node_t, link);
        if (n != cn && mf_lua_flow_node_within(n, cn)) {
            n->task = NULL;
            n->series = NULL;
        }
    }
    if (gn->flow->co && !gn->flow->failed)
        mf_lua__graph_skipped_result(mf_lua_host_state(gn->flow->host), g,
                                     index, gn);
}

/* Keeps the names for the results: state[NAMES][slot] = the plan's names
 * (its environment table). */
static void mf_lua__graph_keep_names(mf_lua_build_t *b, int d, int slot)
{
    lua_State *L = b->L;
    lua_rawgeti(L, b->st, MF_LUA_FLOW_NAMES);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_rawseti(L, b->st, MF_LUA_FLOW_NAMES);
    }
    lua_getfield(L, d, "plan"); /* checked by mf_lua_graph_check */
    lua_getfenv(L, -1);
    lua_rawseti(L, -3, slot);
    lua_pop(L, 2);
}

/* Node i (0-based) from step s: a series' tasks go into the node's own
 * series (their array is the node's result), another step is its task. */
static void mf_lua__graph_node(mf_lua_build_t *b, int s, mf_graph_t *g,
                               mf_lua_node_t *gn, int i)
{
    lua_State *L = b->L;
    const mf_lua_kind_t *kind;
    bool series = mf_lua_desc_step(L, s, &kind) == MF_LUA_STEP_SERIES;
    mf_lua_node_t *cn = mf_lua_flow_node_new(b, NULL, gn, series ? gn->slot : 0,
                                             series ? i + 1 : 0, false);
    cn->series = mf_graph_series_at(g, (size_t)i);
    mf_series_set_context(cn->series, cn);
    if (!series) {
        mf_graph_push(g, (size_t)i,
                      mf_lua_flow_build_task(b, s, cn, gn->slot, i + 1));
        return;
    }
    int count = (int)lua_objlen(L, s);
    for (int k = 1; k <= count; k++) {
        lua_rawgeti(L, s, k);
        mf_graph_push(
            g, (size_t)i,
            mf_lua_flow_build_task(b, lua_gettop(L), cn, cn->slot, 0));
        lua_pop(L, 1);
    }
}

mf_task_t *mf_lua_graph_build(mf_lua_build_t *b, int d, mf_lua_node_t *owner,
                              int parent, int pos)
{
    lua_State *L = b->L;
    lua_getfield(L, d, "plan");
    const mf_lua_graph_plan_t *plan = lua_touserdata(L, -1);
    lua_pop(L, 1); /* d anchors it */
    mf_lua_node_t *gn =
        mf_lua_flow_node_new(b, NULL, owner, parent, pos, false);
    mf_graph_t *g = mf_graph_create(b->flow->loop, plan->nnodes, plan->nedges,
                                    mf_lua__graph_done, gn);
    mf_graph_set_node_callback(g, mf_lua__graph_node_ended);
    mf_graph_set_run_after_failure(g, plan->run_after_failure);
    mf_lua__graph_keep_names(b, d, gn->slot);
    for (uint32_t i = 0; i < plan->nnodes; i++) {
        lua_rawgeti(L, d, (int)i + 1);
        mf_lua__graph_node(b, lua_gettop(L), g, gn, (int)i);
        lua_pop(L, 1);
    }
    for (uint32_t k = 0; k < plan->nedges; k++)
        mf_graph_add_edge(g, plan->edges[2 * k], plan->edges[2 * k + 1]);
    mf_graph_seal(g, NULL); /* checked by mf.graph: acyclic */
    return mf_graph_task(g);
}
