/*
 * listen.c — the listeners of one address for one process: the address
 * lock, the port check, the SO_REUSEPORT listeners, and the handover of all
 * of them to another process (moonflow/listen.h). Owns mf_listen_t. May
 * call: net.c (addresses, listening sockets), libc.
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "moonflow/error.h"
#include "moonflow/listen.h"
#include "net.h"

/* A handover carries the lock and every listener; serve has at most 1024
 * workers, but listeners taken over are never dropped, so allow more. */
#define MF_LISTEN_MAX 4096
#define MF_LISTEN_FDS_PER_MSG 64 /* SCM_RIGHTS carries at most 253 */
#define MF_LISTEN_ANSWER_MS 10000
/* Another start holds the port's lock for a check and a few binds. */
#define MF_LISTEN_PORT_WAIT_MS 2000
/* The holder went away while we asked it: try the lock again. */
#define MF_LISTEN_RETRIES 50
#define MF_LISTEN_NAP_MS 10

struct mf_listen {
    mf_sockaddr_t addr; /* with the bound port */
    int lock_fd;        /* the address lock: a listening SEQPACKET socket */
    int handover_fd;    /* new side: the old process, until confirmed */
    pid_t from;         /* new side: the old process's pid */
    unsigned count, cap;
    int *fds;
};

/* One message of a handover. Its SCM_RIGHTS carry the fds [first,
 * first + n) of the whole list: the lock first, then the listeners. */
typedef struct mf_listen_msg {
    char magic[8]; /* "mflisten" */
    uint32_t version;
    uint32_t total;
    uint32_t first;
    uint32_t n;
} mf_listen_msg_t;

static const char mf__listen_magic[8] = {'m', 'f', 'l', 'i',
                                         's', 't', 'e', 'n'};

typedef union mf_listen_ctl {
    char buf[CMSG_SPACE(MF_LISTEN_FDS_PER_MSG * sizeof(int))];
    struct cmsghdr align;
} mf_listen_ctl_t;

static void mf__listen_nap(void)
{
    struct timespec ts = {0, MF_LISTEN_NAP_MS * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- names in the abstract unix namespace -------------------------------- */

static int mf__listen_unix(const char *name, bool connect_to)
{
    struct sockaddr_un sun;
    memset(&sun, 0, sizeof sun);
    sun.sun_family = AF_UNIX;
    size_t len = strlen(name);
    memcpy(sun.sun_path + 1, name, len); /* abstract: a leading NUL */
    socklen_t slen =
        (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
    int flags = SOCK_CLOEXEC | (connect_to ? 0 : SOCK_NONBLOCK);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | flags, 0);
    if (fd < 0)
        return mf_err_from_errno(errno);
    int rc = connect_to ? connect(fd, (struct sockaddr *)&sun, slen)
                        : bind(fd, (struct sockaddr *)&sun, slen);
    if (rc < 0) {
        rc = mf_err_from_errno(errno);
        close(fd);
        return rc;
    }
    return fd;
}

/* The address lock: bound and listening (a handover connects to it). */
static int mf__listen_lock(const char *name)
{
    int fd = mf__listen_unix(name, false);
    if (fd >= 0 && listen(fd, 16) < 0) {
        int err = mf_err_from_errno(errno);
        close(fd);
        return err;
    }
    return fd;
}

/* The port's lock, held by a start for its check and binds only: waits
 * for another start to finish. */
static int mf__listen_port_lock(uint16_t port)
{
    char name[40];
    snprintf(name, sizeof name, "moonflow/port/%u", (unsigned)port);
    for (int waited = 0; waited < MF_LISTEN_PORT_WAIT_MS;
         waited += MF_LISTEN_NAP_MS) {
        int fd = mf__listen_unix(name, false);
        if (fd != MF_EADDRINUSE)
            return fd;
        mf__listen_nap();
    }
    return MF_ETIMEDOUT;
}

/* ---- the object ------------------------------------------------------------
 */

static void mf__listen_add(mf_listen_t *l, int fd)
{
    if (l->count == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 8;
        l->fds = mf_xrealloc(l->fds, l->cap * sizeof(int));
    }
    l->fds[l->count++] = fd;
}

static int mf__listen_add_listeners(mf_listen_t *l, unsigned count, int backlog)
{
    while (l->count < count) {
        int fd = mf__net_listen(&l->addr, backlog);
        if (fd < 0)
            return fd;
        mf__listen_add(l, fd);
    }
    return 0;
}

static void mf__listen_close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Back to nothing held (a handover that came to nothing). */
static void mf__listen_reset(mf_listen_t *l)
{
    mf__listen_close_fd(&l->lock_fd);
    mf__listen_close_fd(&l->handover_fd);
    for (unsigned i = 0; i < l->count; i++)
        close(l->fds[i]);
    l->count = 0;
    l->from = 0;
}

void mf_listen_close(mf_listen_t *l)
{
    if (!l)
        return;
    mf__listen_reset(l);
    mf_free(l->fds);
    mf_free(l);
}

unsigned mf_listen_count(const mf_listen_t *l)
{
    return l->count;
}

int mf_listen_fd(const mf_listen_t *l, unsigned index)
{
    return index < l->count ? l->fds[index] : -1;
}

uint16_t mf_listen_port(const mf_listen_t *l)
{
    return mf__net_port(&l->addr);
}

pid_t mf_listen_taken_from(const mf_listen_t *l)
{
    return l->from;
}

/* ---- a fresh open ------------------------------------------------------ */

/* Holding the address lock: nothing else may listen on the port; then the
 * listeners. The port's lock makes the check and the binds one step for
 * every moonflow starting on this port, whatever its address. */
static int mf__listen_bind_all(mf_listen_t *l, const mf_listen_opts_t *o)
{
    int port_lock = mf__listen_port_lock(mf__net_port(&l->addr));
    if (port_lock < 0)
        return port_lock;
    int rc = mf__net_check_free(&l->addr);
    if (rc == 0)
        rc = mf__listen_add_listeners(l, o->count, o->backlog);
    close(port_lock);
    return rc;
}

/* Port 0: the kernel picks a port no one uses; lock it, then the rest. */
static int mf__listen_fresh_port(mf_listen_t *l, const mf_listen_opts_t *o)
{
    int fd = mf__net_listen(&l->addr, o->backlog);
    if (fd < 0)
        return fd;
    mf__listen_add(l, fd);
    socklen_t len = sizeof l->addr;
    getsockname(fd, &l->addr.sa, &len);
    char name[96], text[64];
    mf__net_addr_text(&l->addr, text, sizeof text);
    snprintf(name, sizeof name, "moonflow/listen/%s", text);
    int lock = mf__listen_lock(name);
    if (lock < 0)
        return lock;
    l->lock_fd = lock;
    return mf__listen_add_listeners(l, o->count, o->backlog);
}

/* ---- the new side of a handover ---------------------------------------- */

/* The fds a message carries; *n of them. */
static void mf__listen_cmsg_fds(struct msghdr *mh, int *fds, unsigned *n)
{
    *n = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t bytes = c->cmsg_len - CMSG_LEN(0);
        for (size_t i = 0; i < bytes / sizeof(int); i++)
            if (*n < MF_LISTEN_FDS_PER_MSG)
                memcpy(&fds[(*n)++], CMSG_DATA(c) + i * sizeof(int),
                       sizeof(int));
    }
}

/* Keeps a received fd: the first is the lock, the rest are listeners. */
static void mf__listen_keep(mf_listen_t *l, int fd)
{
    if (l->lock_fd < 0)
        l->lock_fd = fd;
    else
        mf__listen_add(l, fd);
}

/* One message; returns the fds it brought (>= 1) or a negative code. Its
 * fds are kept before anything is checked, so none leaks. */
static int mf__listen_recv_msg(mf_listen_t *l, int conn, uint32_t have,
                               uint32_t *total)
{
    mf_listen_msg_t msg;
    mf_listen_ctl_t ctl;
    struct iovec iov = {&msg, sizeof msg};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl.buf,
                        .msg_controllen = sizeof ctl.buf};
    ssize_t got = recvmsg(conn, &mh, MSG_CMSG_CLOEXEC);
    if (got < 0)
        return errno == EAGAIN ? MF_ETIMEDOUT : mf_err_from_errno(errno);
    int fds[MF_LISTEN_FDS_PER_MSG];
    unsigned n;
    mf__listen_cmsg_fds(&mh, fds, &n);
    for (unsigned i = 0; i < n; i++)
        mf__listen_keep(l, fds[i]);
    if (got == 0)
        return MF_ECLOSED; /* the holder is stopping: ask again */
    if ((size_t)got != sizeof msg || (mh.msg_flags & MSG_CTRUNC) ||
        memcmp(msg.magic, mf__listen_magic, sizeof msg.magic) ||
        msg.version != 1 || msg.first != have || msg.n != n || n == 0 ||
        msg.total > MF_LISTEN_MAX + 1 || msg.first + n > msg.total)
        return MF_EPROTO;
    *total = msg.total;
    return (int)n;
}

/* A received fd is a listening socket of the type (and address) wanted. */
static bool mf__listen_is_listener(int fd, int type, const mf_sockaddr_t *addr)
{
    int v = 0;
    socklen_t len = sizeof v;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len) < 0 || v != type)
        return false;
    len = sizeof v;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) < 0 || !v)
        return false;
    if (!addr)
        return true;
    mf_sockaddr_t bound;
    char a[64], b[64];
    len = sizeof bound;
    if (getsockname(fd, &bound.sa, &len) < 0)
        return false;
    mf__net_addr_text(&bound, a, sizeof a);
    mf__net_addr_text(addr, b, sizeof b);
    return strcmp(a, b) == 0;
}

/* The peer runs as our user; *pid is its pid. */
static int mf__listen_peer(int conn, pid_t *pid)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return mf_err_from_errno(errno);
    *pid = cred.pid;
    return cred.uid == geteuid() ? 0 : MF_EPERM;
}

static void mf__listen_timeout(int fd, int option)
{
    struct timeval tv = {MF_LISTEN_ANSWER_MS / 1000, 0};
    setsockopt(fd, SOL_SOCKET, option, &tv, sizeof tv);
}

static int mf__listen_receive(mf_listen_t *l, int conn)
{
    int rc = mf__listen_peer(conn, &l->from);
    if (rc < 0)
        return rc;
    mf__listen_timeout(conn, SO_RCVTIMEO);
    uint32_t total = 1;
    for (uint32_t have = 0; have < total;) {
        rc = mf__listen_recv_msg(l, conn, have, &total);
        if (rc < 0)
            return rc;
        have += (uint32_t)rc;
    }
    if (!mf__listen_is_listener(l->lock_fd, SOCK_SEQPACKET, NULL))
        return MF_EPROTO;
    for (unsigned i = 0; i < l->count; i++)
        if (!mf__listen_is_listener(l->fds[i], SOCK_STREAM, &l->addr))
            return MF_EPROTO;
    return l->count ? 0 : MF_EPROTO;
}

static int mf__listen_take_over(mf_listen_t *l, const char *name,
                                const mf_listen_opts_t *o)
{
    int conn = mf__listen_unix(name, true);
    if (conn < 0)
        return conn;
    l->handover_fd = conn;
    int rc = mf__listen_receive(l, conn);
    if (rc == 0 && l->count < o->count)
        rc = mf__listen_add_listeners(l, o->count, o->backlog);
    return rc;
}

/* A fixed port: the lock, or the holder's listeners when asked to take
 * over. A holder that goes away while asked (stopping) frees the lock: try
 * again. */
static int mf__listen_acquire(mf_listen_t *l, const mf_listen_opts_t *o)
{
    char name[96], text[64];
    mf__net_addr_text(&l->addr, text, sizeof text);
    snprintf(name, sizeof name, "moonflow/listen/%s", text);
    for (int tries = 0; tries < MF_LISTEN_RETRIES; tries++) {
        int lock = mf__listen_lock(name);
        if (lock >= 0) {
            l->lock_fd = lock;
            return mf__listen_bind_all(l, o);
        }
        if (lock != MF_EADDRINUSE || !o->take_over)
            return lock;
        int rc = mf__listen_take_over(l, name, o);
        if (rc != MF_ECONNREFUSED && rc != MF_ECLOSED)
            return rc;
        mf__listen_reset(l);
        mf__listen_nap();
    }
    return MF_EADDRINUSE;
}

mf_listen_t *mf_listen_open(const mf_listen_opts_t *opts, int *err)
{
    mf_sockaddr_t addr;
    int rc =
        opts->count ? mf__net_parse_listen(opts->address, &addr) : MF_EINVAL;
    mf_listen_t *l = NULL;
    if (rc == 0) {
        l = mf_xcalloc(1, sizeof(*l));
        l->addr = addr;
        l->lock_fd = l->handover_fd = -1;
        rc = mf__net_port(&addr) ? mf__listen_acquire(l, opts)
                                 : mf__listen_fresh_port(l, opts);
    }
    if (rc < 0) {
        mf_listen_close(l);
        if (err)
            *err = rc;
        return NULL;
    }
    return l;
}

int mf_listen_confirm(mf_listen_t *l)
{
    if (l->handover_fd < 0)
        return 0;
    ssize_t n = send(l->handover_fd, "R", 1, MSG_NOSIGNAL);
    int rc = n == 1 ? 0 : mf_err_from_errno(errno);
    mf__listen_close_fd(&l->handover_fd);
    return rc;
}

/* ---- the old side of a handover ---------------------------------------- */

/* 1 when fd is readable (or hung up), 0 when cancel_fd is. */
static int mf__listen_wait(int fd, int cancel_fd)
{
    struct pollfd p[2] = {{.fd = cancel_fd, .events = POLLIN},
                          {.fd = fd, .events = POLLIN}};
    for (;;) {
        int n = poll(p, 2, -1);
        if (n < 0 && errno != EINTR)
            return mf_err_from_errno(errno);
        if (n > 0 && p[0].revents)
            return 0;
        if (n > 0 && p[1].revents)
            return 1;
    }
}

/* Sends fds [first, first + n) of the list: the lock, then the listeners. */
static int mf__listen_send_msg(const mf_listen_t *l, int conn, uint32_t first,
                               uint32_t n)
{
    mf_listen_msg_t msg = {
        .version = 1, .total = l->count + 1, .first = first, .n = n};
    memcpy(msg.magic, mf__listen_magic, sizeof msg.magic);
    mf_listen_ctl_t ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {&msg, sizeof msg};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl.buf,
                        .msg_controllen = CMSG_SPACE(n * sizeof(int))};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(n * sizeof(int));
    for (uint32_t i = 0; i < n; i++) {
        int fd = first + i == 0 ? l->lock_fd : l->fds[first + i - 1];
        memcpy(CMSG_DATA(c) + i * sizeof(int), &fd, sizeof fd);
    }
    return sendmsg(conn, &mh, MSG_NOSIGNAL) == (ssize_t)sizeof msg
               ? 0
               : mf_err_from_errno(errno);
}

static int mf__listen_give(const mf_listen_t *l, int conn, pid_t *to)
{
    int rc = mf__listen_peer(conn, to);
    if (rc < 0)
        return rc;
    mf__listen_timeout(conn, SO_SNDTIMEO); /* a peer that does not read */
    uint32_t total = l->count + 1;
    for (uint32_t first = 0; rc == 0 && first < total;) {
        uint32_t n = total - first < MF_LISTEN_FDS_PER_MSG
                         ? total - first
                         : MF_LISTEN_FDS_PER_MSG;
        rc = mf__listen_send_msg(l, conn, first, n);
        first += n;
    }
    return rc;
}

/* The new process's last word: "R" once it serves; anything else (it
 * exited) leaves the listeners with us. */
static int mf__listen_confirmed(int conn)
{
    char c = 0;
    ssize_t n;
    do
        n = recv(conn, &c, 1, 0);
    while (n < 0 && errno == EINTR);
    return n == 1 && c == 'R' ? 1 : MF_ECANCELED;
}

int mf_listen_wait_handover(mf_listen_t *l, int cancel_fd, pid_t *to)
{
    int conn = -1, rc;
    *to = 0;
    while (conn < 0) {
        rc = mf__listen_wait(l->lock_fd, cancel_fd);
        if (rc <= 0)
            return rc;
        conn = accept4(l->lock_fd, NULL, NULL, SOCK_CLOEXEC);
        if (conn < 0 && errno != EAGAIN && errno != EINTR &&
            errno != ECONNABORTED)
            return mf_err_from_errno(errno);
    }
    rc = mf__listen_give(l, conn, to);
    if (rc == 0)
        rc = mf__listen_wait(conn, cancel_fd);
    if (rc == 1)
        rc = mf__listen_confirmed(conn);
    close(conn);
    return rc;
}
