/* The WebSocket frame codec (moonflow/websocket.h) against RFC 6455:
 * each case is a client's bytes and what a server must make of them,
 * replayed at every split point of the input (the bytes arriving in two
 * reads), through the same steps a server takes. */
#include <moonflow/websocket.h>

#include "test.h"

static const uint8_t MASK[4] = {0x37, 0xfa, 0x21, 0x3d};

/* Appends a client frame (masked with MASK) to out at *n; rsv is ORed
 * into the first byte, len7 forces the length form when not 0. */
static void frame_raw(uint8_t *out, size_t *n, uint8_t first, const char *p,
                      size_t len)
{
    out[(*n)++] = first;
    if (len < 126)
        out[(*n)++] = (uint8_t)(0x80 | len);
    else {
        out[(*n)++] = 0x80 | 126;
        out[(*n)++] = (uint8_t)(len >> 8);
        out[(*n)++] = (uint8_t)len;
    }
    memcpy(out + *n, MASK, 4);
    *n += 4;
    for (size_t i = 0; i < len; i++)
        out[*n + i] = (uint8_t)p[i] ^ MASK[i & 3];
    *n += len;
}

static void frame(uint8_t *out, size_t *n, bool fin, unsigned op, const char *p)
{
    frame_raw(out, n, (uint8_t)((fin ? 0x80 : 0) | op), p, strlen(p));
}

/* What a server makes of in[0..n) arriving in two reads split at cut:
 * "op:payload|..." for each message or control frame, ending with
 * "error:CODE" at the first refusal. */
typedef struct server {
    mf_ws_reader_t r;
    uint8_t buf[4096];
    size_t len;
    uint8_t msg[4096];
    size_t msg_len;
    bool checked; /* the head at the front passed mf_ws_reader_frame */
    char out[4096];
} server_t;

static const char *op_name(unsigned op)
{
    switch (op) {
    case MF_WS_OP_TEXT:
        return "text";
    case MF_WS_OP_BINARY:
        return "binary";
    case MF_WS_OP_CLOSE:
        return "close";
    case MF_WS_OP_PING:
        return "ping";
    default:
        return "pong";
    }
}

static void say(server_t *s, const char *what, const void *p, size_t n)
{
    mf_test_append(s->out, sizeof s->out, what, strlen(what));
    mf_test_append(s->out, sizeof s->out, ":", 1);
    mf_test_append(s->out, sizeof s->out, p, n);
    mf_test_append(s->out, sizeof s->out, "|", 1);
}

static int fail(server_t *s, int code)
{
    char text[16];
    snprintf(text, sizeof text, "%d", -code);
    say(s, "error", text, strlen(text));
    return code;
}

/* One whole frame at the front of buf: handled and consumed, 0 when more
 * bytes are needed, < 0 on a refusal. */
static int step(server_t *s)
{
    mf_ws_frame_t f;
    ssize_t head = mf_ws_parse_head(&f, s->buf, s->len);
    if (head < 0)
        return fail(s, (int)head);
    if (head == 0)
        return 0;
    int rc;
    if (!s->checked) { /* once per frame, before its payload is here */
        rc = mf_ws_reader_frame(&s->r, &f);
        if (rc < 0)
            return fail(s, rc);
        s->checked = true;
    }
    if (s->len < (size_t)head + f.len)
        return 0;
    uint8_t *p = s->buf + head;
    mf_ws_unmask(p, f.len, f.mask, 0);
    if (f.opcode == MF_WS_OP_CLOSE) {
        unsigned code;
        const uint8_t *reason;
        size_t rlen;
        rc = mf_ws_close_parse(p, f.len, &code, &reason, &rlen);
        if (rc < 0)
            return fail(s, rc);
        char text[160];
        int tn = snprintf(text, sizeof text, "%u %.*s", code, (int)rlen,
                          (const char *)reason);
        say(s, "close", text, (size_t)tn);
    } else if (f.opcode & 0x8) {
        say(s, op_name(f.opcode), p, f.len);
    } else {
        unsigned op = s->r.message_op;
        /* the payload in two pieces, as a server may unmask it */
        size_t half = f.len / 2;
        rc = mf_ws_reader_data(&s->r, &f, p, half, false);
        if (rc == 0)
            rc = mf_ws_reader_data(&s->r, &f, p + half, f.len - half, true);
        if (rc < 0)
            return fail(s, rc);
        memcpy(s->msg + s->msg_len, p, f.len);
        s->msg_len += f.len;
        if (f.fin) {
            say(s, op_name(op), s->msg, s->msg_len);
            s->msg_len = 0;
        }
    }
    size_t used = (size_t)head + f.len;
    memmove(s->buf, s->buf + used, s->len - used);
    s->len -= used;
    s->checked = false;
    return 1;
}

static void feed(server_t *s, const uint8_t *in, size_t n)
{
    memcpy(s->buf + s->len, in, n);
    s->len += n;
    int rc;
    while ((rc = step(s)) > 0)
        ;
}

/* Replays in[0..n) at every split and checks each gives want. */
static void expect(const uint8_t *in, size_t n, const char *want,
                   uint64_t max_payload)
{
    for (size_t cut = 0; cut <= n; cut++) {
        static server_t s;
        memset(&s, 0, sizeof s);
        s.r.max_payload = max_payload;
        feed(&s, in, cut);
        if (strstr(s.out, "error:"))
            ; /* refused already: what follows is never read */
        else
            feed(&s, in + cut, n - cut);
        if (strcmp(s.out, want) != 0) {
            fprintf(stderr, "split at %zu: got \"%s\", want \"%s\"\n", cut,
                    s.out, want);
            ASSERT(0);
        }
    }
}

TEST(text_binary_and_controls_are_read_whole)
{
    uint8_t in[512];
    size_t n = 0;
    frame(in, &n, true, MF_WS_OP_TEXT, "Hello");
    frame_raw(in, &n, 0x82, "\x01\xff", 2);
    frame(in, &n, true, MF_WS_OP_PING, "p");
    frame(in, &n, true, MF_WS_OP_PONG, "");
    frame(in, &n, true, MF_WS_OP_CLOSE,
          "\x03\xe8"
          "bye");
    expect(in, n, "text:Hello|binary:\x01\xff|ping:p|pong:|close:1000 bye|", 0);
}

TEST(fragments_join_with_controls_between_them)
{
    uint8_t in[512];
    size_t n = 0;
    frame(in, &n, false, MF_WS_OP_TEXT, "frag");
    frame(in, &n, true, MF_WS_OP_PING, "x");
    frame(in, &n, false, MF_WS_OP_CONTINUATION, "ment");
    frame(in, &n, true, MF_WS_OP_CONTINUATION, "ed");
    expect(in, n, "ping:x|text:fragmented|", 0);
}

TEST(a_126_byte_payload_takes_the_16_bit_length)
{
    char big[300];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    uint8_t in[512];
    size_t n = 0;
    frame(in, &n, true, MF_WS_OP_BINARY, big);
    char want[400];
    snprintf(want, sizeof want, "binary:%s|", big);
    expect(in, n, want, 0);
}

TEST(bad_heads_are_protocol_errors)
{
    uint8_t in[64];
    size_t n;
    /* unmasked client frame */
    const uint8_t unmasked[] = {0x81, 0x02, 'h', 'i'};
    expect(unmasked, sizeof unmasked, "error:1002|", 0);
    /* each reserved bit */
    for (unsigned rsv = 0x10; rsv <= 0x40; rsv <<= 1) {
        n = 0;
        frame_raw(in, &n, (uint8_t)(0x81 | rsv), "x", 1);
        expect(in, n, "error:1002|", 0);
    }
    /* reserved opcodes, data and control */
    unsigned reserved[] = {3, 4, 5, 6, 7, 0xb, 0xc, 0xd, 0xe, 0xf};
    for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++) {
        n = 0;
        frame_raw(in, &n, (uint8_t)(0x80 | reserved[i]), "", 0);
        expect(in, n, "error:1002|", 0);
    }
    /* a fragmented ping */
    n = 0;
    frame(in, &n, false, MF_WS_OP_PING, "x");
    expect(in, n, "error:1002|", 0);
    /* a 16-bit length below 126 */
    const uint8_t longform[] = {0x81, 0xfe, 0x00, 0x01, 0, 0, 0, 0, 'a'};
    expect(longform, sizeof longform, "error:1002|", 0);
    /* a 64-bit length with its top bit set */
    const uint8_t top[] = {0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    expect(top, sizeof top, "error:1002|", 0);
}

TEST(a_control_frame_past_125_bytes_is_refused)
{
    char p[127];
    memset(p, 'p', 126);
    p[126] = '\0';
    uint8_t in[256];
    size_t n = 0;
    frame(in, &n, true, MF_WS_OP_PING, p);
    expect(in, n, "error:1002|", 0);
    n = 0;
    p[125] = '\0';
    frame(in, &n, true, MF_WS_OP_PING, p);
    char want[200];
    snprintf(want, sizeof want, "ping:%s|", p);
    expect(in, n, want, 0);
}

TEST(continuation_rules)
{
    uint8_t in[128];
    size_t n = 0;
    frame(in, &n, true, MF_WS_OP_CONTINUATION, "orphan");
    expect(in, n, "error:1002|", 0);
    n = 0;
    frame(in, &n, false, MF_WS_OP_TEXT, "one");
    frame(in, &n, true, MF_WS_OP_TEXT, "two");
    expect(in, n, "error:1002|", 0);
    n = 0;
    frame(in, &n, false, MF_WS_OP_BINARY, "one");
    frame(in, &n, true, MF_WS_OP_BINARY, "two");
    expect(in, n, "error:1002|", 0);
}

TEST(invalid_utf8_is_1007_even_across_fragments)
{
    uint8_t in[128];
    size_t n = 0;
    frame(in, &n, true, MF_WS_OP_TEXT,
          "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5");
    expect(in, n, "text:\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5|", 0);
    /* a character split over two fragments is fine */
    n = 0;
    frame(in, &n, false, MF_WS_OP_TEXT, "\xe1\xbd");
    frame(in, &n, true, MF_WS_OP_CONTINUATION, "\xb9");
    expect(in, n, "text:\xe1\xbd\xb9|", 0);
    const char *bad[] = {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                         "\xff",     "\xe0\x80\xaf", "ok\x80",
                         "\xce"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        n = 0;
        frame(in, &n, true, MF_WS_OP_TEXT, bad[i]);
        expect(in, n, "error:1007|", 0);
    }
    /* refused in the first fragment, before the message ends */
    n = 0;
    frame(in, &n, false, MF_WS_OP_TEXT, "\xce\xba\xff");
    expect(in, n, "error:1007|", 0);
    /* a cut sequence at the message's end */
    n = 0;
    frame(in, &n, false, MF_WS_OP_TEXT, "a");
    frame(in, &n, true, MF_WS_OP_CONTINUATION, "\xe1\xbd");
    expect(in, n, "error:1007|", 0);
    /* binary is not checked */
    n = 0;
    frame(in, &n, true, MF_WS_OP_BINARY, "\xff");
    expect(in, n, "binary:\xff|", 0);
}

TEST(close_payloads)
{
    uint8_t in[128];
    size_t n = 0;
    frame(in, &n, true, MF_WS_OP_CLOSE, "");
    expect(in, n, "close:1005 |", 0);
    n = 0;
    frame_raw(in, &n, 0x88, "\x03", 1); /* one byte */
    expect(in, n, "error:1002|", 0);
    unsigned bad[] = {0, 999, 1004, 1005, 1006, 1015, 1016, 2000, 2999, 5000};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char p[2] = {(char)(bad[i] >> 8), (char)bad[i]};
        n = 0;
        frame_raw(in, &n, 0x88, p, 2);
        expect(in, n, "error:1002|", 0);
    }
    unsigned good[] = {1000, 1001, 1002, 1003, 1007, 1011, 1014, 3000, 4999};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        char p[2] = {(char)(good[i] >> 8), (char)good[i]};
        n = 0;
        frame_raw(in, &n, 0x88, p, 2);
        char want[32];
        snprintf(want, sizeof want, "close:%u |", good[i]);
        expect(in, n, want, 0);
    }
    n = 0;
    frame_raw(in, &n, 0x88, "\x03\xe8\xff", 3); /* reason not UTF-8 */
    expect(in, n, "error:1007|", 0);
}

TEST(messages_past_max_payload_are_1009)
{
    uint8_t in[128];
    size_t n = 0;
    frame(in, &n, true, MF_WS_OP_TEXT, "12345");
    expect(in, n, "text:12345|", 5);
    expect(in, n, "error:1009|", 4);
    /* counted over the fragments */
    n = 0;
    frame(in, &n, false, MF_WS_OP_BINARY, "123");
    frame(in, &n, true, MF_WS_OP_CONTINUATION, "45");
    expect(in, n, "error:1009|", 4);
    expect(in, n, "binary:12345|", 5);
}

TEST(server_heads_and_close_payloads)
{
    uint8_t h[MF_WS_HEAD_MAX];
    ASSERT_EQ(mf_ws_build_head(h, true, MF_WS_OP_TEXT, 5), 2);
    ASSERT(h[0] == 0x81 && h[1] == 5);
    ASSERT_EQ(mf_ws_build_head(h, false, MF_WS_OP_BINARY, 126), 4);
    ASSERT(h[0] == 0x02 && h[1] == 126 && h[2] == 0 && h[3] == 126);
    ASSERT_EQ(mf_ws_build_head(h, true, MF_WS_OP_BINARY, 65536), 10);
    ASSERT(h[1] == 127 && h[7] == 1 && h[8] == 0 && h[9] == 0);
    uint8_t c[MF_WS_CONTROL_MAX];
    ASSERT_EQ(mf_ws_close_build(c, 1000, "bye", 3), 5);
    ASSERT(c[0] == 0x03 && c[1] == 0xe8 && !memcmp(c + 2, "bye", 3));
    ASSERT_EQ(mf_ws_close_build(c, MF_WS_CLOSE_NO_STATUS, "x", 1), 0);
    /* a long reason is cut at a character's start */
    char reason[200] = "a";
    for (size_t i = 1; i + 2 < sizeof reason; i += 2)
        memcpy(reason + i, "\xc3\xa9", 2);
    size_t len = mf_ws_close_build(c, 1001, reason, strlen(reason));
    ASSERT(len <= MF_WS_CONTROL_MAX);
    mf_ws_utf8_t u = {0};
    ASSERT(mf_ws_utf8_feed(&u, c + 2, len - 2) && mf_ws_utf8_whole(&u));
}

TEST(handshake_key_accept_and_tokens)
{
    /* RFC 6455 §1.3's example */
    const char *key = "dGhlIHNhbXBsZSBub25jZQ==";
    ASSERT(mf_ws_key_valid(key, strlen(key)));
    char accept[MF_WS_ACCEPT_LEN];
    mf_ws_accept(accept, key, strlen(key));
    ASSERT(!memcmp(accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", MF_WS_ACCEPT_LEN));
    const char *bad[] = {"",
                         "dGhlIHNhbXBsZSBub25jZQ=",
                         "dGhlIHNhbXBsZSBub25jZQ",
                         "dGhlIHNhbXBsZSBub25j!Q==",
                         "aGVsbG8=",
                         "dGhlIHNhbXBsZSBub25jZSEh"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ASSERT(!mf_ws_key_valid(bad[i], strlen(bad[i])));
    const char *conn = "keep-alive, Upgrade";
    ASSERT(mf_ws_list_has(conn, strlen(conn), "upgrade"));
    ASSERT(mf_ws_list_has(conn, strlen(conn), "keep-alive"));
    ASSERT(!mf_ws_list_has(conn, strlen(conn), "upgrad"));
    ASSERT(!mf_ws_list_has("", 0, "upgrade"));
    ASSERT(mf_ws_list_has(" websocket ,", 12, "WebSocket"));
}

TEST(rsv1_only_opens_a_message_when_deflate_was_negotiated)
{
    uint8_t in[128];
    size_t n = 0;
    frame_raw(in, &n, 0x41, "x", 1); /* RSV1, text, not fin */
    frame_raw(in, &n, 0x80, "y", 1); /* its continuation */
    expect(in, n, "error:1002|", 0); /* no deflate */
    mf_ws_reader_t r;
    memset(&r, 0, sizeof r);
    r.deflate = true;
    mf_ws_frame_t f;
    ASSERT(mf_ws_parse_head(&f, in, n) == 6 && f.rsv1);
    ASSERT_EQ(mf_ws_reader_frame(&r, &f), 0);
    ASSERT(r.compressed);
    /* compressed bytes are not text: no UTF-8 check here */
    ASSERT_EQ(mf_ws_reader_data(&r, &f, (const uint8_t *)"\xff", 1, true), 0);
    mf_ws_frame_t cont = f;
    cont.opcode = MF_WS_OP_CONTINUATION;
    cont.rsv1 = true; /* RSV1 on a continuation */
    ASSERT_EQ(mf_ws_reader_frame(&r, &cont), -1002);
    mf_ws_frame_t ping = f;
    ping.opcode = MF_WS_OP_PING; /* and on a control frame */
    ping.fin = true;
    ASSERT_EQ(mf_ws_reader_frame(&r, &ping), -1002);
    cont.rsv1 = false;
    cont.fin = true;
    ASSERT_EQ(mf_ws_reader_frame(&r, &cont), 0);
    ASSERT_EQ(mf_ws_reader_data(&r, &cont, (const uint8_t *)"\xfe", 1, true),
              0);
    ASSERT(!r.compressed && !r.message_op);
    /* RSV2 and RSV3 stay refused at the head */
    n = 0;
    frame_raw(in, &n, 0xa1, "x", 1);
    ASSERT(mf_ws_parse_head(&f, in, n) == -1002);
}

TEST(permessage_deflate_offers)
{
    mf_ws_deflate_offer_t o;
    struct {
        const char *value;
        bool taken;
        unsigned bits;
        bool set;
    } cases[] = {
        {"permessage-deflate", true, 15, false},
        {"permessage-deflate; client_max_window_bits", true, 15, false},
        {"Permessage-Deflate ; server_no_context_takeover ; "
         "client_no_context_takeover",
         true, 15, false},
        {"permessage-deflate; server_max_window_bits=10", true, 10, true},
        {"permessage-deflate; server_max_window_bits=\"12\"", true, 12, true},
        {"permessage-deflate; client_max_window_bits=9", true, 15, false},
        /* passed over: the next offer is taken */
        {"permessage-deflate; server_max_window_bits=8, permessage-deflate",
         true, 15, false},
        {"permessage-deflate; x=1, permessage-deflate; "
         "server_max_window_bits=11",
         true, 11, true},
        /* none the server can take */
        {"", false, 0, false},
        {"x-webkit-deflate-frame", false, 0, false},
        {"permessage-deflate; server_max_window_bits", false, 0, false},
        {"permessage-deflate; server_max_window_bits=16", false, 0, false},
        {"permessage-deflate; server_max_window_bits=09", false, 0, false},
        {"permessage-deflate; client_max_window_bits=7", false, 0, false},
        {"permessage-deflate; server_no_context_takeover=1", false, 0, false},
        {"permessage-deflate; server_no_context_takeover; "
         "server_no_context_takeover",
         false, 0, false},
        {"permessage-deflate;", false, 0, false},
        {"permessage-deflate=1", false, 0, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bool taken =
            mf_ws_deflate_pick(cases[i].value, strlen(cases[i].value), &o);
        if (taken != cases[i].taken)
            fprintf(stderr, "case \"%s\"\n", cases[i].value);
        ASSERT(taken == cases[i].taken);
        if (taken) {
            ASSERT_EQ(o.server_max_window_bits, cases[i].bits);
            ASSERT(o.window_bits_set == cases[i].set);
        }
    }
}
