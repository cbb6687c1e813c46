/*
 * test_mysql_alloc.c — what a point SELECT costs in allocations once the
 * pool is warm: none through moonflow's allocators (task records and
 * result arrays come from the loop's free lists), and a small fixed number
 * of libc mallocs in all, the connector's own: measured 6 with
 * libmariadb 3.3 — 3 while it reads the column definitions
 * (mysql_read_query_result: a MYSQL_DATA and two memory-root blocks) and
 * 3 in mysql_store_result (the MYSQL_RES, its MYSQL_DATA, a memory-root
 * block for the rows). The plain build counts every malloc
 * of the process with bench/malloc_count.c; the sanitizer twin cannot
 * wrap libc's allocator and counts moonflow's only.
 */
#include "mysql/mysql_harness.h"

#ifndef MF_TEST_SANITIZED
/* bench/malloc_count.c, linked in (spec/CMakeLists.txt): it replaces
 * malloc, calloc and realloc with counting ones for the whole process. */
unsigned long malloc_count_read(void);

static unsigned long mallocs(void)
{
    return malloc_count_read();
}
#else
static unsigned long mallocs(void)
{
    return 0;
}
#endif

#define ROUNDS 1000

TEST(a_warm_point_select_allocates_nothing_of_ours)
{
    mf_mysql_opts_t o;
    mf_mysql_opts_init(&o);
    o.max_connections = 1;
    mf_mysql_client_t *c = setup_with(&o);
    expect(c,
           "DROP TABLE IF EXISTS pt; CREATE TABLE pt (id INT PRIMARY KEY, "
           "name VARCHAR(32), score DOUBLE); INSERT INTO pt VALUES "
           "(1, 'one', 1.5), (2, 'two', 2.5)",
           "ok | ok | ok");
    const char *sql = "SELECT id, name, score FROM pt WHERE id = 2";
    result_t r;
    for (int i = 0; i < 50; i++) /* warm: free lists, the connection */
        run(c, &r, sql);
    uint64_t ours = mf_alloc_count();
    unsigned long all = mallocs();
    for (int i = 0; i < ROUNDS; i++) {
        run(c, &r, sql);
        if (r.state != MF_STATE_SUCCESS || strcmp(r.text, "i:2,two,d:2.5") != 0)
            MF_TEST_FAIL("round %d: %s", i, r.text);
    }
    uint64_t ours_per = (mf_alloc_count() - ours) / ROUNDS;
    double all_per = (double)(mallocs() - all) / ROUNDS;
    fprintf(stderr,
            "point select: %llu moonflow allocations, %.2f libc mallocs "
            "per query\n",
            (unsigned long long)ours_per, all_per);
    ASSERT_EQ(mf_alloc_count() - ours, 0);
#ifndef MF_TEST_SANITIZED
    ASSERT(all_per > 0); /* the counting allocator is in */
    ASSERT(all_per <= 8);
#endif
    ASSERT_EQ(mf_mysql_client_connects(c), 1);
    teardown();
}
