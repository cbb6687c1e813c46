/* load.c — the HTTP load generator (skeleton). */
#include "moonflow/load.h"

#include "moonflow/error.h"

mf_load_t *mf_load_create(mf_loop_t *loop, const mf_load_config_t *cfg,
                          const mf_load_hooks_t *hooks, int *err)
{
    (void)loop;
    (void)cfg;
    (void)hooks;
    *err = MF_EINVAL;
    return NULL;
}
void mf_load_start(mf_load_t *load, void (*done)(mf_load_t *, void *),
                   void *user)
{
    (void)load;
    (void)done;
    (void)user;
}
void mf_load_stop(mf_load_t *load)
{
    (void)load;
}
int mf_load_error(const mf_load_t *load)
{
    (void)load;
    return 0;
}
const mf_load_stats_t *mf_load_stats(const mf_load_t *load)
{
    (void)load;
    return NULL;
}
void mf_load_progress(const mf_load_t *load, mf_load_progress_t *out)
{
    (void)load;
    (void)out;
}
void mf_load_destroy(mf_load_t *load)
{
    (void)load;
}
size_t mf_load_count_requests(const char *buf, size_t len)
{
    (void)buf;
    (void)len;
    return 0;
}
