#include <moonflow/loop.h>

#include "test.h"

TEST(freed_objects_are_reused_without_malloc)
{
    mf_loop_t *loop = mf_loop_create();
    void *ptrs[1000];
    for (int i = 0; i < 1000; i++)
        ptrs[i] = mf_loop_alloc(loop, 100);
    for (int i = 0; i < 1000; i++)
        mf_loop_free(loop, ptrs[i], 100);
    uint64_t before = mf_alloc_count();
    for (int round = 0; round < 10; round++) {
        for (int i = 0; i < 1000; i++) {
            ptrs[i] = mf_loop_alloc(loop, 100);
            memset(ptrs[i], 0xab, 100);
        }
        for (int i = 0; i < 1000; i++)
            mf_loop_free(loop, ptrs[i], 100);
    }
    ASSERT_EQ(mf_alloc_count() - before, 0);
    mf_loop_destroy(loop);
}

TEST(objects_of_each_class_do_not_overlap)
{
    mf_loop_t *loop = mf_loop_create();
    size_t sizes[] = {1, 64, 65, 200, 512, 1000, 2048, 5000, 16384, 20000};
    unsigned char *p[MF_ARRAY_SIZE(sizes)][8];
    for (size_t s = 0; s < MF_ARRAY_SIZE(sizes); s++)
        for (int i = 0; i < 8; i++) {
            p[s][i] = mf_loop_alloc(loop, sizes[s]);
            memset(p[s][i], (int)(s * 8 + i), sizes[s]);
        }
    for (size_t s = 0; s < MF_ARRAY_SIZE(sizes); s++)
        for (int i = 0; i < 8; i++) {
            for (size_t b = 0; b < sizes[s]; b++)
                ASSERT_EQ(p[s][i][b], (unsigned char)(s * 8 + i));
            mf_loop_free(loop, p[s][i], sizes[s]);
        }
    mf_loop_destroy(loop);
}

/* Two classes per power of two: the slot of a size is the least of 64,
 * 96, 128, 192, 256, ... 12288, 16384 that holds it (a fresh class hands
 * out neighbouring slots, so two objects in a row are one slot apart). */
TEST(a_size_gets_the_least_half_step_slot_that_holds_it)
{
    struct {
        size_t size, slot;
    } cases[] = {{1, 64},       {64, 64},       {65, 96},     {96, 96},
                 {97, 128},     {129, 192},     {448, 512},   {592, 768},
                 {656, 768},    {769, 1024},    {3640, 4096}, {4097, 6144},
                 {12288, 12288}, {12289, 16384}};
    for (size_t i = 0; i < MF_ARRAY_SIZE(cases); i++) {
        mf_loop_t *loop = mf_loop_create();
        char *a = mf_loop_alloc(loop, cases[i].size);
        char *b = mf_loop_alloc(loop, cases[i].size);
        ASSERT_EQ((size_t)(b - a), cases[i].slot);
        ASSERT_EQ((uintptr_t)a % 16, 0);
        mf_loop_free(loop, a, cases[i].size);
        mf_loop_free(loop, b, cases[i].size);
        mf_loop_destroy(loop);
    }
}

/* Every size up to MF_LOOP_ALLOC_MAX, not only the edges above: two
 * objects taken in a row are one slot apart, whichever the free list
 * hands out first. */
TEST(every_size_gets_the_least_slot_that_holds_it)
{
    mf_loop_t *loop = mf_loop_create();
    size_t slot = 64;
    for (size_t size = 1; size <= MF_LOOP_ALLOC_MAX; size++) {
        if (size > slot) /* the next half step: 96, 128, 192, 256 ... */
            slot = (slot & (slot - 1)) ? slot / 3 * 4 : slot / 2 * 3;
        char *a = mf_loop_alloc(loop, size);
        char *b = mf_loop_alloc(loop, size);
        size_t apart = (size_t)(a < b ? b - a : a - b);
        if (apart != slot)
            printf("size %zu: slots %zu apart, %zu expected\n", size, apart,
                   slot);
        ASSERT_EQ(apart, slot);
        mf_loop_free(loop, a, size);
        mf_loop_free(loop, b, size);
    }
    mf_loop_destroy(loop);
}

TEST(objects_still_out_at_destroy_are_released_with_the_loop)
{
    mf_loop_t *loop = mf_loop_create();
    for (int i = 0; i < 5000; i++)
        ASSERT(mf_loop_alloc(loop, i % 2 ? 128 : 9000) != NULL);
    /* LeakSanitizer in the twin build fails this test if slabs leak. */
    mf_loop_destroy(loop);
}
