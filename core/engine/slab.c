/*
 * slab.c — the per-loop size-class allocator.
 */
#include "slab.h"

#include "moonflow/common.h"
#include "moonflow/loop.h"

#if defined(__SANITIZE_ADDRESS__)
#define MF_HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MF_HAVE_ASAN 1
#endif
#endif

#ifdef MF_HAVE_ASAN
#include <sanitizer/asan_interface.h>
#define MF_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define MF_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define MF_POISON(p, n) ((void)(p), (void)(n))
#define MF_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define MF_SLAB_CHUNK_MIN (64 * 1024)
#define MF_SLAB_CHUNK_OBJECTS_MIN 4
#define MF_SLAB_MIN_SHIFT 6
/* The chunk header sits in front of the objects, padded so objects keep a
 * 64-byte (cache line) alignment. */
#define MF_SLAB_HEADER 64

/* The class of a size: 0 for up to 64 bytes; above, for 2^(b-1) < size <=
 * 2^b, the odd class 3 * 2^(b-2) or the even class 2^b. Slots stay
 * multiples of 32 bytes, so every object is aligned for any type. */
static unsigned mf__slab_class(size_t size)
{
    if (size <= ((size_t)1 << MF_SLAB_MIN_SHIFT))
        return 0;
    unsigned bits =
        64u - (unsigned)__builtin_clzll((unsigned long long)size - 1);
    unsigned cls = 2 * (bits - MF_SLAB_MIN_SHIFT);
    return size <= ((size_t)3 << (bits - 2)) ? cls - 1 : cls;
}

static size_t mf__slab_class_size(unsigned cls)
{
    if (cls == 0)
        return (size_t)1 << MF_SLAB_MIN_SHIFT;
    unsigned k = (cls - 1) / 2;
    return cls & 1 ? (size_t)3 << (k + MF_SLAB_MIN_SHIFT - 1)
                   : (size_t)1 << (k + MF_SLAB_MIN_SHIFT + 1);
}

_Static_assert(sizeof(((mf_slab_t *)0)->class_of) ==
                   (MF_LOOP_ALLOC_MAX >> MF_SLAB_GRAIN_SHIFT) + 1,
               "a class for every size the slab serves");

void mf__slab_init(mf_slab_t *slab)
{
    for (unsigned i = 0; i < MF_SLAB_CLASSES; i++)
        slab->free[i] = NULL;
    slab->chunks = NULL;
    for (size_t g = 0; g < sizeof slab->class_of; g++)
        slab->class_of[g] =
            (unsigned char)mf__slab_class(g << MF_SLAB_GRAIN_SHIFT);
}

/* The class of size (at most MF_LOOP_ALLOC_MAX): every slot is a whole
 * number of grains, so the size's grains decide. */
static inline unsigned mf__slab_class_of(const mf_slab_t *slab, size_t size)
{
    size_t grains =
        (size + ((size_t)1 << MF_SLAB_GRAIN_SHIFT) - 1) >> MF_SLAB_GRAIN_SHIFT;
    return slab->class_of[grains];
}

void mf__slab_close(mf_slab_t *slab)
{
    mf_slab_chunk_t *chunk = slab->chunks;
    while (chunk) {
        mf_slab_chunk_t *next = chunk->next;
        MF_UNPOISON(chunk, chunk->bytes);
        mf_free(chunk);
        chunk = next;
    }
    mf__slab_init(slab);
}

static size_t mf__slab_objects_per_chunk(size_t objsize)
{
    size_t count = MF_SLAB_CHUNK_MIN / objsize;
    return count < MF_SLAB_CHUNK_OBJECTS_MIN ? MF_SLAB_CHUNK_OBJECTS_MIN
                                             : count;
}

/* Carves a fresh chunk into objects of one class and threads them onto its
 * free list. */
static void mf__slab_refill(mf_slab_t *slab, unsigned cls)
{
    size_t objsize = mf__slab_class_size(cls);
    size_t count = mf__slab_objects_per_chunk(objsize);
    size_t bytes = MF_SLAB_HEADER + count * objsize;
    char *chunk = mf_xmalloc(bytes);
    mf_slab_chunk_t *header = (mf_slab_chunk_t *)(void *)chunk;
    header->next = slab->chunks;
    header->bytes = bytes;
    slab->chunks = header;
    for (size_t i = count; i-- > 0;) {
        mf_slab_free_t *obj =
            (mf_slab_free_t *)(void *)(chunk + MF_SLAB_HEADER + i * objsize);
        obj->next = slab->free[cls];
        slab->free[cls] = obj;
        MF_POISON(obj, objsize);
    }
}

void *mf__slab_alloc(mf_slab_t *slab, size_t size)
{
    if (size > MF_LOOP_ALLOC_MAX)
        return mf_xmalloc(size);
    unsigned cls = mf__slab_class_of(slab, size);
    if (!slab->free[cls])
        mf__slab_refill(slab, cls);
    mf_slab_free_t *obj = slab->free[cls];
    MF_UNPOISON(obj, mf__slab_class_size(cls));
    slab->free[cls] = obj->next;
    return obj;
}

void mf__slab_free(mf_slab_t *slab, void *p, size_t size)
{
    if (!p)
        return;
    if (size > MF_LOOP_ALLOC_MAX) {
        mf_free(p);
        return;
    }
    unsigned cls = mf__slab_class_of(slab, size);
    mf_slab_free_t *obj = p;
    obj->next = slab->free[cls];
    slab->free[cls] = obj;
    MF_POISON(obj, mf__slab_class_size(cls));
}
