/*
 * http_mime.c — Content-Type by file extension, from /etc/mime.types
 * (Debian's media-types package), read once for the process at the first
 * static root's open (mf__http_mime_load) and read-only afterwards, so any
 * thread may look up without a lock. Owns the table: one open-addressing
 * array of extensions and one block of type strings, never freed (they
 * live as long as the process, like nginx's types hash).
 *
 * A missing or unreadable file leaves the table empty: every file is then
 * application/octet-stream, and the load says so once on stderr.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/http_mime.h"
#include "moonflow/http_static.h"

#define MF_MIME_FILE "/etc/mime.types"
#define MF_MIME_SLOTS 4096 /* a power of two, over twice the ~1,600 entries */
#define MF_MIME_EXT_MAX 15
#define MF_MIME_DEFAULT "application/octet-stream"

typedef struct mf_mime_slot {
    char ext[MF_MIME_EXT_MAX + 1]; /* lowercase; "" = free */
    const char *type;
} mf_mime_slot_t;

static mf_mime_slot_t *mf__mime_table;
static pthread_once_t mf__mime_once = PTHREAD_ONCE_INIT;

static uint32_t mf__mime_hash(const char *ext, size_t len)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)tolower((unsigned char)ext[i])) * 16777619u;
    return h;
}

/* The first type named for an extension wins, as in nginx. The type is
 * copied at its first use (*kept), so none is kept that nothing names. */
static void mf__mime_put(const char *ext, size_t len, const char *type,
                         char **kept)
{
    if (len == 0 || len > MF_MIME_EXT_MAX)
        return;
    uint32_t i = mf__mime_hash(ext, len) & (MF_MIME_SLOTS - 1);
    for (uint32_t probes = 0; probes < MF_MIME_SLOTS; probes++) {
        mf_mime_slot_t *s = &mf__mime_table[i];
        if (!s->ext[0]) {
            if (!*kept && !(*kept = strdup(type)))
                return;
            for (size_t k = 0; k < len; k++)
                s->ext[k] = (char)tolower((unsigned char)ext[k]);
            s->type = *kept;
            return;
        }
        if (strlen(s->ext) == len && strncasecmp(s->ext, ext, len) == 0)
            return;
        i = (i + 1) & (MF_MIME_SLOTS - 1);
    }
}

/* "type ext ext ..." lines; '#' starts a comment. The type is copied once
 * (a line's buffer is reused). */
static void mf__mime_line(char *line)
{
    char *save = NULL;
    char *type = strtok_r(line, " \t\r\n", &save);
    if (!type || type[0] == '#')
        return;
    char *ext = strtok_r(NULL, " \t\r\n", &save);
    if (!ext)
        return;
    char *kept = NULL;
    for (; ext; ext = strtok_r(NULL, " \t\r\n", &save))
        mf__mime_put(ext, strlen(ext), type, &kept);
}

static void mf__mime_read(void)
{
    mf__mime_table = calloc(MF_MIME_SLOTS, sizeof(*mf__mime_table));
    if (!mf__mime_table)
        return;
    FILE *f = fopen(MF_MIME_FILE, "re");
    if (!f) {
        fprintf(stderr,
                "moonflow: %s cannot be read (install media-types): every "
                "static file is served as " MF_MIME_DEFAULT "\n",
                MF_MIME_FILE);
        return;
    }
    char line[1024];
    while (fgets(line, sizeof line, f))
        mf__mime_line(line);
    fclose(f);
}

void mf__http_mime_load(void)
{
    pthread_once(&mf__mime_once, mf__mime_read);
}

const char *mf_http_static_mime_type(const char *name, size_t len)
{
    size_t i = len;
    while (i > 0 && name[i - 1] != '.' && name[i - 1] != '/')
        i--;
    if (i == 0 || name[i - 1] != '.' || !mf__mime_table)
        return MF_MIME_DEFAULT;
    const char *ext = name + i;
    size_t elen = len - i;
    if (elen == 0 || elen > MF_MIME_EXT_MAX)
        return MF_MIME_DEFAULT;
    uint32_t h = mf__mime_hash(ext, elen) & (MF_MIME_SLOTS - 1);
    for (uint32_t probes = 0; probes < MF_MIME_SLOTS; probes++) {
        const mf_mime_slot_t *s = &mf__mime_table[h];
        if (!s->ext[0])
            return MF_MIME_DEFAULT;
        if (strlen(s->ext) == elen && strncasecmp(s->ext, ext, elen) == 0)
            return s->type;
        h = (h + 1) & (MF_MIME_SLOTS - 1);
    }
    return MF_MIME_DEFAULT;
}
