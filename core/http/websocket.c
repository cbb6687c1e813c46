/*
 * core/http/websocket.c — the WebSocket frame codec of the server side
 * (RFC 6455 §5, §7.4) and the opening handshake's checks (§4.2), as
 * moonflow/websocket.h describes them.
 *
 * Owns nothing: reads and writes the caller's buffers and reader. May
 * call: libc, the base64 codec (engine), OpenSSL's SHA-1.
 */
#include <string.h>
#include <strings.h>

#include <openssl/sha.h>

#include <moonflow/codec.h>
#include <moonflow/websocket.h>

#define MF__WS_REFUSE (-MF_WS_CLOSE_PROTOCOL)

/* ---- frame heads ------------------------------------------------------- */

static bool mf__ws_opcode_known(unsigned op)
{
    return op <= MF_WS_OP_BINARY ||
           (op >= MF_WS_OP_CLOSE && op <= MF_WS_OP_PONG);
}

/* What the first two bytes alone may refuse, before the rest arrives, so
 * that a bad frame is refused at its head whatever follows. */
static int mf__ws_first_bytes(const uint8_t *buf)
{
    unsigned op = buf[0] & 0x0f;
    bool fin = buf[0] & 0x80;
    unsigned len7 = buf[1] & 0x7f;
    if (buf[0] & 0x30) /* RSV2, RSV3: no extension gives them a meaning */
        return MF__WS_REFUSE;
    if (!mf__ws_opcode_known(op))
        return MF__WS_REFUSE;
    if (!(buf[1] & 0x80)) /* a client's frames are masked (§5.1) */
        return MF__WS_REFUSE;
    if ((op & 0x8) && (!fin || len7 > MF_WS_CONTROL_MAX)) /* §5.5 */
        return MF__WS_REFUSE;
    return 0;
}

ssize_t mf_ws_parse_head(mf_ws_frame_t *f, const uint8_t *buf, size_t n)
{
    if (n < 2)
        return 0;
    if (mf__ws_first_bytes(buf) < 0)
        return MF__WS_REFUSE;
    unsigned len7 = buf[1] & 0x7f;
    size_t ext = len7 == 126 ? 2 : len7 == 127 ? 8 : 0;
    size_t head = 2 + ext + 4;
    if (n < head)
        return 0;
    uint64_t len = len7;
    if (ext) {
        len = 0;
        for (size_t i = 0; i < ext; i++)
            len = len << 8 | buf[2 + i];
        /* the shortest form is a MUST (§5.2), the top bit is 0 */
        if ((ext == 2 && len < 126) ||
            (ext == 8 && (len <= 0xffff || len >> 63)))
            return MF__WS_REFUSE;
    }
    f->fin = buf[0] & 0x80;
    f->rsv1 = buf[0] & 0x40;
    f->opcode = buf[0] & 0x0f;
    f->masked = true;
    memcpy(f->mask, buf + 2 + ext, 4);
    f->len = len;
    f->head_len = head;
    return (ssize_t)head;
}

void mf_ws_unmask(uint8_t *data, size_t n, const uint8_t mask[4],
                  uint64_t offset)
{
    for (size_t i = 0; i < n; i++)
        data[i] ^= mask[(offset + i) & 3];
}

/* ---- UTF-8 ------------------------------------------------------------- */

/* A lead byte: how many continuation bytes follow and the range of the
 * first of them (which is what rules out overlong forms, surrogates and
 * code points past U+10FFFF, RFC 3629 §4); false for a byte no
 * character starts with. */
static bool mf__ws_utf8_lead(mf_ws_utf8_t *u, uint8_t b)
{
    u->lo = 0x80;
    u->hi = 0xbf;
    if (b >= 0xc2 && b <= 0xdf)
        u->need = 1;
    else if (b >= 0xe0 && b <= 0xef) {
        u->need = 2;
        if (b == 0xe0)
            u->lo = 0xa0; /* overlong below U+0800 */
        else if (b == 0xed)
            u->hi = 0x9f; /* surrogates */
    } else if (b >= 0xf0 && b <= 0xf4) {
        u->need = 3;
        if (b == 0xf0)
            u->lo = 0x90; /* overlong below U+10000 */
        else if (b == 0xf4)
            u->hi = 0x8f; /* past U+10FFFF */
    } else
        return false;
    return true;
}

bool mf_ws_utf8_feed(mf_ws_utf8_t *u, const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t b = s[i];
        if (u->need == 0) {
            if (b < 0x80)
                continue;
            if (!mf__ws_utf8_lead(u, b))
                return false;
            continue;
        }
        if (b < u->lo || b > u->hi)
            return false;
        u->need--;
        u->lo = 0x80;
        u->hi = 0xbf;
    }
    return true;
}

/* ---- the stream -------------------------------------------------------- */

int mf_ws_reader_frame(mf_ws_reader_t *r, const mf_ws_frame_t *f)
{
    /* RSV1 only on a message's first frame, when deflate is on (RFC
     * 7692 §6.1) */
    if (f->rsv1 && (!r->deflate || f->opcode == MF_WS_OP_CONTINUATION ||
                    (f->opcode & 0x8)))
        return MF__WS_REFUSE;
    if (f->opcode & 0x8)
        return 0;
    if (f->opcode == MF_WS_OP_CONTINUATION) {
        if (!r->message_op)
            return MF__WS_REFUSE;
    } else {
        if (r->message_op) /* §5.4: no interleaving of messages */
            return MF__WS_REFUSE;
        r->message_op = f->opcode;
        r->compressed = f->rsv1;
        r->message_len = 0;
        memset(&r->utf8, 0, sizeof r->utf8);
    }
    if (r->max_payload && f->len > r->max_payload - r->message_len)
        return -MF_WS_CLOSE_TOO_BIG;
    r->message_len += f->len;
    return 0;
}

int mf_ws_reader_data(mf_ws_reader_t *r, const mf_ws_frame_t *f,
                      const uint8_t *data, size_t n, bool last)
{
    bool text = r->message_op == MF_WS_OP_TEXT && !r->compressed;
    if (text && !mf_ws_utf8_feed(&r->utf8, data, n))
        return -MF_WS_CLOSE_BAD_DATA;
    if (last && f->fin) {
        if (text && !mf_ws_utf8_whole(&r->utf8))
            return -MF_WS_CLOSE_BAD_DATA;
        r->message_op = 0;
        r->message_len = 0;
        r->compressed = false;
    }
    return 0;
}

/* ---- close frames ------------------------------------------------------ */

bool mf_ws_close_code_valid(unsigned code)
{
    return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
           (code >= 3000 && code <= 4999);
}

int mf_ws_close_parse(const uint8_t *p, size_t n, unsigned *code,
                      const uint8_t **reason, size_t *reason_len)
{
    *reason = p;
    *reason_len = 0;
    if (n == 0) {
        *code = MF_WS_CLOSE_NO_STATUS;
        return 0;
    }
    if (n == 1)
        return MF__WS_REFUSE;
    *code = (unsigned)p[0] << 8 | p[1];
    if (!mf_ws_close_code_valid(*code))
        return MF__WS_REFUSE;
    mf_ws_utf8_t u = {0};
    if (!mf_ws_utf8_feed(&u, p + 2, n - 2) || !mf_ws_utf8_whole(&u))
        return -MF_WS_CLOSE_BAD_DATA;
    *reason = p + 2;
    *reason_len = n - 2;
    return 0;
}

size_t mf_ws_build_head(uint8_t *out, bool fin, unsigned opcode, uint64_t len)
{
    out[0] = (uint8_t)((fin ? 0x80 : 0) | (opcode & 0x0f));
    if (len < 126) {
        out[1] = (uint8_t)len;
        return 2;
    }
    size_t ext = len <= 0xffff ? 2 : 8;
    out[1] = ext == 2 ? 126 : 127;
    for (size_t i = 0; i < ext; i++)
        out[2 + i] = (uint8_t)(len >> (8 * (ext - 1 - i)));
    return 2 + ext;
}

size_t mf_ws_close_build(uint8_t *out, unsigned code, const char *reason,
                         size_t reason_len)
{
    if (code == MF_WS_CLOSE_NO_STATUS)
        return 0;
    out[0] = (uint8_t)(code >> 8);
    out[1] = (uint8_t)code;
    size_t room = MF_WS_CONTROL_MAX - 2;
    if (reason_len > room) {
        reason_len = room;
        /* back to the start of the character the cut falls in */
        while (reason_len > 0 &&
               ((unsigned char)reason[reason_len] & 0xc0) == 0x80)
            reason_len--;
    }
    if (reason_len)
        memcpy(out + 2, reason, reason_len);
    return 2 + reason_len;
}

/* ---- the handshake ----------------------------------------------------- */

bool mf_ws_key_valid(const char *key, size_t n)
{
    uint8_t raw[24];
    size_t bad;
    if (n != 24 || key[22] != '=' || key[23] != '=')
        return false;
    return mf_base64_decode(raw, key, n, 0, &bad) == 16;
}

void mf_ws_accept(char *out, const char *key, size_t n)
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    char joined[64 + sizeof guid];
    unsigned char digest[SHA_DIGEST_LENGTH];
    if (n > 64) /* a valid key has 24 bytes; never past the buffer */
        n = 64;
    memcpy(joined, key, n);
    memcpy(joined + n, guid, sizeof guid - 1);
    SHA1((const unsigned char *)joined, n + sizeof guid - 1, digest);
    mf_base64_encode(out, digest, sizeof digest, 0);
}

static bool mf__ws_space(char c)
{
    return c == ' ' || c == '\t';
}

bool mf_ws_list_has(const char *list, size_t n, const char *token)
{
    size_t tlen = strlen(token), i = 0;
    while (i < n) {
        size_t start = i;
        while (i < n && list[i] != ',')
            i++;
        size_t end = i++;
        while (start < end && mf__ws_space(list[start]))
            start++;
        while (end > start && mf__ws_space(list[end - 1]))
            end--;
        if (end - start == tlen && !strncasecmp(list + start, token, tlen))
            return true;
    }
    return false;
}

/* ---- permessage-deflate's offer (RFC 7692 §7.1) ------------------------ */

/* A parameter's window bits v[0..vlen) (8-15, no leading zero): the
 * number, or 0 when it is not one. */
static unsigned mf__ws_window_bits(const char *v, size_t vlen)
{
    if (vlen < 1 || vlen > 2 || v[0] < '1' || v[0] > '9' ||
        (vlen == 2 && (v[1] < '0' || v[1] > '9')))
        return 0;
    unsigned bits = (unsigned)(v[0] - '0');
    if (vlen == 2)
        bits = bits * 10 + (unsigned)(v[1] - '0');
    return bits >= 8 && bits <= 15 ? bits : 0;
}

/* One parameter of an offer, name t[0..klen) and value v[0..vlen) (v
 * NULL: none): whether the offer may still be taken. seen: the
 * parameters met so far (each may come once). */
static bool mf__ws_deflate_param(const char *t, size_t klen, const char *v,
                                 size_t vlen, unsigned *seen,
                                 mf_ws_deflate_offer_t *o)
{
    static const char *const params[] = {
        "server_no_context_takeover", "client_no_context_takeover",
        "server_max_window_bits", "client_max_window_bits"};
    unsigned which = 4;
    for (unsigned j = 0; j < 4; j++)
        if (klen == strlen(params[j]) && !strncasecmp(t, params[j], klen))
            which = j;
    if (which == 4 || *seen & (1u << which))
        return false;
    *seen |= 1u << which;
    if (which < 2) /* the no_context_takeovers take no value */
        return v == NULL;
    unsigned bits = v ? mf__ws_window_bits(v, vlen) : 0;
    if (which == 3) /* client_max_window_bits: the value is optional */
        return !v || bits;
    if (bits < 9) /* zlib's raw deflate has no 8-bit window */
        return false;
    o->server_max_window_bits = bits;
    o->window_bits_set = true;
    return true;
}

/* One offer p[0..n) ("permessage-deflate; a; b=1"): whether the server
 * takes it, with *o. */
static bool mf__ws_deflate_one(const char *p, size_t n,
                               mf_ws_deflate_offer_t *o)
{
    static const char name[] = "permessage-deflate";
    unsigned seen = 0;
    o->server_max_window_bits = 15;
    o->window_bits_set = false;
    size_t i = 0;
    for (int k = 0; i <= n; k++) {
        size_t start = i;
        while (i < n && p[i] != ';')
            i++;
        size_t end = i++;
        while (start < end && mf__ws_space(p[start]))
            start++;
        while (end > start && mf__ws_space(p[end - 1]))
            end--;
        const char *t = p + start, *eq = memchr(t, '=', end - start);
        size_t klen = eq ? (size_t)(eq - t) : end - start;
        while (klen && mf__ws_space(t[klen - 1]))
            klen--;
        const char *v = eq ? eq + 1 : NULL;
        size_t vlen = eq ? (size_t)(p + end - v) : 0;
        while (v && vlen && mf__ws_space(*v))
            v++, vlen--;
        if (v && vlen >= 2 && v[0] == '"' && v[vlen - 1] == '"')
            v++, vlen -= 2; /* a quoted-string value (§7.1) */
        bool ok = k == 0 ? klen == sizeof name - 1 && !eq &&
                               !strncasecmp(t, name, klen)
                         : mf__ws_deflate_param(t, klen, v, vlen, &seen, o);
        if (!ok)
            return false;
    }
    return true;
}

bool mf_ws_deflate_pick(const char *value, size_t n, mf_ws_deflate_offer_t *o)
{
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        while (i < n && value[i] != ',')
            i++;
        if (mf__ws_deflate_one(value + start, i - start, o))
            return true;
        i++;
    }
    return false;
}
