/*
 * timer_heap.c — the loop's timer min-heap.
 */
#include "timer_heap.h"

#include "moonflow/common.h"

static int mf__timer_before(const mf_timer_t *a, const mf_timer_t *b)
{
    if (a->_deadline != b->_deadline)
        return a->_deadline < b->_deadline;
    return a->_seq < b->_seq;
}

static void mf__heap_place(mf_timer_heap_t *heap, uint32_t index,
                           mf_timer_t *timer)
{
    heap->items[index] = timer;
    timer->_index = index;
}

static void mf__heap_sift_up(mf_timer_heap_t *heap, uint32_t index)
{
    mf_timer_t *timer = heap->items[index];
    while (index > 0) {
        uint32_t parent = (index - 1) / 2;
        if (!mf__timer_before(timer, heap->items[parent]))
            break;
        mf__heap_place(heap, index, heap->items[parent]);
        index = parent;
    }
    mf__heap_place(heap, index, timer);
}

static void mf__heap_sift_down(mf_timer_heap_t *heap, uint32_t index)
{
    mf_timer_t *timer = heap->items[index];
    for (;;) {
        uint32_t child = 2 * index + 1;
        if (child >= heap->size)
            break;
        if (child + 1 < heap->size &&
            mf__timer_before(heap->items[child + 1], heap->items[child]))
            child++;
        if (!mf__timer_before(heap->items[child], timer))
            break;
        mf__heap_place(heap, index, heap->items[child]);
        index = child;
    }
    mf__heap_place(heap, index, timer);
}

void mf__timer_heap_init(mf_timer_heap_t *heap)
{
    heap->items = NULL;
    heap->size = 0;
    heap->capacity = 0;
}

void mf__timer_heap_close(mf_timer_heap_t *heap)
{
    mf_free(heap->items);
    mf__timer_heap_init(heap);
}

void mf__timer_heap_insert(mf_timer_heap_t *heap, mf_timer_t *timer)
{
    if (heap->size == heap->capacity) {
        heap->capacity = heap->capacity ? heap->capacity * 2 : 64;
        heap->items =
            mf_xrealloc(heap->items, heap->capacity * sizeof(*heap->items));
    }
    heap->items[heap->size] = timer;
    timer->_index = heap->size++;
    mf__heap_sift_up(heap, timer->_index);
}

void mf__timer_heap_remove(mf_timer_heap_t *heap, mf_timer_t *timer)
{
    uint32_t index = timer->_index;
    mf_timer_t *last = heap->items[--heap->size];
    timer->_index = UINT32_MAX;
    if (last == timer)
        return;
    mf__heap_place(heap, index, last);
    /* The moved element may belong above or below its new place. */
    if (index > 0 && mf__timer_before(last, heap->items[(index - 1) / 2]))
        mf__heap_sift_up(heap, index);
    else
        mf__heap_sift_down(heap, index);
}
