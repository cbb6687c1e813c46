/*
 * moonflow/listen.h — the listening sockets of one address, held by one
 * process at a time, and handed whole to another process for a graceful
 * restart.
 *
 * One owner per address. mf_listen_open first takes the address's lock: an
 * abstract unix socket named after the address ("moonflow/listen/" and the
 * numeric address, "127.0.0.1:8080"), which the kernel releases the moment
 * the process dies, so a crash never leaves a stale lock. Of two processes
 * starting at the same moment exactly one binds the name; the other gets
 * MF_EADDRINUSE. Holding the lock, it checks that nothing else listens on
 * the port (a bind without SO_REUSEPORT, closed at once) and opens `count`
 * SO_REUSEPORT listeners, one per worker, so that only the workers of one
 * process share the port. The check and the binds of every moonflow on one
 * port are serialized by a second, short-lived lock named after the port, so
 * "0.0.0.0:8080" and "127.0.0.1:8080" cannot both slip in either.
 *
 * Handover (a graceful restart): a process opened with take_over = true
 * finds the lock held, connects to it and receives the holder's listeners
 * and the lock itself over SCM_RIGHTS (the same sockets: their accept
 * queues are never closed, no connection is refused or reset). Both
 * processes accept on them until the new one calls mf_listen_confirm; then
 * the old one, waiting in mf_listen_wait_handover, returns 1 and stops
 * accepting, drains and exits. If the new process exits before confirming,
 * the old one simply keeps serving. Only a process of the same user is
 * answered (SO_PEERCRED).
 *
 * An address with port 0 gets a fresh port: it is bound first and locked
 * after; there is nothing to take over.
 *
 * Threads: any, one at a time per mf_listen_t, except that
 * mf_listen_wait_handover may block in a thread of its own while the owner
 * reads the listeners' fds. Ownership: mf_listen_t owns the lock, the
 * listeners and the handover connection; mf_listen_close closes them all.
 * A caller that hands a listener to a server gives it a dup.
 */
#ifndef MOONFLOW_LISTEN_H
#define MOONFLOW_LISTEN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common.h"

MF_EXTERN_C_BEGIN

typedef struct mf_listen mf_listen_t;

typedef struct mf_listen_opts {
    const char *address; /* "127.0.0.1:8080", "[::1]:8443", ":8080" */
    unsigned count;      /* listeners wanted: one per worker, >= 1 */
    int backlog;         /* of each listener */
    /* Take the listeners over from the process holding the address; when
     * none does, open them as usual. */
    bool take_over;
} mf_listen_opts_t;

/* Opens (or takes over) the listeners of opts->address. NULL on failure
 * with *err: MF_EINVAL (bad address), MF_EADDRINUSE (held by another
 * process: another moonflow without take_over, or anything else listening
 * on the port), MF_EPERM (a holder that refused us), MF_EPROTO (a holder
 * that does not speak the handover), MF_ETIMEDOUT (a holder that did not
 * answer within 10 s), or the system error of a socket call. */
MF_API mf_listen_t *mf_listen_open(const mf_listen_opts_t *opts, int *err);

/* The listeners: at least opts->count; more when the process taken over
 * had more (every one of them must keep being accepted on). */
MF_API unsigned mf_listen_count(const mf_listen_t *l);
MF_API int mf_listen_fd(const mf_listen_t *l, unsigned index);
MF_API uint16_t mf_listen_port(const mf_listen_t *l);
/* The process the listeners were taken over from, 0 when opened fresh. */
MF_API pid_t mf_listen_taken_from(const mf_listen_t *l);

/* New side, once its servers accept on the listeners: tells the old
 * process to stop. 0, or the system error of telling it (it is gone: the
 * listeners are ours all the same). Nothing to do after a fresh open. */
MF_API int mf_listen_confirm(mf_listen_t *l);

/* Old side, in a thread of its own: waits for a process asking for the
 * listeners and answers it. Returns 1 when a new process has confirmed
 * (*to: its pid; stop accepting now), 0 when cancel_fd became readable,
 * or a negative code for a request that came to nothing (call again):
 * MF_EPERM (another user: refused), MF_ECANCELED (the new process exited
 * before confirming: keep serving) or a system error. */
MF_API int mf_listen_wait_handover(mf_listen_t *l, int cancel_fd, pid_t *to);

/* Closes the lock, the listeners and any pending handover. NULL is fine. */
MF_API void mf_listen_close(mf_listen_t *l);

MF_EXTERN_C_END

#endif /* MOONFLOW_LISTEN_H */
