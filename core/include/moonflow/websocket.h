/*
 * moonflow/websocket.h — the WebSocket frame codec (RFC 6455) of the server
 * side: pure functions over caller buffers, no I/O and no allocation
 * (core/http/websocket.c). A server upgrades a request with the handshake
 * helpers, then for each frame a client sends:
 *
 *   1. mf_ws_parse_head on the bytes buffered so far: the frame's head, or
 *      "need more", or the close code a bad head deserves;
 *   2. mf_ws_reader_frame with the head: the rules that need the stream's
 *      state (continuation, the message's size);
 *   3. mf_ws_unmask on the payload as it arrives (any split), then
 *      mf_ws_reader_data for a data frame (UTF-8 of text, across
 *      fragments) or mf_ws_close_parse for a close frame.
 *
 * Every refusal is a negative close code (-1002 protocol error, -1007
 * invalid payload data, -1009 message too big) that the caller sends in
 * its close frame before it closes the connection. Answers are built with
 * mf_ws_build_head (server frames are never masked) and mf_ws_close_build.
 *
 * Ownership: the caller owns every buffer and the reader (embed it; no
 * _close needed). Threads: none of its own; a reader belongs to one
 * connection.
 */
#ifndef MOONFLOW_WEBSOCKET_H
#define MOONFLOW_WEBSOCKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common.h"

MF_EXTERN_C_BEGIN

/* Opcodes (RFC 6455 §5.2). */
enum {
    MF_WS_OP_CONTINUATION = 0x0,
    MF_WS_OP_TEXT = 0x1,
    MF_WS_OP_BINARY = 0x2,
    MF_WS_OP_CLOSE = 0x8,
    MF_WS_OP_PING = 0x9,
    MF_WS_OP_PONG = 0xA
};

/* Close codes (RFC 6455 §7.4.1) the codec and servers use. */
enum {
    MF_WS_CLOSE_NORMAL = 1000,
    MF_WS_CLOSE_GOING_AWAY = 1001,
    MF_WS_CLOSE_PROTOCOL = 1002,
    MF_WS_CLOSE_NO_STATUS = 1005, /* never sent: a close without a code */
    MF_WS_CLOSE_BAD_DATA = 1007,
    MF_WS_CLOSE_TOO_BIG = 1009
};

/* The most a control frame's payload may be (§5.5). */
#define MF_WS_CONTROL_MAX 125
/* The longest frame head: 2 + 8 (length) + 4 (mask). */
#define MF_WS_HEAD_MAX 14
/* The Sec-WebSocket-Accept value's length (base64 of a SHA-1). */
#define MF_WS_ACCEPT_LEN 28

typedef struct mf_ws_frame {
    bool fin;
    bool rsv1; /* permessage-deflate's "compressed" bit (RFC 7692 §6) */
    bool masked;
    uint8_t opcode;
    uint8_t mask[4];
    uint64_t len;    /* the payload's */
    size_t head_len; /* the head's bytes, 2 to 14 */
} mf_ws_frame_t;

/* Parses a frame head from buf[0..n): its length (> 0, also in
 * f->head_len), 0 when more bytes are needed, or -1002 for a head no
 * server takes: RSV2 or RSV3 set (RSV1 is left to mf_ws_reader_frame,
 * which knows whether permessage-deflate was negotiated), a reserved
 * opcode, an unmasked frame (a client MUST mask, §5.1), a
 * control frame fragmented or longer than 125 bytes, a 64-bit length
 * with its top bit set, a length not in its shortest form. */
MF_API ssize_t mf_ws_parse_head(mf_ws_frame_t *f, const uint8_t *buf, size_t n);

/* XORs data[0..n) with the mask, data being the payload's bytes from
 * offset on (so a payload may be unmasked piece by piece, in place). */
MF_API void mf_ws_unmask(uint8_t *data, size_t n, const uint8_t mask[4],
                         uint64_t offset);

/* Incremental UTF-8 validation (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), state kept across calls. Zero it
 * to start. */
typedef struct mf_ws_utf8 {
    uint8_t need;   /* continuation bytes still expected */
    uint8_t lo, hi; /* the range of the next one */
} mf_ws_utf8_t;

/* Feeds s[0..n): false at the first byte that cannot be there (a
 * sequence cut by the end of s stays pending, it is not an error). */
MF_API bool mf_ws_utf8_feed(mf_ws_utf8_t *u, const uint8_t *s, size_t n);
/* Whether the bytes fed so far end on a whole character. */
static inline bool mf_ws_utf8_whole(const mf_ws_utf8_t *u)
{
    return u->need == 0;
}

/* The stream state of one connection's incoming frames. Set max_payload
 * (0: no limit) and deflate, and zero the rest to start. */
typedef struct mf_ws_reader {
    uint64_t max_payload; /* the most a message may carry, all fragments */
    bool deflate;         /* permessage-deflate was negotiated */
    bool compressed;      /* the open message is (RSV1 on its first frame) */
    uint64_t message_len; /* the fragmented message's bytes so far */
    uint8_t message_op;   /* TEXT or BINARY while a message is open, else 0 */
    mf_ws_utf8_t utf8;    /* a text message's bytes so far */
} mf_ws_reader_t;

/* Checks a parsed head against the stream: 0, or -1002 (a continuation
 * with no message open, a new data frame while one is open, RSV1 set
 * but on the first frame of a message when deflate was negotiated), or
 * -1009 (the message would pass max_payload, counted on the wire).
 * Control frames pass (they may come between fragments). Records a data
 * frame's opcode and length, and whether its message is compressed. */
MF_API int mf_ws_reader_frame(mf_ws_reader_t *r, const mf_ws_frame_t *f);

/* Takes unmasked payload bytes of the data frame f (any split: call it
 * for each piece, last set on the frame's last piece): 0, or -1007 when
 * a text message is not UTF-8 (checked as bytes come; at the end of the
 * message a cut sequence is refused too). A compressed message is not
 * checked here: its caller checks the text it inflates. The message is
 * over after the last piece of a frame with fin. */
MF_API int mf_ws_reader_data(mf_ws_reader_t *r, const mf_ws_frame_t *f,
                             const uint8_t *data, size_t n, bool last);

/* Whether a close frame may carry code (§7.4: 1000-1003, 1007-1014 as
 * registered, 3000-4999 for libraries and applications). */
MF_API bool mf_ws_close_code_valid(unsigned code);

/* Reads an unmasked close payload: 0 with *code (1005 when it has none)
 * and the reason (in p), or -1002 (1 byte, a code not allowed) or -1007
 * (the reason is not UTF-8). */
MF_API int mf_ws_close_parse(const uint8_t *p, size_t n, unsigned *code,
                             const uint8_t **reason, size_t *reason_len);

/* Writes a server frame's head (unmasked) for a payload of len bytes:
 * its length (2, 4 or 10; out needs MF_WS_HEAD_MAX bytes). */
MF_API size_t mf_ws_build_head(uint8_t *out, bool fin, unsigned opcode,
                               uint64_t len);

/* Writes a close payload: the code, then the reason cut to fit 125 bytes
 * in all (at a character's start, so it stays UTF-8). out needs
 * MF_WS_CONTROL_MAX bytes. code 1005 writes nothing (an empty close).
 * Returns the payload's length. */
MF_API size_t mf_ws_close_build(uint8_t *out, unsigned code, const char *reason,
                                size_t reason_len);

/* ---- the opening handshake (§4.2) ------------------------------------- */

/* What a server answers to an accepted permessage-deflate offer (RFC
 * 7692 §7): it always asks both sides to start each message afresh
 * (server_ and client_no_context_takeover), so that neither keeps a
 * compression context between messages; server_max_window_bits is
 * echoed when the client set it. */
typedef struct mf_ws_deflate_offer {
    unsigned server_max_window_bits; /* 9-15; 15 when the client set none */
    bool window_bits_set;            /* the client set it: echo it */
} mf_ws_deflate_offer_t;

/* Reads one Sec-WebSocket-Extensions value[0..n) (offers separated by
 * commas, parameters by semicolons): true, with *o, at the first
 * permessage-deflate offer the server can take; false when there is none
 * (an offer with an unknown or repeated parameter, a bad value, or a
 * server_max_window_bits of 8, which zlib cannot produce, is passed
 * over, §7.1). */
MF_API bool mf_ws_deflate_pick(const char *value, size_t n,
                               mf_ws_deflate_offer_t *o);

/* Whether key[0..n) is a Sec-WebSocket-Key: the base64 of 16 bytes. */
MF_API bool mf_ws_key_valid(const char *key, size_t n);
/* Writes the Sec-WebSocket-Accept of key (MF_WS_ACCEPT_LEN bytes to
 * out, no NUL): base64(SHA-1(key + the GUID)). */
MF_API void mf_ws_accept(char *out, const char *key, size_t n);
/* Whether the comma-separated list[0..n) holds token (any case; spaces
 * around the elements ignored). */
MF_API bool mf_ws_list_has(const char *list, size_t n, const char *token);

MF_EXTERN_C_END

#endif /* MOONFLOW_WEBSOCKET_H */
