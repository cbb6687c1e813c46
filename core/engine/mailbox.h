/*
 * mailbox.h — the loop's cross-thread inbox: an intrusive lock-free MPSC
 * queue (Vyukov's) plus an eventfd to wake the loop.
 *
 * Producers (any thread) push mf_post_t links with one atomic exchange and
 * write the eventfd only when the consumer may be asleep (the `armed` flag),
 * so a burst of posts costs one wake-up. The single consumer is the loop.
 * The mailbox never allocates or frees posts.
 */
#ifndef MF_MAILBOX_H
#define MF_MAILBOX_H

#include <stdatomic.h>
#include <stdbool.h>

#include "moonflow/loop.h"

typedef struct mf_mailbox {
    _Atomic(mf_post_t *) head; /* producers push here */
    mf_post_t *tail;           /* consumer pops here */
    mf_post_t stub;
    atomic_int wake_pending; /* 1: an eventfd write is already on its way */
    int efd;
} mf_mailbox_t;

int mf__mailbox_init(mf_mailbox_t *box);
void mf__mailbox_close(mf_mailbox_t *box);
/* Any thread. */
void mf__mailbox_push(mf_mailbox_t *box, mf_post_t *post);
/* Loop thread: clears the wake-up (eventfd + flag) before draining. */
void mf__mailbox_ack(mf_mailbox_t *box);
/* Loop thread: next post, or NULL if empty or a push is half-done (the
 * producer of that push then wakes the loop again). */
mf_post_t *mf__mailbox_pop(mf_mailbox_t *box);

#endif /* MF_MAILBOX_H */
