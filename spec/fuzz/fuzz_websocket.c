/*
 * fuzz_websocket.c — libFuzzer target for the WebSocket frame codec
 * (moonflow/websocket.h), whose input is whatever a client sends after
 * the upgrade.
 *
 * The first byte picks max_payload, the size of the reads and whether
 * permessage-deflate was negotiated (RSV1 allowed); the rest
 * is the client's stream, read as a server reads it: a head from an
 * exact-size copy of what arrived (ASan sees a read past it), the stream
 * rules, the payload unmasked and taken in pieces of the read size.
 * Checked: a head never claims more than the bytes given; the stream read
 * in pieces ends as it does read whole (the same messages, the same
 * refusal); every text message and close reason accepted is UTF-8 by a
 * second, independent decoder; no message passes max_payload; a server
 * head for the payload's length is as long as its length needs. The
 * whole input is also read as a Sec-WebSocket-Extensions value.
 */
#include <moonflow/websocket.h>

#include "fuzz_assert.h"

#include <stdlib.h>
#include <string.h>

/* Decodes s as UTF-8 code points: true when it is UTF-8. */
static int utf8_decodes(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint32_t c = s[i], min;
        size_t k;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0)
            k = 1, c &= 0x1f, min = 0x80;
        else if ((c & 0xf0) == 0xe0)
            k = 2, c &= 0x0f, min = 0x800;
        else if ((c & 0xf8) == 0xf0)
            k = 3, c &= 0x07, min = 0x10000;
        else
            return 0;
        if (i + k >= n)
            return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return 0;
            c = c << 6 | (s[i + j] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
            return 0;
        i += k + 1;
    }
    return 1;
}

typedef struct outcome {
    uint32_t hash; /* of the messages and frames seen, in order */
    int refusal;
    size_t events;
} outcome_t;

static void mix(outcome_t *o, const uint8_t *p, size_t n, unsigned op)
{
    o->hash = o->hash * 31 + op;
    for (size_t i = 0; i < n; i++)
        o->hash = o->hash * 131 + p[i];
    o->events++;
}

/* Reads the stream in[0..n) in pieces of step bytes. */
static outcome_t run(const uint8_t *in, size_t n, size_t step, uint64_t max,
                     bool deflate)
{
    outcome_t o = {0, 0, 0};
    mf_ws_reader_t r;
    memset(&r, 0, sizeof r);
    r.max_payload = max;
    r.deflate = deflate;
    uint8_t *msg = malloc(n + 1);
    FUZZ_CHECK(msg != NULL);
    size_t pos = 0, have = 0, msg_len = 0;
    while (pos < n && !o.refusal) {
        have = have + step < n - pos ? have + step : n - pos;
        uint8_t *copy = malloc(have ? have : 1);
        FUZZ_CHECK(copy != NULL);
        memcpy(copy, in + pos, have);
        mf_ws_frame_t f;
        ssize_t head = mf_ws_parse_head(&f, copy, have);
        free(copy);
        if (head < 0) {
            o.refusal = (int)head;
            break;
        }
        if (head == 0 || have - (size_t)head < f.len) {
            if (have == n - pos)
                break; /* the stream ends inside a frame */
            continue;
        }
        FUZZ_CHECK((size_t)head == f.head_len && (size_t)head <= have);
        int rc = mf_ws_reader_frame(&r, &f);
        if (rc < 0) {
            o.refusal = rc;
            break;
        }
        uint8_t *p = malloc(f.len ? f.len : 1);
        FUZZ_CHECK(p != NULL);
        memcpy(p, in + pos + head, f.len);
        unsigned op = r.message_op;
        bool compressed = r.compressed;
        FUZZ_CHECK(!f.rsv1 || (deflate && compressed));
        for (size_t off = 0; off < f.len || off == 0; off += step) {
            size_t k = f.len - off < step ? f.len - off : step;
            mf_ws_unmask(p + off, k, f.mask, off);
            if (!(f.opcode & 0x8) &&
                (rc = mf_ws_reader_data(&r, &f, p + off, k, off + k == f.len)) <
                    0)
                break;
            if (k == 0)
                break;
        }
        if (rc < 0) {
            o.refusal = rc;
            free(p);
            break;
        }
        if (f.opcode == MF_WS_OP_CLOSE) {
            unsigned code;
            const uint8_t *reason;
            size_t rlen;
            rc = mf_ws_close_parse(p, f.len, &code, &reason, &rlen);
            if (rc < 0)
                o.refusal = rc;
            else {
                FUZZ_CHECK(utf8_decodes(reason, rlen));
                FUZZ_CHECK(code == MF_WS_CLOSE_NO_STATUS ||
                           mf_ws_close_code_valid(code));
                mix(&o, reason, rlen, code);
            }
        } else if (f.opcode & 0x8) {
            FUZZ_CHECK(f.len <= MF_WS_CONTROL_MAX && f.fin);
            mix(&o, p, f.len, f.opcode);
        } else {
            memcpy(msg + msg_len, p, f.len);
            msg_len += f.len;
            FUZZ_CHECK(!max || msg_len <= max);
            if (f.fin) {
                FUZZ_CHECK(op != MF_WS_OP_TEXT || compressed ||
                           utf8_decodes(msg, msg_len));
                mix(&o, msg, msg_len, op);
                msg_len = 0;
            }
        }
        uint8_t h[MF_WS_HEAD_MAX];
        size_t hl = mf_ws_build_head(h, f.fin, f.opcode, f.len);
        FUZZ_CHECK(hl == f.head_len - 4);
        free(p);
        pos += (size_t)head + f.len;
        have = 0;
    }
    free(msg);
    return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint64_t max = data[0] & 0x80 ? 0 : (uint64_t)(data[0] & 0x38) * 4;
    size_t step = (data[0] & 0x07) + 1;
    bool deflate = data[0] & 0x40;
    outcome_t whole = run(data + 1, size - 1, size, max, deflate);
    outcome_t pieces = run(data + 1, size - 1, step, max, deflate);
    FUZZ_CHECK(whole.refusal == pieces.refusal);
    FUZZ_CHECK(whole.events == pieces.events && whole.hash == pieces.hash);
    /* the input as a Sec-WebSocket-Extensions value */
    mf_ws_deflate_offer_t offer;
    char *value = malloc(size);
    FUZZ_CHECK(value != NULL);
    memcpy(value, data, size);
    if (mf_ws_deflate_pick(value, size, &offer))
        FUZZ_CHECK(offer.server_max_window_bits >= 9 &&
                   offer.server_max_window_bits <= 15);
    free(value);
    return 0;
}
