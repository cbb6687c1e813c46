/*
 * lua/serve/sources.c — reading scripts, and the last good source of each
 * file shared by the workers (sources.h): a list under one lock, touched
 * when a script loads or changes, never per request.
 *
 * May call: the file system and the Lua host's log.
 */
#include "sources.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <moonflow/common.h>
#include <moonflow/error.h>

/* ---- reading -------------------------------------------------------------
 */

/* Doubles the buffer (checked: a script is user-sized). */
static char *mf__grow(char *buf, size_t len, size_t *cap)
{
    char *bigger = *cap <= SIZE_MAX / 2 ? mf_try_malloc(*cap * 2) : NULL;
    if (bigger) {
        memcpy(bigger, buf, len);
        *cap *= 2;
    }
    mf_free(buf);
    return bigger;
}

int mf_serve_source_read(const char *path, char **text, size_t *len)
{
    *text = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mf_err_from_errno(errno);
    struct stat st;
    size_t cap =
        fstat(fd, &st) == 0 && st.st_size > 0 ? (size_t)st.st_size + 1 : 4096;
    size_t n = 0;
    int rc = 0;
    char *buf = mf_try_malloc(cap);
    while (buf) {
        if (n == cap && !(buf = mf__grow(buf, n, &cap)))
            break;
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            rc = got < 0 ? mf_err_from_errno(errno) : 0;
            break;
        }
        n += (size_t)got;
    }
    close(fd);
    if (!buf)
        return MF_ENOMEM;
    if (rc < 0) {
        mf_free(buf);
        return rc;
    }
    *text = buf;
    *len = n;
    return 0;
}

/* ---- the last good sources ------------------------------------------------
 */

typedef struct mf_last_good {
    struct mf_last_good *next;
    char *text;
    size_t len;
    char file[];
} mf_last_good_t;

static pthread_mutex_t mf__last_good_lock = PTHREAD_MUTEX_INITIALIZER;
static mf_last_good_t *mf__last_good;

static mf_last_good_t **mf__last_good_slot(const char *file)
{
    mf_last_good_t **slot = &mf__last_good;
    while (*slot && strcmp((*slot)->file, file) != 0)
        slot = &(*slot)->next;
    return slot;
}

static int mf__last_good_publish_locked(const char *file, const char *text,
                                        size_t len)
{
    mf_last_good_t *g = *mf__last_good_slot(file);
    if (g && g->len == len && memcmp(g->text, text, len) == 0)
        return 0;
    char *copy = mf_try_malloc(len ? len : 1);
    if (!copy)
        return MF_ENOMEM;
    memcpy(copy, text, len);
    if (!g) {
        size_t flen = strlen(file) + 1;
        g = mf_try_malloc(sizeof(*g) + flen);
        if (!g) {
            mf_free(copy);
            return MF_ENOMEM;
        }
        memcpy(g->file, file, flen);
        g->text = NULL;
        g->next = mf__last_good;
        mf__last_good = g;
    }
    mf_free(g->text);
    g->text = copy;
    g->len = len;
    return 0;
}

int mf_serve_source_publish(const char *file, const char *text, size_t len)
{
    pthread_mutex_lock(&mf__last_good_lock);
    int rc = mf__last_good_publish_locked(file, text, len);
    pthread_mutex_unlock(&mf__last_good_lock);
    return rc;
}

void mf_serve_source_keep(mf_lua_host_t *host, const char *file,
                          const char *text, size_t len)
{
    if (mf_serve_source_publish(file, text, len) < 0)
        mf_lua_host_log(host,
                        "moonflow: %s: out of memory keeping its source: "
                        "workers that never ran it cannot fall back to it",
                        file);
}

int mf_serve_source_last_good(const char *file, char **copy, size_t *len)
{
    int rc = MF_ENOENT;
    *copy = NULL;
    pthread_mutex_lock(&mf__last_good_lock);
    const mf_last_good_t *g = *mf__last_good_slot(file);
    if (g) {
        *copy = mf_try_malloc(g->len ? g->len : 1);
        rc = *copy ? 0 : MF_ENOMEM;
        if (*copy) {
            memcpy(*copy, g->text, g->len);
            *len = g->len;
        }
    }
    pthread_mutex_unlock(&mf__last_good_lock);
    return rc;
}

static void mf__last_good_free(mf_last_good_t *g)
{
    mf_free(g->text);
    mf_free(g);
}

void mf_serve_sources_forget(const char *file)
{
    pthread_mutex_lock(&mf__last_good_lock);
    mf_last_good_t **slot = mf__last_good_slot(file);
    mf_last_good_t *g = *slot;
    if (g) {
        *slot = g->next;
        mf__last_good_free(g);
    }
    pthread_mutex_unlock(&mf__last_good_lock);
}

void mf_serve_sources_forget_all(void)
{
    pthread_mutex_lock(&mf__last_good_lock);
    while (mf__last_good) {
        mf_last_good_t *g = mf__last_good;
        mf__last_good = g->next;
        mf__last_good_free(g);
    }
    pthread_mutex_unlock(&mf__last_good_lock);
}
