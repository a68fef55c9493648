/* The choice of way by timing both (src/comm/pick.h: large allreduces, allgathers and
 * all-to-alls where kernel copies are slow, small-path allgathers from 16 KiB blocks,
 * 2-rank broadcasts past 512 KiB), on costs written out: which way each next call takes, as
 * ls_pick_record returns it and as ls_pick_next (which the large broadcast's and
 * allgather's picking rank asks before each call) gives it, alike.
 *
 *   first    each way runs LS_PICK_FIRST (3) times in a row, the slots first, then
 *            the cheaper is preferred; a way's first calls dearer than its last (the
 *            lines moving to where it keeps them) do not count against it;
 *   looks    the other way runs in a look of 3 calls in a row once every 8 calls,
 *            then 16, 32, 64 and 128 while it stays dearer (farther for a way 3x
 *            dearer or more: 512 at 5x, 1024 at most), and every 8 again once the
 *            preference changes; a look's last call decides as much as its first,
 *            and a look whose first call is cheaper by the margin hands over at once;
 *   change   the preferred way becoming dearer takes over after LS_PICK_KEEP calls,
 *            not before (one slow call is not enough), and only past the margin;
 *   none     a way that could not run is not preferred, even when it was;
 *   long     20000 calls with costs drawn at random in two states that swap: every
 *            answer is 0 or 1, the looks stay at or under 1/8 of the calls, and in
 *            each long stretch the cheaper way runs in most calls.
 * The calls themselves, by whichever way, are checked in comm_collectives_* (the
 * _slowcopy form on any machine; its 2-rank broadcasts of 1 MiB pick on any). */
#include "../common/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/comm/pick.h"

/* record `way` at `cost` and check the next way, as returned and as asked after */
#define STEP(p, way, cost, want)                                                      \
    do {                                                                              \
        CHECK_EQ(ls_pick_record((p), (way), (cost)), (want));                         \
        CHECK_EQ(ls_pick_next(p), (want));                                            \
    } while (0)

/* from a new record, both ways timed 3 times: slots at a, single copy at b */
static void start(ls_pick_t *p, uint64_t a, uint64_t b, int want)
{
    memset(p, 0, sizeof *p);
    STEP(p, 0, a, 0);
    STEP(p, 0, a, 0);
    STEP(p, 0, a, 1);
    STEP(p, 1, b, 1);
    STEP(p, 1, b, 1);
    STEP(p, 1, b, want);
}

/* a look of 3 calls at `way`, each at `cost`, after which `want` runs */
static void look(ls_pick_t *p, int way, uint64_t cost, int want)
{
    STEP(p, way, cost, way);
    STEP(p, way, cost, way);
    STEP(p, way, cost, want);
}

/* `calls` calls of the preferred way `pref` at `cost`, the last of which is followed
 * by a look at the other way */
static void until_look(ls_pick_t *p, int pref, uint64_t cost, int calls)
{
    for (int i = 1; i < calls; i++)
        STEP(p, pref, cost, pref);
    STEP(p, pref, cost, !pref);
}

static int test_first(void)
{
    ls_pick_t p;
    memset(&p, 0, sizeof p);
    CHECK_EQ(ls_pick_next(&p), 0); /* a class never recorded starts with the slots */
    start(&p, 100, 200, 0); /* the slots cheaper */
    CHECK_EQ(p.pref, 0);
    start(&p, 300, 200, 1); /* single copy cheaper */
    CHECK_EQ(p.pref, 1);
    /* one slow call of each kind in the first ones does not decide: the lowest counts */
    memset(&p, 0, sizeof p);
    STEP(&p, 0, 5000, 0); /* first touch of the pages */
    STEP(&p, 0, 100, 0);
    STEP(&p, 0, 100, 1);
    STEP(&p, 1, 200, 1);
    STEP(&p, 1, 200, 1);
    STEP(&p, 1, 200, 0);
    CHECK_EQ(ls_pick_estimate(&p, 0), 100);
    CHECK_EQ(ls_pick_estimate(&p, 1), 200);
    /* single copy's first calls pay for moving the lines, its third is its steady
     * cost, and that one decides: 90 against the slots' 100 */
    memset(&p, 0, sizeof p);
    STEP(&p, 0, 100, 0);
    STEP(&p, 0, 100, 0);
    STEP(&p, 0, 100, 1);
    STEP(&p, 1, 130, 1);
    STEP(&p, 1, 150, 1);
    STEP(&p, 1, 90, 1);
    CHECK_EQ(p.pref, 1);
    memset(&p, 0, sizeof p);
    CHECK_EQ(ls_pick_estimate(&p, 0), LS_PICK_NONE);
    return 0;
}

/* From a new record, the slots at 100 and single copy at `dear`: the looks at single
 * copy, still dearer each time, come 8, 16, 32 ... calls apart up to `last`, and then
 * no further apart: the record is left just before single copy's next look */
static void looks_up_to(ls_pick_t *p, uint64_t dear, int last)
{
    start(p, 100, dear, 0);
    for (int every = 8; every <= last; every *= 2) {
        until_look(p, 0, 100, every);
        look(p, 1, dear, 0);
    }
    until_look(p, 0, 100, last);
}

static int test_looks(void)
{
    ls_pick_t p;
    /* the first look comes 8 calls after single copy last ran (7 more slots calls,
     * then 1); single copy still 2x dearer: 16, 32, 64 and 128 calls apart, no
     * further */
    looks_up_to(&p, 200, 128);
    /* the look's first call finds single copy cheaper now, by more than the margin:
     * it takes over at once (its lowest cost is the new one), and the slots get
     * looked at after 8 */
    STEP(&p, 1, 50, 1);
    CHECK_EQ(p.pref, 1);
    until_look(&p, 1, 50, 7); /* 8 calls after the slots' last, counting this one */

    /* a way 5x dearer is looked at farther apart: up to every 512 calls (its looks
     * of 3 calls then add 12/512 to the calls' cost), not 128 */
    looks_up_to(&p, 500, 512);
    look(&p, 1, 500, 0);
    until_look(&p, 0, 100, 512);
    /* 10x dearer: up to 1024, the cap (864 would do, the looks double past it) */
    looks_up_to(&p, 1000, 1024);
    look(&p, 1, 1000, 0);
    until_look(&p, 0, 100, 1024);
    /* a look whose first two calls pay for moving the lines (1500, 300) and whose
     * third finds single copy cheaper by more than the margin (70 against 100) hands
     * over after the third */
    STEP(&p, 1, 1500, 1);
    STEP(&p, 1, 300, 1);
    CHECK_EQ(p.pref, 0);
    STEP(&p, 1, 70, 1);
    CHECK_EQ(p.pref, 1);
    CHECK_EQ(ls_pick_every_max(100, 199), LS_PICK_EVERY_MAX); /* under 2x */
    CHECK_EQ(ls_pick_every_max(100, 200), LS_PICK_EVERY_MAX); /* 96 calls would do */
    CHECK_EQ(ls_pick_every_max(100, 300), 192);
    CHECK_EQ(ls_pick_every_max(100, 1099), 864);
    CHECK_EQ(ls_pick_every_max(100, 1100), LS_PICK_EVERY_CAP);
    CHECK_EQ(ls_pick_every_max(0, 400), LS_PICK_EVERY_CAP); /* no overflow, no division by 0 */
    CHECK_EQ(ls_pick_every_max(100, UINT64_MAX - 1), LS_PICK_EVERY_CAP);
    return 0;
}

static int test_change(void)
{
    ls_pick_t p;
    start(&p, 100, 200, 0);
    /* the slots turn 3x dearer: the first LS_PICK_KEEP - 1 such calls keep them (the
     * estimate is still the old lowest), the LS_PICK_KEEP-th hands over */
    for (int i = 1; i < LS_PICK_KEEP; i++)
        STEP(&p, 0, 300, 0);
    STEP(&p, 0, 300, 1);
    CHECK_EQ(p.pref, 1);
    /* single copy at 200, slots back at 100 when looked at: they take over again */
    until_look(&p, 1, 200, 8);
    STEP(&p, 0, 100, 0);
    CHECK_EQ(p.pref, 0);

    /* within the margin nothing changes: single copy at 81 against slots at 100 ... */
    start(&p, 100, 200, 0);
    until_look(&p, 0, 100, 8);
    look(&p, 1, 81, 0);
    CHECK_EQ(p.pref, 0);
    /* ... but at 79 it does */
    until_look(&p, 0, 100, 16);
    STEP(&p, 1, 79, 1);
    CHECK_EQ(p.pref, 1);
    /* the first choice has no margin: 99 against 100 prefers the 99 */
    start(&p, 100, 99, 1);
    return 0;
}

static int test_none(void)
{
    ls_pick_t p;
    /* single copy could not run in its first call: the slots are preferred after
     * their three, and single copy is only looked at, in looks that end at once */
    memset(&p, 0, sizeof p);
    STEP(&p, 0, 100, 0);
    STEP(&p, 0, 100, 0);
    STEP(&p, 0, 100, 1);
    STEP(&p, 1, LS_PICK_NONE, 0);
    CHECK_EQ(p.pref, 0);
    until_look(&p, 0, 100, 8);
    STEP(&p, 1, LS_PICK_NONE, 0); /* a look at a way that could not run ends at once */
    until_look(&p, 0, 100, 16);
    /* its looks cost nothing (the call goes by the slots), so they stop growing at 128 */
    for (int every = 32; every <= 128; every *= 2) {
        STEP(&p, 1, LS_PICK_NONE, 0);
        until_look(&p, 0, 100, every);
    }
    STEP(&p, 1, LS_PICK_NONE, 0);
    until_look(&p, 0, 100, 128);
    /* preferred single copy that can no longer run hands over at once, whatever it
     * cost before */
    start(&p, 300, 100, 1);
    STEP(&p, 1, LS_PICK_NONE, 0);
    CHECK_EQ(p.pref, 0);
    CHECK_EQ(ls_pick_estimate(&p, 1), LS_PICK_NONE);
    /* and it takes over again when a look finds it running and cheaper */
    until_look(&p, 0, 300, 8);
    STEP(&p, 1, 100, 1);
    return 0;
}

static uint64_t draw(uint64_t *s, uint64_t mean)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t r = *s >> 33;
    uint64_t cost = mean - mean / 5 + r % (mean * 2 / 5 + 1); /* mean +- 20% */
    if (r % 16 == 0)
        cost *= 4; /* a preempted call now and then */
    return cost;
}

static int test_long(void)
{
    ls_pick_t p;
    memset(&p, 0, sizeof p);
    uint64_t seed = 12345;
    int way = 0, looks = 0, calls = 0;
    for (int stretch = 0; stretch < 10; stretch++) {
        /* even stretches: slots 100, single copy 150; odd: slots 350, single 150 */
        uint64_t mean[2] = {stretch % 2 ? 350u : 100u, 150u};
        int cheap = stretch % 2 ? 1 : 0, on_cheap = 0;
        for (int i = 0; i < 2000; i++, calls++) {
            if (way != p.pref && p.every)
                looks++;
            on_cheap += way == cheap;
            int next = ls_pick_record(&p, way, draw(&seed, mean[way]));
            CHECK(next == 0 || next == 1);
            CHECK_EQ(ls_pick_next(&p), next);
            way = next;
        }
        if (on_cheap < 1800) {
            fprintf(stderr, "stretch %d: the cheaper way ran %d times of 2000\n", stretch, on_cheap);
            return 1;
        }
    }
    CHECK(looks * 8 <= calls);
    return 0;
}

int main(int argc, char **argv)
{
    watchdog(60);
    const char *what = argc > 1 ? argv[1] : "";
    if (strcmp(what, "first") == 0)
        return test_first();
    if (strcmp(what, "looks") == 0)
        return test_looks();
    if (strcmp(what, "change") == 0)
        return test_change();
    if (strcmp(what, "none") == 0)
        return test_none();
    if (strcmp(what, "long") == 0)
        return test_long();
    fprintf(stderr, "usage: %s first|looks|change|none|long\n", argv[0]);
    return 1;
}
