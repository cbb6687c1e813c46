#include <stdint.h>

#include <moonflow/moonflow.h>

#include "test.h"

/* Each timed node is a series: an empty task whose callback notes when the
 * node started, then a timer whose callback notes when it ended (loop
 * time, in ms). */
typedef struct span {
    uint64_t start, end;
    int state; /* the timer's */
    int ran;   /* callbacks run */
} span_t;

static void on_start(mf_task_t *task)
{
    span_t *s = task->user;
    s->start = mf_loop_now(mf_task_loop(task));
    s->ran++;
}

static void on_end(mf_task_t *task)
{
    span_t *s = task->user;
    s->end = mf_loop_now(mf_task_loop(task));
    s->state = mf_task_state(task);
    s->ran++;
}

/* Node i: started, then a timer of ms (a timeout of fail_ms when not 0). */
static void timed_node(mf_graph_t *g, size_t i, uint64_t ms, uint32_t fail_ms,
                       span_t *s)
{
    mf_loop_t *loop = mf_task_loop(mf_graph_task(g));
    ASSERT_EQ(mf_graph_push(g, i, mf_task_empty_create(loop, on_start, s)), 0);
    mf_task_t *t = mf_task_timer_create(loop, ms, on_end, s);
    if (fail_ms)
        mf_task_set_timeout(t, fail_ms);
    ASSERT_EQ(mf_graph_push(g, i, t), 0);
}

typedef struct edge {
    size_t before, after;
} edge_t;

/* Node i timed ms[i] (failing at fail_ms[i] when not 0), then the edges. */
static void shape(mf_graph_t *g, span_t *s, const uint64_t *ms,
                  const uint32_t *fail_ms, const edge_t *edges, size_t nedges)
{
    for (size_t i = 0; i < mf_graph_size(g); i++)
        timed_node(g, i, ms[i], fail_ms ? fail_ms[i] : 0, &s[i]);
    for (size_t k = 0; k < nedges; k++)
        ASSERT_EQ(mf_graph_add_edge(g, edges[k].before, edges[k].after), 0);
}

static int graph_done;
static int graph_state;

static void on_graph(mf_task_t *task)
{
    graph_done++;
    graph_state = mf_task_state(task);
}

static bool overlap(const span_t *a, const span_t *b)
{
    return a->start < b->end && b->start < a->end;
}

TEST(diamond_runs_b_and_c_side_by_side_after_a_and_d_after_both)
{
    enum { A, B, C, D };
    span_t s[4] = {{0}};
    mf_loop_t *loop = mf_loop_create();
    graph_done = 0;
    mf_graph_t *g = mf_graph_create(loop, 4, 4, on_graph, NULL);
    static const edge_t edges[] = {{A, B}, {A, C}, {B, D}, {C, D}};
    shape(g, s, (const uint64_t[]){10, 40, 30, 10}, NULL, edges, 4);
    ASSERT_EQ(mf_graph_seal(g, NULL), 0);
    mf_task_start(mf_graph_task(g));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(graph_done, 1);
    ASSERT_EQ(graph_state, MF_STATE_SUCCESS);
    for (int i = 0; i < 4; i++)
        ASSERT_EQ(s[i].ran, 2);
    ASSERT(s[B].start >= s[A].end && s[C].start >= s[A].end);
    ASSERT(overlap(&s[B], &s[C]));
    ASSERT(s[D].start >= s[B].end && s[D].start >= s[C].end);
    mf_loop_destroy(loop);
}

static size_t fan_order[8];
static size_t fan_ended;

static void on_fan_node(mf_graph_t *g, size_t index)
{
    ASSERT(!mf_graph_node_skipped(g, index));
    fan_order[fan_ended++] = index;
}

TEST(fan_out_then_fan_in_overlaps_the_branches_and_joins_after_all)
{
    enum { ROOT = 0, JOIN = 6, N = 7 };
    span_t s[N] = {{0}};
    mf_loop_t *loop = mf_loop_create();
    fan_ended = 0;
    mf_graph_t *g = mf_graph_create(loop, N, 10, on_graph, NULL);
    mf_graph_set_node_callback(g, on_fan_node);
    timed_node(g, ROOT, 5, 0, &s[ROOT]);
    for (size_t i = 1; i < JOIN; i++) {
        timed_node(g, i, 10 + 5 * (JOIN - i), 0, &s[i]);
        ASSERT_EQ(mf_graph_add_edge(g, ROOT, i), 0);
        ASSERT_EQ(mf_graph_add_edge(g, i, JOIN), 0);
    }
    timed_node(g, JOIN, 1, 0, &s[JOIN]);
    mf_task_start(mf_graph_task(g)); /* sealed by the start */
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(fan_ended, N);
    ASSERT_EQ(fan_order[0], ROOT);
    ASSERT_EQ(fan_order[N - 1], JOIN);
    /* the shortest branch (the last) ends first */
    ASSERT_EQ(fan_order[1], JOIN - 1);
    for (size_t i = 1; i < JOIN; i++) {
        ASSERT(s[i].start >= s[ROOT].end);
        ASSERT(s[JOIN].start >= s[i].end);
        for (size_t j = i + 1; j < JOIN; j++)
            ASSERT(overlap(&s[i], &s[j]));
    }
    mf_loop_destroy(loop);
}

static size_t skipped_nodes, skipped_cause;

static void on_failure_node(mf_graph_t *g, size_t index)
{
    if (mf_graph_node_skipped(g, index)) {
        skipped_nodes++;
        skipped_cause = mf_graph_skipped_by(g, index);
        ASSERT_EQ(mf_series_state(mf_graph_series_at(g, index)),
                  MF_STATE_CANCELED);
    }
}

/* a (fails) → b → c, a → e; d alone. */
static void failing_graph(mf_loop_t *loop, span_t *s, bool run)
{
    enum { A, B, C, D, E };
    skipped_nodes = 0;
    skipped_cause = SIZE_MAX;
    graph_done = 0;
    mf_graph_t *g = mf_graph_create(loop, 5, 3, on_graph, NULL);
    mf_graph_set_node_callback(g, on_failure_node);
    mf_graph_set_run_after_failure(g, run);
    static const edge_t edges[] = {{A, B}, {B, C}, {A, E}};
    shape(g, s, (const uint64_t[]){50, 1, 1, 20, 1},
          (const uint32_t[]){5, 0, 0, 0, 0}, edges, 3);
    mf_task_start(mf_graph_task(g));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(graph_done, 1);
    ASSERT_EQ(graph_state, MF_STATE_SUCCESS);
    ASSERT_EQ(s[A].state, MF_STATE_TIMEOUT);
    ASSERT_EQ(s[D].state, MF_STATE_SUCCESS);
}

TEST(a_failed_node_skips_its_dependents_and_the_rest_runs_on)
{
    span_t s[5] = {{0}};
    mf_loop_t *loop = mf_loop_create();
    failing_graph(loop, s, false);
    ASSERT_EQ(skipped_nodes, 3); /* b, c through b, e */
    ASSERT_EQ(skipped_cause, 0); /* each names a, the first failure */
    ASSERT_EQ(s[1].ran + s[2].ran + s[4].ran, 0); /* no callback ran */
    ASSERT_EQ(s[3].ran, 2);
    mf_loop_destroy(loop);
}

TEST(run_after_failure_runs_the_dependents_anyway)
{
    span_t s[5] = {{0}};
    mf_loop_t *loop = mf_loop_create();
    failing_graph(loop, s, true);
    ASSERT_EQ(skipped_nodes, 0);
    for (int i = 0; i < 5; i++)
        ASSERT_EQ(s[i].ran, 2);
    ASSERT(s[1].start >= s[0].end && s[2].start >= s[1].end);
    mf_loop_destroy(loop);
}

TEST(a_cycle_is_refused_when_sealed_and_named_node_by_node)
{
    mf_loop_t *loop = mf_loop_create();
    /* 0 → 1 → 2 → 3 → 1, and 0 → 4 */
    mf_graph_t *g = mf_graph_create(loop, 5, 5, NULL, NULL);
    ASSERT_EQ(mf_graph_add_edge(g, 0, 1), 0);
    ASSERT_EQ(mf_graph_add_edge(g, 1, 2), 0);
    ASSERT_EQ(mf_graph_add_edge(g, 2, 3), 0);
    ASSERT_EQ(mf_graph_add_edge(g, 3, 1), 0);
    ASSERT_EQ(mf_graph_add_edge(g, 0, 4), 0);
    ASSERT_EQ(mf_graph_add_edge(g, 0, 4), MF_ENOSPC);
    size_t at = SIZE_MAX;
    ASSERT_EQ(mf_graph_seal(g, &at), MF_ELOOP);
    ASSERT(at >= 1 && at <= 3);
    size_t seen = 0, i = at;
    do {
        ASSERT(i >= 1 && i <= 3);
        i = mf_graph_cycle_next(g, i);
        seen++;
    } while (i != at && seen < 10);
    ASSERT_EQ(seen, 3);
    ASSERT_EQ(mf_graph_cycle_next(g, 0), SIZE_MAX);
    mf_task_destroy(mf_graph_task(g));
    mf_loop_destroy(loop);
}

TEST(bad_edges_and_changes_after_sealing_are_refused)
{
    mf_loop_t *loop = mf_loop_create();
    mf_graph_t *g = mf_graph_create(loop, 2, 2, NULL, NULL);
    ASSERT_EQ(mf_graph_add_edge(g, 0, 2), MF_EINVAL); /* no node 2 */
    ASSERT_EQ(mf_graph_add_edge(g, 1, 1), MF_EINVAL); /* itself */
    mf_task_t *t = mf_task_empty_create(loop, NULL, NULL);
    ASSERT_EQ(mf_graph_push(g, 2, t), MF_EINVAL);
    ASSERT_EQ(mf_graph_add_edge(g, 0, 1), 0);
    ASSERT_EQ(mf_graph_seal(g, NULL), 0);
    ASSERT_EQ(mf_graph_seal(g, NULL), 0);
    ASSERT_EQ(mf_graph_add_edge(g, 1, 0), MF_EBUSY);
    ASSERT_EQ(mf_graph_push(g, 0, t), MF_EBUSY);
    mf_task_destroy(t); /* refused: still ours */
    mf_task_destroy(mf_graph_task(g));
    mf_loop_destroy(loop);
}

static int cyclic_state, cyclic_error;

static void on_cyclic(mf_task_t *task)
{
    cyclic_state = mf_task_state(task);
    cyclic_error = mf_task_error(task);
}

TEST(an_unsealed_graph_with_a_cycle_ends_task_error_without_running_a_node)
{
    span_t s[2] = {{0}};
    mf_loop_t *loop = mf_loop_create();
    mf_graph_t *g = mf_graph_create(loop, 2, 2, on_cyclic, NULL);
    static const edge_t edges[] = {{0, 1}, {1, 0}};
    shape(g, s, (const uint64_t[]){1, 1}, NULL, edges, 2);
    mf_task_start(mf_graph_task(g));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(cyclic_state, MF_STATE_TASK_ERROR);
    ASSERT_EQ(cyclic_error, MF_ELOOP);
    ASSERT_EQ(s[0].ran + s[1].ran, 0);
    mf_loop_destroy(loop);
}

static uint64_t aborted_at;

static void on_aborted(mf_task_t *task)
{
    graph_state = mf_task_state(task);
    aborted_at = mf_loop_now(mf_task_loop(task));
    graph_done++;
}

/* a (10 ms) → b (200 ms) → c; d (200 ms) alone; the graph gives up at
 * 30 ms: b and d are canceled as they run, c never starts. */
TEST(a_graph_timing_out_mid_run_cancels_its_nodes_and_leaks_nothing)
{
    enum { A, B, C, D };
    span_t s[4] = {{0}};
    mf_loop_t *loop = mf_loop_create();
    graph_done = 0;
    skipped_nodes = 0;
    skipped_cause = 0;
    mf_graph_t *g = mf_graph_create(loop, 4, 2, on_aborted, NULL);
    mf_graph_set_node_callback(g, on_failure_node);
    static const edge_t edges[] = {{A, B}, {B, C}};
    shape(g, s, (const uint64_t[]){10, 200, 1, 200}, NULL, edges, 2);
    mf_task_set_timeout(mf_graph_task(g), 30);
    uint64_t t0 = mf_loop_now(loop);
    mf_task_start(mf_graph_task(g));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(graph_done, 1);
    ASSERT_EQ(graph_state, MF_STATE_TIMEOUT);
    ASSERT(aborted_at - t0 < 200); /* it did not wait for b or d */
    ASSERT_EQ(s[A].state, MF_STATE_SUCCESS);
    ASSERT_EQ(s[B].state, MF_STATE_CANCELED);
    ASSERT_EQ(s[D].state, MF_STATE_CANCELED);
    ASSERT_EQ(s[C].ran, 0);
    ASSERT_EQ(skipped_nodes, 1);
    ASSERT_EQ(skipped_cause, SIZE_MAX); /* skipped by the abort */
    mf_loop_destroy(loop);
}

static int parallel_done;

static void on_parallel(mf_task_t *task)
{
    parallel_done++;
}

static void cancel_graph(mf_task_t *task)
{
    mf_task_cancel(task->user);
}

TEST(a_graph_canceled_inside_a_parallel_and_a_series_winds_down)
{
    span_t s[3] = {{0}};
    mf_loop_t *loop = mf_loop_create();
    graph_done = parallel_done = 0;
    mf_graph_t *g = mf_graph_create(loop, 3, 2, on_graph, NULL);
    static const edge_t edges[] = {{0, 2}, {1, 2}};
    shape(g, s, (const uint64_t[]){100, 100, 1}, NULL, edges, 2);
    mf_parallel_t *par = mf_parallel_create(loop, on_parallel, NULL);
    mf_series_t *branch = mf_series_create(loop, NULL);
    mf_series_push_back(branch, mf_task_empty_create(loop, NULL, NULL));
    mf_series_push_back(branch, mf_graph_task(g));
    mf_parallel_add_series(par, branch);
    mf_parallel_add_task(
        par, mf_task_timer_create(loop, 20, cancel_graph, mf_graph_task(g)));
    mf_task_start(mf_parallel_task(par));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(parallel_done, 1);
    ASSERT_EQ(graph_done, 1);
    ASSERT_EQ(graph_state, MF_STATE_CANCELED);
    ASSERT_EQ(s[0].state, MF_STATE_CANCELED);
    ASSERT_EQ(s[1].state, MF_STATE_CANCELED);
    ASSERT_EQ(s[2].ran, 0);
    mf_loop_destroy(loop);
}

static int inner_nodes_seen;

static void on_outer_graph(mf_task_t *task)
{
    mf_graph_t *g = mf_graph_from_task(task);
    ASSERT(g != NULL);
    ASSERT(mf_graph_from_task(mf_graph_task(g)) == g);
    ASSERT(mf_series_graph(mf_graph_series_at(g, 0)) == g);
    ASSERT(mf_graph_series_at(g, 2) == NULL);
    inner_nodes_seen = (int)mf_series_finished_count(mf_graph_series_at(g, 1));
    graph_done++;
}

TEST(graphs_nest_in_graphs_and_parallels_are_nodes)
{
    span_t s[4] = {{0}};
    mf_loop_t *loop = mf_loop_create();
    graph_done = 0;
    mf_graph_t *inner = mf_graph_create(loop, 2, 1, NULL, NULL);
    static const edge_t edges[] = {{0, 1}};
    shape(inner, s, (const uint64_t[]){5, 5}, NULL, edges, 1);
    mf_parallel_t *par = mf_parallel_create(loop, NULL, NULL);
    mf_parallel_add_task(par, mf_task_timer_create(loop, 5, on_end, &s[2]));
    mf_parallel_add_task(par, mf_task_timer_create(loop, 5, on_end, &s[3]));
    mf_graph_t *outer = mf_graph_create(loop, 2, 1, on_outer_graph, NULL);
    ASSERT_EQ(mf_graph_push(outer, 0, mf_graph_task(inner)), 0);
    ASSERT_EQ(mf_graph_push(outer, 1, mf_parallel_task(par)), 0);
    ASSERT_EQ(mf_graph_add_edge(outer, 0, 1), 0);
    mf_series_t *top = mf_series_create(loop, NULL);
    mf_series_push_back(top, mf_graph_task(outer));
    mf_series_start(top);
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(graph_done, 1);
    ASSERT_EQ(inner_nodes_seen, 1);
    ASSERT(s[2].end >= s[1].end && s[3].end >= s[1].end);
    mf_loop_destroy(loop);
}

TEST(an_empty_graph_and_empty_nodes_are_done_at_once)
{
    mf_loop_t *loop = mf_loop_create();
    graph_done = 0;
    mf_task_start(mf_graph_task(mf_graph_create(loop, 0, 0, on_graph, NULL)));
    mf_graph_t *g = mf_graph_create(loop, 3, 2, on_graph, NULL);
    ASSERT_EQ(mf_graph_add_edge(g, 0, 1), 0);
    ASSERT_EQ(mf_graph_add_edge(g, 1, 2), 0);
    mf_task_start(mf_graph_task(g));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(graph_done, 2);
    mf_loop_destroy(loop);
}

TEST(a_chain_of_100000_empty_nodes_uses_constant_stack)
{
    enum { N = 100000 };
    mf_loop_t *loop = mf_loop_create();
    graph_done = 0;
    mf_graph_t *g = mf_graph_create(loop, N, N - 1, on_graph, NULL);
    for (size_t i = 0; i + 1 < N; i++)
        ASSERT_EQ(mf_graph_add_edge(g, i, i + 1), 0);
    ASSERT_EQ(mf_graph_seal(g, NULL), 0); /* the search, too, without
                                             recursion */
    mf_task_start(mf_graph_task(g));
    mf_loop_run(loop, MF_RUN_DEFAULT);
    ASSERT_EQ(graph_done, 1);
    mf_loop_destroy(loop);
}

static int diamonds_done;

static void on_diamond(mf_task_t *task)
{
    diamonds_done++;
}

static void run_diamonds(mf_loop_t *loop, int count)
{
    for (int k = 0; k < count; k++) {
        mf_graph_t *g = mf_graph_create(loop, 4, 4, on_diamond, NULL);
        for (size_t i = 0; i < 4; i++)
            mf_graph_push(g, i, mf_task_empty_create(loop, NULL, NULL));
        mf_graph_add_edge(g, 0, 1);
        mf_graph_add_edge(g, 0, 2);
        mf_graph_add_edge(g, 1, 3);
        mf_graph_add_edge(g, 2, 3);
        mf_task_start(mf_graph_task(g));
    }
    mf_loop_run(loop, MF_RUN_DEFAULT);
}

TEST(steady_state_graphs_make_no_malloc)
{
    mf_loop_t *loop = mf_loop_create();
    run_diamonds(loop, 100); /* warm the free lists */
    uint64_t before = mf_alloc_count();
    for (int round = 0; round < 20; round++)
        run_diamonds(loop, 100);
    ASSERT_EQ(diamonds_done, 21 * 100);
    ASSERT_EQ(mf_alloc_count() - before, 0);
    mf_loop_destroy(loop);
}
