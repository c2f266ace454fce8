/* lookahead_evict.c -- look-ahead page eviction for vas.pick_victim (Small 1998, 7.3.3; the
 * thesis' graft is in 7.7.1).
 *
 * A database that reads records through a nonclustered index knows, from the index, the order in
 * which it will read them. LRU does not: with records scattered over the file it keeps whatever was
 * read last. This graft spares every page that one of the next N records will touch and lets LRU
 * pick among the rest.
 *
 * The owner describes the scan once and then only moves a cursor:
 *
 *   la_plan[i]   the pages record i touches, as block indexes in the file: { first, second } with
 *                second = LA_NONE unless the record straddles a block boundary;
 *   la_ctl       { object  (the file's object id: the high 32 bits of a page id),
 *                  lookahead (N, in records), count (records in the plan),
 *                  cursor (the next record the application will read) }.
 *
 * Write la_plan and la_ctl with write_memory, call the control function la_start, and before
 * reading record i write i into la_ctl.cursor (8 bytes).
 *
 * An owner that cannot write the graft's memory (a program grafting its own memory from inside
 * has control calls only) does the same with control calls: la_set(object, lookahead, count,
 * lru_when_all_needed), la_put(at, r0 .. r6) for seven records at a time, each
 * `(first << 32) | second`, then la_start, and la_cursor(i) as it goes (every few records is
 * enough: the window is thousands long). For program memory the object is VINO_MEMORY_OBJECT and
 * the plan's pages are memory page indexes (address / 4096).
 *
 * The thesis' graft compared each candidate with every entry of the keep list, which at 8192
 * records of look-ahead made a run take minutes. Here the graft keeps, for every page, how many
 * accesses in the window [cursor, cursor + N) fall on it (need[]), and slides the window as the
 * cursor moves: a candidate costs one table lookup, a record two increments and two decrements.
 *
 * The kernel passes its candidates in LRU order (page[0] is its own choice), a page at a time;
 * the graft evicts the first one no upcoming record needs, asking for the next page while every
 * candidate so far is needed. If all are needed it returns -1 -- invalid, as the thesis returned
 * EINVAL -- and the kernel's LRU choice stands: the graft may choose which of its own pages go,
 * never keep more memory than the kernel gives it. A window that covers every candidate then
 * fails call after call, and the kernel unloads a graft that fails eight times in a row; set with
 * la_set's lru_when_all_needed, the graft answers the LRU candidate itself instead (the same
 * page goes, and no call fails). */
#include "vino_graft.h"

#define LA_MAX_RECORDS 65536
#define LA_MAX_PAGES 65536
#define LA_NONE 0xffffffffu
#define LA_SLIDE_MAX 256 /* records entering or leaving the window per eviction */

VINO_SHARED struct {
    uint64_t object;    /* object id of the file the plan reads */
    uint64_t lookahead; /* N, in records (0: spare nothing, LRU decides) */
    uint64_t count;     /* records in the plan (clamped to LA_MAX_RECORDS) */
    uint64_t cursor;    /* the next record the application reads; the owner advances it */
} la_ctl;

VINO_SHARED uint32_t la_plan[LA_MAX_RECORDS][2];

static uint32_t need[LA_MAX_PAGES]; /* accesses of each page by records in [win_lo, win_hi) */
/* The window need[] describes. Volatile: stored as each record enters or leaves, so a call cut
 * short by its budget leaves need[] and the window in step for the next one. */
static volatile uint64_t win_lo, win_hi;
static uint64_t started_object;     /* the object of the plan la_start accepted */
static uint32_t started;            /* la_start has run since the plan was written */
static uint32_t lru_when_all_needed; /* answer 0, not -1, when every candidate is needed */

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

static void count_record(uint64_t r, int32_t delta) {
    for (int k = 0; k < 2; k++) {
        uint32_t p = la_plan[r][k];
        if (p < LA_MAX_PAGES)
            need[p] += (uint32_t)delta;
    }
}

/* Brings the window up to [cursor, cursor + N): each record enters once and leaves once, at most
 * `moves` of them per call. Before the cache first fills, the application reads a cacheful of
 * records without an eviction; sliding over all of them in one call would run past the
 * graftpoint's budget, so an eviction slides LA_SLIDE_MAX records at most and decides with the
 * window where it got to (a record just read may still count as upcoming for a call or two). */
static void catch_up(uint64_t moves) {
    /* The owner writes la_ctl directly: clamp everything read from it. */
    uint64_t count = min_u64(la_ctl.count, LA_MAX_RECORDS);
    uint64_t cur = min_u64(la_ctl.cursor, count);
    uint64_t target = cur + min_u64(la_ctl.lookahead, count - cur);
    if (cur < win_lo) {
        /* The cursor went back: rebuild from scratch. */
        memset(need, 0, sizeof need);
        win_lo = win_hi = cur;
    }
    if (win_hi < cur) {
        /* The whole window is behind the cursor: empty it and start again at the cursor. */
        for (; win_lo < win_hi && moves > 0; win_lo++, moves--)
            count_record(win_lo, -1);
        if (win_lo < win_hi)
            return;
        win_lo = win_hi = cur;
    }
    for (; win_hi < target && moves > 0; win_hi++, moves--)
        count_record(win_hi, 1);
    for (; win_lo < cur && moves > 0; win_lo++, moves--)
        count_record(win_lo, -1);
}

static int needed(uint64_t page) {
    if ((page >> 32) != started_object)
        return 0;
    uint64_t index = page & 0xffffffffu;
    return index < LA_MAX_PAGES && need[index] != 0;
}

VINO_GRAFT(vas_pick_victim) int32_t vas_pick_victim(int32_t n) {
    const uint64_t *page = vino_victim_pages();
    uint64_t first = vino_victim_first();
    if (n < 0 || n > VINO_VICTIM_MAX)
        return -1;
    if (!started)
        return 0; /* no plan yet: LRU */
    if (n == 0)
        return lru_when_all_needed ? 0 : -1; /* every candidate is needed: the LRU page goes */
    if (first == 0)
        catch_up(LA_SLIDE_MAX); /* the first page of an eviction */
    for (int32_t i = 0; i < n; i++)
        if (!needed(page[i]))
            return (int32_t)(first + (uint64_t)i); /* 0 when the LRU candidate is not needed soon */
    return VINO_VICTIM_MORE;
}

/* Starts a scan: the plan and la_ctl have been written. Returns the records in the plan. */
VINO_CONTROL(la_start) int32_t la_start(void) {
    memset(need, 0, sizeof need);
    uint64_t count = min_u64(la_ctl.count, LA_MAX_RECORDS);
    win_lo = win_hi = min_u64(la_ctl.cursor, count);
    /* The whole first window is counted here, in the control call's budget: an eviction then
     * only slides it by the records read since the last one. */
    catch_up(~(uint64_t)0);
    started_object = la_ctl.object;
    started = 1;
    return (int32_t)count;
}

/* la_ctl without write_memory: the cursor starts at 0. */
VINO_CONTROL(la_set)
int32_t la_set(uint64_t object, uint64_t lookahead, uint64_t count, uint64_t lru_when_all) {
    lru_when_all_needed = lru_when_all != 0;
    la_ctl.object = object;
    la_ctl.lookahead = lookahead;
    la_ctl.count = count;
    la_ctl.cursor = 0;
    return 0;
}

/* la_plan[at .. at + 7) without write_memory, each record packed `(first << 32) | second`;
 * entries past LA_MAX_RECORDS are dropped. Returns the records written. */
VINO_CONTROL(la_put)
int32_t la_put(uint64_t at, uint64_t r0, uint64_t r1, uint64_t r2, uint64_t r3, uint64_t r4, uint64_t r5,
               uint64_t r6) {
    const uint64_t records[7] = {r0, r1, r2, r3, r4, r5, r6};
    int32_t written = 0;
    for (uint64_t k = 0; k < 7 && at + k < LA_MAX_RECORDS; k++, written++) {
        la_plan[at + k][0] = (uint32_t)(records[k] >> 32);
        la_plan[at + k][1] = (uint32_t)records[k];
    }
    return written;
}

/* The next record the owner reads, without write_memory. */
VINO_CONTROL(la_cursor) int32_t la_cursor(uint64_t record) {
    la_ctl.cursor = record;
    return 0;
}

/* Ends a scan: from now on LRU decides until the next la_start. */
VINO_CONTROL(la_stop) int32_t la_stop(void) {
    started = 0;
    return 0;
}
