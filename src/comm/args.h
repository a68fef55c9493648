/* Argument checks that lockstep_comm_* (comm.h) and lockstep_mpi_* (comm_mpi.h) share.
 * Header-only: both libraries compile it, and neither exports it. */
#ifndef LOCKSTEP_COMM_ARGS_H
#define LOCKSTEP_COMM_ARGS_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "lockstep/comm.h"

/* 1 when [a, a + n) and [b, b + m) share a byte */
static inline int ls_spans_overlap(const void *a, size_t n, const void *b, size_t m)
{
    const char *x = a, *y = b;
    return n && m && x < y + m && y < x + n;
}

/* 1 when [a, a + n) and [b, b + n) share a byte */
static inline int ls_overlap(const void *a, const void *b, size_t n)
{
    return ls_spans_overlap(a, n, b, n);
}

/* A reduce-scatter's arguments (MPI_Reduce_scatter_block's layout: send holds size
 * blocks of count elements, recv one, possibly block rank of send): 0 or -EINVAL. */
static inline int ls_reduce_scatter_args(const void *send, const void *recv, size_t count, lockstep_dtype_t dtype,
                                         lockstep_op_t op, int rank, int size)
{
    size_t es = lockstep_dtype_size(dtype);
    if (!es || (unsigned)op > LOCKSTEP_OP_MIN || (count && (!send || !recv)) || count > SIZE_MAX / es / (size_t)size)
        return -EINVAL;
    size_t block = count * es;
    if (block && recv != (const char *)send + (size_t)rank * block &&
        ls_spans_overlap(send, block * (size_t)size, recv, block))
        return -EINVAL; /* overlapping, and not the in-place layout (recv = my block) */
    return 0;
}

#endif
