/* What the files of lockstep._lockstep share: the Comm object, entering and leaving a
 * call, the errors, and what a call takes of its arguments (intake.c).
 *   errors.c      the exceptions, and lockstep's codes as them
 *   capi.c        the C interface for other extensions (lockstep/csrc/capi.h)
 *   comm_type.c   the Comm type: create, close, the shared buffer, attributes
 *   calls.c       the collectives' entry points
 *   intake.c      arguments and buffers: names, numpy arrays, torch tensors, recv shapes
 *   op_checks.c   the torch ops' argument checks, for both kernels
 *   lockstep_module.c  the module */
#ifndef LOCKSTEP_PY_MODULE_H
#define LOCKSTEP_PY_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "lockstep/lockstep.h"
#include "load_module.h" /* Py_NewRef on Python 3.9 */

extern PyObject *CommError, *PeerDiedError, *CommTimeoutError, *MismatchError, *CancelledError, *PeerArgumentError;
extern PyTypeObject lsp_CommType;

/* op_checks.c: the checks for the torch ops' Python kernels (check_dim, check_split,
 * check_root) and
 * their errors (no_grad_error, unbound_error return the exception to raise) */
PyObject *lsp_mod_check_dim(PyObject *mod, PyObject *args);
PyObject *lsp_mod_check_split(PyObject *mod, PyObject *args);
PyObject *lsp_mod_check_root(PyObject *mod, PyObject *args);
PyObject *lsp_mod_no_grad_error(PyObject *mod, PyObject *arg);
PyObject *lsp_mod_unbound_error(PyObject *mod, PyObject *arg);
/* capi.c: add the capsule _C_API (lockstep/csrc/capi.h) to m: 0, or -1 with the error set */
int lsp_add_capi(PyObject *m);
/* errors.c */
PyObject *lsp_raise_code(int rc, const char *what);
/* the exceptions, created and added to module m: 0, or -1 with the error set */
int lsp_add_errors(PyObject *m);

typedef struct {
    PyObject_HEAD
    lockstep_comm_t *comm;
    int closed;            /* close() was called; comm is freed once exports drop to 0 */
    Py_ssize_t exports;    /* live views of the shared buffer (buffer protocol) */
    int busy;              /* a thread is in a call on comm (see enter) */
} CommObject;


static inline lockstep_comm_t *live(CommObject *self)
{
    if (!self->comm || self->closed) {
        PyErr_SetString(CommError, "the communicator is closed");
        return NULL;
    }
    return self->comm;
}

/* One call at a time per communicator (comm.h). Calls run without the GIL, and a short
 * one made with it lets other threads run while it waits (py_cancel), so a second
 * thread may come in while one waits: it gets RuntimeError and the call in flight goes
 * on, where both would otherwise step on one sequence and slots. A close() meanwhile
 * frees comm when the call leaves. busy and closed change only under the GIL. 0, or -1
 * with the error set. */
static inline int enter(CommObject *self, const char *what)
{
    if (!live(self))
        return -1;
    if (self->busy) {
        PyErr_Format(PyExc_RuntimeError, "%s: another thread is in a call on this Comm; a communicator takes one "
                     "call at a time (give each thread its own Comm, or hold a lock around the calls)", what);
        return -1;
    }
    self->busy = 1;
    return 0;
}

/* After close(), the last of the views and the call in flight frees comm. */
static inline void free_when_done(CommObject *self)
{
    if (self->closed && self->exports == 0 && !self->busy && self->comm) {
        lockstep_comm_free(self->comm);
        self->comm = NULL;
    }
}

static inline void leave(CommObject *self)
{
    self->busy = 0;
    free_when_done(self);
}

/* The end of a call that entered: leave, then None, or rc's exception naming what */
static inline PyObject *left(CommObject *self, int rc, const char *what)
{
    leave(self);
    return rc ? lsp_raise_code(rc, what) : Py_NewRef(Py_None);
}


/* comm_type.c: take this rank's turn in the next call only to refuse it; lsp_refused
 * keeps the error already set and returns NULL */
int lsp_refuse(CommObject *self);
PyObject *lsp_refused(CommObject *self);

/* Run a call (stmt) without the GIL unless it moves at most SHORT_CALL bytes: releasing
 * and taking back the GIL costs more than such a call, and its waits let other threads
 * run anyway (py_cancel). */
#define SHORT_CALL 16384
#define RUN_CALL(bytes, stmt)                                                                                    \
    do {                                                                                                         \
        if ((size_t)(bytes) <= SHORT_CALL) {                                                                     \
            stmt;                                                                                                \
        } else {                                                                                                 \
            Py_BEGIN_ALLOW_THREADS stmt;                                                                         \
            Py_END_ALLOW_THREADS                                                                                 \
        }                                                                                                        \
    } while (0)


/* What a call takes of an object: its memory and, when asked for, its dtype. */
typedef struct {
    void *buf;
    Py_ssize_t len;
    int dt;   /* lockstep_dtype_t with TAKE_DTYPE, else -1 */
    int held; /* view holds a buffer to release */
    Py_buffer view;
} mem_t;

enum { TAKE_WRITE = 1, TAKE_DTYPE = 2 };

/* The package's Python functions for what the C entry points do not take on
 * themselves, set at import (_set_python_paths):
 *   PY_ALLREDUCE  fn(comm, obj, op code) for what is not a buffer and lsp_take() did not
 *                 take (tensor subclasses, tensors that need a version bump or a
 *                 check): obj, or None for "not mine either";
 *   PY_BROADCAST, PY_ALLGATHER, PY_ALLTOALL, PY_REDUCE_SCATTER  fn(comm, *args, **kw), the Comm method
 *                 itself for what the C method does not take (see comm_broadcast). */
enum { PY_ALLREDUCE, PY_BROADCAST, PY_ALLGATHER, PY_ALLTOALL, PY_REDUCE_SCATTER, PY_PATHS };

/* intake.c */
extern PyObject *lsp_python_path[PY_PATHS]; /* the package's paths, set at import */
enum { RECV_GATHER, RECV_SAME, RECV_SCATTER }; /* lsp_new_recv's kinds (recv_shape) */
int lsp_overlap(const void *a, const void *b, Py_ssize_t n);
int lsp_refuse_objects(Py_buffer *view, const char *what);
int lsp_writable_buffer(PyObject *obj, Py_buffer *view, const char *what);
int lsp_dtype_of(const Py_buffer *v);
PyObject *lsp_new_recv(PyObject *send, int kind, int size);
int lsp_take(PyObject *obj, int how, mem_t *m);
void lsp_release_mem(mem_t *m);
PyObject *lsp_to_python(CommObject *self, int which, PyObject *const *args, Py_ssize_t n, PyObject *kwnames);
int lsp_named_args(PyObject *const *args, Py_ssize_t n, PyObject *kwnames, const char *const *names, int nnames,
           PyObject **arg, PyObject **bad);
int lsp_name_code(PyObject *obj, const char *const *names, int n, int absent);
int lsp_op_code(PyObject *op);
int lsp_intern_attrs(void);
PyObject *lsp_mod_set_torch(PyObject *m, PyObject *args);
PyObject *lsp_mod_set_numpy(PyObject *m, PyObject *args);
PyObject *lsp_mod_set_python_paths(PyObject *m, PyObject *args);
PyObject *lsp_mod_recv_shape(PyObject *m, PyObject *args);
extern const char *const lsp_op_names[3], *const lsp_order_names[4], *const lsp_xfer_names[2],
    *const lsp_policy_names[4], *const lsp_mode_names[5];

/* calls.c: the Comm methods */
PyObject *comm_allreduce_ptr(CommObject *self, PyObject *const *args, Py_ssize_t n);
PyObject *comm_reduce_scatter_ptr(CommObject *self, PyObject *const *args, Py_ssize_t n);
PyObject *comm_allreduce(CommObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kwnames);
PyObject *comm_try_allreduce(CommObject *self, PyObject *const *args, Py_ssize_t n);
PyObject *comm_broadcast_buf(CommObject *self, PyObject *args);
PyObject *comm_allgather_buf(CommObject *self, PyObject *args);
PyObject *comm_alltoall_buf(CommObject *self, PyObject *args);
PyObject *comm_broadcast(CommObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kwnames);
PyObject *comm_allgather(CommObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kwnames);
PyObject *comm_alltoall(CommObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kwnames);
PyObject *comm_reduce_scatter(CommObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kwnames);
PyObject *comm_broadcast_ptr(CommObject *self, PyObject *const *args, Py_ssize_t n);
PyObject *comm_allgather_ptr(CommObject *self, PyObject *const *args, Py_ssize_t n);
PyObject *comm_alltoall_ptr(CommObject *self, PyObject *const *args, Py_ssize_t n);
PyObject *comm_barrier(CommObject *self, PyObject *unused);
PyObject *comm_tag(CommObject *self, PyObject *arg);
PyObject *comm_peers(CommObject *self, PyObject *arg);
PyObject *comm_bench_call(CommObject *self, PyObject *args);

#endif
