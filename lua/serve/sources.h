/*
 * lua/serve/sources.h — the site's Lua sources for `moonflow serve`:
 * reading a script, and the last good source of each file, shared by the
 * workers.
 *
 * Each worker compiles scripts (routes and the modules they require) in
 * its own state, at its own pace. Without a shared memory of what last
 * compiled, a worker that had not yet run a script when a broken version
 * was saved would have nothing to fall back on. So every source that
 * compiles is published here under its absolute file name, and a worker
 * whose copy of the file does not compile takes the last good one. The
 * lock is taken on loads and changes only, never per request. Sources are
 * user-sized: their copies use the checked allocator, and a refused one is
 * reported by the caller.
 *
 * Ownership: the store owns its copies; mf_serve_sources_forget drops one
 * file's (the file is gone), mf_serve_sources_forget_all every one (at
 * exit). Threads: any (one lock).
 */
#ifndef MF_SERVE_SOURCES_H
#define MF_SERVE_SOURCES_H

#include <stddef.h>

#include <moonflow/lua_host.h>

/* Reads the whole file into *text (caller frees with mf_free). Returns 0
 * or a negative MF_E* code (*text is then NULL). */
int mf_serve_source_read(const char *path, char **text, size_t *len);

/* Copies text in as the last good source of file. Returns 0, or MF_ENOMEM
 * (the previous copy, if any, stays). */
int mf_serve_source_publish(const char *file, const char *text, size_t len);
/* mf_serve_source_publish, and a copy refused for lack of memory is logged
 * on host (workers that never ran the file then cannot fall back to it). */
void mf_serve_source_keep(mf_lua_host_t *host, const char *file,
                          const char *text, size_t len);
/* *copy gets a copy of the last good source (caller frees with mf_free).
 * Returns 0, MF_ENOENT (none yet) or MF_ENOMEM. */
int mf_serve_source_last_good(const char *file, char **copy, size_t *len);
/* The file was removed: its last good source goes too. */
void mf_serve_sources_forget(const char *file);
void mf_serve_sources_forget_all(void);

#endif /* MF_SERVE_SOURCES_H */
