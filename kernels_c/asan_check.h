/* Shared by the `make asan` test drivers (bn_asan_driver.c, nn_asan_driver.c): guard-byte
 * size, failure counting (CHECK: report, count, give up after 20) and a deterministic
 * xorshift64 generator for the inputs. */
#ifndef MINIGRAPH_ASAN_CHECK_H
#define MINIGRAPH_ASAN_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { GUARD = 64 };

static int failures;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                           \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fputc('\n', stderr);                                                           \
            if (++failures > 20)                                                           \
                exit(1);                                                                   \
        }                                                                                  \
    } while (0)

static uint64_t rng_state = 88172645463325252ull;

static uint64_t xorshift64(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

#endif
