/*
 * graph.c — a task that runs series along the edges of a DAG.
 *
 * Owns the graph's one allocation: the header, the nodes (each embedding
 * its series, so a node costs no allocation of its own) and the edges (a
 * list of successors per node, threaded through the edge array). The
 * graph keeps every node's series until it is destroyed, after its
 * callback, as a parallel keeps its branches.
 *
 * Nodes that become ready (their last predecessor done) are queued in the
 * graph and started by one drain loop; a node that ends inside it (an empty
 * one, a skipped one) only queues its dependents, so completion never nests
 * on the stack. The graph completes at the end of the outermost drain,
 * after which it is not touched: completing may release it.
 *
 * May call: the series internals (flow_int.h) and the loop's allocator.
 */
#include <stdint.h>

#include "flow_int.h"
#include "loop_int.h"
#include "moonflow/graph.h"

#define MF_GRAPH_NONE UINT32_MAX

typedef enum {
    MF_GRAPH_WAITING, /* predecessors not all done */
    MF_GRAPH_RUNNING, /* its series runs */
    MF_GRAPH_ENDED
} mf_graph_phase_t;

/* Colours of the depth-first search that looks for a cycle. */
enum { MF_GRAPH_WHITE, MF_GRAPH_GREY, MF_GRAPH_BLACK };

typedef struct mf_graph_node {
    mf_series_t series;  /* first: a node's series is the node */
    uint32_t first_edge; /* its successors, through edges[].next */
    uint32_t npred;      /* edges into it */
    uint32_t waiting;    /* predecessors not done yet (while running) */
    uint32_t next_ready; /* the ready queue's link */
    uint32_t skipped_by; /* the failed node that skipped it */
    uint32_t dfs_parent; /* sealing: the node the search came from */
    uint32_t dfs_edge;   /* sealing: the next edge to follow */
    uint32_t cycle_next; /* after a cycle was found: the next on it */
    uint8_t phase;
    uint8_t colour;
    bool blocked; /* skip it when ready: a predecessor failed */
    bool skipped;
} mf_graph_node_t;

typedef struct mf_graph_edge {
    uint32_t to;
    uint32_t next; /* the next successor of the same node */
} mf_graph_edge_t;

struct mf_graph {
    mf_task_t task; /* first: a graph is a task */
    mf_graph_node_cb node_cb;
    mf_graph_edge_t *edges; /* inside the allocation, after the nodes */
    size_t bytes;           /* the allocation's size */
    uint32_t nnodes;
    uint32_t nedges;
    uint32_t edge_cap;
    uint32_t nleft; /* nodes not ended */
    uint32_t ready_head, ready_tail;
    bool too_big; /* asked for more than 2^32 - 2 nodes or edges */
    bool sealed;
    bool draining;
    bool canceled;
    bool run_after_failure;
    mf_graph_node_t nodes[];
};

static uint32_t mf__graph_index(const mf_graph_t *g, const mf_graph_node_t *n)
{
    return (uint32_t)(n - g->nodes);
}

/* ---- running ------------------------------------------------------------ */

static void mf__graph_push_ready(mf_graph_t *g, uint32_t i)
{
    g->nodes[i].next_ready = MF_GRAPH_NONE;
    if (g->ready_tail == MF_GRAPH_NONE)
        g->ready_head = i;
    else
        g->nodes[g->ready_tail].next_ready = i;
    g->ready_tail = i;
}

static uint32_t mf__graph_pop_ready(mf_graph_t *g)
{
    uint32_t i = g->ready_head;
    if (i != MF_GRAPH_NONE) {
        g->ready_head = g->nodes[i].next_ready;
        if (g->ready_head == MF_GRAPH_NONE)
            g->ready_tail = MF_GRAPH_NONE;
    }
    return i;
}

/* Whether node n's end keeps its dependents from running. */
static bool mf__graph_blocks(const mf_graph_t *g, const mf_graph_node_t *n)
{
    if (g->canceled)
        return true;
    return n->series.state != MF_STATE_SUCCESS && !g->run_after_failure;
}

/* Node n has ended: its callback, then its dependents learn of it. */
static void mf__graph_node_ended(mf_graph_t *g, mf_graph_node_t *n)
{
    uint32_t index = mf__graph_index(g, n);
    n->phase = MF_GRAPH_ENDED;
    if (g->node_cb)
        g->node_cb(g, index);
    if (n->skipped)
        mf__series_close(&n->series); /* its tasks never ran */
    bool blocks = mf__graph_blocks(g, n);
    uint32_t cause = n->skipped ? n->skipped_by : index;
    for (uint32_t e = n->first_edge; e != MF_GRAPH_NONE; e = g->edges[e].next) {
        mf_graph_node_t *succ = &g->nodes[g->edges[e].to];
        if (blocks && !succ->blocked) {
            succ->blocked = true;
            succ->skipped_by = g->canceled ? MF_GRAPH_NONE : cause;
        }
        if (--succ->waiting == 0)
            mf__graph_push_ready(g, g->edges[e].to);
    }
    g->nleft--;
}

static void mf__graph_skip(mf_graph_t *g, mf_graph_node_t *n)
{
    n->skipped = true;
    n->series.canceled = true;
    n->series.state = MF_STATE_CANCELED;
    n->series.error = MF_ECANCELED;
    mf__graph_node_ended(g, n);
}

static void mf__graph_start(mf_graph_t *g, mf_graph_node_t *n)
{
    if (n->blocked || g->canceled) {
        mf__graph_skip(g, n);
        return;
    }
    n->phase = MF_GRAPH_RUNNING;
    mf__series_advance(&n->series);
}

/* Starts the ready nodes until none is left. Nodes ending inside (empty,
 * skipped) queue their dependents for this same loop. The outermost drain
 * completes the graph when every node has ended, and then returns at once:
 * the completion may have released the graph. */
static void mf__graph_drain(mf_graph_t *g)
{
    if (g->draining)
        return;
    g->draining = true;
    uint32_t i;
    while ((i = mf__graph_pop_ready(g)) != MF_GRAPH_NONE)
        mf__graph_start(g, &g->nodes[i]);
    g->draining = false;
    if (g->nleft == 0)
        mf_task_complete(&g->task, MF_STATE_SUCCESS, 0);
}

/* A node's series has finished. */
static void mf__graph_series_done(mf_task_t *task, mf_series_t *series)
{
    mf_graph_t *g = (mf_graph_t *)task;
    mf__graph_node_ended(g, (mf_graph_node_t *)series);
    mf__graph_drain(g);
}

static const mf_series_parent_ops_t mf__graph_parent_ops = {
    mf__graph_series_done};

static void mf__graph_dispatch(mf_task_t *task)
{
    mf_graph_t *g = (mf_graph_t *)task;
    int rc = g->sealed ? 0 : mf_graph_seal(g, NULL);
    if (rc) { /* MF_ELOOP, or MF_ERANGE for a graph too big to make */
        mf_task_complete(task, MF_STATE_TASK_ERROR, rc);
        return;
    }
    g->nleft = g->nnodes;
    for (uint32_t i = 0; i < g->nnodes; i++) {
        g->nodes[i].waiting = g->nodes[i].npred;
        if (g->nodes[i].npred == 0)
            mf__graph_push_ready(g, i);
    }
    mf__graph_drain(g); /* completes at once when there is no node */
}

/* Timeout or cancel: the running nodes stop, those not started are skipped
 * as they come due; the graph completes when the last has wound down. */
static void mf__graph_cancel(mf_task_t *task)
{
    mf_graph_t *g = (mf_graph_t *)task;
    g->canceled = true;
    for (uint32_t i = 0; i < g->nnodes; i++)
        if (g->nodes[i].phase == MF_GRAPH_RUNNING)
            mf__series_abort(&g->nodes[i].series);
}

static void mf__graph_destroy(mf_task_t *task)
{
    mf_graph_t *g = (mf_graph_t *)task;
    for (uint32_t i = 0; i < g->nnodes; i++)
        mf__series_close(&g->nodes[i].series);
    mf_loop_free(task->_loop, g, g->bytes);
}

static const mf_task_ops_t mf__graph_ops = {
    "graph", mf__graph_dispatch, mf__graph_cancel, mf__graph_destroy};

/* ---- building ----------------------------------------------------------- */

mf_graph_t *mf_graph_create(mf_loop_t *loop, size_t nnodes, size_t nedges,
                            mf_task_cb cb, void *user)
{
    bool too_big = nnodes >= MF_GRAPH_NONE || nedges >= MF_GRAPH_NONE;
    if (too_big)
        nnodes = nedges = 0;
    size_t bytes = sizeof(mf_graph_t) + nnodes * sizeof(mf_graph_node_t) +
                   nedges * sizeof(mf_graph_edge_t);
    mf_graph_t *g = mf_loop_alloc(loop, bytes);
    mf_task_init(&g->task, &mf__graph_ops, loop, cb, user);
    g->node_cb = NULL;
    g->edges = (mf_graph_edge_t *)(void *)(g->nodes + nnodes);
    g->bytes = bytes;
    g->nnodes = (uint32_t)nnodes;
    g->nedges = 0;
    g->edge_cap = (uint32_t)nedges;
    g->nleft = 0;
    g->ready_head = g->ready_tail = MF_GRAPH_NONE;
    g->too_big = too_big;
    g->sealed = g->draining = g->canceled = g->run_after_failure = false;
    for (uint32_t i = 0; i < g->nnodes; i++) {
        mf_graph_node_t *n = &g->nodes[i];
        mf__series_init(&n->series, loop, NULL);
        n->series.parent_ops = &mf__graph_parent_ops;
        n->series.parent = &g->task;
        n->first_edge = MF_GRAPH_NONE;
        n->npred = n->waiting = 0;
        n->next_ready = n->skipped_by = MF_GRAPH_NONE;
        n->dfs_parent = n->dfs_edge = n->cycle_next = MF_GRAPH_NONE;
        n->phase = MF_GRAPH_WAITING;
        n->colour = MF_GRAPH_WHITE;
        n->blocked = n->skipped = false;
    }
    return g;
}

int mf_graph_push(mf_graph_t *g, size_t index, mf_task_t *task)
{
    if (index >= g->nnodes)
        return MF_EINVAL;
    if (g->sealed)
        return MF_EBUSY;
    mf_series_push_back(&g->nodes[index].series, task);
    return 0;
}

int mf_graph_add_edge(mf_graph_t *g, size_t before, size_t after)
{
    if (before >= g->nnodes || after >= g->nnodes || before == after)
        return MF_EINVAL;
    if (g->sealed)
        return MF_EBUSY;
    if (g->nedges == g->edge_cap)
        return MF_ENOSPC;
    uint32_t e = g->nedges++;
    g->edges[e].to = (uint32_t)after;
    g->edges[e].next = g->nodes[before].first_edge;
    g->nodes[before].first_edge = e;
    g->nodes[after].npred++;
    return 0;
}

/* A grey node met again closes a cycle: from `to` down the search path to
 * `from`, then back to `to`. Records it for mf_graph_cycle_next. */
static void mf__graph_record_cycle(mf_graph_t *g, uint32_t from, uint32_t to)
{
    g->nodes[from].cycle_next = to;
    for (uint32_t i = from; i != to; i = g->nodes[i].dfs_parent)
        g->nodes[g->nodes[i].dfs_parent].cycle_next = i;
}

/* Depth-first from root without recursion (the path is kept in the nodes'
 * dfs_parent); returns a node of a cycle, or MF_GRAPH_NONE. */
static uint32_t mf__graph_search(mf_graph_t *g, uint32_t root)
{
    uint32_t cur = root;
    g->nodes[root].colour = MF_GRAPH_GREY;
    g->nodes[root].dfs_edge = g->nodes[root].first_edge;
    while (cur != MF_GRAPH_NONE) {
        mf_graph_node_t *n = &g->nodes[cur];
        uint32_t e = n->dfs_edge;
        if (e == MF_GRAPH_NONE) {
            n->colour = MF_GRAPH_BLACK;
            cur = n->dfs_parent;
            continue;
        }
        n->dfs_edge = g->edges[e].next;
        uint32_t to = g->edges[e].to;
        mf_graph_node_t *t = &g->nodes[to];
        if (t->colour == MF_GRAPH_GREY) {
            mf__graph_record_cycle(g, cur, to);
            return to;
        }
        if (t->colour == MF_GRAPH_WHITE) {
            t->colour = MF_GRAPH_GREY;
            t->dfs_parent = cur;
            t->dfs_edge = t->first_edge;
            cur = to;
        }
    }
    return MF_GRAPH_NONE;
}

int mf_graph_seal(mf_graph_t *g, size_t *on_cycle)
{
    if (g->too_big)
        return MF_ERANGE;
    if (g->sealed)
        return 0;
    for (uint32_t i = 0; i < g->nnodes; i++) {
        g->nodes[i].colour = MF_GRAPH_WHITE;
        g->nodes[i].dfs_parent = MF_GRAPH_NONE;
    }
    for (uint32_t i = 0; i < g->nnodes; i++) {
        if (g->nodes[i].colour != MF_GRAPH_WHITE)
            continue;
        uint32_t c = mf__graph_search(g, i);
        if (c != MF_GRAPH_NONE) {
            if (on_cycle)
                *on_cycle = c;
            return MF_ELOOP;
        }
    }
    g->sealed = true;
    return 0;
}

size_t mf_graph_cycle_next(const mf_graph_t *g, size_t index)
{
    return index < g->nnodes && g->nodes[index].cycle_next != MF_GRAPH_NONE
               ? g->nodes[index].cycle_next
               : SIZE_MAX;
}

/* ---- options and results ------------------------------------------------ */

void mf_graph_set_run_after_failure(mf_graph_t *g, bool run)
{
    g->run_after_failure = run;
}

void mf_graph_set_node_callback(mf_graph_t *g, mf_graph_node_cb cb)
{
    g->node_cb = cb;
}

size_t mf_graph_size(const mf_graph_t *g)
{
    return g->nnodes;
}

mf_series_t *mf_graph_series_at(const mf_graph_t *g, size_t index)
{
    return index < g->nnodes ? (mf_series_t *)&g->nodes[index].series : NULL;
}

bool mf_graph_node_skipped(const mf_graph_t *g, size_t index)
{
    return index < g->nnodes && g->nodes[index].skipped;
}

size_t mf_graph_skipped_by(const mf_graph_t *g, size_t index)
{
    if (index >= g->nnodes || !g->nodes[index].skipped ||
        g->nodes[index].skipped_by == MF_GRAPH_NONE)
        return SIZE_MAX;
    return g->nodes[index].skipped_by;
}

mf_task_t *mf_graph_task(mf_graph_t *g)
{
    return &g->task;
}

mf_graph_t *mf_graph_from_task(mf_task_t *task)
{
    return task->_ops == &mf__graph_ops ? (mf_graph_t *)task : NULL;
}

mf_graph_t *mf_series_graph(const mf_series_t *series)
{
    return series->parent_ops == &mf__graph_parent_ops
               ? (mf_graph_t *)series->parent
               : NULL;
}
