/*
 * upstream_balance.c — a loop's balancers (moonflow/upstream.h): the
 * per-loop hook that picks an attempt's server instead of the group's
 * policy (a Lua function lives in one worker's state, so a balancer is a
 * loop's, not the process's).
 *
 * Ownership: the loop's value under mf__balancer_key, a small array freed
 * with the loop; the balancers' ud stays their setter's.
 *
 * May call: the loop's values, upstream_pick.c, libc.
 */
#include <stdlib.h>

#include "net/upstream_int.h"

typedef struct mf_balancer {
    mf_upstream_t *up;
    mf_upstream_balancer_fn fn;
    void *ud;
} mf_balancer_t;

typedef struct mf_balancers {
    size_t n;
    mf_balancer_t list[];
} mf_balancers_t;

static void mf__balancers_free(mf_loop_t *loop, void *value)
{
    (void)loop;
    free(value);
}

/* Below the Lua host (its state, which the balancers' ud points into, goes
 * first) and above nothing that calls them. */
#define MF_BALANCER_RANK 35
static mf_loop_key_t mf__balancer_key =
    MF_LOOP_KEY_INIT(MF_BALANCER_RANK, mf__balancers_free);

void mf_upstream_set_balancer(mf_loop_t *loop, mf_upstream_t *up,
                              mf_upstream_balancer_fn fn, void *ud)
{
    mf_balancers_t *b = mf_loop_get(loop, &mf__balancer_key);
    size_t n = b ? b->n : 0;
    for (size_t i = 0; i < n; i++)
        if (b->list[i].up == up) {
            if (!fn && ud && b->list[i].ud != ud)
                return;                   /* another setter's since */
            b->list[i] = b->list[--b->n]; /* replaced below, or cleared */
            n--;
            break;
        }
    if (!fn)
        return;
    b = mf_xrealloc(b, sizeof(*b) + (n + 1) * sizeof(b->list[0]));
    b->n = n + 1;
    b->list[n] = (mf_balancer_t){up, fn, ud};
    mf_loop_set(loop, &mf__balancer_key, b);
}

int mf_upstream_balance(mf_loop_t *loop, mf_upstream_try_t *t, const char *key,
                        size_t key_len)
{
    const mf_balancers_t *b = mf_loop_get(loop, &mf__balancer_key);
    for (size_t i = 0; b && i < b->n; i++)
        if (b->list[i].up == t->up)
            return b->list[i].fn(b->list[i].ud, t, key, key_len);
    return mf_upstream_pick(t, key, key_len);
}
