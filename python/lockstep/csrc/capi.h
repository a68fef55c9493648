/* lockstep._lockstep's C interface for other extensions (the torch ops, torch_ops.cpp),
 * published as the capsule "lockstep._lockstep._C_API". An extension that imports it
 * calls the library through these pointers, so it links neither liblockstep nor the
 * extension, and it shares the Comm objects' rules (one call at a time, close while a
 * call runs) with the Python methods.
 *
 * Every function here but the library's own runs with the GIL held; the library's
 * run without it (a waiting call runs the signal handlers by taking it, see comm_type.c). */
#ifndef LOCKSTEP_CAPI_H
#define LOCKSTEP_CAPI_H

#include <Python.h>

#include "lockstep/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LSP_CAPI_NAME "lockstep._lockstep._C_API"
#define LSP_CAPI_VERSION 2 /* raise when a field changes; a reader refuses another */

typedef struct lsp_capi {
    int version;
    PyTypeObject *comm_type; /* lockstep._lockstep.Comm (a lockstep.Comm's ._c) */

    /* Begin a call on obj (a comm_type): 0 and *comm, or -1 with the error set (closed,
     * or another thread in a call on it). Every 0 is paired with one leave. */
    int (*enter)(PyObject *obj, const char *what, lockstep_comm_t **comm);
    void (*leave)(PyObject *obj);
    /* Take this rank's turn in the next call only to refuse it (this rank's arguments
     * are wrong): the peers' call ends with PeerArgumentError. Keeps the error set. */
    void (*refuse)(PyObject *obj);
    /* Set the exception for a library code rc (< 0) in call what, as the Comm methods
     * raise it (PeerDiedError, CommTimeoutError, ...) */
    void (*raise_code)(int rc, const char *what);
    /* "sum", "max", "min" as lockstep_op_t, or -1 with ValueError set */
    int (*op_code)(const char *name);

    /* the library's calls, for the GIL-free part of a call */
    int (*allreduce)(lockstep_comm_t *, const void *, void *, size_t, lockstep_dtype_t, lockstep_op_t);
    int (*reduce_scatter)(lockstep_comm_t *, const void *, void *, size_t, lockstep_dtype_t, lockstep_op_t);
    int (*alltoall)(lockstep_comm_t *, const void *, void *, size_t);
    int (*broadcast)(lockstep_comm_t *, void *, size_t, int, lockstep_order_t, lockstep_xfer_t);
    int (*allgather)(lockstep_comm_t *, const void *, void *, size_t, lockstep_order_t, lockstep_xfer_t);
    int (*rank)(const lockstep_comm_t *);
    int (*size)(const lockstep_comm_t *);

    /* the torch ops' argument checks and messages, shared with the Python kernels; they
     * touch no Python object, so they run without the GIL (python/src/op_checks.h) */
    int (*check_dim)(int64_t ndim, int64_t dim, const char *op, const char *name, char *msg, size_t len);
    int (*check_split)(int64_t extent, int size, int64_t dim, const char *op, char *msg, size_t len);
    int (*check_root)(int64_t root, int size, char *msg, size_t len);
    void (*no_grad_message)(const char *op, char *msg, size_t len);
    void (*dtype_message)(const char *what, const char *dtype, char *msg, size_t len);
    void (*unbound_message)(long long handle, char *msg, size_t len);
} lsp_capi;

#define LSP_CHECK_MSG_BYTES 320 /* room for any of their messages */

#ifdef __cplusplus
}
#endif
#endif
