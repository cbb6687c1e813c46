/* A root's open files (http_file_cache.c): hits hand out a dup with the
 * stat, the least recently used entry goes first when full, and the file
 * watcher drops an entry when its file (or a folder above it) changes. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <moonflow/moonflow.h>

#include "http/http_file_cache.h"
#include "test.h"

static char root[64];

static void write_file(const char *rel, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    FILE *f = fopen(path, "w");
    ASSERT(f != NULL);
    fputs(text, f);
    fclose(f);
}

/* Opens rel and puts it in the cache. */
static void cache_file(mf_file_cache_t *c, const char *rel)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ASSERT(fd >= 0);
    struct stat st;
    ASSERT_EQ(fstat(fd, &st), 0);
    mf__file_cache_put(c, rel, fd, &st);
    close(fd); /* the cache keeps its own */
}

static bool cached(mf_file_cache_t *c, const char *rel)
{
    struct stat st;
    int fd = mf__file_cache_get(c, rel, &st);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

/* Runs the loop until rel is no longer cached (or 2 s). */
static void expect_dropped(mf_loop_t *loop, mf_file_cache_t *c, const char *rel)
{
    for (int i = 0; i < 200; i++) {
        mf_loop_run(loop, MF_RUN_NOWAIT);
        if (!cached(c, rel))
            return;
        usleep(10000);
    }
    MF_TEST_FAIL("%s still cached", rel);
}

static mf_file_cache_t *cache_new(mf_loop_t **loop, size_t entries)
{
    strcpy(root, "/tmp/mf-fcache-XXXXXX");
    ASSERT(mkdtemp(root) != NULL);
    *loop = mf_loop_create();
    int err = 0;
    mf_file_cache_t *c = mf__file_cache_create(*loop, root, entries, &err);
    ASSERT(c != NULL);
    mf_loop_ref(*loop); /* the watcher alone does not keep the loop running */
    return c;
}

static void cache_end(mf_loop_t *loop, mf_file_cache_t *c)
{
    mf__file_cache_destroy(c);
    mf_loop_unref(loop);
    ASSERT_EQ(mf_loop_run(loop, MF_RUN_DEFAULT), 0);
    mf_loop_destroy(loop);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    ASSERT_EQ(system(cmd), 0);
}

TEST(a_hit_hands_out_a_dup_with_the_stat)
{
    mf_loop_t *loop;
    mf_file_cache_t *c = cache_new(&loop, 4);
    write_file("a.txt", "hello");
    cache_file(c, "a.txt");
    struct stat st;
    int fd = mf__file_cache_get(c, "a.txt", &st);
    ASSERT(fd >= 0);
    ASSERT_EQ(st.st_size, 5);
    char buf[8] = {0};
    ASSERT_EQ(pread(fd, buf, sizeof buf, 0), 5);
    ASSERT_STR_EQ(buf, "hello");
    close(fd);
    ASSERT(mf__file_cache_get(c, "b.txt", &st) < 0);
    ASSERT_EQ(mf__file_cache_size(c), 1u);
    cache_end(loop, c);
}

TEST(the_least_recently_used_goes_first)
{
    mf_loop_t *loop;
    mf_file_cache_t *c = cache_new(&loop, 2);
    write_file("a", "1");
    write_file("b", "2");
    write_file("c", "3");
    cache_file(c, "a");
    cache_file(c, "b");
    ASSERT(cached(c, "a")); /* a is now the most recent */
    cache_file(c, "c");     /* b goes */
    ASSERT(cached(c, "a"));
    ASSERT(!cached(c, "b"));
    ASSERT(cached(c, "c"));
    ASSERT_EQ(mf__file_cache_size(c), 2u);
    cache_end(loop, c);
}

TEST(a_written_replaced_or_removed_file_is_dropped)
{
    mf_loop_t *loop;
    mf_file_cache_t *c = cache_new(&loop, 8);
    char path[256], tmp[256];
    snprintf(path, sizeof path, "%s/sub", root);
    ASSERT_EQ(mkdir(path, 0755), 0);
    mf_loop_run(loop, MF_RUN_NOWAIT); /* the folder is watched */
    usleep(50000);
    mf_loop_run(loop, MF_RUN_NOWAIT);
    write_file("w.txt", "1");
    write_file("r.txt", "1");
    write_file("sub/in.txt", "1");
    mf_loop_run(loop, MF_RUN_NOWAIT); /* the writes' own events */
    usleep(50000);
    mf_loop_run(loop, MF_RUN_NOWAIT);
    cache_file(c, "w.txt");
    cache_file(c, "r.txt");
    cache_file(c, "sub/in.txt");
    write_file("w.txt", "2"); /* written in place */
    expect_dropped(loop, c, "w.txt");
    ASSERT(cached(c, "r.txt"));
    snprintf(path, sizeof path, "%s/r.txt", root);
    snprintf(tmp, sizeof tmp, "%s/r.tmp", root);
    write_file("r.tmp", "2");
    ASSERT_EQ(rename(tmp, path), 0); /* replaced */
    expect_dropped(loop, c, "r.txt");
    ASSERT(cached(c, "sub/in.txt"));
    snprintf(path, sizeof path, "%s/sub", root);
    snprintf(tmp, sizeof tmp, "%s/gone", root);
    ASSERT_EQ(rename(path, tmp), 0); /* its folder moved away */
    expect_dropped(loop, c, "sub/in.txt");
    ASSERT_EQ(mf__file_cache_size(c), 0u);
    cache_end(loop, c);
}
