/*
 * lua/ngx_ffi/regex.c — resty.core.regex's entry points (ngx.re.match,
 * find, gmatch, sub, gsub and ngx.re.split through ngx/re.lua) on PCRE2,
 * as mf.re. resty.core reads the compiled regex's first fields (the layout
 * of lua-nginx-module's ngx_http_lua_regex_t: name table, captures) and
 * the replacement template's (ngx_http_lua_complex_value_t); the rest of
 * our record follows them.
 *
 * Options come in PCRE1's bits, as resty.core parses them: i, s, m, x,
 * u, a, D, J map onto PCRE2's; "j" JIT-compiles, "d" runs the DFA matcher,
 * "U" skips the UTF-8 check. A replacement template takes $0 ... $99,
 * ${N} and $$ (nginx's); anything else after a $ fails to compile.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "ngx_ffi.h"

#include <pcre2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* resty.core's flag bits (regex.lua) and PCRE1's option bits. */
#define NGX__FLAG_JIT 0x04
#define NGX__FLAG_DFA 0x02
#define NGX__FLAG_NO_UTF8_CHECK 0x10
#define NGX__DFA_WORKSPACE 100
#define NGX__MAX_CACHE 1024 /* lua_regex_cache_max_entries' default */

static const struct {
    int pcre1;
    uint32_t pcre2;
} ngx__options[] = {
    {0x0000001, PCRE2_CASELESS},
    {0x0000002, PCRE2_MULTILINE},
    {0x0000004, PCRE2_DOTALL},
    {0x0000008, PCRE2_EXTENDED},
    {0x0000010, PCRE2_ANCHORED},
    {0x0000800, PCRE2_UTF},
    {0x0080000, PCRE2_DUPNAMES},
    {0x2000000, PCRE2_ALT_BSUX | PCRE2_MATCH_UNSET_BACKREF},
};

typedef struct {
    ngx_ffi_str_t value; /* the text when there is no capture in it */
    void *lengths;       /* non-NULL: the pieces below are to evaluate */
    void *values;
} ngx_ffi_complex_value_t;

/* One piece of a template: literal bytes, or capture number (-1: none). */
typedef struct {
    int capture;
    size_t len;
    const u_char *text;
} ngx__piece_t;

typedef struct {
    /* read by resty.core: lua-nginx-module's ngx_http_lua_regex_t */
    void *pool;
    u_char *name_table;
    int name_count;
    int name_entry_size;
    int ncaptures;
    int *captures;
    void *regex;
    void *regex_sd;
    ngx_ffi_complex_value_t *replace;
    const char *pattern;
    /* ours */
    pcre2_code *code;
    pcre2_match_data *md;
    ngx_ffi_complex_value_t cv;
    ngx__piece_t *pieces;
    size_t npieces;
    u_char *template_text;
} ngx__regex_t;

typedef struct {
    const u_char *subj;
    ngx__regex_t *re;
    int count;
} ngx__script_t;

NGX_FFI_API const char *ngx_http_lua_ffi_pcre_version(void);
NGX_FFI_API uint32_t ngx_http_lua_ffi_max_regex_cache_size(void);
NGX_FFI_API ngx__regex_t *
ngx_http_lua_ffi_compile_regex(const u_char *pat, size_t pat_len, int flags,
                               int pcre_opts, u_char *errstr,
                               size_t errstr_size);
NGX_FFI_API int ngx_http_lua_ffi_exec_regex(ngx__regex_t *re, int flags,
                                            const u_char *s, size_t len,
                                            int pos);
NGX_FFI_API void ngx_http_lua_ffi_destroy_regex(ngx__regex_t *re);
NGX_FFI_API int ngx_http_lua_ffi_compile_replace_template(ngx__regex_t *re,
                                                          const u_char *data,
                                                          size_t len);
NGX_FFI_API ngx__script_t *ngx_http_lua_ffi_create_script_engine(void);
NGX_FFI_API void ngx_http_lua_ffi_init_script_engine(ngx__script_t *e,
                                                     const u_char *subj,
                                                     ngx__regex_t *compiled,
                                                     int count);
NGX_FFI_API void ngx_http_lua_ffi_destroy_script_engine(ngx__script_t *e);
NGX_FFI_API size_t
ngx_http_lua_ffi_script_eval_len(ngx__script_t *e, ngx_ffi_complex_value_t *cv);
NGX_FFI_API size_t ngx_http_lua_ffi_script_eval_data(
    ngx__script_t *e, ngx_ffi_complex_value_t *cv, u_char *dst);
NGX_FFI_API int ngx_http_lua_ffi_set_jit_stack_size(int size, u_char *errstr,
                                                    size_t *errstr_size);

static char ngx__pcre_version[32];

__attribute__((constructor)) static void ngx__read_pcre_version(void)
{
    pcre2_config(PCRE2_CONFIG_VERSION, ngx__pcre_version);
}

const char *ngx_http_lua_ffi_pcre_version(void)
{
    return ngx__pcre_version;
}

uint32_t ngx_http_lua_ffi_max_regex_cache_size(void)
{
    return NGX__MAX_CACHE;
}

static uint32_t ngx__pcre2_options(int pcre_opts)
{
    uint32_t o = 0;
    for (size_t i = 0; i < sizeof ngx__options / sizeof ngx__options[0]; i++)
        if (pcre_opts & ngx__options[i].pcre1)
            o |= ngx__options[i].pcre2;
    return o;
}

static void ngx__compile_error(u_char *errstr, size_t size, int err,
                               const u_char *pat, size_t len)
{
    PCRE2_UCHAR text[128];
    if (pcre2_get_error_message(err, text, sizeof text) < 0)
        snprintf((char *)text, sizeof text, "error %d", err);
    snprintf((char *)errstr, size, "pcre2_compile() failed: %s in \"%.*s\"",
             (const char *)text, (int)(len > 64 ? 64 : len), (const char *)pat);
}

/* The name table and the capture array resty.core reads. */
static bool ngx__describe(ngx__regex_t *re)
{
    uint32_t captures, names, entry;
    PCRE2_SPTR table;
    pcre2_pattern_info(re->code, PCRE2_INFO_CAPTURECOUNT, &captures);
    pcre2_pattern_info(re->code, PCRE2_INFO_NAMECOUNT, &names);
    pcre2_pattern_info(re->code, PCRE2_INFO_NAMEENTRYSIZE, &entry);
    pcre2_pattern_info(re->code, PCRE2_INFO_NAMETABLE, &table);
    re->ncaptures = (int)captures;
    re->name_count = (int)names;
    re->name_entry_size = (int)entry;
    re->name_table = (u_char *)table;
    re->captures = calloc(((size_t)captures + 1) * 3, sizeof(int));
    re->md = pcre2_match_data_create(captures + 1, NULL);
    return re->captures && re->md;
}

ngx__regex_t *ngx_http_lua_ffi_compile_regex(const u_char *pat, size_t pat_len,
                                             int flags, int pcre_opts,
                                             u_char *errstr, size_t errstr_size)
{
    int err;
    PCRE2_SIZE at;
    ngx__regex_t *re = calloc(1, sizeof *re);
    if (!re) {
        snprintf((char *)errstr, errstr_size, "no memory");
        return NULL;
    }
    re->code = pcre2_compile(pat, pat_len, ngx__pcre2_options(pcre_opts), &err,
                             &at, NULL);
    if (!re->code) {
        ngx__compile_error(errstr, errstr_size, err, pat, pat_len);
        free(re);
        return NULL;
    }
    if (flags & NGX__FLAG_JIT)
        pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE); /* else interpreted */
    if (!ngx__describe(re)) {
        ngx_http_lua_ffi_destroy_regex(re);
        snprintf((char *)errstr, errstr_size, "no memory");
        return NULL;
    }
    re->regex = re->code;
    re->replace = &re->cv;
    return re;
}

/* PCRE's answer: the number of pairs set (captures[] holds them, unset
 * ones -1), -1 for no match, another negative number for an error. The
 * DFA matcher's longest match comes first. */
int ngx_http_lua_ffi_exec_regex(ngx__regex_t *re, int flags, const u_char *s,
                                size_t len, int pos)
{
    uint32_t opts = flags & NGX__FLAG_NO_UTF8_CHECK ? PCRE2_NO_UTF_CHECK : 0;
    int rc;
    if (pos < 0 || (size_t)pos > len)
        return -1; /* nothing to match there */
    if (flags & NGX__FLAG_DFA) {
        int workspace[NGX__DFA_WORKSPACE];
        rc = pcre2_dfa_match(re->code, s, len, (PCRE2_SIZE)pos, opts, re->md,
                             NULL, workspace, NGX__DFA_WORKSPACE);
    } else {
        rc = pcre2_match(re->code, s, len, (PCRE2_SIZE)pos, opts, re->md, NULL);
    }
    if (rc < 0)
        return rc == PCRE2_ERROR_NOMATCH ? -1 : rc;
    uint32_t pairs = pcre2_get_ovector_count(re->md);
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(re->md);
    for (uint32_t i = 0; i < 2 * pairs && i < 2 * ((uint32_t)re->ncaptures + 1);
         i++)
        re->captures[i] = ov[i] == PCRE2_UNSET ? -1 : (int)ov[i];
    return rc;
}

void ngx_http_lua_ffi_destroy_regex(ngx__regex_t *re)
{
    if (!re)
        return;
    pcre2_match_data_free(re->md);
    pcre2_code_free(re->code);
    free(re->captures);
    free(re->pieces);
    free(re->template_text);
    free(re);
}

/* "$N", "${N}" (N up to 99): the number, *used the bytes after the '$';
 * -1 when it is no capture reference. */
static int ngx__capture_ref(const u_char *p, size_t n, size_t *used)
{
    bool braced = n > 0 && p[0] == '{';
    size_t i = braced, digits = 0;
    int value = 0;
    while (i < n && p[i] >= '0' && p[i] <= '9' && digits < 2) {
        value = value * 10 + (p[i] - '0');
        i++;
        digits++;
    }
    if (!digits || (braced && (i >= n || p[i] != '}')))
        return -1;
    *used = i + braced;
    return value;
}

/* Splits the template into literal pieces (in a copy with "$$" made one
 * '$') and capture references. -1 (NGX_ERROR) for a bad '$'. */
int ngx_http_lua_ffi_compile_replace_template(ngx__regex_t *re,
                                              const u_char *data, size_t len)
{
    u_char *text = malloc(len ? len : 1);
    ngx__piece_t *pieces = calloc(len + 1, sizeof *pieces);
    size_t n = 0, out = 0;
    bool refs = false;
    if (!text || !pieces)
        goto fail;
    for (size_t i = 0; i < len;) {
        size_t used = 0;
        int capture = -1;
        if (data[i] == '$' && i + 1 < len && data[i + 1] == '$') {
            i += 2; /* a literal '$' */
        } else if (data[i] == '$') {
            capture = ngx__capture_ref(data + i + 1, len - i - 1, &used);
            if (capture < 0)
                goto fail;
            i += 1 + used;
            pieces[n++] = (ngx__piece_t){.capture = capture};
            refs = true;
            continue;
        } else {
            i++;
        }
        text[out] = data[i - 1];
        if (n == 0 || pieces[n - 1].capture >= 0)
            pieces[n++] = (ngx__piece_t){-1, 0, text + out};
        pieces[n - 1].len++;
        out++;
    }
    re->template_text = text;
    re->pieces = pieces;
    re->npieces = n;
    re->cv.value.data = text;
    re->cv.value.len = out;
    re->cv.lengths = refs ? (void *)pieces : NULL;
    return NGX_FFI_OK;
fail:
    free(text);
    free(pieces);
    return NGX_FFI_ERROR;
}

ngx__script_t *ngx_http_lua_ffi_create_script_engine(void)
{
    return calloc(1, sizeof(ngx__script_t));
}

void ngx_http_lua_ffi_init_script_engine(ngx__script_t *e, const u_char *subj,
                                         ngx__regex_t *compiled, int count)
{
    e->subj = subj;
    e->re = compiled;
    e->count = count;
}

void ngx_http_lua_ffi_destroy_script_engine(ngx__script_t *e)
{
    free(e);
}

/* The bytes of capture n in the subject (none when unset or past count). */
static size_t ngx__capture(const ngx__script_t *e, int n, const u_char **at)
{
    if (n >= e->count || n > e->re->ncaptures || e->re->captures[2 * n] < 0)
        return 0;
    *at = e->subj + e->re->captures[2 * n];
    return (size_t)(e->re->captures[2 * n + 1] - e->re->captures[2 * n]);
}

size_t ngx_http_lua_ffi_script_eval_len(ngx__script_t *e,
                                        ngx_ffi_complex_value_t *cv)
{
    const ngx__piece_t *pieces = cv->lengths;
    const u_char *at;
    size_t len = 0;
    for (size_t i = 0; i < e->re->npieces; i++)
        len += pieces[i].capture < 0 ? pieces[i].len
                                     : ngx__capture(e, pieces[i].capture, &at);
    return len;
}

size_t ngx_http_lua_ffi_script_eval_data(ngx__script_t *e,
                                         ngx_ffi_complex_value_t *cv,
                                         u_char *dst)
{
    const ngx__piece_t *pieces = cv->lengths;
    u_char *d = dst;
    for (size_t i = 0; i < e->re->npieces; i++) {
        const u_char *at = pieces[i].text;
        size_t n = pieces[i].capture < 0
                       ? pieces[i].len
                       : ngx__capture(e, pieces[i].capture, &at);
        if (n)
            memcpy(d, at, n);
        d += n;
    }
    return (size_t)(d - dst);
}

/* PCRE2's JIT runs on its own default stack here: a size cannot be set. */
int ngx_http_lua_ffi_set_jit_stack_size(int size, u_char *errstr,
                                        size_t *errstr_size)
{
    int n = snprintf((char *)errstr, *errstr_size,
                     "ngx.re.opt(\"jit_stack_size\"): not supported by "
                     "moonflow (PCRE2's default JIT stack)");
    if (n > 0 && (size_t)n < *errstr_size)
        *errstr_size = (size_t)n;
    return NGX_FFI_ERROR;
}
