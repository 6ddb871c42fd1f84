/* fuzz_util.h — what the fuzz targets (tests/fuzz_readers.c, tests/fuzz_planners.c) share:
 * a seeded splitmix64 stream (the same sequence on every machine, so a failing mutant is
 * reproduced from its seed) and paths in the target's temporary folder. */
#ifndef MEMSIM_FUZZ_UTIL_H
#define MEMSIM_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>

static char tmpdir[256];
static uint64_t rng_state;

static uint64_t rnd(void) __attribute__((unused));
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static size_t rnd_below(size_t n) __attribute__((unused));
static size_t rnd_below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* NAME in the temporary folder; the last 8 results stay valid. */
static const char *tpath(const char *name) __attribute__((unused));
static const char *tpath(const char *name)
{
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

#endif
