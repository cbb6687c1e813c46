/*
 * mailbox.c — intrusive MPSC queue with eventfd wake-ups.
 *
 * Why the wake protocol is safe: a producer links its post completely, then
 * swaps wake_pending to 1 and writes the eventfd only if it was 0. The loop
 * sets wake_pending to 0 before it drains. A producer that saw 1 finished
 * linking before the loop reset the flag, so that drain sees its post; one
 * that saw 0 writes the eventfd and the loop wakes again.
 */
#include "mailbox.h"

#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "moonflow/error.h"

int mf__mailbox_init(mf_mailbox_t *box)
{
    box->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (box->efd < 0)
        return mf_err_from_errno(errno);
    box->stub._next = NULL;
    atomic_init(&box->head, &box->stub);
    box->tail = &box->stub;
    atomic_init(&box->wake_pending, 0);
    return 0;
}

void mf__mailbox_close(mf_mailbox_t *box)
{
    if (box->efd >= 0)
        close(box->efd);
    box->efd = -1;
}

static void mf__mailbox_link(mf_mailbox_t *box, mf_post_t *post)
{
    /* _next is a plain pointer in the public struct (no _Atomic in the
     * API); the __atomic builtins give it atomic access here. */
    __atomic_store_n(&post->_next, NULL, __ATOMIC_RELAXED);
    mf_post_t *prev =
        atomic_exchange_explicit(&box->head, post, memory_order_acq_rel);
    __atomic_store_n(&prev->_next, post, __ATOMIC_RELEASE);
}

void mf__mailbox_push(mf_mailbox_t *box, mf_post_t *post)
{
    mf__mailbox_link(box, post);
    if (atomic_exchange_explicit(&box->wake_pending, 1, memory_order_seq_cst) ==
        0) {
        uint64_t one = 1;
        ssize_t n;
        do {
            n = write(box->efd, &one, sizeof one);
        } while (n < 0 && errno == EINTR);
        /* EAGAIN means the counter is full: the loop is awake anyway. */
    }
}

void mf__mailbox_ack(mf_mailbox_t *box)
{
    uint64_t value;
    ssize_t n;
    do {
        n = read(box->efd, &value, sizeof value);
    } while (n < 0 && errno == EINTR);
    atomic_store_explicit(&box->wake_pending, 0, memory_order_seq_cst);
}

static mf_post_t *mf__next_of(mf_post_t *post)
{
    return __atomic_load_n(&post->_next, __ATOMIC_ACQUIRE);
}

mf_post_t *mf__mailbox_pop(mf_mailbox_t *box)
{
    mf_post_t *tail = box->tail;
    mf_post_t *next = mf__next_of(tail);
    if (tail == &box->stub) {
        if (!next)
            return NULL;
        box->tail = next;
        tail = next;
        next = mf__next_of(next);
    }
    if (next) {
        box->tail = next;
        return tail;
    }
    if (tail != atomic_load_explicit(&box->head, memory_order_acquire))
        return NULL; /* a producer is between its exchange and its link */
    /* tail is the last real post: put the stub behind it to detach it. */
    mf__mailbox_link(box, &box->stub);
    next = mf__next_of(tail);
    if (next) {
        box->tail = next;
        return tail;
    }
    return NULL;
}
