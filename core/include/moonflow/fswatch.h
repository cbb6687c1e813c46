/*
 * moonflow/fswatch.h — watching a directory tree for changes on a loop
 * (inotify), for hot reload of scripts.
 *
 * The whole tree under the root is watched, and directories created later
 * are added as they appear. Each change calls the callback on the loop's
 * thread with the path relative to the root ("api/user.lua") and what
 * happened. Editors that save by writing a temporary file and renaming it
 * show up as MF_FSWATCH_WRITTEN for the final name. A directory that
 * appears (created or moved in) is reported as MF_FSWATCH_WRITTEN once it
 * is watched, and one that goes as MF_FSWATCH_REMOVED, with its own path:
 * the files inside it are not reported one by one.
 *
 * Threads: the loop's thread. Ownership: the watcher belongs to its creator
 * and is freed by mf_fswatch_stop (safe from inside its own callback: the
 * memory goes from a deferred post). The path passed to the callback is
 * valid during the call only.
 */
#ifndef MOONFLOW_FSWATCH_H
#define MOONFLOW_FSWATCH_H

#include "loop.h"

MF_EXTERN_C_BEGIN

typedef struct mf_fswatch mf_fswatch_t;

enum {
    MF_FSWATCH_WRITTEN = 1,  /* created, written and closed, or renamed in */
    MF_FSWATCH_REMOVED = 2,  /* deleted or renamed away */
    MF_FSWATCH_OVERFLOW = 4, /* the kernel dropped events: rescan everything */
    /* A new name: a symbolic or hard link, complete at once, or a file
     * whose writer may still be writing (WRITTEN follows at its close). */
    MF_FSWATCH_CREATED = 8
};

typedef void (*mf_fswatch_cb)(mf_fswatch_t *w, const char *path, unsigned what,
                              void *arg);

/* Starts watching root. NULL on failure with *err set (MF_ENOENT, EMFILE:
 * the inotify limits). The watcher does not keep mf_loop_run alive. */
MF_API mf_fswatch_t *mf_fswatch_start(mf_loop_t *loop, const char *root,
                                      mf_fswatch_cb cb, void *arg, int *err);
MF_API void mf_fswatch_stop(mf_fswatch_t *w);
/* Folders watched now, the root included: one that is deleted or moved
 * away (and the folders inside it) is forgotten once the kernel confirms
 * its watch is gone. */
MF_API size_t mf_fswatch_folders(const mf_fswatch_t *w);

MF_EXTERN_C_END

#endif /* MOONFLOW_FSWATCH_H */
