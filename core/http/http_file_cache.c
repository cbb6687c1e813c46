/*
 * http_file_cache.c — a root's open files (http_file_cache.h): a fixed
 * array of entries, hash buckets of indices into it, an LRU list, and a
 * file watcher that drops what changed. Owns the entries' descriptors and
 * the watcher.
 *
 * Invalidation follows the watcher's paths (relative to the root): a file
 * written, created, renamed in or removed drops its own entry and, when it
 * is a folder, every entry beneath it; an overflow (events lost) drops
 * everything. Callers only cache files reached without a symbolic link
 * (a link's target changes under another name, which the watcher reports
 * under that name only).
 */
#include "http/http_file_cache.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moonflow/error.h"
#include "moonflow/fswatch.h"
#include "moonflow/list.h"

#define MF_FILE_CACHE_NONE UINT32_MAX

typedef struct mf_file_entry {
    mf_list_t lru; /* most recent at the front; free entries: unlinked */
    uint32_t next; /* the next entry in its bucket */
    int fd;        /* -1: free */
    struct stat st;
    char path[MF_FILE_CACHE_PATH_MAX + 1];
} mf_file_entry_t;

struct mf_file_cache {
    mf_fswatch_t *watch;
    mf_list_t lru;
    size_t count, cap;
    uint32_t nbuckets; /* a power of two */
    uint32_t *buckets;
    mf_file_entry_t *entries;
};

static uint32_t mf__fc_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static uint32_t *mf__fc_bucket(mf_file_cache_t *c, const char *path)
{
    return &c->buckets[mf__fc_hash(path) & (c->nbuckets - 1)];
}

static mf_file_entry_t *mf__fc_find(mf_file_cache_t *c, const char *path)
{
    for (uint32_t i = *mf__fc_bucket(c, path); i != MF_FILE_CACHE_NONE;
         i = c->entries[i].next)
        if (strcmp(c->entries[i].path, path) == 0)
            return &c->entries[i];
    return NULL;
}

/* Unlinks e from its bucket and the LRU list, closes its file. */
static void mf__fc_drop(mf_file_cache_t *c, mf_file_entry_t *e)
{
    uint32_t idx = (uint32_t)(e - c->entries);
    for (uint32_t *at = mf__fc_bucket(c, e->path); *at != MF_FILE_CACHE_NONE;
         at = &c->entries[*at].next) {
        if (*at == idx) {
            *at = e->next;
            break;
        }
    }
    mf_list_remove(&e->lru);
    close(e->fd);
    e->fd = -1;
    c->count--;
}

/* Drops path's entry and those beneath it (a folder); "" drops all. */
static void mf__fc_drop_tree(mf_file_cache_t *c, const char *path)
{
    size_t len = strlen(path);
    for (size_t i = 0; i < c->cap; i++) {
        mf_file_entry_t *e = &c->entries[i];
        if (e->fd >= 0 && strncmp(e->path, path, len) == 0 &&
            (len == 0 || e->path[len] == '\0' || e->path[len] == '/'))
            mf__fc_drop(c, e);
    }
}

static void mf__fc_changed(mf_fswatch_t *w, const char *path, unsigned what,
                           void *arg)
{
    mf_file_cache_t *c = arg;
    (void)w;
    mf__fc_drop_tree(c, (what & MF_FSWATCH_OVERFLOW) ? "" : path);
}

mf_file_cache_t *mf__file_cache_create(mf_loop_t *loop, const char *dir,
                                       size_t entries, int *err)
{
    mf_file_cache_t *c = calloc(1, sizeof(*c));
    uint32_t nbuckets = 16;
    while (nbuckets < entries * 2)
        nbuckets *= 2;
    if (c) {
        c->entries = calloc(entries, sizeof(*c->entries));
        c->buckets = malloc(nbuckets * sizeof(*c->buckets));
    }
    if (!c || !c->entries || !c->buckets) {
        *err = MF_ENOMEM;
        mf__file_cache_destroy(c);
        return NULL;
    }
    c->cap = entries;
    c->nbuckets = nbuckets;
    memset(c->buckets, 0xff, nbuckets * sizeof(*c->buckets));
    mf_list_init(&c->lru);
    for (size_t i = 0; i < entries; i++) {
        c->entries[i].fd = -1;
        mf_list_init(&c->entries[i].lru);
    }
    c->watch = mf_fswatch_start(loop, dir, mf__fc_changed, c, err);
    if (!c->watch) {
        mf__file_cache_destroy(c);
        return NULL;
    }
    return c;
}

void mf__file_cache_destroy(mf_file_cache_t *c)
{
    if (!c)
        return;
    if (c->watch)
        mf_fswatch_stop(c->watch);
    if (c->entries && c->buckets)
        mf__fc_drop_tree(c, "");
    free(c->entries);
    free(c->buckets);
    free(c);
}

int mf__file_cache_get(mf_file_cache_t *c, const char *rel, struct stat *st)
{
    mf_file_entry_t *e = mf__fc_find(c, rel);
    if (!e)
        return -1;
    int fd = dup(e->fd);
    if (fd < 0)
        return -1;
    *st = e->st;
    mf_list_remove(&e->lru);
    mf_list_push_front(&c->lru, &e->lru);
    return fd;
}

/* A free entry, or the least recently used one emptied. */
static mf_file_entry_t *mf__fc_slot(mf_file_cache_t *c)
{
    if (c->count == c->cap) {
        mf_file_entry_t *old =
            mf_container_of(c->lru.prev, mf_file_entry_t, lru);
        mf__fc_drop(c, old);
        return old;
    }
    for (size_t i = 0; i < c->cap; i++)
        if (c->entries[i].fd < 0)
            return &c->entries[i];
    return NULL;
}

void mf__file_cache_put(mf_file_cache_t *c, const char *rel, int fd,
                        const struct stat *st)
{
    size_t len = strlen(rel);
    if (len > MF_FILE_CACHE_PATH_MAX || mf__fc_find(c, rel))
        return;
    mf_file_entry_t *e = mf__fc_slot(c);
    if (!e || (e->fd = dup(fd)) < 0)
        return;
    memcpy(e->path, rel, len + 1);
    e->st = *st;
    uint32_t *bucket = mf__fc_bucket(c, rel);
    e->next = *bucket;
    *bucket = (uint32_t)(e - c->entries);
    mf_list_push_front(&c->lru, &e->lru);
    c->count++;
}

size_t mf__file_cache_size(const mf_file_cache_t *c)
{
    return c->count;
}
