/*
 * http_file_cache.h — a root's open files, kept for the next request: a
 * descriptor and its stat per relative path, at most a fixed number of
 * them, the least recently used going first; a file watcher on the root
 * (moonflow/fswatch.h) drops an entry as soon as its file is written,
 * replaced or removed. Internal (http_static.c uses it).
 *
 * The cache owns its entries' descriptors and its watcher; one loop
 * thread uses it (the root's owner's). A hit hands out a dup of the
 * descriptor: the caller owns that one (the exchange closes it once
 * written) and the cached one stays. Nothing is allocated after create.
 */
#ifndef MF_HTTP_FILE_CACHE_H
#define MF_HTTP_FILE_CACHE_H

#include <stddef.h>
#include <sys/stat.h>

#include "moonflow/loop.h"

typedef struct mf_file_cache mf_file_cache_t;

/* Paths longer than this are not cached (looked up each time). */
#define MF_FILE_CACHE_PATH_MAX 240

/* A cache of up to entries files beneath dir, watched on loop. NULL with
 * a negative MF_E* code in *err (the watcher could not start). */
mf_file_cache_t *mf__file_cache_create(mf_loop_t *loop, const char *dir,
                                       size_t entries, int *err);
void mf__file_cache_destroy(mf_file_cache_t *c);
/* A dup of rel's cached descriptor (its stat in *st), or -1: not cached
 * (or the dup failed). */
int mf__file_cache_get(mf_file_cache_t *c, const char *rel, struct stat *st);
/* Keeps a dup of fd (a regular file opened as rel, with its stat) for the
 * next get, evicting the least recently used entry when full. Nothing
 * happens for a path too long or a failed dup. */
void mf__file_cache_put(mf_file_cache_t *c, const char *rel, int fd,
                        const struct stat *st);
/* Entries held. */
size_t mf__file_cache_size(const mf_file_cache_t *c);

#endif /* MF_HTTP_FILE_CACHE_H */
