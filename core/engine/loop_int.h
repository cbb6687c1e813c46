/*
 * loop_int.h — the loop's body, shared by the engine's own modules (task.c
 * queues finished tasks, series.c runs them, pool.c needs the refs). Not a
 * public header.
 */
#ifndef MF_LOOP_INT_H
#define MF_LOOP_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/epoll.h>

#include "mailbox.h"
#include "moonflow/loop.h"
#include "moonflow/task.h"
#include "slab.h"
#include "timer_heap.h"

#define MF_LOOP_MAX_EVENTS 256
/* Callbacks run per phase before the loop polls again, so a flood of posted
 * or finished work cannot starve I/O. */
#define MF_LOOP_PHASE_BUDGET 4096

struct mf_loop {
    int epfd;
    uint64_t now;
    uint64_t now_ns; /* the same clock read, to the nanosecond */
    mf_timer_heap_t timers;
    uint64_t timer_seq;
    uint32_t unref_timers; /* running timers that keep nothing alive */
    mf_mailbox_t mailbox;
    mf_io_t mailbox_io;
    bool mailbox_more;  /* last drain hit the budget */
    mf_list_t deferred; /* mf_post_t._link */
    mf_list_t ready;    /* finished tasks, mf_task_t._link */
    /* Runs up to budget entries of `ready`, returns how many: series.c's,
     * set as each series is made, so the loop names no flow function and
     * pays one indirect call per pass, not per task. */
    unsigned (*run_ready)(mf_loop_t *loop, unsigned budget);
    mf_slab_t slab;
    unsigned active_io;
    long refs;
    atomic_int stop_requested;
    bool has_thread;
    pthread_t thread;
    mf_pool_t *pool;
    const mf_task_observer_t *observer; /* mf_loop_observe_tasks; NULL */
    mf_task_trace_t *trace;             /* mf_loop_set_trace; NULL */
    unsigned index;
    void *values[MF_LOOP_KEYS];              /* by key id - 1 */
    mf_loop_key_t *value_keys[MF_LOOP_KEYS]; /* whose dtor runs at destroy */
    /* The batch being dispatched, so mf_io_stop can void stale entries. */
    struct epoll_event *polled;
    int npolled;
    int polled_pos;
    struct epoll_event events[MF_LOOP_MAX_EVENTS];
};

#endif /* MF_LOOP_INT_H */
