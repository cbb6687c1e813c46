/*
 * redis_slot.c — Redis Cluster's key slots: CRC16 (XMODEM) of the key, or
 * of its hash tag ("{user1}.a" and "{user1}.b" hash "user1"), modulo 16384,
 * and where a command's keys are.
 *
 * Key positions come from a table of the commands this client knows (the
 * positions Redis's COMMAND INFO gives for them, written down here): the
 * first key, the last (counted from the end when negative) and the step
 * between keys; or a numkeys argument (EVAL, ZUNIONSTORE, LMPOP ...); or
 * the keys after STREAMS (XREAD, XREADGROUP). A command that is not in the
 * table is refused by the cluster client rather than sent to a guessed
 * node. No I/O, no allocation: the table is searched by length first, then
 * by name.
 *
 * Ownership: none (static tables).
 */
#include <string.h>
#include <strings.h>

#include "redis_int.h"

/* ---- CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0) ----------- */

static uint16_t mf__crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int bit = 0; bit < 8; bit++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

int mf__redis_key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(open + 1, '}', len - from);
        if (close && close > open + 1) /* "{}" is no tag: the whole key */
            return mf__crc16(open + 1, (size_t)(close - open - 1)) & 16383;
    }
    return mf__crc16(key, len) & 16383;
}

/* ---- key positions -------------------------------------------------------
 */

enum {
    MF__K_RO = 1,      /* reads only: may go to a replica */
    MF__K_NUMKEYS = 2, /* argv[first] is numkeys, keys follow it */
    MF__K_DEST = 4,    /* ... and argv[1] is a key too (ZUNIONSTORE) */
    MF__K_STREAMS = 8, /* the keys are the first half after STREAMS */
    MF__K_NOKEY = 16   /* no key: any node */
};

typedef struct mf__keyspec {
    const char *name;
    unsigned char len;
    signed char first, last, step;
    unsigned char flags;
} mf__keyspec_t;

#define K(n, f, l, s, fl)             \
    {                                 \
        n, sizeof(n) - 1, f, l, s, fl \
    }
#define R1(n) K(n, 1, 1, 1, MF__K_RO)
#define W1(n) K(n, 1, 1, 1, 0)
#define NOKEY(n) K(n, 0, 0, 0, MF__K_NOKEY)

static const mf__keyspec_t mf__keyspecs[] = {
    /* strings, keys, bits */
    R1("GET"),
    R1("STRLEN"),
    R1("GETRANGE"),
    R1("SUBSTR"),
    R1("GETBIT"),
    R1("BITCOUNT"),
    R1("BITPOS"),
    R1("BITFIELD_RO"),
    R1("TTL"),
    R1("PTTL"),
    R1("EXPIRETIME"),
    R1("PEXPIRETIME"),
    R1("TYPE"),
    R1("DUMP"),
    W1("SET"),
    W1("SETNX"),
    W1("SETEX"),
    W1("PSETEX"),
    W1("GETSET"),
    W1("GETDEL"),
    W1("GETEX"),
    W1("APPEND"),
    W1("INCR"),
    W1("DECR"),
    W1("INCRBY"),
    W1("DECRBY"),
    W1("INCRBYFLOAT"),
    W1("SETRANGE"),
    W1("SETBIT"),
    W1("BITFIELD"),
    W1("EXPIRE"),
    W1("PEXPIRE"),
    W1("EXPIREAT"),
    W1("PEXPIREAT"),
    W1("PERSIST"),
    W1("RESTORE"),
    K("MGET", 1, -1, 1, MF__K_RO),
    K("EXISTS", 1, -1, 1, MF__K_RO),
    K("TOUCH", 1, -1, 1, MF__K_RO),
    K("LCS", 1, 2, 1, MF__K_RO),
    K("DEL", 1, -1, 1, 0),
    K("UNLINK", 1, -1, 1, 0),
    K("MSET", 1, -1, 2, 0),
    K("MSETNX", 1, -1, 2, 0),
    K("RENAME", 1, 2, 1, 0),
    K("RENAMENX", 1, 2, 1, 0),
    K("COPY", 1, 2, 1, 0),
    K("WATCH", 1, -1, 1, 0),
    K("OBJECT", 2, 2, 1, MF__K_RO),
    K("MEMORY", 2, 2, 1, MF__K_RO),
    /* hashes */
    R1("HGET"),
    R1("HMGET"),
    R1("HLEN"),
    R1("HSTRLEN"),
    R1("HEXISTS"),
    R1("HKEYS"),
    R1("HVALS"),
    R1("HGETALL"),
    R1("HSCAN"),
    R1("HRANDFIELD"),
    W1("HSET"),
    W1("HSETNX"),
    W1("HMSET"),
    W1("HDEL"),
    W1("HINCRBY"),
    W1("HINCRBYFLOAT"),
    /* lists */
    R1("LLEN"),
    R1("LINDEX"),
    R1("LRANGE"),
    R1("LPOS"),
    W1("LPUSH"),
    W1("RPUSH"),
    W1("LPUSHX"),
    W1("RPUSHX"),
    W1("LPOP"),
    W1("RPOP"),
    W1("LSET"),
    W1("LTRIM"),
    W1("LREM"),
    W1("LINSERT"),
    K("RPOPLPUSH", 1, 2, 1, 0),
    K("LMOVE", 1, 2, 1, 0),
    K("BRPOPLPUSH", 1, 2, 1, 0),
    K("BLMOVE", 1, 2, 1, 0),
    K("BLPOP", 1, -2, 1, 0),
    K("BRPOP", 1, -2, 1, 0),
    K("LMPOP", 1, 0, 1, MF__K_NUMKEYS),
    K("BLMPOP", 2, 0, 1, MF__K_NUMKEYS),
    /* sets */
    R1("SCARD"),
    R1("SISMEMBER"),
    R1("SMISMEMBER"),
    R1("SMEMBERS"),
    R1("SRANDMEMBER"),
    R1("SSCAN"),
    W1("SADD"),
    W1("SREM"),
    W1("SPOP"),
    K("SINTER", 1, -1, 1, MF__K_RO),
    K("SUNION", 1, -1, 1, MF__K_RO),
    K("SDIFF", 1, -1, 1, MF__K_RO),
    K("SMOVE", 1, 2, 1, 0),
    K("SINTERSTORE", 1, -1, 1, 0),
    K("SUNIONSTORE", 1, -1, 1, 0),
    K("SDIFFSTORE", 1, -1, 1, 0),
    K("SINTERCARD", 1, 0, 1, MF__K_NUMKEYS | MF__K_RO),
    /* sorted sets */
    R1("ZCARD"),
    R1("ZCOUNT"),
    R1("ZSCORE"),
    R1("ZMSCORE"),
    R1("ZRANK"),
    R1("ZREVRANK"),
    R1("ZRANGE"),
    R1("ZREVRANGE"),
    R1("ZRANGEBYSCORE"),
    R1("ZREVRANGEBYSCORE"),
    R1("ZRANGEBYLEX"),
    R1("ZREVRANGEBYLEX"),
    R1("ZLEXCOUNT"),
    R1("ZRANDMEMBER"),
    R1("ZSCAN"),
    W1("ZADD"),
    W1("ZREM"),
    W1("ZINCRBY"),
    W1("ZREMRANGEBYRANK"),
    W1("ZREMRANGEBYSCORE"),
    W1("ZREMRANGEBYLEX"),
    W1("ZPOPMIN"),
    W1("ZPOPMAX"),
    K("ZRANGESTORE", 1, 2, 1, 0),
    K("BZPOPMIN", 1, -2, 1, 0),
    K("BZPOPMAX", 1, -2, 1, 0),
    K("ZUNION", 1, 0, 1, MF__K_NUMKEYS | MF__K_RO),
    K("ZINTER", 1, 0, 1, MF__K_NUMKEYS | MF__K_RO),
    K("ZDIFF", 1, 0, 1, MF__K_NUMKEYS | MF__K_RO),
    K("ZINTERCARD", 1, 0, 1, MF__K_NUMKEYS | MF__K_RO),
    K("ZUNIONSTORE", 2, 0, 1, MF__K_NUMKEYS | MF__K_DEST),
    K("ZINTERSTORE", 2, 0, 1, MF__K_NUMKEYS | MF__K_DEST),
    K("ZDIFFSTORE", 2, 0, 1, MF__K_NUMKEYS | MF__K_DEST),
    K("ZMPOP", 1, 0, 1, MF__K_NUMKEYS),
    K("BZMPOP", 2, 0, 1, MF__K_NUMKEYS),
    /* HyperLogLog, geo, streams, sort */
    K("PFCOUNT", 1, -1, 1, MF__K_RO),
    W1("PFADD"),
    K("PFMERGE", 1, -1, 1, 0),
    R1("GEODIST"),
    R1("GEOHASH"),
    R1("GEOPOS"),
    R1("GEORADIUS_RO"),
    R1("GEORADIUSBYMEMBER_RO"),
    R1("GEOSEARCH"),
    W1("GEOADD"),
    W1("GEORADIUS"),
    W1("GEORADIUSBYMEMBER"),
    K("GEOSEARCHSTORE", 1, 2, 1, 0),
    R1("XLEN"),
    R1("XRANGE"),
    R1("XREVRANGE"),
    R1("XPENDING"),
    W1("XADD"),
    W1("XDEL"),
    W1("XTRIM"),
    W1("XACK"),
    W1("XCLAIM"),
    W1("XAUTOCLAIM"),
    W1("XSETID"),
    K("XINFO", 2, 2, 1, MF__K_RO),
    K("XGROUP", 2, 2, 1, 0),
    K("XREAD", 0, 0, 1, MF__K_STREAMS | MF__K_RO),
    K("XREADGROUP", 0, 0, 1, MF__K_STREAMS),
    R1("SORT_RO"),
    W1("SORT"),
    /* scripts and functions */
    K("EVAL", 2, 0, 1, MF__K_NUMKEYS),
    K("EVALSHA", 2, 0, 1, MF__K_NUMKEYS),
    K("EVAL_RO", 2, 0, 1, MF__K_NUMKEYS | MF__K_RO),
    K("EVALSHA_RO", 2, 0, 1, MF__K_NUMKEYS | MF__K_RO),
    K("FCALL", 2, 0, 1, MF__K_NUMKEYS),
    K("FCALL_RO", 2, 0, 1, MF__K_NUMKEYS | MF__K_RO),
    /* sharded pub/sub: the channel is the key */
    W1("SPUBLISH"),
    /* no key: one node serves them (for a task's keyed commands, theirs) */
    NOKEY("PING"),
    NOKEY("ECHO"),
    NOKEY("INFO"),
    NOKEY("TIME"),
    NOKEY("DBSIZE"),
    NOKEY("COMMAND"),
    NOKEY("CONFIG"),
    NOKEY("CLUSTER"),
    NOKEY("SCRIPT"),
    NOKEY("FUNCTION"),
    NOKEY("PUBLISH"),
    NOKEY("PUBSUB"),
    NOKEY("SLOWLOG"),
    NOKEY("LASTSAVE"),
    NOKEY("ROLE"),
    NOKEY("MULTI"),
    NOKEY("EXEC"),
    NOKEY("DISCARD"),
    NOKEY("UNWATCH"),
    NOKEY("RANDOMKEY"),
    NOKEY("KEYS"),
    NOKEY("SCAN"),
    NOKEY("FLUSHALL"),
    NOKEY("FLUSHDB"),
    NOKEY("WAIT"),
    NOKEY("WAITAOF"),
    NOKEY("DEBUG"),
    NOKEY("READONLY"),
    NOKEY("READWRITE"),
    NOKEY("ASKING"),
    NOKEY("LATENCY"),
    NOKEY("LOLWUT"),
    NOKEY("CLIENT"),
    NOKEY("SELECT"),
    NOKEY("AUTH"),
    NOKEY("HELLO"),
    NOKEY("QUIT"),
    NOKEY("RESET"),
    NOKEY("ACL"),
    NOKEY("SAVE"),
    NOKEY("BGSAVE"),
    NOKEY("BGREWRITEAOF"),
    NOKEY("SWAPDB"),
    NOKEY("MODULE"),
    NOKEY("MONITOR"),
};

#undef K
#undef R1
#undef W1
#undef NOKEY

static const mf__keyspec_t *mf__keyspec_find(const char *name, size_t n)
{
    for (size_t i = 0; i < MF_ARRAY_SIZE(mf__keyspecs); i++)
        if (mf__keyspecs[i].len == n &&
            strncasecmp(name, mf__keyspecs[i].name, n) == 0)
            return &mf__keyspecs[i];
    return NULL;
}

/* Calls visit with each key; false when the command is not in the table
 * (its keys are unknown) or its numkeys is not a number. */
typedef void (*mf__key_visit)(void *ud, const char *key, size_t len);

#define ARG(i) argv[i], MF__REDIS_ARGLEN(lens, argv, i)

/* Keys after STREAMS: "XREAD COUNT 2 STREAMS a b 0 0" → a, b. */
static void mf__streams_keys(int argc, const char *const *argv,
                             const size_t *lens, mf__key_visit visit, void *ud)
{
    for (int i = 1; i < argc; i++) {
        if (MF__REDIS_ARGLEN(lens, argv, i) != 7 ||
            strncasecmp(argv[i], "STREAMS", 7) != 0)
            continue;
        int nkeys = (argc - i - 1) / 2;
        for (int k = 0; k < nkeys; k++)
            visit(ud, ARG(i + 1 + k));
        return;
    }
}

static bool mf__numkeys_keys(const mf__keyspec_t *ks, int argc,
                             const char *const *argv, const size_t *lens,
                             mf__key_visit visit, void *ud)
{
    if (ks->flags & MF__K_DEST && argc > 1)
        visit(ud, ARG(1));
    if (ks->first >= argc)
        return true;
    uint64_t n = 0;
    size_t len = MF__REDIS_ARGLEN(lens, argv, ks->first);
    for (size_t i = 0; i < len; i++) {
        char c = argv[ks->first][i];
        if (c < '0' || c > '9' || n > (uint64_t)argc)
            return false; /* the server will refuse it */
        n = n * 10 + (uint64_t)(c - '0');
    }
    for (int i = ks->first + 1; i < argc && (uint64_t)(i - ks->first) <= n; i++)
        visit(ud, ARG(i));
    return true;
}

static bool mf__cmd_keys(const mf__keyspec_t *ks, int argc,
                         const char *const *argv, const size_t *lens,
                         mf__key_visit visit, void *ud)
{
    if (ks->flags & MF__K_NOKEY)
        return true;
    if (ks->flags & MF__K_STREAMS) {
        mf__streams_keys(argc, argv, lens, visit, ud);
        return true;
    }
    if (ks->flags & MF__K_NUMKEYS)
        return mf__numkeys_keys(ks, argc, argv, lens, visit, ud);
    int last = ks->last < 0 ? argc + ks->last : ks->last;
    for (int i = ks->first; i <= last && i < argc; i += ks->step)
        visit(ud, ARG(i));
    return true;
}

/* Folds one key into *slot: MF__SLOT_CROSS when it hashes elsewhere. */
static void mf__fold(void *ud, const char *key, size_t len)
{
    int *slot = ud;
    int s = mf__redis_key_slot(key, len);
    if (*slot == MF_REDIS_SLOT_NONE)
        *slot = s;
    else if (*slot != s)
        *slot = MF_REDIS_SLOT_CROSS;
}

int mf__redis_cmd_slot(int argc, const char *const *argv, const size_t *lens,
                       bool *readonly)
{
    const mf__keyspec_t *ks = mf__keyspec_find(ARG(0));
    *readonly = false;
    if (!ks)
        return MF_REDIS_SLOT_UNKNOWN;
    *readonly = ks->flags & MF__K_RO;
    int slot = MF_REDIS_SLOT_NONE;
    if (!mf__cmd_keys(ks, argc, argv, lens, mf__fold, &slot))
        return MF_REDIS_SLOT_UNKNOWN;
    return slot;
}

typedef struct mf__key_walk {
    mf_redis_key_fn fn;
    void *ud;
    bool stop;
} mf__key_walk_t;

static void mf__walk_key(void *ud, const char *key, size_t len)
{
    mf__key_walk_t *w = ud;
    if (!w->stop)
        w->stop = !w->fn(w->ud, key, len);
}

bool mf__redis_cmd_keys(int argc, const char *const *argv, const size_t *lens,
                        mf_redis_key_fn fn, void *ud)
{
    const mf__keyspec_t *ks = mf__keyspec_find(ARG(0));
    mf__key_walk_t w = {fn, ud, false};
    return ks && mf__cmd_keys(ks, argc, argv, lens, mf__walk_key, &w);
}
