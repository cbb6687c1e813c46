/* base64 and hex (moonflow/codec.h): RFC 4648 §10's vectors both ways and
 * in both alphabets, every length from 0 to 300 round-tripping every byte,
 * the sizes the header promises never exceeded, and each refusal at the
 * byte the header says. */
#include <moonflow/codec.h>

#include "test.h"

static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba",
                                    "foobar"};
static const char *const coded[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
                                    "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};

TEST(rfc4648_vectors)
{
    char out[32];
    for (int i = 0; i < 7; i++) {
        size_t n = strlen(plain[i]);
        size_t len = mf_base64_encode(out, plain[i], n, 0);
        ASSERT_EQ(len, strlen(coded[i]));
        ASSERT(memcmp(out, coded[i], len) == 0);
        len = mf_base64_encode(out, plain[i], n, MF_BASE64_NOPAD);
        ASSERT_EQ(len, strcspn(coded[i], "="));
        size_t bad = 99;
        ssize_t got = mf_base64_decode(out, coded[i], strlen(coded[i]), 0, &bad);
        ASSERT_EQ(got, (ssize_t)n);
        ASSERT(memcmp(out, plain[i], n) == 0);
        got = mf_base64_decode(out, coded[i], strcspn(coded[i], "="), 0, &bad);
        ASSERT_EQ(got, (ssize_t)n);
        ASSERT_EQ(bad, 99); /* untouched on success */
    }
}

TEST(url_alphabet)
{
    const unsigned char in[] = {0xfb, 0xff, 0xbf, 0xfe};
    char out[16];
    size_t len = mf_base64_encode(out, in, 3, 0);
    ASSERT_EQ(len, 4);
    ASSERT(memcmp(out, "+/+/", 4) == 0);
    len = mf_base64_encode(out, in, 4, MF_BASE64_URL | MF_BASE64_NOPAD);
    ASSERT_EQ(len, 6);
    ASSERT(memcmp(out, "-_-__g", 6) == 0);
    size_t bad;
    ASSERT_EQ(mf_base64_decode(out, "-_-_", 4, 0, &bad), -1);
    ASSERT_EQ(bad, 0);
    ASSERT_EQ(mf_base64_decode(out, "+/+/", 4, MF_BASE64_URL, &bad), -1);
    ASSERT_EQ(bad, 0);
}

/* Every length 0..300 of bytes cycling through all 256 values: the encoded
 * size is what mf_base64_encoded_size says (or its unpadded part), and a
 * canary after the room the size functions promise stays untouched. */
TEST(round_trip_every_length)
{
    unsigned char in[300];
    char enc[400 + 1];
    unsigned char dec[300 + 3];
    for (size_t i = 0; i < sizeof in; i++)
        in[i] = (unsigned char)(i * 97 + 13);
    for (size_t n = 0; n <= sizeof in; n++) {
        for (unsigned flags = 0; flags < 4; flags++) {
            size_t room = mf_base64_encoded_size(n);
            enc[room] = '#';
            size_t len = mf_base64_encode(enc, in, n, flags);
            ASSERT(len <= room);
            ASSERT_EQ(enc[room], '#');
            if (!(flags & MF_BASE64_NOPAD))
                ASSERT_EQ(len, room);
            size_t droom = mf_base64_decoded_size(len), bad = 0;
            dec[droom] = 0xa5;
            ssize_t got = mf_base64_decode(dec, enc, len, flags, &bad);
            ASSERT_EQ(got, (ssize_t)n);
            ASSERT(memcmp(dec, in, n) == 0);
            ASSERT_EQ(dec[droom], 0xa5);
        }
        char hex[600];
        mf_hex_encode(hex, in, n);
        size_t bad = 0;
        ASSERT_EQ(mf_hex_decode(dec, hex, 2 * n, &bad), (ssize_t)n);
        ASSERT(memcmp(dec, in, n) == 0);
    }
}

static size_t refused_at(const char *s, unsigned flags)
{
    unsigned char out[64];
    size_t bad = 12345;
    ASSERT_EQ(mf_base64_decode(out, s, strlen(s), flags, &bad), -1);
    return bad;
}

TEST(base64_refusals)
{
    ASSERT_EQ(refused_at("Zm 9v", 0), 2);    /* a space */
    ASSERT_EQ(refused_at("Zm9v\n", 0), 4);   /* a line break */
    ASSERT_EQ(refused_at("Z=m9", 0), 1);     /* padding inside */
    ASSERT_EQ(refused_at("Zm9==", 0), 3);    /* padding off a quantum */
    ASSERT_EQ(refused_at("Zm9vY", 0), 5);    /* 6 bits left: ends early */
    ASSERT_EQ(refused_at("Zg===", 0), 2);    /* three '=' */
    ASSERT_EQ(refused_at("=", 0), 0);
    ASSERT_EQ(refused_at("Zm9v\x80", 0), 4); /* a high byte */
}

TEST(hex)
{
    char out[16];
    mf_hex_encode(out, "\x00\x7f\xff", 3);
    ASSERT(memcmp(out, "007fff", 6) == 0);
    unsigned char dec[8];
    size_t bad = 0;
    ASSERT_EQ(mf_hex_decode(dec, "0A7fFf", 6, &bad), 3);
    ASSERT(memcmp(dec, "\x0a\x7f\xff", 3) == 0);
    ASSERT_EQ(mf_hex_decode(dec, "0g", 2, &bad), -1);
    ASSERT_EQ(bad, 1);
    ASSERT_EQ(mf_hex_decode(dec, "g0", 2, &bad), -1);
    ASSERT_EQ(bad, 0);
    ASSERT_EQ(mf_hex_decode(dec, "abc", 3, &bad), -1);
    ASSERT_EQ(bad, 3);
    ASSERT_EQ(mf_hex_decode(dec, "abx", 3, &bad), -1);
    ASSERT_EQ(bad, 2);
    ASSERT_EQ(mf_hex_decode(dec, "", 0, &bad), 0);
}
