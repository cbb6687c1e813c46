/*
 * moonflow/list.h — intrusive circular doubly-linked list.
 *
 * The link lives inside the element; the list owns nothing. Recover the
 * element with mf_container_of. A node that is in no list should be
 * initialised with mf_list_init so mf_list_linked() tells the truth.
 */
#ifndef MOONFLOW_LIST_H
#define MOONFLOW_LIST_H

#include <stdbool.h>
#include <stddef.h>

#include "common.h"

MF_EXTERN_C_BEGIN

typedef struct mf_list {
    struct mf_list *next;
    struct mf_list *prev;
} mf_list_t;

static inline void mf_list_init(mf_list_t *head)
{
    head->next = head;
    head->prev = head;
}

static inline bool mf_list_empty(const mf_list_t *head)
{
    return head->next == head;
}

/* True when the node is in some list (nodes are self-linked when not). */
static inline bool mf_list_linked(const mf_list_t *node)
{
    return node->next != node;
}

static inline void mf_list__insert(mf_list_t *node, mf_list_t *prev,
                                   mf_list_t *next)
{
    node->prev = prev;
    node->next = next;
    prev->next = node;
    next->prev = node;
}

static inline void mf_list_push_back(mf_list_t *head, mf_list_t *node)
{
    mf_list__insert(node, head->prev, head);
}

static inline void mf_list_push_front(mf_list_t *head, mf_list_t *node)
{
    mf_list__insert(node, head, head->next);
}

static inline void mf_list_remove(mf_list_t *node)
{
    node->prev->next = node->next;
    node->next->prev = node->prev;
    mf_list_init(node);
}

/* Removes and returns the first node, or NULL when empty. */
static inline mf_list_t *mf_list_pop_front(mf_list_t *head)
{
    mf_list_t *first = head->next;
    if (first == head)
        return NULL;
    mf_list_remove(first);
    return first;
}

/* Moves every node of src to the back of dst; src becomes empty. */
static inline void mf_list_splice_back(mf_list_t *dst, mf_list_t *src)
{
    if (mf_list_empty(src))
        return;
    src->next->prev = dst->prev;
    dst->prev->next = src->next;
    src->prev->next = dst;
    dst->prev = src->prev;
    mf_list_init(src);
}

#define mf_list_foreach(pos, head) \
    for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)

MF_EXTERN_C_END

#endif /* MOONFLOW_LIST_H */
