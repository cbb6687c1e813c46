/*
 * bench/engine.c — throughput of the flow engine's building blocks, and the
 * mallocs per task in steady state.
 *
 * Scenarios (each run REPEATS times; the median is reported):
 *   timer tasks/s       0 ms timer tasks, 1,000 in flight, each in its series
 *   series of 10/s      series of 10 empty tasks, 100 in flight
 *   parallel of 10/s    parallels of 10 empty-task series, 100 in flight
 *   go tasks/s          no-op go tasks through the compute pool, 1,000 in
 *                       flight
 *   mailbox posts/s     PRODUCERS threads posting to one loop
 * Placement: the loop (main thread) runs on core 0; pool threads and mailbox
 * producers run on core 1 when there is one, so cross-thread figures cross
 * cores as they do in the server.
 * Allocation: this binary interposes malloc/calloc/realloc (forwarding to
 * glibc's __libc_* entry points) to count every allocation in the process,
 * not only the engine's own, during a steady-state window.
 *
 * Usage: bench_engine [--quick] [--json FILE]
 */
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <moonflow/moonflow.h>

/* Process-wide malloc counting: malloc_count.c (linked in, the same code
 * bench/http/mallocs.py preloads into servers) replaces malloc, calloc and
 * realloc. */
unsigned long malloc_count_read(void);

/* ---- helpers ------------------------------------------------------------ */

static void pin_to_core(int core)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cores > 1 ? core : 0, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void pin_job(void *arg)
{
    (void)arg;
    pin_to_core(1);
}

#define REPEATS 5

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, int n)
{
    qsort(values, (size_t)n, sizeof(*values), compare_doubles);
    return values[n / 2];
}

typedef struct scenario {
    const char *name;
    const char *unit;
    double (*run)(long n); /* returns operations per second */
    long n;
    double result;
} scenario_t;

/* ---- scenarios -------------------------------------------------------- */

static mf_loop_t *bench_loop;
static long remaining;
static long completed; /* callbacks seen: checked against what was started */

/* A scenario whose flows did not all complete is a bug, not a number. */
static double checked_rate(long expected, double t0)
{
    double elapsed = now_seconds() - t0;
    if (completed != expected) {
        fprintf(stderr, "bench: %ld completions, expected %ld\n", completed,
                expected);
        exit(2);
    }
    return (double)expected / elapsed;
}

static void on_timer_done(mf_task_t *task)
{
    completed++;
    if (--remaining > 0)
        mf_task_start(
            mf_task_timer_create(mf_task_loop(task), 0, on_timer_done, NULL));
}

static double run_timer_tasks(long n)
{
    const long inflight = 1000;
    remaining = n;
    completed = 0;
    double t0 = now_seconds();
    for (long i = 0; i < inflight; i++)
        mf_task_start(mf_task_timer_create(bench_loop, 0, on_timer_done, NULL));
    mf_loop_run(bench_loop, MF_RUN_DEFAULT);
    return checked_rate(n + inflight - 1, t0);
}

static void start_series_of_ten(mf_loop_t *loop);

static void on_series_done(mf_series_t *series)
{
    completed++;
    if (--remaining > 0)
        start_series_of_ten(mf_series_loop(series));
}

static void start_series_of_ten(mf_loop_t *loop)
{
    mf_series_t *s = mf_series_create(loop, on_series_done);
    for (int i = 0; i < 10; i++)
        mf_series_push_back(s, mf_task_empty_create(loop, NULL, NULL));
    mf_series_start(s);
}

static double run_series(long n)
{
    const long inflight = 100;
    remaining = n;
    completed = 0;
    double t0 = now_seconds();
    for (long i = 0; i < inflight; i++)
        start_series_of_ten(bench_loop);
    mf_loop_run(bench_loop, MF_RUN_DEFAULT);
    return checked_rate(n + inflight - 1, t0);
}

static void start_parallel_of_ten(mf_loop_t *loop);

static void on_parallel_done(mf_task_t *task)
{
    completed++;
    if (--remaining > 0)
        start_parallel_of_ten(mf_task_loop(task));
}

static void start_parallel_of_ten(mf_loop_t *loop)
{
    mf_parallel_t *par = mf_parallel_create(loop, on_parallel_done, NULL);
    for (int i = 0; i < 10; i++)
        mf_parallel_add_task(par, mf_task_empty_create(loop, NULL, NULL));
    mf_task_start(mf_parallel_task(par));
}

static double run_parallels(long n)
{
    const long inflight = 100;
    remaining = n;
    completed = 0;
    double t0 = now_seconds();
    for (long i = 0; i < inflight; i++)
        start_parallel_of_ten(bench_loop);
    mf_loop_run(bench_loop, MF_RUN_DEFAULT);
    return checked_rate(n + inflight - 1, t0);
}

static void go_noop(void *arg)
{
    (void)arg;
}

static void on_go_done(mf_task_t *task)
{
    completed++;
    if (--remaining > 0)
        mf_task_start(mf_task_go_create(mf_task_loop(task), go_noop, NULL,
                                        on_go_done, NULL));
}

static double run_go_tasks(long n)
{
    const long inflight = 1000;
    remaining = n;
    completed = 0;
    double t0 = now_seconds();
    for (long i = 0; i < inflight; i++)
        mf_task_start(
            mf_task_go_create(bench_loop, go_noop, NULL, on_go_done, NULL));
    mf_loop_run(bench_loop, MF_RUN_DEFAULT);
    return checked_rate(n + inflight - 1, t0);
}

#define PRODUCERS 2

typedef struct producer {
    mf_loop_t *loop;
    mf_post_t *posts;
    long count;
} producer_t;

static long posts_received;
static long posts_expected;

static void on_bench_post(mf_post_t *post)
{
    if (++posts_received == posts_expected)
        mf_loop_stop(bench_loop);
}

static void *produce(void *arg)
{
    producer_t *p = arg;
    pin_to_core(1);
    for (long i = 0; i < p->count; i++) {
        mf_post_init(&p->posts[i], on_bench_post, NULL);
        mf_loop_post(p->loop, &p->posts[i]);
    }
    return NULL;
}

static double run_mailbox(long n)
{
    producer_t producers[PRODUCERS];
    pthread_t threads[PRODUCERS];
    posts_received = 0;
    posts_expected = n - n % PRODUCERS;
    for (int i = 0; i < PRODUCERS; i++) {
        producers[i].loop = bench_loop;
        producers[i].count = n / PRODUCERS;
        producers[i].posts =
            mf_xcalloc((size_t)producers[i].count, sizeof(mf_post_t));
    }
    double t0 = now_seconds();
    for (int i = 0; i < PRODUCERS; i++)
        pthread_create(&threads[i], NULL, produce, &producers[i]);
    mf_loop_run(bench_loop, MF_RUN_FOREVER);
    completed = posts_received;
    double rate = checked_rate(posts_expected, t0);
    for (int i = 0; i < PRODUCERS; i++) {
        pthread_join(threads[i], NULL);
        mf_free(producers[i].posts);
    }
    return rate;
}

/* ---- mallocs per task ---------------------------------------------- */

/* Runs every scenario once more after warm-up and counts all mallocs of the
 * process per task started (timer + 10 per series + 11 per parallel + go). */
static double mallocs_per_task(long n)
{
    run_timer_tasks(n);
    run_series(n / 10);
    run_parallels(n / 10);
    run_go_tasks(n);
    unsigned long before = malloc_count_read();
    run_timer_tasks(n);
    run_series(n / 10);
    run_parallels(n / 10);
    run_go_tasks(n);
    unsigned long mallocs = malloc_count_read() - before;
    double tasks =
        (double)n + (double)(n / 10) * 10 + (double)(n / 10) * 11 + (double)n;
    return (double)mallocs / tasks;
}

static void write_json(const char *path, scenario_t *sc, int count,
                       double per_task)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return;
    }
    fprintf(f, "{\n  \"benchmark\": \"engine\",\n  \"results\": [\n");
    for (int i = 0; i < count; i++)
        fprintf(f,
                "    {\"name\": \"%s\", \"unit\": \"%s\", \"value\": %.0f}%s\n",
                sc[i].name, sc[i].unit, sc[i].result, ",");
    fprintf(f,
            "    {\"name\": \"mallocs per task (steady state)\", "
            "\"unit\": \"mallocs\", \"value\": %.4f}\n  ]\n}\n",
            per_task);
    fclose(f);
}

int main(int argc, char **argv)
{
    int quick = 0;
    const char *json = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
            json = argv[++i];
    }
    long scale = quick ? 10 : 1;
    scenario_t scenarios[] = {
        {"timer tasks (0 ms)", "tasks/s", run_timer_tasks, 1000000 / scale, 0},
        {"series of 10 empty tasks", "series/s", run_series, 200000 / scale, 0},
        {"parallel of 10 empty series", "parallels/s", run_parallels,
         100000 / scale, 0},
        {"go tasks, loop core 0 -> pool core 1", "tasks/s", run_go_tasks,
         500000 / scale, 0},
        {"mailbox posts, 2 threads (core 1) -> loop (core 0)", "posts/s",
         run_mailbox, 4000000 / scale, 0},
    };
    int count = (int)MF_ARRAY_SIZE(scenarios);
    pin_to_core(0);
    bench_loop = mf_loop_create();
    mf_pool_t *pool = mf_pool_create(1);
    mf_loop_set_pool(bench_loop, pool);
    mf_task_start(mf_task_go_create(bench_loop, pin_job, NULL, NULL, NULL));
    mf_loop_run(bench_loop, MF_RUN_DEFAULT);

    printf("| scenario | median of %d | unit |\n| --- | ---: | --- |\n",
           REPEATS);
    for (int i = 0; i < count; i++) {
        double runs[REPEATS];
        scenarios[i].run(scenarios[i].n / 10); /* warm-up */
        for (int r = 0; r < REPEATS; r++)
            runs[r] = scenarios[i].run(scenarios[i].n);
        scenarios[i].result = median(runs, REPEATS);
        printf("| %s | %.0f | %s |\n", scenarios[i].name, scenarios[i].result,
               scenarios[i].unit);
        fflush(stdout);
    }
    double per_task = mallocs_per_task(100000 / scale);
    printf("| mallocs per task, steady state (whole process) | %.4f | "
           "mallocs |\n",
           per_task);
    if (json)
        write_json(json, scenarios, count, per_task);
    mf_pool_destroy(pool);
    mf_loop_destroy(bench_loop);
    return per_task == 0.0 ? 0 : 1;
}
