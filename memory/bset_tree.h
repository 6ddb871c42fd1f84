/* bset_tree.h — the large form of the free-block set (memory/bset.h): the same operations
 * and contract on a two-level B+-tree, for a set of many entries or many sizes, where
 * bset.c's buckets by size would move too much at each change. Only memory/bset.c uses it;
 * positions (bset_pos) are the tree's: unit is a leaf. */
#ifndef MEMSIM_BSET_TREE_H
#define MEMSIM_BSET_TREE_H

#include "memory/bset.h"

typedef struct bset_tree bset_tree;

bset_tree *bset_tree_new(void);
void bset_tree_free(bset_tree *s);
size_t bset_tree_count(const bset_tree *s);
int bset_tree_reserve(bset_tree *s);
int bset_tree_insert(bset_tree *s, uint64_t size, uint64_t addr, uint32_t id);
int bset_tree_erase(bset_tree *s, uint64_t size, uint64_t addr, uint32_t id);
int bset_tree_find(const bset_tree *s, uint64_t size, uint64_t addr, uint32_t id,
                   bset_pos *pos);
void bset_tree_rekey_at(bset_tree *s, bset_pos pos, uint64_t size, uint64_t addr, uint32_t id);
uint32_t bset_tree_lower_bound(const bset_tree *s, uint64_t size, bset_pos *pos,
                               uint64_t *found_size);
void bset_tree_erase_at(bset_tree *s, bset_pos pos);
uint32_t bset_tree_pred(const bset_tree *s, uint64_t size, uint64_t addr);
size_t bset_tree_ids(const bset_tree *s, uint32_t *out, size_t max);
const char *bset_tree_check(const bset_tree *s);

#endif
