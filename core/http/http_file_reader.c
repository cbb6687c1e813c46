/*
 * http_file_reader.c — a file's bytes read a chunk at a time on the loop's
 * compute pool (see http_file_reader.h).
 */
#include "http_file_reader.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "engine/buf.h"
#include "moonflow/error.h"
#include "moonflow/pool.h"

struct mf_file_reader {
    mf_pool_job_t job;
    mf_loop_t *loop;
    mf_file_reader_cb cb;
    void *arg;
    int fd;
    bool reading; /* a job is out */
    bool orphan;  /* closed by its owner: free at the completion */
    int err;      /* a failed read: the range cannot be sent whole */
    uint64_t off; /* the next chunk's file offset */
    uint64_t end; /* the range's end */
    size_t want;  /* the read's length */
    ssize_t got;  /* its answer (or -errno) */
    size_t at;    /* bytes of buf taken */
    mf_buf_t buf; /* the chunk read */
};

mf_file_reader_t *mf__file_reader_new(mf_loop_t *loop, int fd, uint64_t offset,
                                      uint64_t len, mf_file_reader_cb cb,
                                      void *arg)
{
    mf_file_reader_t *r = mf_loop_alloc(loop, sizeof(*r));
    memset(r, 0, sizeof(*r));
    r->loop = loop;
    r->cb = cb;
    r->arg = arg;
    r->fd = fd;
    r->off = offset;
    r->end = offset + len;
    mf__buf_init(&r->buf);
    return r;
}

static void mf__file_reader_free(mf_file_reader_t *r)
{
    close(r->fd);
    mf__buf_release(r->loop, &r->buf);
    mf_loop_free(r->loop, r, sizeof(*r));
}

/* A chunk's read, on a pool thread: the reader's fields only. */
static void mf__file_reader_read(mf_pool_job_t *job)
{
    mf_file_reader_t *r = mf_container_of(job, mf_file_reader_t, job);
    ssize_t n;
    do {
        n = pread(r->fd, r->buf.data, r->want, (off_t)r->off);
    } while (n < 0 && errno == EINTR);
    r->got = n < 0 ? -errno : n;
}

/* A read's answer as the chunk to take, or the error that ends it. */
static void mf__file_reader_settle(mf_file_reader_t *r)
{
    r->reading = false;
    if (r->got < 0)
        r->err = mf_err_from_errno((int)-r->got);
    else if ((size_t)r->got < r->want)
        r->err = MF_EIO; /* the file is shorter than the range said */
    r->buf.len = r->err ? 0 : r->want;
    r->off += r->buf.len;
    r->at = 0;
}

/* Back on the loop: the chunk is ready (or failed); the owner looks. */
static void mf__file_reader_done(mf_pool_job_t *job)
{
    mf_file_reader_t *r = mf_container_of(job, mf_file_reader_t, job);
    if (r->orphan) {
        mf__file_reader_free(r);
        return;
    }
    mf__file_reader_settle(r);
    r->cb(r->arg);
}

/* Starts the next chunk's read: on the compute pool, or here when the
 * loop has none. */
static void mf__file_reader_start(mf_file_reader_t *r)
{
    uint64_t left = r->end - r->off;
    r->want = left > MF_FILE_READER_CHUNK ? MF_FILE_READER_CHUNK : (size_t)left;
    r->job.fn = mf__file_reader_read;
    r->job.done = mf__file_reader_done;
    r->reading = true;
    mf_pool_t *pool = mf_loop_pool(r->loop);
    if (pool) {
        mf_pool_submit(pool, r->loop, &r->job);
        return;
    }
    mf__file_reader_read(&r->job);
    mf__file_reader_settle(r);
}

ssize_t mf__file_reader_peek(mf_file_reader_t *r, const char **data)
{
    if (r->reading)
        return MF_EAGAIN;
    if (r->err)
        return r->err;
    if (r->at == r->buf.len) {
        if (r->off == r->end)
            return 0;
        if (!r->buf.cap &&
            mf__buf_reserve(r->loop, &r->buf, MF_FILE_READER_CHUNK) < 0)
            return MF_ENOMEM;
        mf__file_reader_start(r);
        if (r->reading)
            return MF_EAGAIN;
        if (r->err)
            return r->err;
    }
    *data = r->buf.data + r->at;
    return (ssize_t)(r->buf.len - r->at);
}

void mf__file_reader_take(mf_file_reader_t *r, size_t n)
{
    r->at += n;
}

uint64_t mf__file_reader_left(const mf_file_reader_t *r)
{
    return r->end - r->off + (r->buf.len - r->at);
}

void mf__file_reader_close(mf_file_reader_t *r)
{
    if (!r)
        return;
    if (r->reading)
        r->orphan = true;
    else
        mf__file_reader_free(r);
}
