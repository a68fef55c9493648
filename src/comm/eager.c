/* Eager broadcasts (params.broadcast_eager_bytes): the root of a broadcast of at most
 * that many bytes writes its payload into its own ring of LS_EAGER_DEPTH entries and
 * returns without waiting for anyone; each receiver waits for the root's entry alone
 * and copies the payload out. A loop of broadcasts then runs up to LS_EAGER_DEPTH calls
 * ahead on the root, and receivers never wait for each other, as in MPI's eager sends.
 *
 * Call s (numbered as every call is) uses entry s % LS_EAGER_DEPTH. Every rank marks
 * the start of an eager call in own.eager_seq (and its root in own.eager_root) and its
 * end in own.done = s.
 *   - The root rewrites an entry only once every rank has finished the call that last
 *     used it (done has reached s - LS_EAGER_DEPTH). It knows that without waiting when
 *     the entry's last call came before the regular call that preceded this run of eager
 *     calls (c->run_start - 1: its announcement waited until every rank had finished
 *     the call before it), or when an earlier wait saw every rank past it (c->known).
 *     done only moves in eager calls, so that wait is only made when every call since
 *     the entry's last was eager, and so publishes a done. Regular calls keep no count
 *     of their own for this: the tiny allreduce has no room for it.
 *   - Other calls write slots and announcements that a rank still in an eager call's
 *     predecessor may be reading, and assume every rank finished the call before them.
 *     So the first other call after an eager one (ls_eager_settle) waits until every
 *     rank's done has reached that eager call.
 * What the root gives up: it learns nothing in the call. A receiver whose call differs
 * from the root's (count, root, transfer, or any other call) fails with
 * LOCKSTEP_EMISMATCH and breaks the communicator, and a receiver that dies leaves the
 * next wait to notice it: the root sees either error in its next call that waits,
 * at the latest LS_EAGER_DEPTH broadcasts later. Receivers that agree with the root
 * return 0, and fail in their next call.
 * Mismatches that would otherwise only end at the deadline are found between wait
 * slices (liveness.c's ls_between_slices and eager_check below): a receiver whose root made
 * call s a regular call, or made it an eager one as a receiver; a rank in a regular
 * call s whose peer made it an eager broadcast. */
#include <errno.h>
#include <string.h>

#include "comm_impl.h"

/* Between slices of a receiver's wait for its root's entry s (= c->seq). */
static int eager_check(lockstep_comm_t *c, int root)
{
    uint32_t s = c->seq;
    const ls_ctl_t *r = ls_ctl(c, root);
    int regular = ls_load_acquire(&r->ann[s & 1].seq.value) == s;
    int receiver = ls_load_acquire(&r->own.eager_seq) == s &&
                   ls_load_relaxed(&r->own.eager_root) != root;
    return regular || receiver ? ls_comm_fail(c, LOCKSTEP_EMISMATCH) : 0;
}

int ls_eager_broadcast(lockstep_comm_t *c, void *buf, size_t bytes, int root, lockstep_xfer_t xfer)
{
    int rc = ls_comm_failed(c);
    if (rc)
        return rc;
    uint32_t s = ++c->seq;
    if (!c->after_eager)
        c->run_start = s;
    ls_ctl_t *mine = ls_ctl(c, c->rank);
    ls_desc_t want = {LS_CALL_BROADCAST, (uint8_t)xfer, 0, c->tag, root, bytes};
    c->in_eager = 1;
    ls_store_relaxed(&mine->own.eager_root, root);
    ls_store_release(&mine->own.eager_seq, s);
    if (c->rank == root) {
        uint32_t last = s - LS_EAGER_DEPTH; /* the entry's last call */
        uint32_t before = c->run_start - 2;  /* every rank finished it: see above */
        if ((int32_t)(last - before) > 0 && (int32_t)(last - c->known) > 0) {
            if ((rc = ls_comm_wait_done(c, last)) != 0)
                return rc;
            /* how far the slowest rank has got: no wait until the ring reaches that */
            c->known = s - 1;
            for (int r = 0; r < c->size; r++) {
                uint32_t d = ls_load_acquire(&ls_ctl(c, r)->own.done.value);
                if (r != root && (int32_t)(d - c->known) < 0)
                    c->known = d;
            }
        }
        ls_eager_entry_t *e = ls_eager_entry(c, root, s);
        e->desc = want;
        if (bytes)
            memcpy(e->data, buf, bytes);
        lockstep_wait_publish(&c->wait, &e->seq, s); /* release: desc and data first */
    } else {
        ls_eager_entry_t *e = ls_eager_entry(c, root, s);
        if (!ls_reached(ls_load_acquire(&e->seq.value), s) &&
            (rc = ls_comm_wait_word_checked(c, root, &e->seq, s, ls_comm_deadline(c), eager_check)) != 0)
            return rc;
        if (!ls_same_desc(&e->desc, &want))
            return ls_comm_fail(c, LOCKSTEP_EMISMATCH);
        if (bytes)
            memcpy(buf, e->data, bytes);
    }
    c->after_eager = 1;
    c->in_eager = 0;
    lockstep_wait_publish(&c->wait, &mine->own.done, s);
    return 0;
}

int ls_eager_settle(lockstep_comm_t *c)
{
    int rc = ls_comm_failed(c);
    if (rc)
        return rc;
    if ((int32_t)(c->known - c->seq) < 0) {
        c->in_eager = 1; /* peers' eager_seq may still say this call */
        rc = ls_comm_wait_done(c, c->seq);
        c->in_eager = 0;
        if (rc)
            return rc;
        c->known = c->seq;
    }
    c->after_eager = 0;
    c->busy = -1; /* every rank finished every call so far */
    return 0;
}
