#include <moonflow/list.h>
#include <moonflow/common.h>

#include "test.h"

typedef struct item {
    int value;
    mf_list_t link;
} item_t;

static int value_at(mf_list_t *node)
{
    return mf_container_of(node, item_t, link)->value;
}

TEST(push_back_and_front_keep_order)
{
    mf_list_t head;
    item_t items[4] = {{1, {0}}, {2, {0}}, {3, {0}}, {0, {0}}};
    mf_list_init(&head);
    ASSERT(mf_list_empty(&head));
    for (int i = 0; i < 3; i++)
        mf_list_push_back(&head, &items[i].link);
    mf_list_push_front(&head, &items[3].link);
    int expected = 0;
    mf_list_t *pos;
    mf_list_foreach(pos, &head) ASSERT_EQ(value_at(pos), expected++);
    ASSERT_EQ(expected, 4);
}

TEST(remove_unlinks_and_reinitialises)
{
    mf_list_t head;
    item_t a = {1, {0}}, b = {2, {0}};
    mf_list_init(&head);
    mf_list_push_back(&head, &a.link);
    mf_list_push_back(&head, &b.link);
    mf_list_remove(&a.link);
    ASSERT(!mf_list_linked(&a.link));
    ASSERT_EQ(value_at(mf_list_pop_front(&head)), 2);
    ASSERT(mf_list_pop_front(&head) == NULL);
}

TEST(splice_moves_everything_in_order)
{
    mf_list_t dst, src;
    item_t items[5];
    mf_list_init(&dst);
    mf_list_init(&src);
    for (int i = 0; i < 5; i++) {
        items[i].value = i;
        mf_list_push_back(i < 2 ? &dst : &src, &items[i].link);
    }
    mf_list_splice_back(&dst, &src);
    ASSERT(mf_list_empty(&src));
    for (int i = 0; i < 5; i++)
        ASSERT_EQ(value_at(mf_list_pop_front(&dst)), i);
    ASSERT(mf_list_empty(&dst));
}
