/*
 * http_file_reader.h — a file's bytes read off the loop thread, one chunk
 * at a time, for a writer that cannot hand the file to the kernel
 * (sendfile): a TLS transport, an HTTP/2 stream. Internal.
 *
 * A cold file's read blocks, and the loop must not: each chunk is read on
 * the loop's compute pool (or at once when the loop has none), and the
 * owner hears of it through the callback it gave, on the loop thread,
 * never inside a call of its own. The owner takes the chunk's bytes as
 * it writes them, then asks for the next chunk.
 *
 * Ownership: the reader owns the file's descriptor and its chunk buffer
 * from mf__file_reader_new on; the owner ends it with
 * mf__file_reader_close, after which no callback comes (a read still out
 * finishes on the pool and frees the reader at its completion). Loop
 * thread only, but the read itself.
 */
#ifndef MF_HTTP_FILE_READER_H
#define MF_HTTP_FILE_READER_H

#include <stdint.h>
#include <sys/types.h>

#include "moonflow/loop.h"

/* The bytes of a chunk: 16 KiB, TLS's record and HTTP/2's default frame. */
#define MF_FILE_READER_CHUNK (16 * 1024)

typedef struct mf_file_reader mf_file_reader_t;

/* A chunk read (or failed): the owner may look again. */
typedef void (*mf_file_reader_cb)(void *arg);

/* A reader of fd's bytes [offset, offset + len), from the loop's free
 * lists; its chunk buffer is reserved at the first read. */
mf_file_reader_t *mf__file_reader_new(mf_loop_t *loop, int fd, uint64_t offset,
                                      uint64_t len, mf_file_reader_cb cb,
                                      void *arg);

/* The chunk's bytes not taken yet (*data set): a count, 0 once the whole
 * range is taken, MF_EAGAIN while a read is out (the callback comes when
 * it ends; a read is started here when none is), or the error that ended
 * the read (MF_EIO: the file is shorter than the range). */
ssize_t mf__file_reader_peek(mf_file_reader_t *r, const char **data);

/* n bytes of the chunk peeked were written. */
void mf__file_reader_take(mf_file_reader_t *r, size_t n);

/* Bytes of the range not taken yet. */
uint64_t mf__file_reader_left(const mf_file_reader_t *r);

/* Ends the reader: the file is closed, the memory goes (at a read's
 * completion if one is out); no callback comes. NULL is fine. */
void mf__file_reader_close(mf_file_reader_t *r);

#endif /* MF_HTTP_FILE_READER_H */
