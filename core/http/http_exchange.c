/*
 * http_exchange.c — one request as the handler sees it (mf_http_exchange_*,
 * the public API in moonflow/http_server.h): running the handler, its
 * series or hold, and building the response, which it hands to its
 * protocol. Owns mf_http_exchange_t, whose body is private to this file;
 * protocols reach it through the ops in http_exchange.h (registered in the
 * site by the server). May call: its protocol's ops (http_proto.h), the
 * site's handler and hooks (http_site.h), the engine. Must not call a
 * protocol, the transport or the server by name: it knows no wire format,
 * so HTTP/1 and a second protocol drive it alike.
 *
 * The protocol frames the head and copies it, with a body up to
 * MF_HTTP_COPY_BODY_MAX, behind what is already queued, so pipelined
 * answers leave in one write; bigger bodies are written from their own
 * memory (zero copy for _ref bodies).
 *
 * Never a silently short answer: when memory runs out while the response
 * is built (an added header, an appended body, the queued head), the answer
 * becomes a 500 with Connection: close; once the head is out, the
 * connection is closed instead, so the client sees a cut body (no last
 * chunk, or fewer bytes than Content-Length said). Either way the server
 * counts it (mf_http_server_failed_responses). A header the handler should
 * not have given (mf__header_fault) turns the answer into the same 500, and
 * an abort ends it the same way: a 500 before the head, a cut after.
 *
 * The request body reaches the handler from memory (read before the
 * handler) or, streamed, through the protocol's read and watch_read; an
 * upgrade sends the head unframed and turns those reads into the
 * connection's raw bytes (state MF_EX_RAW: writes go out unframed, the
 * send adds nothing). A body the protocol refuses while it is read (413,
 * 400, 408) is answered in place of the handler's answer.
 *
 * Compression (moonflow/http_compress.h) sits between the answer and the
 * protocol: a whole body is compressed before its head is queued (its
 * length is the compressed one), a streamed one piece by piece
 * (http_compress_filter.c); out of memory there fails the answer as
 * above.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "http_compress_filter.h"
#include "http_exchange.h"
#include "http_site.h"

/* Bodies up to this size are copied into the output (one write for head
 * and body); bigger ones are written from their own memory. */
#define MF_HTTP_COPY_BODY_MAX (16 * 1024)

typedef enum mf_ex_state {
    MF_EX_ACTIVE, /* the handler, its series or holder builds the answer */
    MF_EX_STREAM, /* streamed response: head queued, chunks flowing */
    MF_EX_RAW,    /* upgraded: head queued, the connection's bytes both ways */
    MF_EX_FILE,   /* head and a file body queued: the send adds nothing */
    MF_EX_FAILED, /* a 500 was queued or the connection cut (out of memory,
                     an invalid header, an abort); further output is
                     dropped until the send */
    MF_EX_DONE    /* sent: the connection is released */
} mf_ex_state_t;

struct mf_http_exchange {
    const mf_http_proto_ops_t *ops; /* the protocol's, with its state: */
    void *proto;
    mf_http_site_t *site;
    mf_loop_t *loop;
    const mf_sockaddr_t *peer;
    mf_http_request_t req;
    const char *body;
    size_t body_len;
    size_t body_read; /* bytes of body handed to mf_http_exchange_read */
    mf_ex_state_t state;
    bool streamed; /* the protocol streams the body (no body above) */
    bool held;
    bool closed_early;  /* the connection went away before the response */
    bool out_of_memory; /* an append failed: the answer becomes a 500 */
    bool bad_header;    /* a header was refused: the answer becomes a 500 */
    int status;
    mf_buf_t resp_headers; /* "Name: value\r\n" lines as added */
    mf_buf_t resp_body;    /* appended body */
    const char *body_ref;  /* zero-copy body */
    size_t body_ref_len;
    const char *static_lines[MF_HTTP_STATIC_LINES];
    uint16_t static_lens[MF_HTTP_STATIC_LINES];
    unsigned nstatic;
    /* "Name: value\r\n" lines sent after the body */
    mf_buf_t resp_trailers;
    mf_series_t *series; /* from its creation until its callback */
    mf_http_exchange_close_cb on_close;
    void *on_close_arg;
    mf_http_exchange_drain_cb on_drain;
    void *on_drain_arg;
    mf_post_t drain_post;
    mf_http_exchange_readable_cb on_readable;
    void *on_readable_arg;
    mf_post_t readable_post; /* a reader of a body in memory */
    const mf_http_compress_config_t *compress; /* NULL: never */
    mf_http_encoder_t *encoder; /* a compressed stream's, until its end */
    /* The request's headers, as many as it has (an idle exchange, a
     * WebSocket's say, should not carry room for a hundred). Last: not
     * zeroed. */
    unsigned nheaders;
    mf_http_header_t headers[];
};

static size_t mf__exchange_size(unsigned nheaders)
{
    return sizeof(mf_http_exchange_t) + nheaders * sizeof(mf_http_header_t);
}

/* ---- answers that cannot be completed ------------------------------------
 */

/* Appends to one of the exchange's buffers; a refused allocation marks the
 * answer as failed (it becomes a 500 at the send) and drops the rest.
 * 0 or MF_ENOMEM. */
static int mf__exchange_keep(mf_http_exchange_t *ex, mf_buf_t *buf,
                             const void *data, size_t len)
{
    if (ex->out_of_memory)
        return MF_ENOMEM;
    if (mf__buf_append(ex->loop, buf, data, len) == 0)
        return 0;
    ex->out_of_memory = true;
    return MF_ENOMEM;
}

/* Nothing of the response is queued yet: answer 500 with Connection:
 * close instead; if even that cannot be queued, close the connection.
 * Returns whether the 500 was queued. */
static bool mf__exchange_answer_500(mf_http_exchange_t *ex)
{
    ex->state = MF_EX_FAILED;
    if (ex->closed_early)
        return false;
    if (ex->ops->send_error(ex->proto, 500) == 0)
        return true;
    ex->ops->abort(ex->proto); /* runs mf__exchange_lost */
    return false;
}

/* The head is queued: the rest cannot follow, so close the connection
 * without the end of the body (no last chunk). */
static void mf__exchange_close(mf_http_exchange_t *ex)
{
    ex->state = MF_EX_FAILED;
    if (!ex->closed_early)
        ex->ops->abort(ex->proto); /* runs mf__exchange_lost */
}

/* Out of memory before the head: a 500 instead, counted and reported. */
static void mf__exchange_fail(mf_http_exchange_t *ex)
{
    ex->site->hooks->response_failed(ex->site, mf__exchange_answer_500(ex));
}

/* Out of memory after the head: cut, counted and reported. */
static void mf__exchange_cut(mf_http_exchange_t *ex)
{
    ex->site->hooks->response_failed(ex->site, false);
    mf__exchange_close(ex);
}

/* The answer as built cannot go out: a 500 (counted as out of memory when
 * that is why; a refused header was counted and reported when it came). */
static void mf__exchange_refuse_answer(mf_http_exchange_t *ex)
{
    if (ex->out_of_memory)
        mf__exchange_fail(ex);
    else
        mf__exchange_answer_500(ex);
}

/* ---- response heads ---------------------------------------------------- */

static bool mf__status_has_body(int status)
{
    return status >= 200 && status != 204 && status != 304;
}

/* The head as the protocol needs it, with the body copied behind it:
 * 0 or MF_ENOMEM (nothing queued). */
static int mf__exchange_queue_head(mf_http_exchange_t *ex,
                                   mf_http_framing_t framing, uint64_t length,
                                   const char *body, size_t body_len)
{
    mf_http_response_head_t rh = {
        .status = ex->status,
        .framing = framing,
        .length = length,
        .lines = ex->resp_headers.data,
        .lines_len = ex->resp_headers.len,
        .static_lines = ex->static_lines,
        .static_lens = ex->static_lens,
        .nstatic = ex->nstatic,
    };
    int rc = ex->ops->send_head(ex->proto, &rh, body, body_len);
    if (rc == 0) /* copied out: an exchange that lives on (a WebSocket's,
                    a stream's) keeps no head */
        mf__buf_release(ex->loop, &ex->resp_headers);
    return rc;
}

/* The answer as the compression step sees it. */
static mf_http_compress_answer_t
mf__exchange_answer(const mf_http_exchange_t *ex)
{
    return (mf_http_compress_answer_t){
        .config = ex->compress,
        .req = &ex->req,
        .status = ex->status,
        .lines = &ex->resp_headers,
        .static_lines = ex->static_lines,
        .static_lens = ex->static_lens,
        .nstatic = ex->nstatic,
    };
}

/* A known-length body, compressed into gz when the answer qualifies (gz
 * left empty when not), with the head's lines that follow. 0 or
 * MF_ENOMEM. */
static int mf__exchange_compress_whole(mf_http_exchange_t *ex, const char *body,
                                       size_t len, mf_buf_t *gz)
{
    if (len < ex->compress->min_length)
        return 0; /* the usual answer: small, decided without a call */
    mf_http_compress_answer_t a = mf__exchange_answer(ex);
    bool vary;
    mf_http_coding_t coding = mf__http_compress_choose(&a, true, len, &vary);
    if (coding != MF_HTTP_CODING_IDENTITY &&
        mf__http_compress_whole(ex->loop, ex->compress, coding, body, len, gz) <
            0)
        return MF_ENOMEM;
    if (mf__http_compress_head(ex->loop, &ex->resp_headers, coding, vary) == 0)
        return 0;
    mf__buf_release(ex->loop, gz);
    return MF_ENOMEM;
}

/* The whole response of a send: head, then the body copied behind it or
 * referenced from its own memory. */
static void mf__exchange_queue_full(mf_http_exchange_t *ex)
{
    if (ex->out_of_memory || ex->bad_header) {
        mf__exchange_refuse_answer(ex);
        return;
    }
    const char *body = ex->body_ref ? ex->body_ref : ex->resp_body.data;
    size_t len = ex->body_ref ? ex->body_ref_len : ex->resp_body.len;
    bool has_body = mf__status_has_body(ex->status);
    bool head_only =
        ex->req.method_len == 4 && memcmp(ex->req.method, "HEAD", 4) == 0;
    mf_buf_t gz = {0}; /* the body compressed, when it is */
    if (ex->compress && has_body && !head_only &&
        mf__exchange_compress_whole(ex, body, len, &gz) < 0) {
        mf__exchange_fail(ex);
        return;
    }
    mf_buf_t *owned = ex->body_ref ? NULL : &ex->resp_body;
    if (gz.data) {
        body = gz.data;
        len = gz.len;
        owned = &gz;
    }
    bool copy = has_body && !head_only && len <= MF_HTTP_COPY_BODY_MAX;
    mf_http_framing_t framing =
        has_body ? MF_HTTP_FRAME_LENGTH : MF_HTTP_FRAME_NONE;
    int rc = mf__exchange_queue_head(ex, framing, len, copy ? body : NULL,
                                     copy ? len : 0);
    /* A body that cannot follow its queued head: cut (rc 1). */
    if (rc == 0 && has_body && !head_only && len && !copy &&
        ex->ops->send_body(ex->proto, body, len, owned) < 0)
        rc = 1;
    mf__buf_release(ex->loop, &gz); /* unless the protocol took it */
    if (rc < 0)
        mf__exchange_fail(ex);
    else if (rc > 0)
        mf__exchange_cut(ex);
}

/* One piece of a streamed body, compressed and flushed when the stream
 * is: 0 or MF_ENOMEM. */
static int mf__exchange_send_piece(mf_http_exchange_t *ex, const void *data,
                                   size_t len, bool last)
{
    if (!ex->encoder)
        return len ? ex->ops->send_piece(ex->proto, data, len) : 0;
    const char *out;
    size_t out_len;
    int rc = mf__http_compress_piece(ex->loop, ex->encoder, data, len, last,
                                     &out, &out_len);
    if (rc == 0 && out_len)
        rc = ex->ops->send_piece(ex->proto, out, out_len);
    return rc < 0 ? MF_ENOMEM : 0;
}

/* Trailers that cannot follow this answer: said, never silently lost. */
static void mf__exchange_drop_trailers(mf_http_exchange_t *ex, const char *why)
{
    if (!ex->resp_trailers.len)
        return;
    fprintf(stderr, "moonflow: http: %.*s %.*s: trailers dropped: %s\n",
            (int)ex->req.method_len, ex->req.method, (int)ex->req.path_len,
            ex->req.path, why);
    ex->resp_trailers.len = 0;
}

/* The whole response of a send_file: head, then the file's bytes as the
 * protocol writes them. Returns whether the protocol took fd. */
static bool mf__exchange_queue_file(mf_http_exchange_t *ex, int fd,
                                    uint64_t offset, uint64_t len)
{
    if (ex->out_of_memory || ex->bad_header) {
        mf__exchange_refuse_answer(ex);
        return false;
    }
    if (!ex->ops->send_file) { /* a protocol that cannot send files */
        ex->site->hooks->response_failed(ex->site, mf__exchange_answer_500(ex));
        return false;
    }
    bool has_body = mf__status_has_body(ex->status);
    bool head_only =
        ex->req.method_len == 4 && memcmp(ex->req.method, "HEAD", 4) == 0;
    mf_http_framing_t framing =
        has_body ? MF_HTTP_FRAME_LENGTH : MF_HTTP_FRAME_NONE;
    if (mf__exchange_queue_head(ex, framing, len, NULL, 0) < 0) {
        mf__exchange_fail(ex);
        return false;
    }
    ex->state = MF_EX_FILE;
    mf__exchange_drop_trailers(ex, "a file answer is not streamed");
    if (!has_body || head_only || !len)
        return false;
    if (ex->ops->send_file(ex->proto, fd, offset, len) < 0) {
        mf__exchange_cut(ex);
        return false;
    }
    return true;
}

/* The end of a streamed body, as the protocol frames it, with the
 * trailers behind it when there are some and the protocol can carry
 * them. 0 or MF_ENOMEM. */
static int mf__exchange_end_body(mf_http_exchange_t *ex)
{
    if (!ex->resp_trailers.len || !ex->ops->end_stream_trailers)
        return ex->ops->end_stream(ex->proto);
    int rc = ex->ops->end_stream_trailers(ex->proto, ex->resp_trailers.data,
                                          ex->resp_trailers.len);
    if (rc == MF_ENOSYS) {
        mf__exchange_drop_trailers(ex, "the connection cannot carry them "
                                       "(HTTP/1.0 or raw)");
        rc = ex->ops->end_stream(ex->proto);
    }
    return rc;
}

/* The end of a streamed body, compressed input flushed first. */
static void mf__exchange_end_stream(mf_http_exchange_t *ex)
{
    int rc = ex->encoder ? mf__exchange_send_piece(ex, NULL, 0, true) : 0;
    mf__http_compress_close(ex->encoder);
    ex->encoder = NULL;
    if (rc < 0 || mf__exchange_end_body(ex) < 0)
        mf__exchange_cut(ex);
}

/* ---- the exchange's lifecycle, for its protocol (mf__http_exchange_ops) -- */

static mf_http_exchange_t *
mf__exchange_create(mf_http_site_t *site, const mf_http_proto_ops_t *ops,
                    void *proto, const mf_sockaddr_t *peer,
                    const mf_http_request_t *req, const char *body,
                    size_t body_len)
{
    mf_loop_t *loop = site->loop;
    unsigned nheaders = (unsigned)req->num_headers;
    mf_http_exchange_t *ex = mf_loop_alloc(loop, mf__exchange_size(nheaders));
    /* Everything but the header array, which is copied below. Zero is
     * also an empty buffer and no callback. */
    memset(ex, 0, offsetof(mf_http_exchange_t, headers));
    mf_list_init(&ex->drain_post._link); /* no drain call pending */
    mf_list_init(&ex->readable_post._link);
    ex->ops = ops;
    ex->proto = proto;
    ex->site = site;
    ex->loop = loop;
    ex->peer = peer;
    ex->req = *req;
    ex->nheaders = nheaders;
    memcpy(ex->headers, req->headers, nheaders * sizeof(ex->headers[0]));
    ex->req.headers = ex->headers;
    ex->streamed = body_len == SIZE_MAX; /* read through the protocol */
    ex->body = ex->streamed ? NULL : body;
    ex->body_len = ex->streamed ? 0 : body_len;
    ex->state = MF_EX_ACTIVE;
    ex->status = 200;
    ex->compress = site->config->compress;
    return ex;
}

static void mf__exchange_run(mf_http_exchange_t *ex)
{
    ex->site->handler(ex, ex->site->user);
    /* A send inside the handler only queued the response: the protocol
     * keeps the exchange alive until this call returns. */
    if (ex->series) {
        mf_series_start(ex->series);
        return;
    }
    if (ex->state != MF_EX_ACTIVE || ex->held)
        return; /* sent, streaming, failed (the writer sends), or held */
    mf_http_exchange_send(ex);
}

static void mf__exchange_readable(mf_http_exchange_t *ex)
{
    if (!ex->on_readable)
        return;
    mf_http_exchange_readable_cb cb = ex->on_readable;
    ex->on_readable = NULL;
    cb(ex, ex->on_readable_arg);
}

static void mf__exchange_lost(mf_http_exchange_t *ex)
{
    ex->closed_early = true;
    if (ex->on_drain) { /* wake a paused writer: its next write fails */
        mf_http_exchange_drain_cb cb = ex->on_drain;
        ex->on_drain = NULL;
        cb(ex, ex->on_drain_arg);
    }
    mf__exchange_readable(ex); /* and a reader: its next read fails */
    if (ex->on_close) {
        mf_http_exchange_close_cb cb = ex->on_close;
        ex->on_close = NULL;
        cb(ex, ex->on_close_arg);
        /* After on_close the handler holds no reference (nor a hold); a
         * series still running releases the connection when it ends. */
        ex->held = false;
        if (!ex->series && ex->state != MF_EX_DONE) {
            ex->state = MF_EX_DONE;
            ex->ops->release(ex->proto);
        }
    }
}

static void mf__exchange_drained(mf_http_exchange_t *ex)
{
    if (!ex->on_drain)
        return;
    mf_http_exchange_drain_cb cb = ex->on_drain;
    ex->on_drain = NULL;
    cb(ex, ex->on_drain_arg);
}

static void mf__exchange_destroy(mf_http_exchange_t *ex)
{
    if (mf_list_linked(&ex->drain_post._link))
        mf_list_remove(&ex->drain_post._link); /* a drain call not run yet */
    if (mf_list_linked(&ex->readable_post._link))
        mf_list_remove(&ex->readable_post._link);
    mf__http_compress_close(ex->encoder); /* a stream cut short */
    mf__buf_release(ex->loop, &ex->resp_headers);
    mf__buf_release(ex->loop, &ex->resp_body);
    mf__buf_release(ex->loop, &ex->resp_trailers);
    mf_loop_free(ex->loop, ex, mf__exchange_size(ex->nheaders));
}

static void mf__exchange_series_done(mf_series_t *series)
{
    mf_http_exchange_t *ex = mf_series_callback_arg(series);
    ex->series = NULL; /* the series is freed after this callback */
    if (ex->state == MF_EX_DONE)
        ex->ops->release(ex->proto); /* sent (or lost) meanwhile */
    else if (!ex->held)
        mf_http_exchange_send(ex);
}

/* ---- public API: the request ----------------------------------------------
 */

const mf_http_request_t *mf_http_exchange_request(const mf_http_exchange_t *ex)
{
    return &ex->req;
}

const char *mf_http_exchange_body(const mf_http_exchange_t *ex, size_t *len)
{
    if (len)
        *len = ex->body_len;
    return ex->body;
}

const mf_sockaddr_t *mf_http_exchange_peer(const mf_http_exchange_t *ex)
{
    return ex->peer;
}

mf_loop_t *mf_http_exchange_loop(const mf_http_exchange_t *ex)
{
    return ex->loop;
}

mf_http_server_t *mf_http_exchange_server(const mf_http_exchange_t *ex)
{
    return ex->site->srv;
}

/* ---- public API: the response ------------------------------------------ */

void mf_http_exchange_set_status(mf_http_exchange_t *ex, int status)
{
    ex->status = status >= 100 && status <= 999 ? status : 500;
}

/* Headers the server computes itself: a handler's copy would contradict
 * the framing or the connection's fate. name is a valid token already, so
 * a whole-token comparison cannot be fooled ("Content-Length " is not a
 * token). */
static bool mf__header_is_managed(const char *name, size_t len)
{
    switch (len) { /* most names have none of these lengths */
    case 4:
        return strncasecmp(name, "date", 4) == 0;
    case 10:
        return strncasecmp(name, "connection", 10) == 0 ||
               strncasecmp(name, "keep-alive", 10) == 0;
    case 14:
        return strncasecmp(name, "content-length", 14) == 0;
    case 17:
        return strncasecmp(name, "transfer-encoding", 17) == 0;
    default:
        return false;
    }
}

/* Why a header cannot be added, or NULL when it can. */
static const char *mf__header_fault(const mf_http_exchange_t *ex,
                                    const char *name, size_t name_len,
                                    const char *value, size_t value_len)
{
    if (!mf_http_field_name_valid(name, name_len))
        return "is not a valid field name";
    if (!mf_http_field_value_valid(value, value_len))
        return "has a control byte in its value";
    if (mf__header_is_managed(name, name_len))
        return "is set by the server";
    if (ex->state == MF_EX_STREAM || ex->state == MF_EX_RAW)
        return "comes after the head was sent";
    if (ex->state != MF_EX_ACTIVE)
        return "comes after the answer ended";
    return NULL;
}

/* A handler error, never a silent drop: counted and reported with the
 * request (once per exchange), and an answer not yet sent becomes a 500. */
/* Appends "name: value\r\n" to buf (the head's fields or the trailers'),
 * in one reserve; a refused allocation fails the answer (a 500 at the
 * send). 0 or MF_ENOMEM. */
static int mf__exchange_put_field(mf_http_exchange_t *ex, mf_buf_t *buf,
                                  const char *name, size_t name_len,
                                  const char *value, size_t value_len)
{
    size_t need = name_len + value_len + 4;
    if (ex->out_of_memory || (buf->cap - buf->len < need &&
                              mf__buf_reserve(ex->loop, buf, need) < 0)) {
        ex->out_of_memory = true;
        return MF_ENOMEM;
    }
    char *p = buf->data + buf->len;
    memcpy(p, name, name_len);
    memcpy(p + name_len, ": ", 2);
    if (value_len)
        memcpy(p + name_len + 2, value, value_len);
    memcpy(p + name_len + 2 + value_len, "\r\n", 2);
    buf->len += need;
    return 0;
}

static int mf__exchange_refuse_header(mf_http_exchange_t *ex, const char *name,
                                      size_t name_len, const char *fault)
{
    bool first = !ex->bad_header;
    ex->bad_header = true; /* only a head not yet sent looks at it */
    ex->site->hooks->header_refused(ex->site, &ex->req, name, name_len, fault,
                                    first, ex->state != MF_EX_ACTIVE);
    return MF_EINVAL;
}

int mf_http_exchange_add_header(mf_http_exchange_t *ex, const char *name,
                                size_t name_len, const char *value,
                                size_t value_len)
{
    while (value_len && (value[0] == ' ' || value[0] == '\t')) {
        value++;
        value_len--;
    }
    while (value_len &&
           (value[value_len - 1] == ' ' || value[value_len - 1] == '\t'))
        value_len--;
    const char *fault = mf__header_fault(ex, name, name_len, value, value_len);
    if (fault)
        return mf__exchange_refuse_header(ex, name, name_len, fault);
    return mf__exchange_put_field(ex, &ex->resp_headers, name, name_len,
                                  value, value_len);
}

void mf_http_exchange_add_header_line(mf_http_exchange_t *ex, const char *line,
                                      size_t len)
{
    mf__exchange_keep(ex, &ex->resp_headers, line, len);
}

void mf_http_exchange_add_header_static(mf_http_exchange_t *ex,
                                        const char *line, size_t len)
{
    if (ex->nstatic == MF_HTTP_STATIC_LINES || len > UINT16_MAX) {
        mf_http_exchange_add_header_line(ex, line, len);
        return;
    }
    ex->static_lines[ex->nstatic] = line;
    ex->static_lens[ex->nstatic] = (uint16_t)len;
    ex->nstatic++;
}

void mf_http_exchange_append(mf_http_exchange_t *ex, const void *data,
                             size_t len)
{
    if (ex->body_ref) { /* switch from a reference to an owned copy */
        const char *ref = ex->body_ref;
        ex->body_ref = NULL;
        mf__exchange_keep(ex, &ex->resp_body, ref, ex->body_ref_len);
    }
    mf__exchange_keep(ex, &ex->resp_body, data, len);
}

void mf_http_exchange_body_ref(mf_http_exchange_t *ex, const void *data,
                               size_t len)
{
    ex->resp_body.len = 0;
    ex->body_ref = data;
    ex->body_ref_len = len;
}

mf_series_t *mf_http_exchange_series(mf_http_exchange_t *ex)
{
    if (!ex->series) {
        ex->series = mf_series_create(ex->loop, mf__exchange_series_done);
        mf_series_set_callback_arg(ex->series, ex);
    }
    return ex->series;
}

void mf_http_exchange_set_compress(mf_http_exchange_t *ex,
                                   const mf_http_compress_config_t *config)
{
    ex->compress = config;
}

void mf_http_exchange_hold(mf_http_exchange_t *ex)
{
    ex->held = true;
}

void mf_http_exchange_on_close(mf_http_exchange_t *ex,
                               mf_http_exchange_close_cb cb, void *arg)
{
    ex->on_close = cb;
    ex->on_close_arg = arg;
}

void mf_http_exchange_send_body(mf_http_exchange_t *ex, const void *data,
                                size_t len)
{
    if (ex->resp_body.len || ex->body_ref || len > MF_HTTP_COPY_BODY_MAX) {
        mf_http_exchange_append(ex, data, len); /* kept until written */
    } else {
        ex->body_ref = data; /* copied into the output by the send */
        ex->body_ref_len = len;
    }
    mf_http_exchange_send(ex);
}

static void mf__exchange_queue_with_trailers(mf_http_exchange_t *ex);

void mf_http_exchange_send(mf_http_exchange_t *ex)
{
    if (ex->state == MF_EX_DONE)
        return;
    /* The handler lets go here: no callback of its may run after. */
    ex->on_close = NULL;
    ex->on_drain = NULL;
    ex->on_readable = NULL;
    ex->held = false;
    if (!ex->closed_early) {
        if (ex->state == MF_EX_ACTIVE && ex->resp_trailers.len)
            mf__exchange_queue_with_trailers(ex); /* streamed, or dropped */
        if (ex->state == MF_EX_STREAM)
            mf__exchange_end_stream(ex);
        else if (ex->state == MF_EX_ACTIVE)
            mf__exchange_queue_full(ex);
    }
    ex->state = MF_EX_DONE;
    if (ex->series) { /* sent from inside its series: its end releases */
        ex->ops->flush(ex->proto);
        return;
    }
    ex->ops->release(ex->proto); /* may destroy ex */
}

void mf_http_exchange_send_file(mf_http_exchange_t *ex, int fd, uint64_t offset,
                                uint64_t len)
{
    bool taken = false;
    if (ex->state == MF_EX_ACTIVE && !ex->closed_early)
        taken = mf__exchange_queue_file(ex, fd, offset, len);
    if (!taken)
        close(fd);
    mf_http_exchange_send(ex); /* ends the exchange, adds nothing */
}

void mf_http_exchange_abort(mf_http_exchange_t *ex)
{
    if (ex->state == MF_EX_DONE)
        return;
    /* The handler lets go now: closing the connection below must not call
     * it back. */
    ex->on_close = NULL;
    ex->on_drain = NULL;
    ex->on_readable = NULL;
    if (ex->state == MF_EX_ACTIVE)
        mf__exchange_answer_500(ex);
    else if (ex->state == MF_EX_STREAM || ex->state == MF_EX_RAW)
        mf__exchange_close(ex);
    mf_http_exchange_send(ex); /* failed: ends the exchange, adds nothing */
}

/* A streamed answer's encoder, when it qualifies, and the head's lines
 * that follow. 0 or MF_ENOMEM. */
static int mf__exchange_compress_stream(mf_http_exchange_t *ex)
{
    mf_http_compress_answer_t a = mf__exchange_answer(ex);
    bool vary;
    mf_http_coding_t coding = mf__http_compress_choose(&a, false, 0, &vary);
    if (coding != MF_HTTP_CODING_IDENTITY &&
        !(ex->encoder = mf__http_compress_open(ex->loop, ex->compress, coding)))
        return MF_ENOMEM;
    return mf__http_compress_head(ex->loop, &ex->resp_headers, coding, vary);
}

/* The head of a streamed response, on its first write; an answer that
 * cannot go out becomes a 500 instead. 0, MF_ENOMEM or MF_EINVAL. */
static int mf__exchange_start_stream(mf_http_exchange_t *ex)
{
    if (ex->out_of_memory || ex->bad_header) {
        int rc = ex->out_of_memory ? MF_ENOMEM : MF_EINVAL;
        mf__exchange_refuse_answer(ex);
        return rc;
    }
    if (ex->compress && mf__exchange_compress_stream(ex) < 0) {
        mf__exchange_fail(ex); /* nothing queued yet: a 500 */
        return MF_ENOMEM;
    }
    ex->state = MF_EX_STREAM;
    if (mf__exchange_queue_head(ex, MF_HTTP_FRAME_STREAM, 0, NULL, 0) == 0)
        return 0;
    mf__exchange_fail(ex); /* nothing queued yet: a 500 */
    return MF_ENOMEM;
}

/* A whole answer with trailers goes out as a stream so they can follow
 * its body (the send ends it); where no body may be sent they are
 * dropped, said on stderr. */
static void mf__exchange_queue_with_trailers(mf_http_exchange_t *ex)
{
    bool head_only =
        ex->req.method_len == 4 && memcmp(ex->req.method, "HEAD", 4) == 0;
    if (head_only || !mf__status_has_body(ex->status)) {
        mf__exchange_drop_trailers(ex, "the answer has no body");
        return;
    }
    const char *body = ex->body_ref ? ex->body_ref : ex->resp_body.data;
    size_t len = ex->body_ref ? ex->body_ref_len : ex->resp_body.len;
    if (mf__exchange_start_stream(ex) < 0)
        return; /* a 500 is queued instead */
    if (len && mf__exchange_send_piece(ex, body, len, false) < 0)
        mf__exchange_cut(ex);
}

int mf_http_exchange_add_trailer(mf_http_exchange_t *ex, const char *name,
                                 size_t name_len, const char *value,
                                 size_t value_len)
{
    if (mf_http_trailer_fault(name, name_len, value, value_len) ||
        ex->state == MF_EX_DONE || ex->state == MF_EX_RAW)
        return MF_EINVAL;
    return mf__exchange_put_field(ex, &ex->resp_trailers, name, name_len,
                                  value, value_len);
}

const char *mf_http_exchange_trailers(const mf_http_exchange_t *ex, size_t *len)
{
    *len = 0;
    if (!ex->ops->request_trailers || ex->state == MF_EX_DONE)
        return NULL;
    return ex->ops->request_trailers(ex->proto, len);
}

int mf_http_exchange_write(mf_http_exchange_t *ex, const void *data, size_t len)
{
    if (ex->closed_early || ex->state == MF_EX_DONE)
        return MF_ECLOSED;
    if (ex->state == MF_EX_FAILED)
        return MF_ENOMEM;
    int rc = 0;
    if (ex->state == MF_EX_ACTIVE) /* on failure a 500 is queued instead */
        rc = mf__exchange_start_stream(ex);
    if (rc == 0 && len && mf__exchange_send_piece(ex, data, len, false) < 0) {
        mf__exchange_cut(ex);
        return MF_ENOMEM;
    }
    if (ex->ops->flush(ex->proto) < 0 || ex->closed_early)
        return rc ? rc : MF_ECLOSED;
    if (rc)
        return rc;
    return ex->ops->pending(ex->proto) > MF_HTTP_WRITE_HIGH_WATER ? 1 : 0;
}

static void mf__exchange_drain_now(mf_post_t *post)
{
    mf_http_exchange_t *ex = post->data;
    if (ex->on_drain && !ex->closed_early) {
        mf_http_exchange_drain_cb cb = ex->on_drain;
        ex->on_drain = NULL;
        cb(ex, ex->on_drain_arg);
    }
}

void mf_http_exchange_on_drain(mf_http_exchange_t *ex,
                               mf_http_exchange_drain_cb cb, void *arg)
{
    ex->on_drain = cb;
    ex->on_drain_arg = arg;
    if (!cb)
        return;
    /* The protocol calls drained when a write leaves less than the low
     * water queued. */
    ex->ops->watch_drain(ex->proto, MF_HTTP_WRITE_LOW_WATER);
    /* Room already: call back on the next phase (never inside this call),
     * with one post at most in flight. */
    if (ex->ops->pending(ex->proto) < MF_HTTP_WRITE_LOW_WATER &&
        !mf_list_linked(&ex->drain_post._link)) {
        mf_post_init(&ex->drain_post, mf__exchange_drain_now, ex);
        mf_loop_defer(ex->loop, &ex->drain_post);
    }
}

/* ---- public API: the body as a stream, the raw connection -------------- */

bool mf_http_exchange_body_streamed(const mf_http_exchange_t *ex)
{
    return ex->streamed;
}

/* The body was refused while the handler read it: the client hears the
 * status the protocol names (413, 400, 408) if nothing was sent, else the
 * answer is cut; either way the connection ends after it, and the
 * handler's own answer is dropped. */
static void mf__exchange_body_refused(mf_http_exchange_t *ex)
{
    if (ex->state == MF_EX_ACTIVE) {
        ex->state = MF_EX_FAILED;
        int status = ex->ops->body_status(ex->proto);
        if (ex->ops->send_error(ex->proto, status) < 0)
            ex->ops->abort(ex->proto); /* runs mf__exchange_lost */
        else
            ex->ops->flush(ex->proto);
    } else if (ex->state == MF_EX_STREAM) {
        mf__exchange_close(ex);
    }
}

/* Whether reads go to the protocol: a streamed body, or the connection. */
static bool mf__exchange_reads_proto(const mf_http_exchange_t *ex)
{
    return ex->streamed || ex->state == MF_EX_RAW;
}

ssize_t mf_http_exchange_read(mf_http_exchange_t *ex, void *buf, size_t len)
{
    if (ex->closed_early)
        return MF_ECLOSED;
    if (!mf__exchange_reads_proto(ex)) { /* the body read before */
        size_t n = ex->body_len - ex->body_read;
        n = n < len ? n : len;
        if (n)
            memcpy(buf, ex->body + ex->body_read, n);
        ex->body_read += n;
        return (ssize_t)n;
    }
    ssize_t n = ex->ops->read(ex->proto, buf, len);
    if (n == MF_EMSGSIZE || n == MF_EPROTO || n == MF_ETIMEDOUT)
        mf__exchange_body_refused(ex);
    return n;
}

static void mf__exchange_readable_now(mf_post_t *post)
{
    mf__exchange_readable(post->data);
}

void mf_http_exchange_on_readable(mf_http_exchange_t *ex,
                                  mf_http_exchange_readable_cb cb, void *arg)
{
    ex->on_readable = cb;
    ex->on_readable_arg = arg;
    if (!cb)
        return;
    if (!ex->closed_early && mf__exchange_reads_proto(ex)) {
        ex->ops->watch_read(ex->proto);
        return;
    }
    /* A body in memory (or a connection gone) answers at once: on the
     * next phase, never inside this call. */
    if (!mf_list_linked(&ex->readable_post._link)) {
        mf_post_init(&ex->readable_post, mf__exchange_readable_now, ex);
        mf_loop_defer(ex->loop, &ex->readable_post);
    }
}

int mf_http_exchange_upgrade(mf_http_exchange_t *ex)
{
    if (ex->closed_early)
        return MF_ECLOSED;
    if (ex->state != MF_EX_ACTIVE)
        return MF_EINVAL;
    if (ex->out_of_memory || ex->bad_header) {
        int rc = ex->out_of_memory ? MF_ENOMEM : MF_EINVAL;
        mf__exchange_refuse_answer(ex);
        return rc;
    }
    int rc = ex->ops->upgrade(ex->proto);
    if (rc < 0)
        return rc;
    ex->state = MF_EX_RAW;
    if (mf__exchange_queue_head(ex, MF_HTTP_FRAME_NONE, 0, NULL, 0) < 0) {
        mf__exchange_cut(ex); /* no HTTP answer can follow an upgrade */
        return MF_ENOMEM;
    }
    if (ex->ops->flush(ex->proto) < 0 || ex->closed_early)
        return MF_ECLOSED;
    return 0;
}

/* A pointer into from[0..len) now points into to[0..len). */
static const char *mf__exchange_follow(const char *p, const char *from,
                                       size_t len, const char *to)
{
    if (p && (uintptr_t)p - (uintptr_t)from < len)
        return to + (p - from);
    return p;
}

static void mf__exchange_moved(mf_http_exchange_t *ex, const char *from,
                               size_t len, const char *to)
{
    mf_http_request_t *r = &ex->req;
    r->method = mf__exchange_follow(r->method, from, len, to);
    r->target = mf__exchange_follow(r->target, from, len, to);
    r->path = mf__exchange_follow(r->path, from, len, to);
    r->query = mf__exchange_follow(r->query, from, len, to);
    r->host = mf__exchange_follow(r->host, from, len, to);
    for (unsigned i = 0; i < ex->nheaders; i++) {
        mf_http_header_t *h = &ex->headers[i];
        h->name = mf__exchange_follow(h->name, from, len, to);
        h->value = mf__exchange_follow(h->value, from, len, to);
    }
    ex->body = mf__exchange_follow(ex->body, from, len, to);
}

const mf_http_exchange_ops_t mf__http_exchange_ops = {
    .create = mf__exchange_create,
    .run = mf__exchange_run,
    .lost = mf__exchange_lost,
    .drained = mf__exchange_drained,
    .readable = mf__exchange_readable,
    .moved = mf__exchange_moved,
    .destroy = mf__exchange_destroy,
};
