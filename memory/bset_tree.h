/* bset_tree.h — the large form of the free-block set (memory/bset.h): the same operations
 * and contract on a two-level B+-tree, for a set of many entries or many sizes, where
 * bset.c's buckets by size would move too much at each change. Only memory/bset.c uses it.
 * The searches return BSET_TREE_NONE (bset.h's BSET_NONE) for none. */
#ifndef MEMSIM_BSET_TREE_H
#define MEMSIM_BSET_TREE_H

#include <stddef.h>
#include <stdint.h>

#define BSET_TREE_NONE UINT32_MAX

/* Out of line: a set is seldom a tree, and memory/alloc_caching.c flattens the buckets'
 * operations into its entry points; the tree's stay out of that code. */
#define BSET_TREE_OUTLINE __attribute__((noinline))

typedef struct bset_tree bset_tree;
/* An entry's leaf and its place there (bset.h's bset_pos in the tree's terms). */
typedef struct bset_tree_pos { uint32_t leaf, at; } bset_tree_pos;

BSET_TREE_OUTLINE bset_tree *bset_tree_new(void);
BSET_TREE_OUTLINE void bset_tree_free(bset_tree *s);
BSET_TREE_OUTLINE size_t bset_tree_count(const bset_tree *s);
BSET_TREE_OUTLINE int bset_tree_reserve(bset_tree *s);
BSET_TREE_OUTLINE int bset_tree_insert(bset_tree *s, uint64_t size, uint64_t addr,
                                       uint32_t id);
BSET_TREE_OUTLINE int bset_tree_erase(bset_tree *s, uint64_t size, uint64_t addr, uint32_t id);
BSET_TREE_OUTLINE int bset_tree_find(const bset_tree *s, uint64_t size, uint64_t addr,
                                     uint32_t id, bset_tree_pos *pos);
BSET_TREE_OUTLINE void bset_tree_rekey_at(bset_tree *s, bset_tree_pos pos, uint64_t size,
                                          uint64_t addr, uint32_t id);
BSET_TREE_OUTLINE uint32_t bset_tree_lower_bound(const bset_tree *s, uint64_t size,
                                                 bset_tree_pos *pos, uint64_t *found_size);
BSET_TREE_OUTLINE void bset_tree_erase_at(bset_tree *s, bset_tree_pos pos);
BSET_TREE_OUTLINE uint32_t bset_tree_pred(const bset_tree *s, uint64_t size, uint64_t addr);
BSET_TREE_OUTLINE size_t bset_tree_ids(const bset_tree *s, uint32_t *out, size_t max);
BSET_TREE_OUTLINE const char *bset_tree_check(const bset_tree *s);

#endif
