/* bset.h — an ordered set of free blocks keyed by (size, address), each naming its block by
 * a 32-bit id: best fit is a lower_bound on the size, as in PyTorch's std::set of blocks
 * ordered by BlockComparatorSize. The caching allocator (memory/alloc_caching.c) keeps the
 * free blocks of each pool and stream in one. Keys are unique (free blocks do not overlap).
 *
 * Insertion may need memory: bset_reserve makes sure that the next insertion will not, so
 * that a caller can reserve before it changes anything and then insert without a failure
 * path. Erasing never allocates. */
#ifndef MEMSIM_BSET_H
#define MEMSIM_BSET_H

#include <stddef.h>
#include <stdint.h>

#define BSET_NONE UINT32_MAX

typedef struct bset bset;

/* Where an entry lies (unit: its size's bucket, or in a large set the tree's leaf; at: its
 * place there), from bset_lower_bound or bset_find, valid until the set next changes or
 * bset_reserve is called (which may reorganize a large set). */
typedef struct bset_pos { uint32_t unit, at; } bset_pos;

bset *bset_new(void);
void bset_free(bset *s);
size_t bset_count(const bset *s);
/* 0 when the next bset_insert cannot fail for want of memory; -1 when out of memory. */
int bset_reserve(bset *s);
/* Adds the key (size, addr) with its id; the key must be absent. 0, or -1 when out of
 * memory (never after a successful bset_reserve). */
int bset_insert(bset *s, uint64_t size, uint64_t addr, uint32_t id);
/* Removes key (size, addr) if it holds id: 1, else 0 (nothing removed). */
int bset_erase(bset *s, uint64_t size, uint64_t addr, uint32_t id);
/* 1 and *pos when key (size, addr) is present and holds id, else 0. */
int bset_find(const bset *s, uint64_t size, uint64_t addr, uint32_t id, bset_pos *pos);
/* Gives the entry at pos the key (size, addr) and id: the same as bset_erase_at and then
 * bset_insert (the new key must be absent; room reserved with bset_reserve), but where the
 * new key falls in the same leaf only the entries between the two places move. A block
 * that is split or merged changes its key this way. */
void bset_rekey_at(bset *s, bset_pos pos, uint64_t size, uint64_t addr, uint32_t id);
/* The entry with the least key >= (size, 0): its id (*pos, *found_size set), or BSET_NONE. */
uint32_t bset_lower_bound(const bset *s, uint64_t size, bset_pos *pos, uint64_t *found_size);
/* Removes the entry at pos (from bset_lower_bound, the set unchanged since). */
void bset_erase_at(bset *s, bset_pos pos);
/* The id of the entry with the greatest key < (size, addr), or BSET_NONE. */
uint32_t bset_pred(const bset *s, uint64_t size, uint64_t addr);
/* Writes up to max ids in key order; returns the number of entries (all of them). */
size_t bset_ids(const bset *s, uint32_t *out, size_t max);
/* NULL when the set's structure is sound, else a sentence saying what is broken. */
const char *bset_check(const bset *s);

#endif
