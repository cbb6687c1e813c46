/*
 * fuzz_assert.h — the invariant check of every fuzz target: it aborts, so
 * libFuzzer records the input that broke it.
 */
#ifndef MF_FUZZ_ASSERT_H
#define MF_FUZZ_ASSERT_H

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "invariant failed: %s (%s:%d)\n", #cond, __FILE__, \
                    __LINE__);                                                 \
            abort();                                                           \
        }                                                                      \
    } while (0)

#endif /* MF_FUZZ_ASSERT_H */
