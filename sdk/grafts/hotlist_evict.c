/* hotlist_evict.c -- the thesis' page-eviction graft (Small 1998, 7.7.1) for vas.pick_victim.
 *
 * The application knows which of its pages are hot (a database's index root, say) better than
 * LRU does. It keeps a "hot list" of page ids in this graft's memory, either by writing `hot_list`
 * directly (write_memory at the address of the exported `hot_list` global: a uint64 count, then up
 * to HOT_MAX uint64 page ids) or through the control functions hot_add / hot_remove / hot_clear.
 *
 * The kernel passes its candidates in LRU order (page[0] is its own choice). The graft evicts the
 * first candidate that is not hot. If every candidate is hot it returns -1 -- invalid, as the
 * thesis returned EINVAL -- and the kernel's default (the LRU candidate) decides: a graft may
 * choose which of its own pages go, never keep more memory than the kernel gives it. */
#include "vino_graft.h"

#define HOT_MAX 128

VINO_SHARED struct {
    uint64_t count; /* entries in use; values above HOT_MAX are treated as HOT_MAX */
    uint64_t page[HOT_MAX];
} hot_list;

static uint32_t hot_count(void) {
    /* The owner writes this memory directly: never trust the count. */
    return hot_list.count > HOT_MAX ? HOT_MAX : (uint32_t)hot_list.count;
}

static int32_t hot_find(uint64_t page) {
    uint32_t n = hot_count();
    for (uint32_t i = 0; i < n; i++)
        if (hot_list.page[i] == page)
            return (int32_t)i;
    return -1;
}

VINO_GRAFT(vas_pick_victim) int32_t vas_pick_victim(int32_t n) {
    const uint64_t *page = vino_victim_pages();
    if (n <= 0 || n > VINO_VICTIM_MAX)
        return -1;
    for (int32_t i = 0; i < n; i++)
        if (hot_find(page[i]) < 0)
            return i; /* 0 when the LRU candidate is fine */
    return -1; /* everything is hot: let the kernel's default decide */
}

/* Add a page to the hot list. Returns the new count, or -1 if the list is full. */
VINO_CONTROL(hot_add) int32_t hot_add(uint64_t page) {
    uint32_t n = hot_count();
    if (hot_find(page) >= 0)
        return (int32_t)n;
    if (n == HOT_MAX)
        return -1;
    hot_list.page[n] = page;
    hot_list.count = n + 1;
    return (int32_t)(n + 1);
}

/* Remove a page. Returns the new count, or -1 if the page was not on the list. */
VINO_CONTROL(hot_remove) int32_t hot_remove(uint64_t page) {
    int32_t i = hot_find(page);
    uint32_t n = hot_count();
    if (i < 0)
        return -1;
    hot_list.page[i] = hot_list.page[n - 1]; /* order does not matter */
    hot_list.count = n - 1;
    return (int32_t)(n - 1);
}

VINO_CONTROL(hot_clear) int32_t hot_clear(void) {
    hot_list.count = 0;
    return 0;
}
