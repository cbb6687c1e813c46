/*
 * lua/host/mf_lua_instrument.c — loop checks written into Lua source
 * (mf_lua_instrument.h): a lexer of Lua 5.1 as LuaJIT reads it (short
 * strings and their escapes, long strings and comments of any level,
 * numbers, names and keywords, a UTF-8 BOM and a "#" first line), and a
 * stack of open blocks that tells a loop's `do` from a plain one. Text is
 * copied byte for byte; checks are inserted between tokens only.
 *
 * Owns: nothing past the call (the output is the caller's).
 */
#include "mf_lua_instrument.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MF_LUA_CHECK " if __mf_w[0]~=0 then __mf_h() end __mf_s[0]=0 "
#define MF_LUA_PROLOGUE                                                        \
    "local __mf_w,__mf_s,__mf_h=... return function(...) "
#define MF_LUA_EPILOGUE " end"
/* LuaJIT's parser refuses nesting past 200 levels (LJ_MAX_XLEVEL): a
 * deeper chunk would not load anyway. */
#define MF_LUA_MAX_BLOCKS 256

/* Blocks closed by `end` (or `until`); LOOP_HEAD waits for its `do`. */
enum { B_OTHER, B_LOOP_HEAD, B_LOOP, B_REPEAT };

typedef struct rewriter {
    const char *s;
    size_t n, i;
    char *out;
    size_t len, cap;
    bool failed;
    unsigned checks;
    uint8_t blocks[MF_LUA_MAX_BLOCKS];
    int depth;
    /* after `function`: 1 until its "(", 2 until its ")" */
    int function_state;
    bool ends_in_line_comment;
    /* The last token can end a statement (or open a block), so a `goto`
     * after it may start one: LuaJIT reads `goto` as a name elsewhere. */
    bool statement_may_follow;
} rewriter_t;

static void put(rewriter_t *r, const char *p, size_t n)
{
    if (r->failed)
        return;
    if (r->len + n > r->cap) {
        size_t cap = (r->cap + n) * 2;
        char *grown = realloc(r->out, cap);
        if (!grown) {
            r->failed = true;
            return;
        }
        r->out = grown;
        r->cap = cap;
    }
    memcpy(r->out + r->len, p, n);
    r->len += n;
}

static void put_check(rewriter_t *r)
{
    put(r, MF_LUA_CHECK, sizeof MF_LUA_CHECK - 1);
    r->checks++;
}

/* Copies the source from `from` to the current position. */
static void copy_from(rewriter_t *r, size_t from)
{
    put(r, r->s + from, r->i - from);
}

static int peek(const rewriter_t *r, size_t ahead)
{
    return r->i + ahead < r->n ? (unsigned char)r->s[r->i + ahead] : -1;
}

static bool is_name_start(int c)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           c >= 0x80; /* LuaJIT takes any byte past ASCII in names */
}

static bool is_name_char(int c)
{
    return is_name_start(c) || (c >= '0' && c <= '9');
}

static bool is_digit(int c)
{
    return c >= '0' && c <= '9';
}

/* The level of a long bracket "[==[" at the position (its '=' count), or
 * -1 when there is none. */
static int long_bracket_level(const rewriter_t *r)
{
    if (peek(r, 0) != '[')
        return -1;
    size_t k = 1;
    while (peek(r, k) == '=')
        k++;
    return peek(r, k) == '[' ? (int)(k - 1) : -1;
}

/* Skips a long string or comment body from its opening bracket to just
 * past "]==]" of the same level (or the end of the text). */
static void skip_long(rewriter_t *r, int level)
{
    r->i += (size_t)level + 2;
    while (r->i < r->n) {
        if (r->s[r->i] == ']') {
            size_t k = 1;
            while (peek(r, k) == '=')
                k++;
            if (peek(r, k) == ']' && (int)(k - 1) == level) {
                r->i += k + 1;
                return;
            }
        }
        r->i++;
    }
}

/* A short string from its quote to past the closing one. A backslash
 * takes the next character with it (a backslash-newline pair, "\r\n"
 * included, is part of the string); an unescaped newline ends it, as it
 * ends LuaJIT's (an error there). */
static void skip_short_string(rewriter_t *r)
{
    int quote = peek(r, 0);
    r->i++;
    while (r->i < r->n) {
        int c = peek(r, 0);
        if (c == quote) {
            r->i++;
            return;
        }
        if (c == '\n' || c == '\r')
            return;
        if (c == '\\') {
            int e = peek(r, 1);
            r->i += e < 0 ? 1 : 2; /* a backslash that ends the text */
            if ((e == '\n' || e == '\r') && (peek(r, 0) == '\n' || peek(r, 0) == '\r') &&
                peek(r, 0) != e)
                r->i++;
            continue;
        }
        r->i++;
    }
}

/* A comment from its "--": long, or to the end of its line (the newline
 * left for the caller to copy). */
static void skip_comment(rewriter_t *r)
{
    r->i += 2;
    int level = long_bracket_level(r);
    if (level >= 0) {
        skip_long(r, level);
        return;
    }
    while (r->i < r->n && r->s[r->i] != '\n' && r->s[r->i] != '\r')
        r->i++;
    r->ends_in_line_comment = r->i == r->n;
}

/* A number as LuaJIT scans it (lex_number): name characters and dots,
 * and a sign right after the exponent's letter, which is p in a hex number
 * and e in a decimal one: in 0x4.e-- the "--" starts a comment. */
static void skip_number(rewriter_t *r)
{
    bool hex = peek(r, 0) == '0' && (peek(r, 1) | 0x20) == 'x';
    int exponent = hex ? 'p' : 'e';
    int prev = 0;
    while (r->i < r->n) {
        int c = peek(r, 0);
        bool sign = (c == '+' || c == '-') && (prev | 0x20) == exponent;
        if (!is_name_char(c) && c != '.' && !sign)
            break;
        prev = c;
        r->i++;
    }
}

static void push_block(rewriter_t *r, uint8_t kind)
{
    if (r->depth == MF_LUA_MAX_BLOCKS) {
        r->failed = true;
        return;
    }
    r->blocks[r->depth++] = kind;
}

static void pop_block(rewriter_t *r)
{
    if (r->depth > 0) /* an `end` too many: the chunk will not load */
        r->depth--;
}

static bool word_is(const char *w, size_t n, const char *kw)
{
    return strlen(kw) == n && memcmp(w, kw, n) == 0;
}

/* Words after which an expression, a name list or a name goes on: a
 * `goto` right after one is a name, not a statement. */
static bool word_continues_expression(const char *w, size_t n)
{
    static const char *const words[] = {
        "and",   "or",     "not",   "return", "local", "function", "for",
        "in",    "until",  "if",    "elseif", "while", "goto"};
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
        if (word_is(w, n, words[k]))
            return true;
    return false;
}

/* The next token, past white space and comments, starts a name. */
static bool name_follows(const rewriter_t *r)
{
    rewriter_t probe = *r;
    while (probe.i < probe.n) {
        int c = peek(&probe, 0);
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
            c == '\v') {
            probe.i++;
        } else if (c == '-' && peek(&probe, 1) == '-') {
            probe.i += 2;
            int level = long_bracket_level(&probe);
            if (level >= 0)
                skip_long(&probe, level);
            else
                while (probe.i < probe.n && probe.s[probe.i] != '\n' &&
                       probe.s[probe.i] != '\r')
                    probe.i++;
        } else {
            return is_name_start(c);
        }
    }
    return false;
}

/* `goto NAME` where a statement may start: LuaJIT's rule (a `goto` not
 * followed by a name is an identifier), and no check inside an
 * expression such as `x + goto`. */
static bool is_goto_statement(const rewriter_t *r, const char *w, size_t n)
{
    return word_is(w, n, "goto") && r->statement_may_follow && name_follows(r);
}

/* A name or keyword at [from, i): copied, with what it opens or closes
 * and the checks it calls for. */
static void on_word(rewriter_t *r, size_t from)
{
    const char *w = r->s + from;
    size_t n = r->i - from;
    if (is_goto_statement(r, w, n))
        put_check(r);
    r->statement_may_follow = !word_continues_expression(w, n);
    copy_from(r, from);
    if (word_is(w, n, "function")) {
        push_block(r, B_OTHER);
        r->function_state = 1;
    } else if (word_is(w, n, "while") || word_is(w, n, "for")) {
        push_block(r, B_LOOP_HEAD);
    } else if (word_is(w, n, "do")) {
        if (r->depth > 0 && r->blocks[r->depth - 1] == B_LOOP_HEAD) {
            r->blocks[r->depth - 1] = B_LOOP;
            put_check(r);
        } else {
            push_block(r, B_OTHER);
        }
    } else if (word_is(w, n, "if")) {
        push_block(r, B_OTHER);
    } else if (word_is(w, n, "repeat")) {
        push_block(r, B_REPEAT);
        put_check(r);
    } else if (word_is(w, n, "end") || word_is(w, n, "until")) {
        pop_block(r);
    }
}

/* One punctuation character: the parentheses of a function's parameter
 * list are watched (its body starts after the ")"). */
static void on_punct(rewriter_t *r)
{
    int c = peek(r, 0);
    r->i++;
    copy_from(r, r->i - 1);
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\f' &&
        c != '\v')
        r->statement_may_follow = c == ')' || c == ']' || c == '}' ||
                                  c == ';' || c == ':';
    if (r->function_state == 1 && c == '(') {
        r->function_state = 2;
    } else if (r->function_state == 2 && c == ')') {
        r->function_state = 0;
        put_check(r);
    }
}

static void next_token(rewriter_t *r)
{
    size_t from = r->i;
    int c = peek(r, 0);
    if (c == '-' && peek(r, 1) == '-') {
        skip_comment(r);
        copy_from(r, from);
        return;
    }
    r->ends_in_line_comment = false;
    int level = long_bracket_level(r);
    if (level >= 0) {
        skip_long(r, level);
        copy_from(r, from);
        r->statement_may_follow = true;
    } else if (c == '"' || c == '\'') {
        skip_short_string(r);
        copy_from(r, from);
        r->statement_may_follow = true;
    } else if (is_digit(c) || (c == '.' && is_digit(peek(r, 1)))) {
        skip_number(r);
        copy_from(r, from);
        r->statement_may_follow = true;
    } else if (is_name_start(c)) {
        while (r->i < r->n && is_name_char(peek(r, 0)))
            r->i++;
        on_word(r, from);
    } else {
        on_punct(r);
    }
}

/* Past a UTF-8 BOM and a "#" first line, as LuaJIT's lexer skips them;
 * the "#" line's newline stays (line numbers). */
static void skip_header(rewriter_t *r)
{
    if (r->n >= 3 && memcmp(r->s, "\xef\xbb\xbf", 3) == 0)
        r->i = 3;
    if (peek(r, 0) == '#')
        while (r->i < r->n && r->s[r->i] != '\n' && r->s[r->i] != '\r')
            r->i++;
}

int mf_lua_instrument(const char *src, size_t len, mf_lua_instrumented_t *out)
{
    rewriter_t r = {.s = src, .n = len, .statement_may_follow = true};
    skip_header(&r);
    put(&r, MF_LUA_PROLOGUE, sizeof MF_LUA_PROLOGUE - 1);
    while (r.i < r.n && !r.failed)
        next_token(&r);
    if (r.ends_in_line_comment)
        put(&r, "\n", 1);
    put(&r, MF_LUA_EPILOGUE, sizeof MF_LUA_EPILOGUE - 1);
    if (r.failed) {
        free(r.out);
        return -1;
    }
    out->text = r.out;
    out->len = r.len;
    out->newline_added = r.ends_in_line_comment;
    out->checks = r.checks;
    return 0;
}
