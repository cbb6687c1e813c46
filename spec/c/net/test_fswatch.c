#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <moonflow/fswatch.h>
#include <moonflow/moonflow.h>

#include "test.h"

static char root[64];
static char seen[32][128];
static unsigned seen_what[32];
static int nseen;

static void on_change(mf_fswatch_t *w, const char *path, unsigned what,
                      void *arg)
{
    (void)w;
    (void)arg;
    if (nseen < 32) {
        snprintf(seen[nseen], sizeof seen[nseen], "%s", path);
        seen_what[nseen++] = what;
    }
}

static void write_file(const char *rel, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    FILE *f = fopen(path, "w");
    ASSERT(f != NULL);
    fputs(text, f);
    fclose(f);
}

/* Runs the loop until a change for `path` with `what` arrives (or 2 s). */
static void expect(mf_loop_t *loop, const char *path, unsigned what)
{
    for (int i = 0; i < 200; i++) {
        for (int k = 0; k < nseen; k++)
            if (strcmp(seen[k], path) == 0 && (seen_what[k] & what))
                return;
        mf_loop_run(loop, MF_RUN_NOWAIT);
        usleep(10000);
    }
    MF_TEST_FAIL("no change reported for %s", path);
}

/* A watcher on a new temporary root, on a new loop kept running. */
static mf_fswatch_t *watch_new_root(mf_loop_t **loop)
{
    strcpy(root, "/tmp/mf-watch-XXXXXX");
    ASSERT(mkdtemp(root) != NULL);
    *loop = mf_loop_create();
    int err = 0;
    mf_fswatch_t *w = mf_fswatch_start(*loop, root, on_change, NULL, &err);
    ASSERT(w != NULL);
    mf_loop_ref(*loop); /* the watcher alone does not keep the loop running */
    return w;
}

/* Stops the watcher, lets the loop end, removes the root. */
static void watch_end(mf_loop_t *loop, mf_fswatch_t *w)
{
    mf_fswatch_stop(w);
    mf_loop_unref(loop);
    ASSERT_EQ(mf_loop_run(loop, MF_RUN_DEFAULT), 0);
    mf_loop_destroy(loop);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    ASSERT_EQ(system(cmd), 0);
}

TEST(writes_renames_new_directories_and_deletes_are_reported)
{
    mf_loop_t *loop;
    mf_fswatch_t *w = watch_new_root(&loop);
    write_file("index.lua", "return 1");
    expect(loop, "index.lua", MF_FSWATCH_WRITTEN);

    char path[256], tmp[256];
    snprintf(path, sizeof path, "%s/api", root);
    ASSERT_EQ(mkdir(path, 0755), 0);
    usleep(20000);
    mf_loop_run(loop, MF_RUN_NOWAIT); /* the new directory gets watched */
    write_file("api/user.lua", "return 2");
    expect(loop, "api/user.lua", MF_FSWATCH_WRITTEN);

    /* An editor's save: write a temporary file, rename it over the old. */
    write_file("api/.user.lua.swp", "return 3");
    snprintf(tmp, sizeof tmp, "%s/api/.user.lua.swp", root);
    snprintf(path, sizeof path, "%s/api/user.lua", root);
    nseen = 0;
    ASSERT_EQ(rename(tmp, path), 0);
    expect(loop, "api/user.lua", MF_FSWATCH_WRITTEN);

    ASSERT_EQ(unlink(path), 0);
    expect(loop, "api/user.lua", MF_FSWATCH_REMOVED);
    for (int k = 0; k < nseen; k++)
        ASSERT(seen[k][0] != '.' && !strstr(seen[k], "/.")); /* hidden */
    watch_end(loop, w);
}

/* Runs the loop until the watcher watches `want` folders (or 2 s). */
static void expect_folders(mf_loop_t *loop, mf_fswatch_t *w, size_t want)
{
    for (int i = 0; i < 200 && mf_fswatch_folders(w) != want; i++) {
        mf_loop_run(loop, MF_RUN_NOWAIT);
        usleep(10000);
    }
    ASSERT_EQ(mf_fswatch_folders(w), want);
}

TEST(folders_deleted_renamed_or_moved_away_leave_no_watch_behind)
{
    mf_loop_t *loop;
    mf_fswatch_t *w = watch_new_root(&loop);
    ASSERT_EQ(mf_fswatch_folders(w), 1);
    char path[256], sub[300], cmd[400];
    for (int round = 0; round < 20; round++) {
        snprintf(path, sizeof path, "%s/d%d", root, round);
        snprintf(sub, sizeof sub, "%s/inner", path);
        ASSERT_EQ(mkdir(path, 0755), 0);
        expect_folders(loop, w, 2);
        ASSERT_EQ(mkdir(sub, 0755), 0);
        expect_folders(loop, w, 3);
        if (round % 2) { /* deleted */
            ASSERT_EQ(rmdir(sub), 0);
            ASSERT_EQ(rmdir(path), 0);
            expect_folders(loop, w, 1);
            continue;
        }
        /* renamed inside the root: watched under its new name only */
        char moved[300], away[300];
        snprintf(moved, sizeof moved, "%s/m%d", root, round);
        nseen = 0;
        ASSERT_EQ(rename(path, moved), 0);
        snprintf(sub, sizeof sub, "m%d", round);
        expect(loop, sub, MF_FSWATCH_WRITTEN);
        expect_folders(loop, w, 3);
        snprintf(sub, sizeof sub, "m%d/inner/x.lua", round);
        write_file(sub, "return 1");
        expect(loop, sub, MF_FSWATCH_WRITTEN);
        /* moved out of the root: no watch left behind */
        snprintf(away, sizeof away, "%s-away%d", root, round);
        ASSERT_EQ(rename(moved, away), 0);
        expect_folders(loop, w, 1);
        snprintf(cmd, sizeof cmd, "rm -rf %s", away);
        ASSERT_EQ(system(cmd), 0);
    }
    watch_end(loop, w);
}

TEST(a_missing_root_fails_with_enoent)
{
    mf_loop_t *loop = mf_loop_create();
    int err = 0;
    ASSERT(mf_fswatch_start(loop, "/nonexistent/dir", on_change, NULL, &err) ==
           NULL);
    ASSERT_EQ(err, MF_ENOENT);
    mf_loop_destroy(loop);
}

/* Files inside a folder moved in or out are not reported one by one: the
 * folder is, after it is watched (a file written into it later is reported
 * as usual). A new link is reported as created. */
TEST(folders_moved_in_and_out_and_new_links_are_reported)
{
    char outside[64], path[256];
    strcpy(root, "/tmp/mf-watch-XXXXXX");
    ASSERT(mkdtemp(root) != NULL);
    strcpy(outside, "/tmp/mf-watch-out-XXXXXX");
    ASSERT(mkdtemp(outside) != NULL);
    mf_loop_t *loop = mf_loop_create();
    mf_fswatch_t *w = mf_fswatch_start(loop, root, on_change, NULL, NULL);
    ASSERT(w != NULL);
    mf_loop_ref(loop);
    nseen = 0;
    snprintf(path, sizeof path, "%s/site", root);
    ASSERT_EQ(rename(outside, path), 0);
    expect(loop, "site", MF_FSWATCH_WRITTEN);
    write_file("site/page.lua", "return 1");
    expect(loop, "site/page.lua", MF_FSWATCH_WRITTEN);
    ASSERT_EQ(rename(path, outside), 0);
    expect(loop, "site", MF_FSWATCH_REMOVED);
    /* A link is complete when it appears: no write, no close. */
    snprintf(path, sizeof path, "%s/link.lua", root);
    ASSERT_EQ(symlink("/dev/null", path), 0);
    expect(loop, "link.lua", MF_FSWATCH_CREATED);

    mf_fswatch_stop(w);
    mf_loop_unref(loop);
    ASSERT_EQ(mf_loop_run(loop, MF_RUN_DEFAULT), 0);
    mf_loop_destroy(loop);
    char cmd[192];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", root, outside);
    ASSERT_EQ(system(cmd), 0);
}
