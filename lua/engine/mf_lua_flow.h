/*
 * lua/engine/mf_lua_flow.h — what the flow builder (mf_lua_flow.c) shares with
 * the structures built beside it (mf_lua_graph.c): the flow record, its nodes,
 * the build in progress and the few steps a structure needs to place its
 * children. Internal to lua/.
 *
 * Ownership is mf_lua_flow.c's (see there): a structure allocates its
 * nodes with mf_lua_flow_node_new, which links them into the flow, and the
 * flow frees them all when its root series completes.
 */
#ifndef MF_LUA_FLOW_H
#define MF_LUA_FLOW_H

#include "host/mf_lua_leaf.h"

#define MF_LUA_FLOWREF "moonflow.flowref"

/* The fields of the state table. */
enum {
    MF_LUA_FLOW_RESULTS = 1,   /* slot -> result table */
    MF_LUA_FLOW_CALLBACKS = 2, /* slot -> the node's callback */
    MF_LUA_FLOW_ERROR = 3,     /* the message of a callback that raised */
    MF_LUA_FLOW_NAMES = 4      /* graph slot -> its node names (graphs) */
};

typedef struct mf_lua_flow mf_lua_flow_t;
typedef struct mf_lua_node mf_lua_node_t;

/* A series, a parallel, a graph or a task of the flow. */
struct mf_lua_node {
    mf_list_t link; /* flow->nodes */
    mf_lua_flow_t *flow;
    mf_task_t *task;           /* task: until its callback has run */
    mf_series_t *series;       /* series node: until its callback has run */
    mf_lua_node_t *owner;      /* the series or parallel node it runs in */
    const mf_lua_kind_t *kind; /* task: its kind; NULL otherwise */
    int slot;                  /* its result table: state[1][slot]; 0: lean */
    int parent, pos;           /* lean task: its place, state[1][parent][pos] */
    bool has_cb;
    bool canceled;    /* by flow:cancel(): no callback, no more pushes */
    unsigned step;    /* a top-level step's index (step observer); 0: not */
    MF_LUA_LEAF_DATA; /* task: kind->data_size bytes */
};

struct mf_lua_flow {
    mf_loop_t *loop;
    mf_lua_host_t *host; /* NULL once detached: the host may be gone */
    mf_lua_co_t *co;     /* the waiting coroutine; NULL once detached */
    int ref;             /* the state table; LUA_NOREF once released */
    int nslots;
    int root_slot;
    bool unwrap; /* a lone task or parallel: return results[root][1] */
    bool failed; /* a callback raised */
    bool lean;   /* the waiter's lean results (its hooks' lean, at the wait) */
    mf_list_t nodes;
    mf_lua_step_fn step_fn; /* the waiter's step observer, or NULL */
    void *step_ud;
};

/* A build runs on one thread with the state table at index st. */
typedef struct mf_lua_build {
    lua_State *L;
    mf_lua_flow_t *flow;
    int st;
    unsigned step; /* the top-level step the next node is (then 0) */
} mf_lua_build_t;

/* mf_lua_flow.c */

/* A node; kind NULL: a structure. Its result table goes in results[parent]
 * at pos (appended when pos is 0; parent 0: not placed). A lean task
 * (lean) gets no table of its own, a place in its parent's. */
mf_lua_node_t *mf_lua_flow_node_new(mf_lua_build_t *b,
                                    const mf_lua_kind_t *kind,
                                    mf_lua_node_t *owner, int parent, int pos,
                                    bool lean);
/* The C task of the step described at d (a task, series, parallel or
 * graph), its result placed as mf_lua_flow_node_new places it. */
mf_task_t *mf_lua_flow_build_task(mf_lua_build_t *b, int d,
                                  mf_lua_node_t *owner, int parent, int pos);
/* Pushes results[slot] of the state table at st. */
void mf_lua_flow_push_slot(lua_State *L, int st, int slot);
/* Tells the waiter's step observer that top-level step n ended. */
void mf_lua_flow_step_report(const mf_lua_node_t *n);
/* Whether node n runs inside structure node s (or is s). */
bool mf_lua_flow_node_within(const mf_lua_node_t *n, const mf_lua_node_t *s);

/* mf_lua_graph.c */

/* Raises unless the graph description at d is as mf.graph made it. */
void mf_lua_graph_check(lua_State *L, int d);
/* The C graph of the graph description at d (checked by graph()). */
mf_task_t *mf_lua_graph_build(mf_lua_build_t *b, int d, mf_lua_node_t *owner,
                              int parent, int pos);
/* graph(nodes [, opts]) -> the graph description's fields, checked: the
 * steps in order, names, edges; raises on a bad name, step or cycle. */
int mf_lua_graph_describe(lua_State *L);

/* moonflow.flow: wait, push (mf_lua_flow.c). */
int mf_lua_open_flow(lua_State *L);

#endif /* MF_LUA_FLOW_H */
