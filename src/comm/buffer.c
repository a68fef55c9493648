/* The shared buffers (lockstep_comm_buffer): params.buffer_bytes of the segment per
 * rank. A call whose buffers lie in them posts their offsets in its announcement, and
 * every rank reads every rank's post once all have announced: then the call can read
 * and write the peers' buffers directly (zero-copy). */
#include <errno.h>
#include <string.h>

#include "comm_impl.h"

void *lockstep_comm_buffer(lockstep_comm_t *c, size_t *bytes)
{
    if (!c) {
        errno = EINVAL;
        return NULL;
    }
    if (bytes)
        *bytes = c->hdr->buffer_bytes;
    if (!c->hdr->buffer_bytes) {
        errno = ENOENT;
        return NULL;
    }
    return ls_buf(c, c->rank);
}

uint64_t ls_buffer_offset(const lockstep_comm_t *c, const void *p, size_t bytes)
{
    uintptr_t b = (uintptr_t)ls_buf(c, c->rank), q = (uintptr_t)p; /* p may be anywhere */
    size_t n = c->hdr->buffer_bytes;
    if (!n || q < b || q - b > n || bytes > n - (q - b))
        return LS_NO_OFFSET;
    return (uint64_t)(q - b);
}

/* Safe before announcing call s = seq + 1: ann[s & 1] was last read in call s - 2, and
 * every rank announced s - 1 after it finished that. */
void ls_zc_post(lockstep_comm_t *c, uint64_t send, uint64_t recv)
{
    struct ls_zc_offsets o = {send, recv};
    c->zc = o;
    memcpy(ls_ctl(c, c->rank)->ann[(c->seq + 1) & 1].data, &o, sizeof o);
}

int ls_zc_count(const lockstep_comm_t *c)
{
    int n = 0;
    for (int k = 0; k < c->size; k++)
        n += ls_zc_announced(c, k).send != LS_NO_OFFSET;
    return n;
}

struct ls_zc_offsets ls_zc_announced(const lockstep_comm_t *c, int r)
{
    if (r == c->rank)
        return c->zc;
    struct ls_zc_offsets o;
    memcpy(&o, ls_ctl(c, r)->ann[c->seq & 1].data, sizeof o);
    return o;
}

