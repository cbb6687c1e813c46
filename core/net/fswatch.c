/*
 * fswatch.c — recursive inotify watcher on the loop.
 *
 * inotify watches one directory per descriptor, so the tree is walked once
 * at start and each new directory is added when its creation is reported.
 * Watch descriptors map to their relative directory path in a small array
 * (script trees are small; a linear lookup per event is fine).
 */
#include "moonflow/fswatch.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moonflow/error.h"

#define MF_FSWATCH_MASK                                                     \
    (IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_MOVED_FROM | \
     IN_DELETE_SELF | IN_ATTRIB)

typedef struct mf_fswatch_dir {
    int wd;
    char *rel; /* "" for the root, "api", "api/v2" ... */
} mf_fswatch_dir_t;

struct mf_fswatch {
    mf_loop_t *loop;
    mf_io_t io;
    char *root;
    mf_fswatch_cb cb;
    void *arg;
    mf_fswatch_dir_t *dirs;
    size_t ndirs;
    size_t cap;
    bool stopped;
    mf_post_t free_post;
};

static void mf__fswatch_add_tree(mf_fswatch_t *w, const char *rel);

static void mf__fswatch_remember(mf_fswatch_t *w, int wd, const char *rel)
{
    for (size_t i = 0; i < w->ndirs; i++)
        if (w->dirs[i].wd == wd)
            return; /* already watched (inotify reuses the wd) */
    if (w->ndirs == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 16;
        w->dirs = mf_xrealloc(w->dirs, w->cap * sizeof(*w->dirs));
    }
    w->dirs[w->ndirs].wd = wd;
    w->dirs[w->ndirs].rel = strdup(rel);
    w->ndirs++;
}

/* A watch the kernel dropped (its folder was deleted, or we removed the
 * watch): its entry goes too, so folders that come and go do not pile up
 * entries. */
static void mf__fswatch_forget(mf_fswatch_t *w, int wd)
{
    for (size_t i = 0; i < w->ndirs; i++)
        if (w->dirs[i].wd == wd) {
            free(w->dirs[i].rel);
            w->dirs[i] = w->dirs[--w->ndirs];
            return;
        }
}

/* A folder moved away keeps its watches (they follow the inode wherever
 * it went, and would report its later changes under its old name): they
 * are removed, the folder's and those below it; the kernel's IN_IGNORED
 * for each then forgets its entry. */
static void mf__fswatch_unwatch_tree(mf_fswatch_t *w, const char *rel)
{
    size_t n = strlen(rel);
    for (size_t i = 0; i < w->ndirs; i++) {
        const char *r = w->dirs[i].rel;
        if (strncmp(r, rel, n) == 0 && (r[n] == '\0' || r[n] == '/'))
            inotify_rm_watch(w->io.fd, w->dirs[i].wd);
    }
}

static const char *mf__fswatch_dir_of(const mf_fswatch_t *w, int wd)
{
    for (size_t i = 0; i < w->ndirs; i++)
        if (w->dirs[i].wd == wd)
            return w->dirs[i].rel;
    return NULL;
}

/* a + "/" + b; false when it does not fit (the path is then ignored). */
static bool mf__fswatch_join(char *out, size_t size, const char *a,
                             const char *b)
{
    int n = snprintf(out, size, "%s%s%s", a, *a && *b ? "/" : "", b);
    return n >= 0 && (size_t)n < size;
}

/* Watches root/rel and, recursively, every directory below it. */
static void mf__fswatch_add_tree(mf_fswatch_t *w, const char *rel)
{
    char abs[PATH_MAX];
    if (!mf__fswatch_join(abs, sizeof abs, w->root, rel))
        return;
    int wd = inotify_add_watch(w->io.fd, abs, MF_FSWATCH_MASK | IN_ONLYDIR);
    if (wd < 0)
        return;
    mf__fswatch_remember(w, wd, rel);
    DIR *dir = opendir(abs);
    struct dirent *e;
    while (dir && (e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue; /* ".", "..", hidden files and editor swap dirs */
        char child[PATH_MAX], full[PATH_MAX];
        struct stat st;
        if (mf__fswatch_join(child, sizeof child, rel, e->d_name) &&
            mf__fswatch_join(full, sizeof full, w->root, child) &&
            stat(full, &st) == 0 && S_ISDIR(st.st_mode))
            mf__fswatch_add_tree(w, child);
    }
    if (dir)
        closedir(dir);
}

static void mf__fswatch_event(mf_fswatch_t *w, const struct inotify_event *ev)
{
    if (ev->mask & IN_Q_OVERFLOW) {
        w->cb(w, "", MF_FSWATCH_OVERFLOW, w->arg);
        return;
    }
    if (ev->mask & IN_IGNORED) {
        mf__fswatch_forget(w, ev->wd);
        return;
    }
    const char *dir = mf__fswatch_dir_of(w, ev->wd);
    if (!dir || !ev->len || ev->name[0] == '.')
        return;
    char rel[PATH_MAX];
    if (!mf__fswatch_join(rel, sizeof rel, dir, ev->name))
        return;
    /* A directory that arrives is watched first and reported after, so
     * files written into it before its watch existed are on disk by the
     * time the callback looks; one that goes (moved away) takes its files
     * without an event for each. */
    if ((ev->mask & (IN_CREATE | IN_MOVED_TO)) && (ev->mask & IN_ISDIR)) {
        mf__fswatch_add_tree(w, rel);
        w->cb(w, rel, MF_FSWATCH_WRITTEN, w->arg);
        return;
    }
    if ((ev->mask & (IN_DELETE | IN_MOVED_FROM)) && (ev->mask & IN_ISDIR)) {
        if (ev->mask & IN_MOVED_FROM)
            mf__fswatch_unwatch_tree(w, rel);
        w->cb(w, rel, MF_FSWATCH_REMOVED, w->arg);
        return;
    }
    if (ev->mask & IN_ISDIR)
        return;
    if (ev->mask & (IN_CLOSE_WRITE | IN_MOVED_TO | IN_ATTRIB))
        w->cb(w, rel, MF_FSWATCH_WRITTEN, w->arg);
    else if (ev->mask & (IN_DELETE | IN_MOVED_FROM))
        w->cb(w, rel, MF_FSWATCH_REMOVED, w->arg);
    else if (ev->mask & IN_CREATE)
        w->cb(w, rel, MF_FSWATCH_CREATED, w->arg);
}

static void mf__fswatch_readable(mf_io_t *io, unsigned events)
{
    mf_fswatch_t *w = io->data;
    char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
    (void)events;
    while (!w->stopped) {
        ssize_t n = read(io->fd, buf, sizeof buf);
        if (n <= 0)
            return; /* EAGAIN: drained (edge-triggered) */
        for (char *p = buf; p < buf + n && !w->stopped;) {
            const struct inotify_event *ev = (const void *)p;
            mf__fswatch_event(w, ev);
            p += sizeof(*ev) + ev->len;
        }
    }
}

static void mf__fswatch_free(mf_post_t *post)
{
    mf_fswatch_t *w = post->data;
    for (size_t i = 0; i < w->ndirs; i++)
        free(w->dirs[i].rel);
    mf_free(w->dirs);
    free(w->root);
    mf_free(w);
}

mf_fswatch_t *mf_fswatch_start(mf_loop_t *loop, const char *root,
                               mf_fswatch_cb cb, void *arg, int *err)
{
    struct stat st;
    if (stat(root, &st) < 0 || !S_ISDIR(st.st_mode)) {
        if (err)
            *err = MF_ENOENT;
        return NULL;
    }
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) {
        if (err)
            *err = mf_err_from_errno(errno);
        return NULL;
    }
    mf_fswatch_t *w = mf_xcalloc(1, sizeof(*w));
    w->loop = loop;
    w->root = strdup(root);
    w->cb = cb;
    w->arg = arg;
    mf_io_init(&w->io, fd, mf__fswatch_readable, w);
    mf_io_set_ref(loop, &w->io, false);
    mf_io_start(loop, &w->io, MF_IO_READ);
    mf__fswatch_add_tree(w, "");
    return w;
}

size_t mf_fswatch_folders(const mf_fswatch_t *w)
{
    return w->ndirs;
}

void mf_fswatch_stop(mf_fswatch_t *w)
{
    if (!w || w->stopped)
        return;
    w->stopped = true;
    mf_io_stop(w->loop, &w->io);
    close(w->io.fd);
    mf_post_init(&w->free_post, mf__fswatch_free, w);
    mf_loop_defer(w->loop, &w->free_post);
}
