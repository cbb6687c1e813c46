/*
 * lua/serve/handover.c — the listeners of `moonflow serve`: opened once by
 * the main thread for all workers (the address lock and one SO_REUSEPORT
 * listener per worker, or with --takeover the running server's own
 * listeners, moonflow/listen.h), dealt to the workers as dups, and offered
 * to a process that takes over by a thread of its own, which wakes the main
 * thread with SIGUSR2 once that process serves.
 *
 * Ownership: mf_serve_handover_t owns the mf_listen_t (the originals), the
 * thread and its cancel eventfd; each worker's server owns its dups.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "serve.h"

int mf_serve_handover_open(mf_serve_handover_t *h, const mf_serve_config_t *c,
                           unsigned nworkers)
{
    memset(h, 0, sizeof(*h));
    h->cancel_fd = -1;
    mf_listen_opts_t opts = {.address = c->http.listen,
                             .count = nworkers,
                             .backlog = c->http.backlog,
                             .take_over = c->take_over};
    int err = 0;
    h->listen = mf_listen_open(&opts, &err);
    if (!h->listen) {
        fprintf(stderr, "moonflow serve: %s: %s%s\n", c->http.listen,
                mf_strerror(err),
                err == MF_EADDRINUSE && !c->take_over
                    ? " (another process listens there; a moonflow is "
                      "replaced gracefully by starting this one with "
                      "--takeover)"
                    : "");
        return -1;
    }
    if (c->take_over && !mf_listen_taken_from(h->listen))
        fprintf(stderr,
                "moonflow serve: --takeover: no server on %s, "
                "starting afresh\n",
                c->http.listen);
    return 0;
}

int *mf_serve_handover_fds(const mf_serve_handover_t *h, unsigned worker,
                           unsigned nworkers, unsigned *n)
{
    unsigned total = mf_listen_count(h->listen);
    int *fds = mf_xcalloc(total / nworkers + 1, sizeof(int));
    *n = 0;
    /* More listeners than workers (taken over from a server with more):
     * each is still accepted on, by worker j % nworkers. */
    for (unsigned j = worker; j < total; j += nworkers) {
        int fd = fcntl(mf_listen_fd(h->listen, j), F_DUPFD_CLOEXEC, 0);
        if (fd < 0) {
            mf_serve_handover_close_fds(fds, *n);
            *n = 0;
            return NULL; /* EMFILE: the worker reports it cannot listen */
        }
        fds[(*n)++] = fd;
    }
    return fds;
}

void mf_serve_handover_close_fds(int *fds, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        close(fds[i]);
    mf_free(fds);
}

/* Why a takeover request came to nothing; the server keeps serving. */
static void mf__handover_report(int rc, pid_t pid)
{
    if (rc == MF_EPERM)
        fprintf(stderr,
                "moonflow serve: pid %d of another user asked for the "
                "listeners: refused\n",
                (int)pid);
    else if (rc == MF_ECANCELED)
        fprintf(stderr,
                "moonflow serve: pid %d exited before taking over: still "
                "serving\n",
                (int)pid);
    else
        fprintf(stderr, "moonflow serve: a takeover failed: %s\n",
                mf_strerror(rc));
}

static void *mf__handover_thread(void *arg)
{
    mf_serve_handover_t *h = arg;
    for (;;) {
        pid_t to = 0;
        int rc = mf_listen_wait_handover(h->listen, h->cancel_fd, &to);
        if (rc == 0)
            return NULL;
        if (rc == 1) {
            h->to = to;
            atomic_store(&h->handed_over, true);
            pthread_kill(h->main, SIGUSR2);
            return NULL;
        }
        mf__handover_report(rc, to);
        if (rc != MF_EPERM && rc != MF_ECANCELED) {
            struct timespec nap = {0, 100 * 1000000L}; /* EMFILE: no spin */
            nanosleep(&nap, NULL);
        }
    }
}

void mf_serve_handover_serving(mf_serve_handover_t *h, const char *address)
{
    pid_t from = mf_listen_taken_from(h->listen);
    int rc = mf_listen_confirm(h->listen);
    if (from)
        fprintf(stderr, "moonflow serve: took %s over from pid %d%s%s\n",
                address, (int)from, rc ? ", which exited meanwhile: " : "",
                rc ? mf_strerror(rc) : "");
    h->main = pthread_self();
    h->cancel_fd = eventfd(0, EFD_CLOEXEC);
    int err = h->cancel_fd < 0
                  ? errno
                  : pthread_create(&h->thread, NULL, mf__handover_thread, h);
    if (err) {
        fprintf(stderr,
                "moonflow serve: cannot start the takeover thread (%s): "
                "this process cannot be taken over\n",
                strerror(err));
        return;
    }
    h->thread_started = true;
}

bool mf_serve_handover_done(const mf_serve_handover_t *h)
{
    return atomic_load(&h->handed_over);
}

void mf_serve_handover_close(mf_serve_handover_t *h)
{
    if (h->thread_started) {
        uint64_t one = 1;
        if (write(h->cancel_fd, &one, sizeof one) != sizeof one)
            perror("moonflow serve: stopping the takeover thread");
        pthread_join(h->thread, NULL);
        h->thread_started = false;
    }
    if (h->cancel_fd >= 0)
        close(h->cancel_fd);
    h->cancel_fd = -1;
    mf_listen_close(h->listen);
    h->listen = NULL;
}
