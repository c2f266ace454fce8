/*
 * Page-eviction graft (thesis 4.2.1 / 4.3.4): a prioritization graft.
 *
 * The application keeps a "hot list" of pages it will need soon, as a
 * linked list of structs in the extension's own memory.  When the kernel
 * must evict a page, it hands the graft the head of its LRU queue (the
 * candidates, copied into an argument area); the graft accepts the first
 * candidate that is not on the hot list.
 */
#include "workload.h"

#define HL_POOL 128      /* the model application starts with 128 hot pages */
#define HL_MAX_ARGS 64   /* size of the candidate argument area */

struct hl_node {
    uint32_t page;
    struct hl_node *next;
};

static struct hl_node hl_pool[HL_POOL];
static struct hl_node *hl_head;
static uint32_t hl_count;
static uint32_t hl_arg_area[HL_MAX_ARGS];

/* A call that does nothing: measures the cost of one invocation. */
VB_EXPORT uint32_t vb_nop(uint32_t x)
{
    return x;
}

/* Where the kernel copies the candidate list before a call. */
VB_EXPORT uint32_t *vb_hl_args(void)
{
    return hl_arg_area;
}

VB_EXPORT uint32_t vb_hl_args_capacity(void)
{
    return HL_MAX_ARGS;
}

static int hl_contains(uint32_t page)
{
    for (const struct hl_node *n = hl_head; n != NULL; n = n->next) {
        if (n->page == page)
            return 1;
    }
    return 0;
}

/*
 * Build a hot list of n distinct page numbers below max_page.  The nodes
 * are linked in a shuffled order of the pool, so the walk is a pointer
 * chase rather than a sequential scan.  Returns the list length.
 */
VB_EXPORT uint32_t vb_hl_setup(uint32_t n, uint32_t max_page, uint32_t seed)
{
    uint32_t order[HL_POOL];
    uint32_t rng = seed ? seed : 1u;

    if (n > HL_POOL)
        n = HL_POOL;
    if (max_page < n)
        n = max_page;
    for (uint32_t i = 0; i < HL_POOL; i++)
        order[i] = i;
    for (uint32_t i = HL_POOL - 1; i > 0; i--) {
        uint32_t j = vb_below(&rng, i + 1);
        uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }

    hl_head = NULL;
    hl_count = 0;
    struct hl_node **link = &hl_head;
    while (hl_count < n) {
        uint32_t page = vb_below(&rng, max_page);
        if (hl_contains(page))
            continue;
        struct hl_node *node = &hl_pool[order[hl_count]];
        node->page = page;
        node->next = NULL;
        *link = node;
        link = &node->next;
        hl_count++;
    }
    return hl_count;
}

VB_EXPORT uint32_t vb_hl_len(void)
{
    return hl_count;
}

/* Page number of the i-th entry in list order (or 0xffffffff). */
VB_EXPORT uint32_t vb_hl_page(uint32_t i)
{
    const struct hl_node *n = hl_head;
    while (n != NULL && i > 0) {
        n = n->next;
        i--;
    }
    return n != NULL ? n->page : 0xffffffffu;
}

/*
 * The graft proper: given n LRU candidates (oldest first), return the index
 * of the first one that is not on the hot list, or n if every candidate is
 * hot (the kernel then falls back to its own choice).
 */
VB_EXPORT uint32_t vb_hl_pick_victim(const uint32_t *cand, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (!hl_contains(cand[i]))
            return i;
    }
    return n;
}
