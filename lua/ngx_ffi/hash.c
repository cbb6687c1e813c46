/*
 * lua/ngx_ffi/hash.c — resty.core.hash's digests (ngx.md5, ngx.md5_bin,
 * ngx.sha1_bin through OpenSSL, as mf.crypto) and checksums
 * (ngx.crc32_short, ngx.crc32_long: the CRC-32 of zlib and Ethernet; nginx
 * has two functions for speed on short and long input, same result).
 */
#include "ngx_ffi.h"

#include <openssl/evp.h>

#include <moonflow/codec.h>

#define NGX__MD5_LEN 16

void ngx_http_lua_ffi_md5_bin(const u_char *src, size_t len, u_char *dst)
{
    EVP_Digest(src, len, dst, NULL, EVP_md5(), NULL);
}

/* Lowercase hex (32 bytes). */
void ngx_http_lua_ffi_md5(const u_char *src, size_t len, u_char *dst)
{
    u_char bin[NGX__MD5_LEN];
    ngx_http_lua_ffi_md5_bin(src, len, bin);
    mf_hex_encode((char *)dst, bin, sizeof bin);
}

/* 1: done (0 would tell resty.core that SHA-1 is missing). */
int ngx_http_lua_ffi_sha1_bin(const u_char *src, size_t len, u_char *dst)
{
    return EVP_Digest(src, len, dst, NULL, EVP_sha1(), NULL) == 1;
}

/* The reflected CRC-32 (polynomial 0xEDB88320), a byte at a time through a
 * table made once at load time. */
static uint32_t ngx__crc32_table[256];

__attribute__((constructor)) static void ngx__crc32_make_table(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        ngx__crc32_table[n] = c;
    }
}

unsigned int ngx_http_lua_ffi_crc32_long(const u_char *src, size_t len)
{
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < len; i++)
        crc = ngx__crc32_table[(crc ^ src[i]) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

unsigned int ngx_http_lua_ffi_crc32_short(const u_char *src, size_t len)
{
    return ngx_http_lua_ffi_crc32_long(src, len);
}
