/*
 * lua/serve/site.h — generations of the site's code on one worker of
 * `moonflow serve`: the environment that route scripts and the site's own
 * modules run in.
 *
 * A generation is a fresh module environment: a globals table whose reads
 * fall through to the state's _G (the standard library, `moonflow` and
 * every system module are shared), its own `require` and its own table of
 * loaded site modules. require(name) looks in the site first —
 * ROOT/lib/?.lua, ROOT/lib/?/init.lua, ROOT/?.lua, ROOT/?/init.lua — and
 * runs a module found there once per generation, in the generation's
 * environment (so the modules it requires are the generation's too); any
 * other name goes to the state's require (system modules: loaded once,
 * shared by every generation). Globals that site code sets stay in its
 * generation.
 *
 * A change to a module starts a new generation (mf_serve_site_renew): each
 * route compiled in an older one is compiled again at its next request, in
 * the new one, so a route and its modules are always one version. Requests
 * in flight keep the function they started with, and through it their
 * generation's environment, require and modules: they finish on the old
 * code (a module such a request requires for the first time after the
 * change is read as the file is now, into its old generation). Nothing
 * else holds an old generation, so it is garbage once its last request has
 * ended.
 *
 * A module file that does not compile is logged and its last good source
 * (sources.h) runs instead, as for routes.
 *
 * Ownership: the site belongs to its worker's route cache (routes.c) and
 * holds registry references to the current generation's environment and
 * to the set of module files it loaded. Threads: the worker's loop thread.
 */
#ifndef MF_SERVE_SITE_H
#define MF_SERVE_SITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <moonflow/lua_host.h>

typedef struct mf_serve_site mf_serve_site_t;

/* The site of the scripts folder root (copied), with its first generation. */
mf_serve_site_t *mf_serve_site_create(mf_lua_host_t *host, const char *root);
void mf_serve_site_destroy(mf_serve_site_t *site);

/* The current generation's number: a route compiled in another one is
 * compiled again before its next use. */
uint32_t mf_serve_site_generation(const mf_serve_site_t *site);
/* Starts a new generation. */
void mf_serve_site_renew(mf_serve_site_t *site);
/* path (ROOT/...) is a site module the current generation required, or a
 * folder holding one. */
bool mf_serve_site_has_module(mf_serve_site_t *site, const char *path);

/* Compiles text (the source of file) as a chunk of the current generation
 * and pushes it on L. Returns NULL, or the error message (on L). */
const char *mf_serve_site_load(mf_serve_site_t *site, lua_State *L,
                               const char *file, const char *text, size_t len);

#endif /* MF_SERVE_SITE_H */
