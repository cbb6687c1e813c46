/*
 * timer_heap.h — binary min-heap of timers keyed by (deadline, seq).
 *
 * Internal to the loop. The heap stores pointers to timers embedded by their
 * users and never frees them; each timer knows its index, so stop is
 * O(log n). The array grows by doubling (amortised: no malloc once warm).
 */
#ifndef MF_TIMER_HEAP_H
#define MF_TIMER_HEAP_H

#include <stdint.h>

#include "moonflow/loop.h"

typedef struct mf_timer_heap {
    mf_timer_t **items;
    uint32_t size;
    uint32_t capacity;
} mf_timer_heap_t;

void mf__timer_heap_init(mf_timer_heap_t *heap);
void mf__timer_heap_close(mf_timer_heap_t *heap);
void mf__timer_heap_insert(mf_timer_heap_t *heap, mf_timer_t *timer);
void mf__timer_heap_remove(mf_timer_heap_t *heap, mf_timer_t *timer);

static inline mf_timer_t *mf__timer_heap_min(const mf_timer_heap_t *heap)
{
    return heap->size ? heap->items[0] : NULL;
}

#endif /* MF_TIMER_HEAP_H */
