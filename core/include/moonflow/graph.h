/*
 * moonflow/graph.h — graphs: tasks with explicit edges (a DAG), like Sogou
 * Workflow's WFGraphTask.
 *
 * A graph is a task holding N nodes. Each node is a series (one task, or
 * several run in order); an edge "after before, run after" holds a node
 * until every node it comes after is done. The graph is done when every
 * node is. Nodes whose predecessors are done start together, so a graph
 * is series and parallels with shapes they cannot express (a diamond, a
 * fan-out whose branches join in different places).
 *
 * Building: mf_graph_create with the node and edge counts (the graph's one
 * allocation: no memory per node or per run beyond it), mf_graph_push to
 * give nodes their tasks, mf_graph_add_edge, then mf_graph_seal, which
 * refuses a cycle and says where it is. Mistakes are refused by the call
 * that makes them, never at run time: an unknown node or a self edge
 * (MF_EINVAL), more edges than declared (MF_ENOSPC), a cycle (MF_ELOOP
 * from mf_graph_seal), a change after sealing (MF_EBUSY), a graph asked
 * for too big (MF_ERANGE from mf_graph_seal). Starting a graph that was
 * not sealed seals it first; one that cannot be sealed then ends
 * MF_STATE_TASK_ERROR with seal's code without running any node.
 *
 * A failed node (its series' state is not MF_STATE_SUCCESS: a task failed,
 * timed out or was canceled) skips its dependents by default: they and
 * their own dependents never run; their tasks are released without their
 * callbacks (as mf_series_cancel drops a series' rest) and their series end
 * MF_STATE_CANCELED / MF_ECANCELED, with mf_graph_node_skipped true and
 * mf_graph_skipped_by naming the failed node. Nodes not downstream of the
 * failure run on. mf_graph_set_run_after_failure(g, true) gives Workflow's
 * rule instead: dependents run anyway and read their predecessors' results
 * themselves. A parallel or a graph node never fails on its own (their
 * state is MF_STATE_SUCCESS, each branch keeping its own), as inside a
 * series.
 *
 * The graph's own state is MF_STATE_SUCCESS: each node keeps its result
 * until the graph's callback has run (mf_graph_series_at, mf_graph_node_*).
 * A timeout or cancel of the graph (mf_task_set_timeout, mf_task_cancel, an
 * enclosing parallel that gives up) cancels the running nodes' tasks and
 * skips every node not started yet; the graph completes once the running
 * ones have wound down, and nothing leaks.
 *
 * Completion never recurses: nodes that become ready are queued in the
 * graph and started by one loop, so a chain of 100,000 empty nodes uses
 * constant stack.
 *
 * Threads: loop thread only. Ownership: mf_graph_push hands the task to
 * the graph (it owns it from then on, as a series owns its tasks); the
 * graph belongs to the series it is pushed on, like any task, or to the
 * caller until then (mf_task_destroy(mf_graph_task(g)) releases an unstarted
 * graph and every task pushed into it). The node series are the graph's:
 * their context and callback argument are free for the user.
 */
#ifndef MOONFLOW_GRAPH_H
#define MOONFLOW_GRAPH_H

#include <stddef.h>

#include "series.h"

MF_EXTERN_C_BEGIN

typedef struct mf_graph mf_graph_t;

/* Runs when node index has ended (its series done, or skipped), before its
 * dependents are decided and, for a skipped node, before its tasks are
 * released; the graph is passed as its task's user pointer is. */
typedef void (*mf_graph_node_cb)(mf_graph_t *graph, size_t index);

/* A graph of nnodes nodes and up to nedges edges (at most 2^32 - 2 of
 * each; asked for more, it is made empty: push and add_edge refuse with
 * MF_EINVAL, seal with MF_ERANGE). The callback gets the graph's task:
 * mf_graph_from_task gives the graph back. */
MF_API mf_graph_t *mf_graph_create(mf_loop_t *loop, size_t nnodes,
                                   size_t nedges, mf_task_cb cb, void *user);
/* Appends task to node index's series. MF_EINVAL for an unknown node,
 * MF_EBUSY once sealed: the task then stays the caller's. */
MF_API int mf_graph_push(mf_graph_t *graph, size_t index, mf_task_t *task);
/* Node after runs once node before is done. MF_EINVAL for an unknown node
 * or before == after, MF_ENOSPC past nedges, MF_EBUSY once sealed. A
 * repeated edge counts once per call (harmless). */
MF_API int mf_graph_add_edge(mf_graph_t *graph, size_t before, size_t after);
/* Checks that the edges make no cycle and freezes the graph. MF_ELOOP on a
 * cycle, with *on_cycle (if not NULL) a node of it: mf_graph_cycle_next
 * walks it. 0 when sealed (again: 0). */
MF_API int mf_graph_seal(mf_graph_t *graph, size_t *on_cycle);
/* After MF_ELOOP: the node after index on the cycle found (index must be
 * on it); following it from *on_cycle comes back to *on_cycle. */
MF_API size_t mf_graph_cycle_next(const mf_graph_t *graph, size_t index);

/* false (the default): a failed node's dependents are skipped; true: they
 * run anyway (Workflow's rule). Before the graph starts. */
MF_API void mf_graph_set_run_after_failure(mf_graph_t *graph, bool run);
MF_API void mf_graph_set_node_callback(mf_graph_t *graph, mf_graph_node_cb cb);

MF_API size_t mf_graph_size(const mf_graph_t *graph);
/* Node index's series (state, error, context, finished count), or NULL. */
MF_API mf_series_t *mf_graph_series_at(const mf_graph_t *graph, size_t index);
/* Whether node index was skipped (a predecessor failed, or the graph was
 * canceled before it started). */
MF_API bool mf_graph_node_skipped(const mf_graph_t *graph, size_t index);
/* The failed node whose failure skipped node index (followed back to the
 * first failure); SIZE_MAX when it was not skipped for a failure. */
MF_API size_t mf_graph_skipped_by(const mf_graph_t *graph, size_t index);

MF_API mf_task_t *mf_graph_task(mf_graph_t *graph);
MF_API mf_graph_t *mf_graph_from_task(mf_task_t *task);
/* The graph a node series belongs to, or NULL. */
MF_API mf_graph_t *mf_series_graph(const mf_series_t *series);

MF_EXTERN_C_END

#endif /* MOONFLOW_GRAPH_H */
