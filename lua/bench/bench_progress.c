/*
 * lua/bench/bench_progress.c — the live line on stderr: a thread that redraws,
 * every 0.5 s, elapsed/total, requests, the current rate, errors and the p99 so
 * far, from a sampling function the mode gives (bench_progress_source);
 * the line is erased when the run ends, so the report stays clean.
 *
 * On by default only when stderr is a terminal (--progress forces it,
 * --no-progress stops it). Owns its thread, mutex and condition. The
 * sampler runs on this thread: it must read counters that are safe to read
 * while the run goes on (mf_load_progress).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <moonflow/common.h>

#include "bench.h"

#define REDRAW_NS 500000000LL

struct bench_progress {
    const bench_opts_t *o;
    pthread_t tid;
    pthread_mutex_t mutex;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    bool stopping;
    void (*sample)(void *user, bench_progress_sample_t *out);
    void *user;
    struct timespec start;
    uint64_t last_requests, last_ns;
};

static uint64_t since_ns(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)(now.tv_sec - start->tv_sec) * 1000000000u +
           (uint64_t)now.tv_nsec - (uint64_t)start->tv_nsec;
}

static void format_ms(char *buf, size_t len, uint64_t ns)
{
    if (ns < 1000000)
        snprintf(buf, len, "%.0fus", (double)ns / 1e3);
    else if (ns < 1000000000)
        snprintf(buf, len, "%.2fms", (double)ns / 1e6);
    else
        snprintf(buf, len, "%.2fs", (double)ns / 1e9);
}

static void draw(struct bench_progress *p, const bench_progress_sample_t *s,
                 uint64_t now)
{
    if (s->warming_up) {
        fprintf(stderr, "\r  warming up %.1fs\033[K", (double)now / 1e9);
        fflush(stderr);
        return;
    }
    double dt = (double)(now - p->last_ns) / 1e9;
    double rate = dt > 0 ? (double)(s->requests - p->last_requests) / dt : 0;
    if (s->requests < p->last_requests)
        rate = 0;
    p->last_requests = s->requests;
    p->last_ns = now;
    char p99[32];
    format_ms(p99, sizeof p99, s->p99_ns);
    fprintf(stderr,
            "\r  %.1fs/%.0fs  %" PRIu64 " requests  %.0f req/s  %" PRIu64
            " errors  p99 %s\033[K",
            (double)(now > p->o->warmup_ns ? now - p->o->warmup_ns : 0) / 1e9,
            (double)p->o->duration_ns / 1e9, s->requests, rate, s->errors, p99);
    fflush(stderr);
}

static void *progress_main(void *arg)
{
    struct bench_progress *p = arg;
    pthread_mutex_lock(&p->mutex);
    while (!p->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += REDRAW_NS;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        int rc = 0;
        while (!p->stopping && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&p->cond, &p->mutex, &until);
        if (p->stopping || !p->sample)
            continue;
        bench_progress_sample_t s;
        p->sample(p->user, &s);
        draw(p, &s, since_ns(&p->start));
    }
    pthread_mutex_unlock(&p->mutex);
    return NULL;
}

static bool wanted(const bench_opts_t *o)
{
    return o->progress == 1 || (o->progress < 0 && isatty(STDERR_FILENO));
}

bench_progress_t *bench_progress_start(const bench_opts_t *o)
{
    if (!wanted(o))
        return NULL;
    struct bench_progress *p = mf_xcalloc(1, sizeof *p);
    pthread_condattr_t attr;
    p->o = o;
    clock_gettime(CLOCK_MONOTONIC, &p->start);
    pthread_mutex_init(&p->mutex, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cond, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&p->tid, NULL, progress_main, p) != 0) {
        fputs("moonflow bench: no progress line (cannot start its thread)\n",
              stderr);
        pthread_cond_destroy(&p->cond);
        pthread_mutex_destroy(&p->mutex);
        mf_free(p);
        return NULL;
    }
    return p;
}

void bench_progress_source(bench_progress_t *p,
                           void (*sample)(void *user,
                                          bench_progress_sample_t *out),
                           void *user)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mutex);
    p->sample = sample;
    p->user = user;
    pthread_mutex_unlock(&p->mutex);
}

void bench_progress_stop(bench_progress_t *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mutex);
    p->stopping = true;
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->mutex);
    pthread_join(p->tid, NULL);
    fputs("\r\033[K", stderr);
    fflush(stderr);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->mutex);
    mf_free(p);
}
