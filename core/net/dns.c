/*
 * dns.c — asynchronous name resolution on the loop: the per-loop resolver
 * (a c-ares channel driven by the loop's watchers and a timer), the
 * mf_dns_query_* API, and the dns task kind.
 *
 * Who owns what:
 * - The loop owns the resolver: it is the value of its loop key, created
 *   on first use, and mf__dns_resolver_dtor frees it with the loop.
 * - The resolver owns the c-ares channel, one socket record (an mf_io_t from
 *   mf_loop_alloc) per socket c-ares asks us to watch, the retry timer, and
 *   the table of names (dns_cache.h), which holds both the lookups in flight
 *   and the cached answers.
 * - Callers own their mf_dns_query_t. The resolver only links it on a
 *   pending entry's waiters list or posts it to the loop's deferred queue.
 *
 * Every result reaches its query through mf_loop_defer, including the ones
 * known at once (numeric host, cache hit, /etc/hosts answered inside
 * ares_getaddrinfo, bad host). So no user callback ever runs inside
 * mf_dns_query_start, mf_dns_query_cancel or c-ares' own processing, and a
 * callback may start queries or reconfigure the resolver freely.
 */
#include <arpa/inet.h>
#include <ares.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "dns_cache.h"
#include "net.h"
#include "moonflow/dns.h"
#include "moonflow/error.h"

#define MF__DNS_CACHE_MAX 1024
/* c-ares reports TTL 0 for /etc/hosts answers (the file has none). Keeping
 * them a few seconds spares a client that connects to "localhost" per
 * request a reread of the file on the loop thread; Go's resolver caches the
 * hosts file 5 s too. A genuine zero-TTL DNS answer is reused as long. */
#define MF__DNS_HOSTS_TTL_MS 5000
/* Each pass of ares_process_fd over a readable socket consumes input or
 * closes the socket; the bound only guards against a c-ares doing neither. */
#define MF__DNS_DRAIN_MAX 256

typedef struct mf_dns_resolver mf_dns_resolver_t;

typedef struct mf_dns_sock {
    mf_io_t io;
    mf_list_t link; /* mf_dns_resolver_t.socks */
} mf_dns_sock_t;

struct mf_dns_resolver {
    mf_loop_t *loop;
    ares_channel channel; /* NULL until the first lookup or configure */
    mf_timer_t timer;     /* armed from ares_timeout() */
    mf_list_t socks;      /* mf_dns_sock_t: the sockets c-ares has open */
    mf_dns_cache_t cache;
    mf_dns_config_t config; /* servers is not kept: applied at configure */
    size_t waiting;         /* queries linked on pending entries */
    bool dying;             /* the loop is being destroyed */
};

static const mf_dns_config_t mf__dns_defaults = {
    .timeout_ms = 2000,
    .tries = 2,
    .max_ttl_ms = 60000,
    .negative_ttl_ms = 1000,
    .servers = NULL,
};

/* ---- c-ares library and status codes --------------------------------- */

static pthread_once_t mf__dns_once = PTHREAD_ONCE_INIT;
static int mf__dns_lib_status;

static void mf__dns_lib_init_once(void)
{
    mf__dns_lib_status = ares_library_init(ARES_LIB_INIT_ALL);
}

static int mf__dns_status(int ares_status)
{
    switch (ares_status) {
    case ARES_SUCCESS:
        return 0;
    case ARES_ETIMEOUT:
        return MF_ETIMEDOUT;
    case ARES_ECANCELLED:
    case ARES_EDESTRUCTION:
        return MF_ECANCELED;
    case ARES_ENOMEM:
        return MF_ENOMEM;
    case ARES_EBADNAME:
        return MF_EINVAL;
    default: /* ENOTFOUND, ENODATA, ESERVFAIL, EREFUSED, ECONNREFUSED ... */
        return MF_EDNS;
    }
}

static int mf__dns_lib_init(void)
{
    pthread_once(&mf__dns_once, mf__dns_lib_init_once);
    return mf__dns_status(mf__dns_lib_status);
}

/* ---- c-ares sockets and timeouts on the loop -------------------------- */

static void mf__dns_sock_ready(mf_io_t *io, unsigned events);

static mf_dns_sock_t *mf__dns_sock_find(mf_dns_resolver_t *r, int fd)
{
    mf_list_t *pos;
    mf_list_foreach(pos, &r->socks)
    {
        mf_dns_sock_t *sock = mf_container_of(pos, mf_dns_sock_t, link);
        if (sock->io.fd == fd)
            return sock;
    }
    return NULL;
}

static void mf__dns_sock_free(mf_dns_resolver_t *r, mf_dns_sock_t *sock)
{
    mf_io_stop(r->loop, &sock->io);
    mf_list_remove(&sock->link);
    mf_loop_free(r->loop, sock, sizeof(*sock));
}

/* ARES_OPT_SOCK_STATE_CB: c-ares says which sockets to watch for what.
 * (fd, 0, 0) comes just before c-ares closes fd, so the watcher leaves epoll
 * while the fd number still means this socket. */
static void mf__dns_sock_state(void *data, ares_socket_t fd, int readable,
                               int writable)
{
    mf_dns_resolver_t *r = data;
    mf_dns_sock_t *sock = mf__dns_sock_find(r, fd);
    if (!readable && !writable) {
        if (sock)
            mf__dns_sock_free(r, sock);
        return;
    }
    if (!sock) {
        sock = mf_loop_alloc(r->loop, sizeof(*sock));
        mf_io_init(&sock->io, fd, mf__dns_sock_ready, r);
        mf_list_push_back(&r->socks, &sock->link);
    }
    unsigned events =
        (readable ? MF_IO_READ : 0) | (writable ? MF_IO_WRITE : 0);
    /* c-ares cannot be told of a failure here; its queries on an unwatched
     * socket end by its own timeout, which the timer still drives. */
    (void)mf_io_start(r->loop, &sock->io, events);
}

static void mf__dns_arm_timer(mf_dns_resolver_t *r)
{
    struct timeval tv;
    if (!r->channel || !ares_timeout(r->channel, NULL, &tv)) {
        mf_timer_stop(r->loop, &r->timer); /* no query in flight */
        return;
    }
    /* Rounded up: firing early would find nothing due and only re-arm. */
    uint64_t ms =
        (uint64_t)tv.tv_sec * 1000u + ((uint64_t)tv.tv_usec + 999u) / 1000u;
    mf_timer_start(r->loop, &r->timer, ms);
}

static void mf__dns_timer_fired(mf_timer_t *timer)
{
    mf_dns_resolver_t *r = timer->data;
    ares_process_fd(r->channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
    mf__dns_arm_timer(r);
}

/* Whether fd still holds something for c-ares: data, EOF or an error. */
static bool mf__dns_sock_pending(int fd)
{
    char byte;
    if (recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) >= 0)
        return true;
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

/* Our watchers are edge-triggered. c-ares drains a UDP socket to EAGAIN by
 * itself, but takes a TCP answer one recv per call (the length word, then
 * the body), so a socket stays readable after ares_process_fd with no edge
 * to come: feed it again while something is left and c-ares still owns the
 * socket. The record may be freed inside ares_process_fd (c-ares closed the
 * socket), so only the fd is used after the first call. */
static void mf__dns_sock_ready(mf_io_t *io, unsigned events)
{
    mf_dns_resolver_t *r = io->data;
    int fd = io->fd;
    bool readable = (events & ~(unsigned)MF_IO_WRITE) != 0;
    ares_process_fd(r->channel, readable ? fd : ARES_SOCKET_BAD,
                    (events & MF_IO_WRITE) ? fd : ARES_SOCKET_BAD);
    for (int i = 0; readable && i < MF__DNS_DRAIN_MAX; i++) {
        if (!mf__dns_sock_find(r, fd) || !mf__dns_sock_pending(fd))
            break;
        ares_process_fd(r->channel, fd, ARES_SOCKET_BAD);
    }
    mf__dns_arm_timer(r);
}

/* ---- the channel ------------------------------------------------------- */

/* Reads /etc/resolv.conf and friends: a few small files, once per loop (or
 * per configure), on the loop thread. */
static int mf__dns_channel_create(mf_dns_resolver_t *r,
                                  const mf_dns_config_t *config,
                                  ares_channel *out)
{
    struct ares_options opts;
    memset(&opts, 0, sizeof(opts));
    opts.timeout =
        config->timeout_ms > INT_MAX ? INT_MAX : (int)config->timeout_ms;
    opts.tries = config->tries > INT_MAX ? INT_MAX : (int)config->tries;
    opts.sock_state_cb = mf__dns_sock_state;
    opts.sock_state_cb_data = r;
    int mask = ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_SOCK_STATE_CB;
    int rc = ares_init_options(out, &opts, mask);
    if (rc != ARES_SUCCESS)
        return mf__dns_status(rc);
    if (config->servers &&
        ares_set_servers_ports_csv(*out, config->servers) != ARES_SUCCESS) {
        ares_destroy(*out); /* no query, no socket yet */
        return MF_EINVAL;
    }
    return 0;
}

/* Ends every lookup in flight: c-ares calls each back with
 * ARES_EDESTRUCTION (its waiters get MF_ECANCELED, or nothing while the loop
 * dies) and closes its sockets through mf__dns_sock_state(fd, 0, 0). */
static void mf__dns_channel_destroy(mf_dns_resolver_t *r)
{
    if (!r->channel)
        return;
    ares_destroy(r->channel);
    r->channel = NULL;
    mf_timer_stop(r->loop, &r->timer);
    while (!mf_list_empty(&r->socks)) /* a guard: c-ares said (fd, 0, 0) */
        mf__dns_sock_free(r,
                          mf_container_of(r->socks.next, mf_dns_sock_t, link));
}

static int mf__dns_channel(mf_dns_resolver_t *r)
{
    if (r->channel)
        return 0;
    ares_channel channel;
    int rc = mf__dns_lib_init();
    if (rc == 0)
        rc = mf__dns_channel_create(r, &r->config, &channel);
    if (rc == 0)
        r->channel = channel;
    return rc;
}

/* ---- the resolver, one per loop ----------------------------------------- */

static void mf__dns_resolver_dtor(mf_loop_t *loop, void *ext)
{
    mf_dns_resolver_t *r = ext;
    (void)loop;
    /* The loop will not run again: no completion could be delivered, and
     * the queries may already be gone with their owners (values of higher
     * ranks are destroyed first). Lookups are dropped without touching them,
     * as the loop drops tasks still in flight. */
    r->dying = true;
    mf__dns_channel_destroy(r);
    mf__dns_cache_close(&r->cache);
    mf_free(r);
}

/* Last to go: other values' teardown may still cancel lookups (loop.h). */
#define MF_DNS_LOOP_RANK 10
static mf_loop_key_t mf__dns_loop_key =
    MF_LOOP_KEY_INIT(MF_DNS_LOOP_RANK, mf__dns_resolver_dtor);

static mf_dns_resolver_t *mf__dns_resolver(mf_loop_t *loop)
{
    mf_dns_resolver_t *r = mf_loop_get(loop, &mf__dns_loop_key);
    if (r)
        return r;
    r = mf_xcalloc(1, sizeof(*r));
    r->loop = loop;
    mf_timer_init(&r->timer, mf__dns_timer_fired, r);
    mf_list_init(&r->socks);
    mf__dns_cache_init(&r->cache, MF__DNS_CACHE_MAX);
    r->config = mf__dns_defaults;
    mf_loop_set(loop, &mf__dns_loop_key, r);
    return r;
}

/* ---- delivering results ------------------------------------------------ */

static void mf__dns_query_post(mf_post_t *post)
{
    mf_dns_query_t *query = post->data;
    query->cb(query, query->_status);
}

static void mf__dns_query_finish(mf_dns_query_t *query, int status)
{
    query->_pending = NULL;
    query->_status = status;
    if (status)
        query->naddrs = 0;
    mf_loop_defer(query->_loop, &query->_post);
}

static void mf__sockaddr_set_port(mf_sockaddr_t *addr, uint16_t port)
{
    if (addr->sa.sa_family == AF_INET)
        addr->in4.sin_port = htons(port);
    else
        addr->in6.sin6_port = htons(port);
}

static void mf__dns_query_fill(mf_dns_query_t *query,
                               const mf_dns_entry_t *entry)
{
    query->naddrs = entry->naddrs;
    for (size_t i = 0; i < entry->naddrs; i++) {
        query->addrs[i] = entry->addrs[i];
        mf__sockaddr_set_port(&query->addrs[i], query->_port);
    }
}

static mf_dns_resolver_t *mf__dns_entry_resolver(const mf_dns_entry_t *entry)
{
    return mf_container_of(entry->cache, mf_dns_resolver_t, cache);
}

static void mf__dns_entry_join(mf_dns_entry_t *entry, mf_dns_query_t *query)
{
    query->_pending = entry;
    mf_list_push_back(&entry->waiters, &query->_link);
    mf__dns_entry_resolver(entry)->waiting++;
}

static void mf__dns_entry_wake(mf_dns_entry_t *entry)
{
    mf_dns_resolver_t *r = mf__dns_entry_resolver(entry);
    mf_list_t *node;
    while ((node = mf_list_pop_front(&entry->waiters)) != NULL) {
        mf_dns_query_t *query = mf_container_of(node, mf_dns_query_t, _link);
        r->waiting--;
        if (entry->status == 0)
            mf__dns_query_fill(query, entry);
        mf__dns_query_finish(query, entry->status);
    }
}

/* ---- turning an ares_addrinfo into an entry ---------------------------- */

static bool mf__dns_entry_has(const mf_dns_entry_t *entry,
                              const struct sockaddr *sa, socklen_t len)
{
    for (size_t i = 0; i < entry->naddrs; i++)
        if (memcmp(&entry->addrs[i], sa, len) == 0)
            return true;
    return false;
}

/* Appends the addresses of one family, skipping duplicates (/etc/hosts may
 * list a name twice). Ports are zero here; each query sets its own. */
static void mf__dns_entry_take(mf_dns_entry_t *entry,
                               const struct ares_addrinfo *res, int family)
{
    socklen_t len = family == AF_INET ? sizeof(struct sockaddr_in)
                                      : sizeof(struct sockaddr_in6);
    const struct ares_addrinfo_node *node;
    for (node = res->nodes; node && entry->naddrs < MF_DNS_MAX_ADDRS;
         node = node->ai_next) {
        if (node->ai_family != family || node->ai_addrlen != len)
            continue;
        mf_sockaddr_t addr;
        memset(&addr, 0, sizeof(addr));
        memcpy(&addr, node->ai_addr, len);
        mf__sockaddr_set_port(&addr, 0);
        if (!mf__dns_entry_has(entry, &addr.sa, len))
            entry->addrs[entry->naddrs++] = addr;
    }
}

/* The answer lives as long as the shortest TTL on its chain: every address
 * and every CNAME that led to it. */
static uint64_t mf__dns_answer_ttl(const struct ares_addrinfo *res,
                                   uint64_t max_ms)
{
    int ttl = INT_MAX;
    const struct ares_addrinfo_node *node;
    const struct ares_addrinfo_cname *cname;
    for (node = res->nodes; node; node = node->ai_next)
        ttl = node->ai_ttl < ttl ? node->ai_ttl : ttl;
    for (cname = res->cnames; cname; cname = cname->next)
        ttl = cname->ttl < ttl ? cname->ttl : ttl;
    uint64_t ms = ttl > 0 ? (uint64_t)ttl * 1000u : MF__DNS_HOSTS_TTL_MS;
    return ms < max_ms ? ms : max_ms;
}

/* Fills the entry's result; returns how long to cache it. Only "the name
 * does not resolve" is cached negatively: a timeout says nothing about the
 * name, and the next try may reach a server that answers. max_ttl_ms caps
 * both, so 0 turns the cache off. */
static uint64_t mf__dns_entry_result(const mf_dns_config_t *config,
                                     mf_dns_entry_t *entry, int ares_status,
                                     const struct ares_addrinfo *res)
{
    entry->naddrs = 0;
    entry->status = mf__dns_status(ares_status);
    if (entry->status == 0 && res) {
        mf__dns_entry_take(entry, res, AF_INET); /* IPv4 first */
        mf__dns_entry_take(entry, res, AF_INET6);
    }
    if (entry->status == 0 && entry->naddrs == 0)
        entry->status = MF_EDNS;
    if (entry->status == 0)
        return mf__dns_answer_ttl(res, config->max_ttl_ms);
    if (entry->status != MF_EDNS)
        return 0;
    return config->negative_ttl_ms < config->max_ttl_ms
               ? config->negative_ttl_ms
               : config->max_ttl_ms;
}

/* ares_getaddrinfo's callback: from ares_process_fd, from ares_destroy, or
 * synchronously inside ares_getaddrinfo (/etc/hosts). */
static void mf__dns_lookup_done(void *arg, int status, int timeouts,
                                struct ares_addrinfo *res)
{
    mf_dns_entry_t *entry = arg;
    mf_dns_resolver_t *r = mf__dns_entry_resolver(entry);
    (void)timeouts;
    if (r->dying) {
        ares_freeaddrinfo(res);
        mf__dns_cache_remove(&r->cache, entry);
        return;
    }
    uint64_t ttl_ms = mf__dns_entry_result(&r->config, entry, status, res);
    ares_freeaddrinfo(res);
    mf__dns_entry_wake(entry);
    mf__dns_cache_settle(&r->cache, entry, mf_loop_now(r->loop), ttl_ms);
}

static void mf__dns_lookup_start(mf_dns_resolver_t *r, mf_dns_entry_t *entry)
{
    /* NOSORT: we put IPv4 first ourselves, and c-ares' RFC 6724 sort opens
     * and connects a socket per address and undoes DNS round-robin. */
    struct ares_addrinfo_hints hints = {.ai_flags = ARES_AI_NOSORT,
                                        .ai_family = AF_UNSPEC};
    /* May call mf__dns_lookup_done (and free the entry) before returning. */
    ares_getaddrinfo(r->channel, entry->host, NULL, &hints, mf__dns_lookup_done,
                     entry);
    mf__dns_arm_timer(r);
}

/* ---- queries ----------------------------------------------------------- */

/* Copies host into out, lowercase, without the brackets of "[v6]". Rejects
 * what no resolver can look up: empty, longer than a DNS name, spaces or
 * control bytes (they would reach /etc/hosts matching or the wire). */
static int mf__dns_host_copy(const char *host, char *out)
{
    out[0] = '\0';
    size_t len = host ? strnlen(host, MF_DNS_MAX_HOST + 1) : 0;
    if (len == 0 || len > MF_DNS_MAX_HOST)
        return MF_EINVAL;
    bool bracketed = host[0] == '[';
    if (bracketed) {
        if (len < 3 || host[len - 1] != ']')
            return MF_EINVAL;
        host++;
        len -= 2;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)host[i];
        if (c <= ' ' || c == 0x7f)
            return MF_EINVAL;
        out[i] = (char)(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
    }
    out[len] = '\0';
    struct in6_addr unused;
    if (bracketed && inet_pton(AF_INET6, out, &unused) != 1)
        return MF_EINVAL;
    return 0;
}

/* Literal addresses never reach c-ares; the resolver is not even created. */
static bool mf__dns_numeric(mf_dns_query_t *query)
{
    mf_sockaddr_t *addr = &query->addrs[0];
    memset(addr, 0, sizeof(*addr));
    if (inet_pton(AF_INET, query->_host, &addr->in4.sin_addr) == 1)
        addr->sa.sa_family = AF_INET;
    else if (inet_pton(AF_INET6, query->_host, &addr->in6.sin6_addr) == 1)
        addr->sa.sa_family = AF_INET6;
    else
        return false;
    mf__sockaddr_set_port(addr, query->_port);
    query->naddrs = 1;
    return true;
}

/* Everything but the loop: the dns task does this at creation, so a bad
 * host is found early and reported at dispatch. */
static void mf__dns_query_init(mf_dns_query_t *query, const char *host,
                               uint16_t port, mf_dns_cb cb, void *data)
{
    query->cb = cb;
    query->data = data;
    query->naddrs = 0;
    query->_loop = NULL;
    mf_list_init(&query->_link);
    query->_pending = NULL;
    mf_post_init(&query->_post, mf__dns_query_post, query);
    query->_port = port;
    query->_status = mf__dns_host_copy(host, query->_host);
}

static void mf__dns_resolve(mf_dns_resolver_t *r, mf_dns_query_t *query)
{
    size_t len = strlen(query->_host);
    mf_dns_entry_t *entry =
        mf__dns_cache_find(&r->cache, query->_host, len, mf_loop_now(r->loop));
    if (entry && !entry->pending) { /* cached: no allocation, no c-ares */
        if (entry->status == 0)
            mf__dns_query_fill(query, entry);
        mf__dns_query_finish(query, entry->status);
        return;
    }
    if (entry) { /* a lookup for this name is in flight: share it */
        mf__dns_entry_join(entry, query);
        return;
    }
    int rc = mf__dns_channel(r);
    if (rc < 0) {
        mf__dns_query_finish(query, rc);
        return;
    }
    entry = mf__dns_cache_add(&r->cache, query->_host, len);
    mf__dns_entry_join(entry, query);
    mf__dns_lookup_start(r, entry);
}

static void mf__dns_query_launch(mf_loop_t *loop, mf_dns_query_t *query)
{
    query->_loop = loop;
    if (query->_status != 0 || mf__dns_numeric(query)) {
        mf__dns_query_finish(query, query->_status);
        return;
    }
    mf__dns_resolve(mf__dns_resolver(loop), query);
}

/* ---- public API -------------------------------------------------------- */

int mf_dns_configure(mf_loop_t *loop, const mf_dns_config_t *config)
{
    mf_dns_config_t next = config ? *config : mf__dns_defaults;
    if (!next.timeout_ms)
        next.timeout_ms = mf__dns_defaults.timeout_ms;
    if (!next.tries)
        next.tries = mf__dns_defaults.tries;
    if (next.servers && !*next.servers)
        next.servers = NULL;
    int rc = mf__dns_lib_init();
    if (rc < 0)
        return rc;
    mf_dns_resolver_t *r = mf__dns_resolver(loop);
    ares_channel channel;
    rc = mf__dns_channel_create(r, &next, &channel);
    if (rc < 0)
        return rc;              /* the resolver keeps its old configuration */
    mf__dns_channel_destroy(r); /* lookups in flight: MF_ECANCELED */
    mf__dns_cache_clear(&r->cache); /* answers of the old servers */
    r->channel = channel;
    r->config = next;
    r->config.servers = NULL; /* the caller's string; applied already */
    return 0;
}

void mf_dns_query_start(mf_loop_t *loop, mf_dns_query_t *query,
                        const char *host, uint16_t port, mf_dns_cb cb,
                        void *data)
{
    mf__dns_query_init(query, host, port, cb, data);
    mf__dns_query_launch(loop, query);
}

/* A waiting query leaves its lookup, which goes on and fills the cache for
 * the next query: c-ares 1.18 cannot cancel one lookup alone. Once no query
 * waits on any lookup, all of them are canceled (ares_cancel; the entries
 * go, nothing is delivered) so that retries to a dead server do not keep
 * the loop alive for nobody. A query whose result is already posted keeps
 * its post: only the status changes, so the callback still runs once. */
void mf_dns_query_cancel(mf_dns_query_t *query)
{
    if (query->_pending) {
        mf_dns_resolver_t *r = mf__dns_entry_resolver(query->_pending);
        mf_list_remove(&query->_link);
        mf__dns_query_finish(query, MF_ECANCELED);
        if (--r->waiting == 0 && r->channel) {
            ares_cancel(r->channel);
            mf__dns_arm_timer(r);
        }
    } else if (mf_list_linked(&query->_post._link)) {
        query->_status = MF_ECANCELED;
        query->naddrs = 0;
    }
}

const void *mf__dns_resolver_of(const mf_loop_t *loop)
{
    return mf_loop_get(loop, &mf__dns_loop_key);
}

void mf_dns_cache_clear(mf_loop_t *loop)
{
    mf_dns_resolver_t *r = mf_loop_get(loop, &mf__dns_loop_key);
    if (r)
        mf__dns_cache_clear(&r->cache);
}

/* ---- the dns task ------------------------------------------------------ */

typedef struct mf_dns_task {
    mf_task_t base;
    mf_dns_query_t query;
} mf_dns_task_t;

static int mf__dns_task_state(int status)
{
    switch (status) {
    case 0:
        return MF_STATE_SUCCESS;
    case MF_ETIMEDOUT:
        return MF_STATE_TIMEOUT;
    case MF_ECANCELED:
        return MF_STATE_CANCELED;
    default:
        return MF_STATE_DNS_ERROR;
    }
}

static void mf__dns_task_resolved(mf_dns_query_t *query, int status)
{
    mf_dns_task_t *t = query->data;
    mf_task_complete(&t->base, mf__dns_task_state(status), status);
}

static void mf__dns_task_dispatch(mf_task_t *task)
{
    mf_dns_task_t *t = (mf_dns_task_t *)task;
    mf__dns_query_launch(task->_loop, &t->query);
}

/* The query's callback still runs (MF_ECANCELED) and completes the task. */
static void mf__dns_task_cancel(mf_task_t *task)
{
    mf_dns_query_cancel(&((mf_dns_task_t *)task)->query);
}

static void mf__dns_task_destroy(mf_task_t *task)
{
    mf_loop_free(task->_loop, task, sizeof(mf_dns_task_t));
}

static const mf_task_ops_t mf__dns_task_ops = {
    "dns", mf__dns_task_dispatch, mf__dns_task_cancel, mf__dns_task_destroy};

mf_task_t *mf_task_dns_create(mf_loop_t *loop, const char *host, uint16_t port,
                              mf_task_cb cb, void *user)
{
    mf_dns_task_t *t = mf_loop_alloc(loop, sizeof(*t));
    mf_task_init(&t->base, &mf__dns_task_ops, loop, cb, user);
    mf__dns_query_init(&t->query, host, port, mf__dns_task_resolved, t);
    return &t->base;
}

size_t mf_task_dns_count(const mf_task_t *task)
{
    if (task->_ops != &mf__dns_task_ops)
        return 0;
    return ((const mf_dns_task_t *)task)->query.naddrs;
}

const mf_sockaddr_t *mf_task_dns_addr(const mf_task_t *task, size_t index)
{
    if (index >= mf_task_dns_count(task))
        return NULL;
    return &((const mf_dns_task_t *)task)->query.addrs[index];
}

/* ---- formatting -------------------------------------------------------- */

char *mf_sockaddr_format_ip(const mf_sockaddr_t *addr, char *buf, size_t size)
{
    const void *ip = addr->sa.sa_family == AF_INET6
                         ? (const void *)&addr->in6.sin6_addr
                         : (const void *)&addr->in4.sin_addr;
    if (buf && size && !inet_ntop(addr->sa.sa_family, ip, buf, (socklen_t)size))
        snprintf(buf, size, "?");
    return buf;
}

char *mf_sockaddr_format(const mf_sockaddr_t *addr, char *buf, size_t size)
{
    char ip[INET6_ADDRSTRLEN];
    if (!buf || size == 0)
        return buf;
    if (addr->sa.sa_family == AF_INET &&
        inet_ntop(AF_INET, &addr->in4.sin_addr, ip, sizeof(ip)))
        snprintf(buf, size, "%s:%u", ip, (unsigned)ntohs(addr->in4.sin_port));
    else if (addr->sa.sa_family == AF_INET6 &&
             inet_ntop(AF_INET6, &addr->in6.sin6_addr, ip, sizeof(ip)))
        snprintf(buf, size, "[%s]:%u", ip,
                 (unsigned)ntohs(addr->in6.sin6_port));
    else
        snprintf(buf, size, "?");
    return buf;
}
