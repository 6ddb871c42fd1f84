/* u64map.h — an open-addressing hash map from 64-bit keys to 64-bit values, for the many
 * places that look things up by tensor id, address or handle (trace checking, allocators,
 * the simulated backend, lowering). Deterministic: iteration order depends only on the
 * sequence of operations. */
#ifndef MEMSIM_U64MAP_H
#define MEMSIM_U64MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct u64map u64map;

u64map *u64map_new(size_t expected);
void u64map_free(u64map *m);
/* 0 on success, -1 if out of memory. Overwrites an existing value. */
int u64map_put(u64map *m, uint64_t key, uint64_t value);
/* The value slot of key, inserted (value 0, *added 1) when absent, so that a check for
 * presence and an insertion cost one probe; valid until the next put, slot or del. NULL if
 * out of memory. */
uint64_t *u64map_slot(u64map *m, uint64_t key, int *added);
/* 1 and *value if present, else 0. value may be NULL. */
int u64map_get(const u64map *m, uint64_t key, uint64_t *value);
/* 1 if it was present (and removes it), else 0. */
int u64map_del(u64map *m, uint64_t key, uint64_t *value);
size_t u64map_count(const u64map *m);
/* Bytes of its slot array (what the map holds in memory besides its header). */
size_t u64map_bytes(const u64map *m);
/* 1 if putting a new key would first double the slot array. */
int u64map_put_grows(const u64map *m);
void u64map_clear(u64map *m);
/* Iteration: for (size_t it = 0; u64map_next(m, &it, &k, &v);) ... */
int u64map_next(const u64map *m, size_t *it, uint64_t *key, uint64_t *value);

#endif
