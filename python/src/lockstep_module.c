/* lockstep._lockstep — the CPython extension over liblockstep's communicator.
 * Kept thin: argument conversion, buffer checks, and errors mapped to exceptions.
 * The Python layer (lockstep/__init__.py) adds dtype inference for numpy and torch. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "load_module.h"
#include "lockstep/lockstep.h"

static PyObject *CommError, *PeerDiedError, *CommTimeoutError, *MismatchError, *CancelledError, *PeerArgumentError;

/* A negative lockstep/errno code as the matching exception; returns NULL. */
static PyObject *raise_code(int rc, const char *what)
{
    if (rc == -ECANCELED && PyErr_Occurred())
        return NULL; /* this rank's signal handler raised (KeyboardInterrupt): keep it */
    PyObject *type = CommError;
    if (rc == -LOCKSTEP_EPEERDIED)
        type = PeerDiedError;
    else if (rc == -ETIMEDOUT)
        type = CommTimeoutError;
    else if (rc == -LOCKSTEP_EMISMATCH)
        type = MismatchError;
    else if (rc == -LOCKSTEP_EPEERINVAL) {
        PyErr_Format(PeerArgumentError, "%s: another rank's arguments to this call were invalid (it raised "
                     "ValueError or TypeError there); the call did nothing on any rank and the communicator "
                     "goes on", what);
        return NULL;
    }
    else if (rc == -ECANCELED) {
        PyErr_Format(CancelledError, "%s: a rank abandoned the call (Ctrl-C or another signal); "
                     "the communicator is broken: close it and create a new one", what);
        return NULL;
    }
    else if (rc == -LOCKSTEP_EFORKED) {
        PyErr_Format(CommError, "%s: this Comm was created before os.fork() (or multiprocessing's fork): its "
                     "rank belongs to the parent process; create a new Comm, with a job of its own, in the child",
                     what);
        return NULL;
    }
    else if (rc == -EINVAL)
        type = PyExc_ValueError;
    else if (rc == -ENOMEM)
        type = PyExc_MemoryError;
    PyErr_Format(type, "%s: %s", what, lockstep_strerror(rc));
    return NULL;
}

typedef struct {
    PyObject_HEAD
    lockstep_comm_t *comm;
    int closed;            /* close() was called; comm is freed once exports drop to 0 */
    Py_ssize_t exports;    /* live views of the shared buffer (buffer protocol) */
    int busy;              /* a thread is in a call on comm (see enter) */
} CommObject;

/* params.cancel: run the signal handlers (Ctrl-C's KeyboardInterrupt) while a call
 * waits; a handler that raises abandons the call. A call made holding the GIL (short
 * ones) also lets other threads run here, so a stuck peer cannot starve them. Called
 * every 10 ms of waiting, never on the fast path. */
static int py_cancel(void *arg)
{
    (void)arg;
    int stop;
    if (PyGILState_Check()) {
        Py_BEGIN_ALLOW_THREADS
        Py_END_ALLOW_THREADS
        stop = PyErr_CheckSignals() < 0;
    } else {
        PyGILState_STATE g = PyGILState_Ensure();
        stop = PyErr_CheckSignals() < 0;
        PyGILState_Release(g);
    }
    return stop;
}

static int comm_init(CommObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"job", "rank", "size", "timeout_ms", "wait_policy", "small_bytes", "chunk_bytes",
                             "allreduce_small_bytes", "buffer_bytes", "cpu_sharers", "broadcast_eager_bytes",
                             NULL};
    const char *job;
    int rank, size, policy = 0, sharers = 0;
    long long timeout_ms = 60000;
    Py_ssize_t small = 0, chunk = 0, ar_small = 0, buffer = 0, eager = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sii|Linnnnin", kwlist, &job, &rank, &size, &timeout_ms,
                                     &policy, &small, &chunk, &ar_small, &buffer, &sharers, &eager))
        return -1;
    if (self->comm) {
        PyErr_SetString(PyExc_RuntimeError, "Comm.__init__ called twice");
        return -1;
    }
    lockstep_comm_params_t p = lockstep_comm_params_default();
    if (strlen(job) == 0 || strlen(job) > LOCKSTEP_COMM_JOB_MAX) {
        PyErr_Format(PyExc_ValueError, "job must be 1 to %d characters", LOCKSTEP_COMM_JOB_MAX);
        return -1;
    }
    if (timeout_ms < 0 || timeout_ms > (long long)UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "timeout_ms must be 0 (no deadline) to %lu (49.7 days), not %lld",
                     (unsigned long)UINT32_MAX, timeout_ms);
        return -1;
    }
    if (small < 0 || chunk < 0 || ar_small < 0 || buffer < 0 || eager < 0) { /* 0 keeps the default */
        PyErr_SetString(PyExc_ValueError, "small_bytes, chunk_bytes, allreduce_small_bytes, buffer_bytes and "
                                          "broadcast_eager_bytes must not be negative");
        return -1;
    }
    snprintf(p.job, sizeof p.job, "%s", job);
    p.rank = rank;
    p.size = size;
    p.timeout_ms = (uint32_t)timeout_ms;
    p.wait_policy = (lockstep_wait_policy_t)policy;
    if (small)
        p.small_bytes = (size_t)small;
    if (chunk)
        p.chunk_bytes = (size_t)chunk;
    if (ar_small)
        p.allreduce_small_bytes = (size_t)ar_small;
    p.buffer_bytes = (size_t)buffer;
    p.cpu_sharers = sharers;
    p.broadcast_eager_bytes = (size_t)eager;
    p.cancel = py_cancel;
    char why[160]; /* the job's length is checked above: p.job would hide it */
    if (lockstep_comm_params_check(&p, why, sizeof why)) {
        PyErr_SetString(PyExc_ValueError, why);
        return -1;
    }
    lockstep_comm_t *c;
    Py_BEGIN_ALLOW_THREADS
    c = lockstep_comm_create(&p);
    Py_END_ALLOW_THREADS
    if (!c) {
        if (errno == ENOSPC)
            PyErr_Format(CommError, "cannot join the job: /dev/shm has no room for the shared segment "
                         "(buffer_bytes and 2 x (small_bytes + chunk_bytes) per rank): lower buffer_bytes, "
                         "or give /dev/shm more space (docker run --shm-size=...)");
        else if (errno == EEXIST)
            PyErr_Format(CommError, "cannot create the job '%s': a live job of that name already runs on this "
                         "machine; give jobs that run at the same time different names (LOCKSTEP_JOB, or "
                         "torchrun's MASTER_PORT)", job);
        else if (errno == EBUSY)
            PyErr_Format(CommError, "cannot join the job '%s' as rank %d: another process already holds that "
                         "rank (the same rank given twice, or two jobs started under one name)", job, rank);
        else if (errno == ETIMEDOUT)
            PyErr_Format(CommTimeoutError, "cannot join the job '%s': not all of its %d ranks came within the "
                         "timeout (%lld ms); start every rank, with the same job name and size", job, size,
                         timeout_ms);
        else if (errno == EPROTO)
            PyErr_Format(CommError, "cannot join the job '%s': its rank 0 runs another version of lockstep, "
                         "whose shared memory this one cannot read; run every rank with the same build", job);
        else if (errno == LOCKSTEP_EMISMATCH)
            PyErr_Format(MismatchError, "cannot join the job '%s': its ranks were created with different "
                         "size, small_bytes, chunk_bytes, allreduce_small_bytes, buffer_bytes or "
                         "broadcast_eager_bytes; pass the same values on every rank", job);
        else
            raise_code(-errno, "cannot join the job (lockstep_comm_create)");
        return -1;
    }
    self->comm = c;
    return 0;
}

static void comm_dealloc(CommObject *self)
{
    lockstep_comm_free(self->comm); /* no exports left: each holds a reference */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static lockstep_comm_t *live(CommObject *self)
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
static int enter(CommObject *self, const char *what)
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
static void free_when_done(CommObject *self)
{
    if (self->closed && self->exports == 0 && !self->busy && self->comm) {
        lockstep_comm_free(self->comm);
        self->comm = NULL;
    }
}

static void leave(CommObject *self)
{
    self->busy = 0;
    free_when_done(self);
}

/* The end of a call that entered: leave, then None, or rc's exception naming what */
static PyObject *left(CommObject *self, int rc, const char *what)
{
    leave(self);
    return rc ? raise_code(rc, what) : Py_NewRef(Py_None);
}

/* A collective this rank rejects before lockstep sees it (a bad buffer or op) still
 * takes its turn, refused (lockstep_comm_refuse), so that the peers' call ends at once
 * with PeerArgumentError instead of at the deadline. Not when the Comm is closed or
 * another thread is in a call (that call is this rank's turn). 0, or -1 when a signal
 * handler raised while the refusal waited (KeyboardInterrupt, set); a failure the
 * refusal met is the next call's error. */
static int refuse(CommObject *self)
{
    if (!self->comm || self->closed || self->busy)
        return 0;
    int rc;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = lockstep_comm_refuse(self->comm);
    Py_END_ALLOW_THREADS
    leave(self);
    return rc == -ECANCELED && PyErr_Occurred() ? -1 : 0;
}

/* refuse, keeping the error already set for the caller (unless a signal handler's
 * replaces it); returns NULL */
static PyObject *refused(CommObject *self)
{
#if PY_VERSION_HEX >= 0x030C0000 /* PyErr_Fetch is deprecated from 3.12 */
    PyObject *exc = PyErr_GetRaisedException();
    if (refuse(self) != 0)
        Py_XDECREF(exc);
    else
        PyErr_SetRaisedException(exc);
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (refuse(self) != 0) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    } else {
        PyErr_Restore(type, value, tb);
    }
#endif
    return NULL;
}

/* Comm.refuse(): for the package's own checks (Comm.broadcast...) */
static PyObject *comm_refuse(CommObject *self, PyObject *unused)
{
    (void)unused;
    if (refuse(self) != 0)
        return NULL;
    Py_RETURN_NONE;
}

/* The buffer protocol: this rank's shared buffer (params.buffer_bytes), writable bytes.
 * Views keep the mapping alive: close() with views left frees it when the last goes. */
static int comm_getbuffer(CommObject *self, Py_buffer *view, int flags)
{
    lockstep_comm_t *c = live(self);
    if (!c) {
        view->obj = NULL;
        return -1;
    }
    size_t n = 0;
    void *p = lockstep_comm_buffer(c, &n);
    if (!p) {
        view->obj = NULL;
        PyErr_SetString(PyExc_ValueError, "this communicator has no shared buffer: create it with "
                        "buffer_bytes=N (bytes per rank, the same on every rank)");
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)self, p, (Py_ssize_t)n, 0, flags) != 0)
        return -1;
    self->exports++;
    return 0;
}

static void comm_releasebuffer(CommObject *self, Py_buffer *view)
{
    (void)view;
    self->exports--;
    free_when_done(self);
}

static PyBufferProcs comm_as_buffer = {(getbufferproc)comm_getbuffer, (releasebufferproc)comm_releasebuffer};

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

/* The allreduce every entry point ends in: in place on count items of dtype dt at buf */
static PyObject *allreduce_bytes(CommObject *self, lockstep_comm_t *c, void *buf, size_t count, int dt, int op)
{
    int rc;
    if (enter(self, "allreduce") != 0)
        return NULL;
    RUN_CALL(count * lockstep_dtype_size((lockstep_dtype_t)dt),
             rc = lockstep_comm_allreduce(c, buf, buf, count, (lockstep_dtype_t)dt, (lockstep_op_t)op));
    return left(self, rc, "allreduce");
}

/* allreduce_ptr(address, count, dtype, op): the raw path, for torch tensors (bf16). */
static PyObject *comm_allreduce_ptr(CommObject *self, PyObject *const *args, Py_ssize_t n)
{
    if (n != 4) {
        PyErr_SetString(PyExc_TypeError, "allreduce_ptr(address, count, dtype, op)");
        return refused(self);
    }
    lockstep_comm_t *c = live(self);
    if (!c)
        return NULL;
    void *addr = PyLong_AsVoidPtr(args[0]);
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    long dt = PyLong_AsLong(args[2]), op = PyLong_AsLong(args[3]);
    if (PyErr_Occurred())
        return refused(self);
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "count must be >= 0");
        return refused(self);
    }
    return allreduce_bytes(self, c, addr, (size_t)count, (int)dt, (int)op);
}

static int ls_py_overlap(const void *a, const void *b, Py_ssize_t n)
{
    const char *x = a, *y = b;
    return n > 0 && x < y + n && y < x + n;
}

/* reduce_scatter on checked memory: send holds size blocks of count elements of dt,
 * recv one (both entry points end here) */
static PyObject *reduce_scatter_bytes(CommObject *self, lockstep_comm_t *c, const void *send, void *recv,
                                      Py_ssize_t count, int dt, int op)
{
    int rc, size = lockstep_comm_size(c);
    size_t bytes = count <= SHORT_CALL ? (size_t)count * (size_t)size * lockstep_dtype_size((lockstep_dtype_t)dt)
                                       : SIZE_MAX;
    if (enter(self, "reduce_scatter") != 0)
        return NULL;
    RUN_CALL(bytes, rc = lockstep_comm_reduce_scatter(c, send, recv, (size_t)count, (lockstep_dtype_t)dt,
                                                      (lockstep_op_t)op));
    leave(self);
    if (rc == -EINVAL) {
        PyErr_SetString(PyExc_ValueError, "reduce_scatter: recv overlaps send other than as this rank's block");
        return NULL;
    }
    if (rc)
        return raise_code(rc, "reduce_scatter");
    Py_RETURN_NONE;
}

/* reduce_scatter_ptr(send address, recv address, count, dtype, op): the package checks
 * the arrays or tensors behind the addresses (Comm.reduce_scatter) */
static PyObject *comm_reduce_scatter_ptr(CommObject *self, PyObject *const *args, Py_ssize_t n)
{
    if (n != 5) {
        PyErr_SetString(PyExc_TypeError, "reduce_scatter_ptr(send, recv, count, dtype, op)");
        return refused(self);
    }
    lockstep_comm_t *c = live(self);
    if (!c)
        return NULL;
    void *send = PyLong_AsVoidPtr(args[0]), *recv = PyLong_AsVoidPtr(args[1]);
    Py_ssize_t count = PyLong_AsSsize_t(args[2]);
    long dt = PyLong_AsLong(args[3]), op = PyLong_AsLong(args[4]);
    if (PyErr_Occurred())
        return refused(self);
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "count must be >= 0");
        return refused(self);
    }
    return reduce_scatter_bytes(self, c, send, recv, count, (int)dt, (int)op);
}

/* Whether a buffer's items are (or hold) Python objects: format 'O' outside the
 * field names of a struct format ("T{O:x:i:b:}"). Their bytes are pointers, valid only
 * in this process and without the references they stand for: no call moves them. */
static int holds_objects(const Py_buffer *v)
{
    int in_name = 0;
    for (const char *f = v->format; f && *f; f++)
        if (*f == ':')
            in_name = !in_name;
        else if (*f == 'O' && !in_name)
            return 1;
    return 0;
}

/* holds_objects(view): release it, TypeError naming what, -1; else 0 */
static int refuse_objects(Py_buffer *view, const char *what)
{
    if (!holds_objects(view))
        return 0;
    PyBuffer_Release(view);
    PyErr_Format(PyExc_TypeError, "%s: this buffer holds Python objects (numpy dtype object), whose bytes are "
                 "pointers valid only in this process; lockstep moves bytes (convert the objects to numbers, or "
                 "send them pickled)", what);
    return -1;
}

/* The writable C-contiguous buffer of obj, or NULL with ValueError saying what to fix. */
static int writable_buffer(PyObject *obj, Py_buffer *view, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0)
        return refuse_objects(view, what);
    PyErr_Clear();
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s needs a writable buffer; this one is read-only "
                     "(pass a copy, e.g. numpy.array(x))", what);
    } else if (PyObject_CheckBuffer(obj)) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s needs a C-contiguous buffer "
                     "(pass numpy.ascontiguousarray(x) and copy the result back)", what);
    } else {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s needs a buffer (numpy array, bytearray, torch CPU "
                     "tensor), not %.100s", what, Py_TYPE(obj)->tp_name);
    }
    return -1;
}

/* dtype code from a buffer format, or -1 with TypeError */
static int dtype_of(const Py_buffer *v)
{
    const char *f = v->format ? v->format : "B";
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    if (strcmp(f, "f") == 0 && v->itemsize == 4)
        return LOCKSTEP_F32;
    if (strcmp(f, "e") == 0 && v->itemsize == 2)
        return LOCKSTEP_F16;
    if ((strcmp(f, "i") == 0 || strcmp(f, "l") == 0) && v->itemsize == 4)
        return LOCKSTEP_I32;
    if (*f == '>' || *f == '!') {
        PyErr_Format(PyExc_TypeError, "allreduce reduces numbers in this machine's byte order; this "
                     "buffer holds big-endian '%s' items (convert them first: "
                     "x.astype(x.dtype.newbyteorder('=')))", f);
        return -1;
    }
    PyErr_Format(PyExc_TypeError, "allreduce supports float32, float16, bfloat16 and int32; "
                 "this buffer holds '%s' items of %zd bytes", f, v->itemsize);
    return -1;
}

/* The attribute names the calls look up on tensors and arrays, interned at import
 * (intern_attrs). */
static struct {
    PyObject *is_cpu, *requires_grad, *dtype, *is_contiguous, *data_ptr, *nbytes, *shape, *new_empty;
} attr;

static int intern_attrs(void)
{
    static const char *const names[] = {"is_cpu", "requires_grad", "dtype", "is_contiguous", "data_ptr", "nbytes",
                                        "shape", "new_empty"};
    PyObject **slot[] = {&attr.is_cpu, &attr.requires_grad, &attr.dtype, &attr.is_contiguous, &attr.data_ptr,
                         &attr.nbytes, &attr.shape, &attr.new_empty};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!(*slot[i] = PyUnicode_InternFromString(names[i])))
            return -1;
    return 0;
}

/* Plain torch CPU tensors, taken in C as buffers are (torch tensors have no buffer
 * protocol; through the Python path a call costs 0.15-0.4 us more). The package hands
 * over torch's Tensor type and the dtypes lockstep reduces (_set_torch) when a first
 * tensor reaches its Python path, or lockstep.distributed or lockstep.torch_ops is
 * imported. Only the exact Tensor type is taken here: subclasses, other layouts and
 * devices, non-contiguous tensors, a written tensor that requires grad (its version
 * must be bumped) and anything that raises go on to the Python path, which does the
 * same call or says what is wrong. */
static struct {
    PyObject *type, *dtypes[4]; /* dtypes in lockstep_dtype_t's order */
} torch_;

static PyObject *mod_set_torch(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *type, *dtypes;
    if (!PyArg_ParseTuple(args, "O!O!", &PyType_Type, &type, &PyTuple_Type, &dtypes))
        return NULL;
    if (PyTuple_GET_SIZE(dtypes) != 4) {
        PyErr_SetString(PyExc_TypeError, "_set_torch(Tensor, (float32, float16, bfloat16, int32))");
        return NULL;
    }
    for (int i = 0; i < 4; i++)
        Py_XSETREF(torch_.dtypes[i], Py_NewRef(PyTuple_GET_ITEM(dtypes, i)));
    Py_XSETREF(torch_.type, Py_NewRef(type));
    Py_RETURN_NONE;
}

/* numpy's ndarray type and numpy.empty, from the package at import (_set_numpy), for
 * the recv new_recv makes */
static PyObject *np_ndarray, *np_empty;

static PyObject *mod_set_numpy(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *type, *empty;
    if (!PyArg_ParseTuple(args, "O!O", &PyType_Type, &type, &empty))
        return NULL;
    Py_XSETREF(np_ndarray, Py_NewRef(type));
    Py_XSETREF(np_empty, Py_NewRef(empty));
    Py_RETURN_NONE;
}

enum { RECV_GATHER, RECV_SAME, RECV_SCATTER };

/* The shape of the recv a call makes for send's shape, as the Python paths make it
 * (_new_like, _rs_recv): RECV_GATHER size blocks of send's shape (allgather),
 * RECV_SAME send's shape (alltoall), RECV_SCATTER the first dimension divided by size
 * when it divides, else 1-D of the element count divided by size (reduce_scatter).
 * NULL with an exception. */
static PyObject *recv_shape(PyObject *shape, int kind, int size)
{
    Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    if (kind == RECV_SAME)
        return Py_NewRef(shape);
    Py_ssize_t first = nd ? PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, 0)) : 0;
    if (first < 0 && PyErr_Occurred())
        return NULL;
    if (kind == RECV_SCATTER && !(nd && first % size == 0)) {
        Py_ssize_t count = 1;
        for (Py_ssize_t i = 0; i < nd; i++) {
            Py_ssize_t d = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
            if (d < 0)
                return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "negative dimension");
            count = d && count > PY_SSIZE_T_MAX / d ? PY_SSIZE_T_MAX : count * d;
        }
        return Py_BuildValue("(n)", count / size);
    }
    Py_ssize_t lead = kind == RECV_GATHER;
    PyObject *want = PyTuple_New(nd + lead), *head = PyLong_FromSsize_t(lead ? size : first / size);
    if (!want || !head) {
        Py_XDECREF(want);
        Py_XDECREF(head);
        return NULL;
    }
    PyTuple_SET_ITEM(want, 0, head); /* then shape[1:] (scatter), or all of shape (gather) */
    for (Py_ssize_t k = 1; k < nd + lead; k++)
        PyTuple_SET_ITEM(want, k, Py_NewRef(PyTuple_GET_ITEM(shape, k - lead)));
    return want;
}

/* A new recv for a call on send that was given none, of the shape recv_shape gives
 * and send's dtype: numpy.empty for a numpy array, new_empty for a plain torch tensor.
 * NULL with no exception set for any other send, or when making it fails: the Python
 * path then makes it (or says what is wrong). */
static PyObject *new_recv(PyObject *send, int kind, int size)
{
    PyObject *type = (PyObject *)Py_TYPE(send), *recv = NULL, *want = NULL;
    int numpy = np_ndarray && type == np_ndarray;
    if (!numpy && !(torch_.type && type == torch_.type))
        return NULL;
    PyObject *shape = PyObject_GetAttr(send, attr.shape);
    if (shape && PyTuple_Check(shape) && (want = recv_shape(shape, kind, size)) != NULL) {
        if (numpy) {
            PyObject *dtype = PyObject_GetAttr(send, attr.dtype);
            recv = dtype ? PyObject_CallFunctionObjArgs(np_empty, want, dtype, NULL) : NULL;
            Py_XDECREF(dtype);
        } else {
            recv = PyObject_CallMethodOneArg(send, attr.new_empty, want);
        }
    }
    Py_XDECREF(shape);
    Py_XDECREF(want);
    if (!recv)
        PyErr_Clear();
    return recv;
}

/* What a call takes of an object: its memory and, when asked for, its dtype. */
typedef struct {
    void *buf;
    Py_ssize_t len;
    int dt;   /* lockstep_dtype_t with TAKE_DTYPE, else -1 */
    int held; /* view holds a buffer to release */
    Py_buffer view;
} mem_t;

enum { TAKE_WRITE = 1, TAKE_DTYPE = 2 };

/* getattr(obj, name) is want */
static int attr_is(PyObject *obj, PyObject *name, PyObject *want)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    int is = v == want;
    Py_XDECREF(v);
    return is;
}

/* obj's memory when obj is a plain torch tensor lockstep takes as it is (above): 1, or
 * 0 with no exception set. */
static int tensor_memory(PyObject *obj, int how, mem_t *m)
{
    if (!torch_.type || (PyObject *)Py_TYPE(obj) != torch_.type)
        return 0;
    m->dt = -1;
    PyObject *v = PyObject_GetAttr(obj, attr.dtype);
    for (int i = 0; v && i < 4; i++)
        if (v == torch_.dtypes[i])
            m->dt = i;
    Py_XDECREF(v);
    /* (No layout check: a tensor of another layout, sparse or mkldnn, has no data
     * pointer, and data_ptr() raises.) */
    if (((how & TAKE_DTYPE) && m->dt < 0) || !attr_is(obj, attr.is_cpu, Py_True) ||
        ((how & TAKE_WRITE) && !attr_is(obj, attr.requires_grad, Py_False)))
        goto no;
    v = PyObject_CallMethodNoArgs(obj, attr.is_contiguous);
    int contiguous = v == Py_True;
    Py_XDECREF(v);
    if (!contiguous)
        goto no;
    PyObject *p = PyObject_CallMethodNoArgs(obj, attr.data_ptr), *nb = p ? PyObject_GetAttr(obj, attr.nbytes) : NULL;
    m->buf = nb ? PyLong_AsVoidPtr(p) : NULL;
    m->len = nb ? PyLong_AsSsize_t(nb) : -1;
    Py_XDECREF(p);
    Py_XDECREF(nb);
    if (m->len < 0 || PyErr_Occurred())
        goto no;
    if (!(how & TAKE_DTYPE))
        m->dt = -1;
    m->held = 0;
    return 1;
no:
    PyErr_Clear();
    return 0;
}

/* obj's memory for a call: a C-contiguous buffer (writable with TAKE_WRITE; with
 * TAKE_DTYPE of a dtype lockstep reduces) or a plain torch tensor. 1 (release_mem
 * after), or 0 with no exception set: the call goes to its Python path, which says
 * what is wrong. */
static int take(PyObject *obj, int how, mem_t *m)
{
    if (!PyObject_CheckBuffer(obj))
        return tensor_memory(obj, how, m);
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (how & TAKE_WRITE ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &m->view, flags) != 0) {
        PyErr_Clear();
        return 0;
    }
    if (holds_objects(&m->view)) {
        PyBuffer_Release(&m->view);
        return 0;
    }
    m->dt = how & TAKE_DTYPE ? dtype_of(&m->view) : -1;
    if ((how & TAKE_DTYPE) && m->dt < 0) {
        PyErr_Clear();
        PyBuffer_Release(&m->view);
        return 0;
    }
    m->buf = m->view.buf;
    m->len = m->view.len;
    m->held = 1;
    return 1;
}

static void release_mem(mem_t *m)
{
    if (m->held)
        PyBuffer_Release(&m->view);
}

/* The package's Python functions for what the C entry points do not take on
 * themselves, set at import (_set_python_paths):
 *   PY_ALLREDUCE  fn(comm, obj, op code) for what is not a buffer and take() did not
 *                 take (tensor subclasses, tensors that need a version bump or a
 *                 check): obj, or None for "not mine either";
 *   PY_BROADCAST, PY_ALLGATHER, PY_ALLTOALL, PY_REDUCE_SCATTER  fn(comm, *args, **kw), the Comm method
 *                 itself for what the C method does not take (see comm_broadcast). */
enum { PY_ALLREDUCE, PY_BROADCAST, PY_ALLGATHER, PY_ALLTOALL, PY_REDUCE_SCATTER, PY_PATHS };
static PyObject *python_path[PY_PATHS];

static PyObject *mod_set_python_paths(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *fn[PY_PATHS];
    if (!PyArg_ParseTuple(args, "OOOOO", &fn[0], &fn[1], &fn[2], &fn[3], &fn[4]))
        return NULL;
    for (int i = 0; i < PY_PATHS; i++)
        if (!PyCallable_Check(fn[i])) {
            PyErr_SetString(PyExc_TypeError, "_set_python_paths needs five callables");
            return NULL;
        }
    for (int i = 0; i < PY_PATHS; i++)
        Py_XSETREF(python_path[i], Py_NewRef(fn[i]));
    Py_RETURN_NONE;
}

/* Hand a call, with the caller's own arguments, to its Python path (comm first). */
static PyObject *to_python(CommObject *self, int which, PyObject *const *args, Py_ssize_t n, PyObject *kwnames)
{
    if (!python_path[which]) {
        PyErr_SetString(PyExc_RuntimeError, "lockstep._lockstep's Comm is used through the lockstep package "
                        "(import lockstep; lockstep.Comm)");
        return NULL;
    }
    Py_ssize_t total = n + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    PyObject *local[8], **all = total < 8 ? local : PyMem_New(PyObject *, (size_t)total + 1);
    if (!all)
        return PyErr_NoMemory();
    all[0] = (PyObject *)self;
    if (total)
        memcpy(all + 1, args, (size_t)total * sizeof *args);
    PyObject *r = PyObject_Vectorcall(python_path[which], all, (size_t)n + 1, kwnames);
    if (all != local)
        PyMem_Free(all);
    return r;
}

/* A METH_FASTCALL | METH_KEYWORDS call's arguments by parameter name, positional ones
 * first, into arg[0..nnames) (NULL where not given); 0, or -1 when they do not fit,
 * with *bad the keyword that names no parameter or one already given (else NULL). */
static int named_args(PyObject *const *args, Py_ssize_t n, PyObject *kwnames, const char *const *names, int nnames,
                      PyObject **arg, PyObject **bad)
{
    *bad = NULL;
    if (n > nnames)
        return -1;
    for (int i = 0; i < nnames; i++)
        arg[i] = i < n ? args[i] : NULL;
    for (Py_ssize_t k = 0; kwnames && k < PyTuple_GET_SIZE(kwnames); k++) {
        int i = 0;
        while (i < nnames && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, k), names[i]) != 0)
            i++;
        if (i == nnames || arg[i]) {
            *bad = PyTuple_GET_ITEM(kwnames, k);
            return -1;
        }
        arg[i] = args[n + k];
    }
    return 0;
}

/* obj as the index of its name in names[0..n) (a str), absent when obj is NULL, -1
 * when it names none */
static int name_code(PyObject *obj, const char *const *names, int n, int absent)
{
    if (!obj)
        return absent;
    if (PyUnicode_Check(obj))
        for (int i = 0; i < n; i++)
            if (PyUnicode_CompareWithASCIIString(obj, names[i]) == 0)
                return i;
    return -1;
}

static const char *const op_names[] = {"sum", "max", "min"};                       /* lockstep_op_t */
static const char *const order_names[] = {"linear", "rotated", "random", "topology"}; /* lockstep_order_t */
static const char *const xfer_names[] = {"pull", "push"};                          /* lockstep_xfer_t */
/* named only in Python (the C methods take the codes): exported so the package's names
 * and codes follow these tables */
static const char *const policy_names[] = {"default", "auto", "active", "passive"}; /* lockstep_wait_policy_t */
static const char *const mode_names[] = {"auto", "alias", "copy", "buffered"};      /* lockstep_load_mode_t */
/* each table is the enum in code order */
_Static_assert(LOCKSTEP_SUM == 0 && LOCKSTEP_MAX == 1 && LOCKSTEP_MIN == 2, "op_names");
_Static_assert(LOCKSTEP_ORDER_LINEAR == 0 && LOCKSTEP_ORDER_ROTATED == 1 && LOCKSTEP_ORDER_RANDOM == 2 &&
                   LOCKSTEP_ORDER_TOPOLOGY == 3,
               "order_names");
_Static_assert(LOCKSTEP_PULL == 0 && LOCKSTEP_PUSH == 1, "xfer_names");
_Static_assert(LOCKSTEP_WAIT_DEFAULT == 0 && LOCKSTEP_WAIT_AUTO == 1 && LOCKSTEP_WAIT_ACTIVE == 2 &&
                   LOCKSTEP_WAIT_PASSIVE == 3,
               "policy_names");
_Static_assert(LOCKSTEP_LOAD_AUTO == 0 && LOCKSTEP_LOAD_ALIAS == 1 && LOCKSTEP_LOAD_COPY == 2 &&
                   LOCKSTEP_LOAD_BUFFERED == 3,
               "mode_names");

/* "sum", "max" or "min" as LOCKSTEP_SUM..., or -1 with ValueError */
static int op_code(PyObject *op)
{
    int code = name_code(op, op_names, 3, LOCKSTEP_SUM);
    if (code < 0)
        PyErr_Format(PyExc_ValueError, "op must be one of max, min, sum, not %R", op);
    return code;
}

/* A call's result as the Comm method's: the buffer written into, or NULL */
static PyObject *returned(PyObject *r, PyObject *buffer)
{
    if (!r)
        return NULL;
    Py_DECREF(r);
    return Py_NewRef(buffer);
}

/* allreduce of obj when take() takes it (*taken 1): obj, or NULL with the call's
 * error; else *taken 0, nothing done, no exception set. */
static PyObject *allreduce_taken(CommObject *self, lockstep_comm_t *c, PyObject *obj, int op, int *taken)
{
    mem_t m;
    if (!(*taken = take(obj, TAKE_WRITE | TAKE_DTYPE, &m)))
        return NULL;
    PyObject *r = allreduce_bytes(self, c, m.buf, (size_t)m.len / lockstep_dtype_size((lockstep_dtype_t)m.dt), m.dt,
                                  op);
    release_mem(&m);
    return returned(r, obj);
}

/* allreduce(buffer, op="sum") -> buffer: in place on what take() takes (numpy arrays,
 * plain torch tensors); other objects go to its Python path. Called straight from Python (the
 * package binds it on each Comm), so this is the whole per-call path for numpy. */
static PyObject *comm_allreduce(CommObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kwnames)
{
    static const char *const names[] = {"buf", "op"};
    PyObject *a[2], *bad;
    if (named_args(args, n, kwnames, names, 2, a, &bad) != 0 || !a[0]) {
        if (bad)
            PyErr_Format(PyExc_TypeError, "allreduce(buf, op=\"sum\"): unexpected or repeated argument %R", bad);
        else
            PyErr_SetString(PyExc_TypeError, "allreduce(buf, op=\"sum\") takes the buffer and at most an op");
        return refused(self);
    }
    PyObject *obj = a[0];
    int op = op_code(a[1]);
    if (op < 0)
        return refused(self);
    lockstep_comm_t *c = live(self);
    if (!c)
        return NULL;
    int taken;
    PyObject *r = allreduce_taken(self, c, obj, op, &taken);
    if (taken)
        return r;
    if (!PyObject_CheckBuffer(obj) && python_path[PY_ALLREDUCE]) {
        PyObject *code = PyLong_FromLong(op);
        r = code ? PyObject_CallFunctionObjArgs(python_path[PY_ALLREDUCE], (PyObject *)self, obj, code, NULL) : NULL;
        Py_XDECREF(code);
        if (r != Py_None)
            return r; /* obj, or NULL with its error */
        Py_DECREF(r);  /* not a tensor either: writable_buffer says what is wrong */
    }
    Py_buffer v; /* what take() did not take: say why */
    if (writable_buffer(obj, &v, "allreduce") != 0)
        return refused(self);
    int dt = dtype_of(&v);
    PyBuffer_Release(&v);
    if (dt >= 0) /* take() refused what these accept: not expected */
        PyErr_SetString(PyExc_ValueError, "allreduce could not take this buffer");
    return refused(self);
}

/* try_allreduce(obj, op code) -> obj, or None when obj is not a buffer or plain tensor
 * that allreduce takes as it is (nothing done, nothing refused): the torch.distributed
 * back end's common case in one call. */
static PyObject *comm_try_allreduce(CommObject *self, PyObject *const *args, Py_ssize_t n)
{
    if (n != 2) {
        PyErr_SetString(PyExc_TypeError, "try_allreduce(obj, op code)");
        return refused(self);
    }
    long op = PyLong_AsLong(args[1]);
    if (op < 0 || op >= (long)(sizeof op_names / sizeof *op_names)) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "try_allreduce's op is a code from 0 to 2 (_lockstep.OPS), not %ld", op);
        return refused(self);
    }
    lockstep_comm_t *c = live(self);
    if (!c)
        return NULL;
    int taken;
    PyObject *r = allreduce_taken(self, c, args[0], (int)op, &taken);
    return taken ? r : Py_NewRef(Py_None);
}

/* The calls that move bytes (broadcast, allgather, alltoall) on memory the caller has
 * checked. Besides the Comm methods (below), their Python paths have two entry points,
 * one for buffers (numpy arrays, bytes...) and one for addresses and byte lengths
 * (_ptr: the tensors the methods leave to Python, which the package checks, and which
 * reach memory faster through data_ptr() than through a byte view, 0.13 against 1.75
 * us); all end here. */
static PyObject *broadcast_bytes(CommObject *self, lockstep_comm_t *c, void *buf, Py_ssize_t len, int root,
                                 int order, int xfer)
{
    int rc;
    if (enter(self, "broadcast") != 0)
        return NULL;
    RUN_CALL(len, rc = lockstep_comm_broadcast(c, buf, (size_t)len, root, (lockstep_order_t)order,
                                               (lockstep_xfer_t)xfer));
    return left(self, rc, "broadcast");
}

static PyObject *allgather_bytes(CommObject *self, lockstep_comm_t *c, const void *send, Py_ssize_t slen,
                                 void *recv, Py_ssize_t rlen, int order, int xfer)
{
    int size = lockstep_comm_size(c), rc;
    if (slen > PY_SSIZE_T_MAX / size) {
        PyErr_Format(PyExc_ValueError, "allgather's send (%zd bytes) times %d ranks is past any recv", slen, size);
        return refused(self);
    }
    if (rlen != slen * size) {
        PyErr_Format(PyExc_ValueError, "allgather's recv must hold size * len(send) = %zd bytes, not %zd",
                     slen * size, rlen);
        return refused(self);
    }
    if (enter(self, "allgather") != 0)
        return NULL;
    RUN_CALL(rlen, rc = lockstep_comm_allgather(c, send, recv, (size_t)slen, (lockstep_order_t)order,
                                                (lockstep_xfer_t)xfer));
    return left(self, rc, "allgather");
}

static PyObject *alltoall_bytes(CommObject *self, lockstep_comm_t *c, const void *send, Py_ssize_t slen,
                                void *recv, Py_ssize_t rlen)
{
    int size = lockstep_comm_size(c), rc;
    const char *why = slen % size ? "alltoall's send must hold size equal blocks"
                    : rlen != slen ? "alltoall's recv must hold as many bytes as send"
                    : ls_py_overlap(send, recv, slen) ? "alltoall's recv must not overlap send" : NULL;
    if (why) {
        PyErr_Format(PyExc_ValueError, "%s (size %d, send %zd bytes, recv %zd)", why, size, slen, rlen);
        return refused(self);
    }
    if (enter(self, "alltoall") != 0)
        return NULL;
    RUN_CALL(slen, rc = lockstep_comm_alltoall(c, send, recv, (size_t)(slen / size)));
    return left(self, rc, "alltoall");
}

static PyObject *comm_broadcast_buf(CommObject *self, PyObject *args)
{
    PyObject *obj;
    int root, order = 0, xfer = 0;
    if (!PyArg_ParseTuple(args, "Oi|ii", &obj, &root, &order, &xfer))
        return refused(self);
    lockstep_comm_t *c = live(self);
    if (!c)
        return NULL;
    Py_buffer v;
    if (writable_buffer(obj, &v, "broadcast") != 0)
        return refused(self);
    PyObject *r = broadcast_bytes(self, c, v.buf, v.len, root, order, xfer);
    PyBuffer_Release(&v);
    return r;
}

/* call's send (any C-contiguous buffer) and recv (writable too), or -1 with ValueError
 * or TypeError naming call and the argument to fix (nothing held then) */
static int send_recv_buffers(PyObject *sobj, PyObject *robj, Py_buffer *s, Py_buffer *r, const char *call)
{
    char what[64];
    if (PyObject_GetBuffer(sobj, s, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s's send must be a C-contiguous buffer", call);
        return -1;
    }
    snprintf(what, sizeof what, "%s's send", call);
    if (refuse_objects(s, what) != 0)
        return -1;
    snprintf(what, sizeof what, "%s's recv", call);
    if (writable_buffer(robj, r, what) != 0) {
        PyBuffer_Release(s);
        return -1;
    }
    return 0;
}

static PyObject *comm_allgather_buf(CommObject *self, PyObject *args)
{
    PyObject *sobj, *robj;
    int order = 0, xfer = 0;
    if (!PyArg_ParseTuple(args, "OO|ii", &sobj, &robj, &order, &xfer))
        return refused(self);
    lockstep_comm_t *c = live(self);
    Py_buffer s, r;
    if (!c)
        return NULL;
    if (send_recv_buffers(sobj, robj, &s, &r, "allgather") != 0)
        return refused(self);
    PyObject *out = allgather_bytes(self, c, s.buf, s.len, r.buf, r.len, order, xfer);
    PyBuffer_Release(&s);
    PyBuffer_Release(&r);
    return out;
}

static PyObject *comm_alltoall_buf(CommObject *self, PyObject *args)
{
    PyObject *sobj, *robj;
    if (!PyArg_ParseTuple(args, "OO", &sobj, &robj))
        return refused(self);
    lockstep_comm_t *c = live(self);
    Py_buffer s, r;
    if (!c)
        return NULL;
    if (send_recv_buffers(sobj, robj, &s, &r, "alltoall") != 0)
        return refused(self);
    PyObject *out = alltoall_bytes(self, c, s.buf, s.len, r.buf, r.len);
    PyBuffer_Release(&s);
    PyBuffer_Release(&r);
    return out;
}

/* Arguments that do not fit a method's parameters: its Python path raises the
 * TypeError Python gives for them, and this rank refuses the call. */
static PyObject *misfit(CommObject *self, int which, PyObject *const *args, Py_ssize_t n, PyObject *kwnames)
{
    PyObject *r = to_python(self, which, args, n, kwnames);
    return r ? r : refused(self);
}

/* The Comm methods themselves, bound on each Comm by the package: what take() takes
 * (buffers, plain tensors) with plain arguments (an int root in range, order and xfer
 * by name; a recv given, or one new_recv makes) runs here without a Python frame;
 * anything else goes to the Python path with the caller's arguments (other tensors
 * and sends, what to convert or refuse). */
static PyObject *comm_broadcast(CommObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kwnames)
{
    static const char *const names[] = {"buf", "root", "order", "xfer"};
    PyObject *a[4], *bad;
    int root = 0, overflow = 0, order, xfer;
    if (named_args(args, n, kwnames, names, 4, a, &bad) != 0 || !a[0])
        return misfit(self, PY_BROADCAST, args, n, kwnames);
    if (!live(self))
        return NULL;
    if (a[1]) {
        long v = PyLong_CheckExact(a[1]) ? PyLong_AsLongAndOverflow(a[1], &overflow) : -1;
        if (overflow || v < 0 || v >= lockstep_comm_size(self->comm))
            return to_python(self, PY_BROADCAST, args, n, kwnames);
        root = (int)v;
    }
    order = name_code(a[2], order_names, 4, LOCKSTEP_ORDER_LINEAR);
    xfer = name_code(a[3], xfer_names, 2, LOCKSTEP_PULL);
    if (order < 0 || xfer < 0)
        return to_python(self, PY_BROADCAST, args, n, kwnames);
    mem_t m;
    if (!take(a[0], TAKE_WRITE, &m))
        return to_python(self, PY_BROADCAST, args, n, kwnames);
    PyObject *r = broadcast_bytes(self, self->comm, m.buf, m.len, root, order, xfer);
    release_mem(&m);
    return returned(r, a[0]);
}

/* allgather and alltoall: send and recv both buffers, order and xfer by name */
static PyObject *send_recv_call(CommObject *self, int which, PyObject *const *args, Py_ssize_t n,
                                PyObject *kwnames)
{
    static const char *const names[] = {"send", "recv", "order", "xfer"};
    PyObject *a[4], *bad;
    if (named_args(args, n, kwnames, names, which == PY_ALLGATHER ? 4 : 2, a, &bad) != 0 || !a[0])
        return misfit(self, which, args, n, kwnames);
    if (!live(self))
        return NULL;
    int order = 0, xfer = 0;
    if (which == PY_ALLGATHER) {
        order = name_code(a[2], order_names, 4, LOCKSTEP_ORDER_LINEAR);
        xfer = name_code(a[3], xfer_names, 2, LOCKSTEP_PULL);
        if (order < 0 || xfer < 0)
            return to_python(self, which, args, n, kwnames);
    }
    PyObject *made = NULL, *recv = a[1];
    int kind = which == PY_ALLGATHER ? RECV_GATHER : RECV_SAME;
    if ((!recv || recv == Py_None) && !(recv = made = new_recv(a[0], kind, lockstep_comm_size(self->comm))))
        return to_python(self, which, args, n, kwnames);
    mem_t s, r;
    int taken = take(a[0], 0, &s);
    if (taken && !(taken = take(recv, TAKE_WRITE, &r)))
        release_mem(&s);
    if (!taken) {
        Py_XDECREF(made);
        return to_python(self, which, args, n, kwnames);
    }
    PyObject *out = which == PY_ALLGATHER ? allgather_bytes(self, self->comm, s.buf, s.len, r.buf, r.len, order, xfer)
                                          : alltoall_bytes(self, self->comm, s.buf, s.len, r.buf, r.len);
    release_mem(&s);
    release_mem(&r);
    out = returned(out, recv);
    Py_XDECREF(made);
    return out;
}

static PyObject *comm_allgather(CommObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kwnames)
{
    return send_recv_call(self, PY_ALLGATHER, args, n, kwnames);
}

static PyObject *comm_alltoall(CommObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kwnames)
{
    return send_recv_call(self, PY_ALLTOALL, args, n, kwnames);
}

/* reduce_scatter(send, recv=None, op="sum") -> recv: send and recv (given, or made by
 * new_recv) taken by take(), of one dtype lockstep reduces, recv writable and one
 * block of send; anything else (other tensors and sends, errors to explain) goes to
 * the Python path. */
static PyObject *comm_reduce_scatter(CommObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kwnames)
{
    static const char *const names[] = {"send", "recv", "op"};
    PyObject *a[3], *bad;
    if (named_args(args, n, kwnames, names, 3, a, &bad) != 0 || !a[0])
        return misfit(self, PY_REDUCE_SCATTER, args, n, kwnames);
    if (!live(self))
        return NULL;
    int op = name_code(a[2], op_names, 3, LOCKSTEP_SUM), size = lockstep_comm_size(self->comm), fits = 0;
    PyObject *made = NULL, *recv = a[1], *out = NULL;
    if (op >= 0 && (!recv || recv == Py_None))
        recv = made = new_recv(a[0], RECV_SCATTER, size);
    mem_t s, r;
    if (op >= 0 && recv && take(a[0], TAKE_DTYPE, &s)) {
        if (take(recv, TAKE_WRITE | TAKE_DTYPE, &r)) {
            Py_ssize_t esize = (Py_ssize_t)lockstep_dtype_size((lockstep_dtype_t)s.dt);
            fits = r.dt == s.dt && s.len % (esize * size) == 0 && r.len == s.len / size;
            if (fits)
                out = returned(reduce_scatter_bytes(self, self->comm, s.buf, r.buf, r.len / esize, s.dt, op), recv);
            release_mem(&r);
        }
        release_mem(&s);
    }
    Py_XDECREF(made);
    return fits ? out : to_python(self, PY_REDUCE_SCATTER, args, n, kwnames);
}

/* The _ptr entry points' arguments: n addresses and byte lengths (n pairs), then the
 * ints that follow (root, order, xfer); -1 with an exception (the call refused). */
static int ptr_args(CommObject *self, PyObject *const *args, Py_ssize_t n, int pairs, int ints, const char *usage,
                    void **addr, Py_ssize_t *len, int *rest)
{
    if (n != 2 * pairs + ints) {
        PyErr_SetString(PyExc_TypeError, usage);
        refused(self);
        return -1;
    }
    for (int i = 0; i < pairs && !PyErr_Occurred(); i++) {
        addr[i] = PyLong_AsVoidPtr(args[2 * i]);
        len[i] = PyErr_Occurred() ? 0 : PyLong_AsSsize_t(args[2 * i + 1]);
        if (len[i] < 0 && !PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "%s: byte lengths must be >= 0", usage);
    }
    for (int i = 0; i < ints && !PyErr_Occurred(); i++) {
        long v = PyLong_AsLong(args[2 * pairs + i]);
        if ((v < INT_MIN || v > INT_MAX) && !PyErr_Occurred())
            PyErr_SetString(PyExc_OverflowError, "root, order and xfer must fit an int");
        rest[i] = (int)v;
    }
    if (PyErr_Occurred()) {
        refused(self);
        return -1;
    }
    return 0;
}

static PyObject *comm_broadcast_ptr(CommObject *self, PyObject *const *args, Py_ssize_t n)
{
    void *a[1];
    Py_ssize_t l[1];
    int rest[3];
    lockstep_comm_t *c = live(self);
    if (!c)
        return NULL;
    if (ptr_args(self, args, n, 1, 3, "broadcast_ptr(address, bytes, root, order, xfer)", a, l, rest) != 0)
        return NULL;
    return broadcast_bytes(self, c, a[0], l[0], rest[0], rest[1], rest[2]);
}

static PyObject *comm_allgather_ptr(CommObject *self, PyObject *const *args, Py_ssize_t n)
{
    void *a[2];
    Py_ssize_t l[2];
    int rest[2];
    lockstep_comm_t *c = live(self);
    if (!c)
        return NULL;
    if (ptr_args(self, args, n, 2, 2, "allgather_ptr(send, send bytes, recv, recv bytes, order, xfer)", a, l,
                 rest) != 0)
        return NULL;
    return allgather_bytes(self, c, a[0], l[0], a[1], l[1], rest[0], rest[1]);
}

static PyObject *comm_alltoall_ptr(CommObject *self, PyObject *const *args, Py_ssize_t n)
{
    void *a[2];
    Py_ssize_t l[2];
    lockstep_comm_t *c = live(self);
    if (!c)
        return NULL;
    if (ptr_args(self, args, n, 2, 0, "alltoall_ptr(send, send bytes, recv, recv bytes)", a, l, NULL) != 0)
        return NULL;
    return alltoall_bytes(self, c, a[0], l[0], a[1], l[1]);
}

static PyObject *comm_barrier(CommObject *self, PyObject *unused)
{
    (void)unused;
    lockstep_comm_t *c = live(self);
    if (!c)
        return NULL;
    int rc;
    if (enter(self, "barrier") != 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = lockstep_comm_barrier(c);
    Py_END_ALLOW_THREADS
    return left(self, rc, "barrier");
}

static PyObject *comm_tag(CommObject *self, PyObject *arg)
{
    long tag = PyLong_AsLong(arg);
    if (tag == -1 && PyErr_Occurred())
        return NULL;
    if (tag < 0 || tag > 255) {
        PyErr_Format(PyExc_ValueError, "tag must be 0 to 255, not %ld", tag);
        return NULL;
    }
    if (enter(self, "tag") != 0)
        return NULL;
    return left(self, lockstep_comm_tag(self->comm, (unsigned)tag), "tag");
}

static PyObject *comm_peers(CommObject *self, PyObject *arg)
{
    long order = PyLong_AsLong(arg);
    if (order == -1 && PyErr_Occurred())
        return NULL;
    lockstep_comm_t *c = live(self);
    if (!c)
        return NULL;
    int peers[LOCKSTEP_COMM_MAX_RANKS], n = lockstep_comm_size(c) - 1;
    int rc = lockstep_comm_peers(c, (lockstep_order_t)order, peers);
    if (rc)
        return raise_code(rc, "peers");
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++)
        PyList_SET_ITEM(list, i, PyLong_FromLong(peers[i]));
    return list;
}

/* bench_call(call, count, iters) -> mean ns per C call of call ("allreduce",
 * "broadcast", "allgather", "alltoall" or "reduce_scatter", root 0, f32 sum) on count
 * floats (the Python call's buffer: allgather's send, alltoall's and reduce_scatter's
 * send of size blocks): the reference the Python call's overhead is measured against
 * (lockstep bench comm, python_overhead rows). Every rank must make the same call. */
static PyObject *comm_bench_call(CommObject *self, PyObject *args)
{
    static const char *const calls[] = {"allreduce", "broadcast", "allgather", "alltoall", "reduce_scatter"};
    PyObject *name;
    Py_ssize_t count, iters;
    if (!PyArg_ParseTuple(args, "Unn", &name, &count, &iters))
        return NULL;
    lockstep_comm_t *c = live(self);
    if (!c)
        return NULL;
    int call = name_code(name, calls, 5, -1);
    size_t size = (size_t)lockstep_comm_size(c);
    if (call < 0 || count < 0 || count > (1 << 24) || iters < 1 || (call >= 3 && (size_t)count % size)) {
        PyErr_SetString(PyExc_ValueError, "bench_call needs a call (allreduce, broadcast, allgather, alltoall, "
                        "reduce_scatter), 0 <= count <= 2**24 (alltoall, reduce_scatter: a multiple of the size) "
                        "and iters >= 1");
        return NULL;
    }
    size_t n = (size_t)count, bytes = n * sizeof(float);
    float *send = PyMem_Calloc(n + 1, sizeof(float)), *recv = PyMem_Calloc(n * size + 1, sizeof(float));
    if (!send || !recv) {
        PyMem_Free(send);
        PyMem_Free(recv);
        return PyErr_NoMemory();
    }
    int rc = 0;
    if (enter(self, "bench_call") != 0) {
        PyMem_Free(send);
        PyMem_Free(recv);
        return NULL;
    }
    uint64_t t0 = lockstep_now_ns();
    for (Py_ssize_t i = 0; i < iters && rc == 0; i++) {
        switch (call) { /* as the Python calls do it: the GIL kept for short ones (RUN_CALL) */
        case 0:
            RUN_CALL(bytes, rc = lockstep_comm_allreduce(c, send, send, n, LOCKSTEP_F32, LOCKSTEP_SUM));
            break;
        case 1:
            RUN_CALL(bytes, rc = lockstep_comm_broadcast(c, send, bytes, 0, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PULL));
            break;
        case 2:
            RUN_CALL(bytes * size, rc = lockstep_comm_allgather(c, send, recv, bytes, LOCKSTEP_ORDER_LINEAR,
                                                                 LOCKSTEP_PULL));
            break;
        case 3:
            RUN_CALL(bytes, rc = lockstep_comm_alltoall(c, send, recv, bytes / size));
            break;
        default:
            RUN_CALL(bytes, rc = lockstep_comm_reduce_scatter(c, send, recv, n / size, LOCKSTEP_F32, LOCKSTEP_SUM));
        }
    }
    uint64_t dt = lockstep_now_ns() - t0;
    leave(self);
    PyMem_Free(send);
    PyMem_Free(recv);
    if (rc)
        return raise_code(rc, calls[call]);
    return PyFloat_FromDouble((double)dt / (double)iters);
}

static PyObject *comm_close(CommObject *self, PyObject *unused)
{
    (void)unused;
    self->closed = 1;
    free_when_done(self); /* else the last view's release, or the call in flight, frees it */
    Py_RETURN_NONE;
}

static PyObject *comm_get_rank(CommObject *self, void *closure)
{
    (void)closure;
    lockstep_comm_t *c = live(self);
    return c ? PyLong_FromLong(lockstep_comm_rank(c)) : NULL;
}

static PyObject *comm_get_size(CommObject *self, void *closure)
{
    (void)closure;
    lockstep_comm_t *c = live(self);
    return c ? PyLong_FromLong(lockstep_comm_size(c)) : NULL;
}

static PyObject *comm_get_kernel_copy(CommObject *self, void *closure)
{
    (void)closure;
    lockstep_comm_t *c = live(self);
    return c ? PyUnicode_FromString(lockstep_comm_kernel_copy(c)) : NULL;
}

static PyObject *comm_get_closed(CommObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(!self->comm || self->closed);
}

static PyObject *comm_get_busy(CommObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->busy);
}

static PyMethodDef comm_methods[] = {
    {"allreduce", (PyCFunction)(void (*)(void))comm_allreduce, METH_FASTCALL | METH_KEYWORDS,
     "allreduce(buf, op=\"sum\") -> buf, in place"},
    {"allreduce_ptr", (PyCFunction)(void (*)(void))comm_allreduce_ptr, METH_FASTCALL, "allreduce_ptr(address, count, dtype, op)"},
    {"try_allreduce", (PyCFunction)(void (*)(void))comm_try_allreduce, METH_FASTCALL,
     "try_allreduce(obj, op code) -> obj, or None for what allreduce does not take as it is (nothing done)"},
    {"reduce_scatter", (PyCFunction)(void (*)(void))comm_reduce_scatter, METH_FASTCALL | METH_KEYWORDS,
     "reduce_scatter(send, recv=None, op=\"sum\") -> recv"},
    {"reduce_scatter_ptr", (PyCFunction)(void (*)(void))comm_reduce_scatter_ptr, METH_FASTCALL,
     "reduce_scatter_ptr(send address, recv address, count, dtype, op)"},
    {"broadcast", (PyCFunction)(void (*)(void))comm_broadcast, METH_FASTCALL | METH_KEYWORDS,
     "broadcast(buf, root=0, order=\"linear\", xfer=\"pull\") -> buf"},
    {"allgather", (PyCFunction)(void (*)(void))comm_allgather, METH_FASTCALL | METH_KEYWORDS,
     "allgather(send, recv=None, order=\"linear\", xfer=\"pull\") -> recv"},
    {"alltoall", (PyCFunction)(void (*)(void))comm_alltoall, METH_FASTCALL | METH_KEYWORDS,
     "alltoall(send, recv=None) -> recv"},
    {"broadcast_buf", (PyCFunction)comm_broadcast_buf, METH_VARARGS, "broadcast_buf(buffer, root, order code, xfer code)"},
    {"allgather_buf", (PyCFunction)comm_allgather_buf, METH_VARARGS,
     "allgather_buf(send, recv, order code, xfer code)"},
    {"alltoall_buf", (PyCFunction)comm_alltoall_buf, METH_VARARGS, "alltoall_buf(send, recv): block r of send to rank r"},
    {"broadcast_ptr", (PyCFunction)(void (*)(void))comm_broadcast_ptr, METH_FASTCALL,
     "broadcast_ptr(address, bytes, root, order, xfer)"},
    {"allgather_ptr", (PyCFunction)(void (*)(void))comm_allgather_ptr, METH_FASTCALL,
     "allgather_ptr(send, send bytes, recv, recv bytes, order, xfer)"},
    {"alltoall_ptr", (PyCFunction)(void (*)(void))comm_alltoall_ptr, METH_FASTCALL,
     "alltoall_ptr(send, send bytes, recv, recv bytes)"},
    {"barrier", (PyCFunction)comm_barrier, METH_NOARGS, "barrier()"},
    {"refuse", (PyCFunction)comm_refuse, METH_NOARGS,
     "refuse(): take this rank's turn in the next collective only to refuse it (bad arguments)"},
    {"tag", (PyCFunction)comm_tag, METH_O, "tag(t): this rank's later calls carry tag t (0-255), compared as the call is"},
    {"peers", (PyCFunction)comm_peers, METH_O, "peers(order) -> the other ranks, in the order a broadcast visits them"},
    {"bench_call", (PyCFunction)comm_bench_call, METH_VARARGS,
     "bench_call(call, count, iters) -> ns per C call (allreduce, broadcast, allgather, alltoall, reduce_scatter)"},
    {"close", (PyCFunction)comm_close, METH_NOARGS, "close()"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef comm_getset[] = {
    {"rank", (getter)comm_get_rank, NULL, "this process's rank", NULL},
    {"size", (getter)comm_get_size, NULL, "number of ranks", NULL},
    {"kernel_copy", (getter)comm_get_kernel_copy, NULL,
     "'fast', 'slow' or 'off': how large blocks move by single copy (lockstep_comm_kernel_copy)", NULL},
    {"closed", (getter)comm_get_closed, NULL, "whether close() was called (or creation failed)", NULL},
    {"busy", (getter)comm_get_busy, NULL, "whether a thread is in a call on this communicator", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject CommType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "lockstep._lockstep.Comm",
    .tp_basicsize = sizeof(CommObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Comm(job, rank, size, timeout_ms=60000, wait_policy=0, small_bytes=0, chunk_bytes=0, "
              "allreduce_small_bytes=0, buffer_bytes=0, cpu_sharers=0, broadcast_eager_bytes=0)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)comm_init,
    .tp_dealloc = (destructor)comm_dealloc,
    .tp_methods = comm_methods,
    .tp_as_buffer = &comm_as_buffer,
    .tp_getset = comm_getset,
};

static PyObject *mod_env_params(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    lockstep_comm_params_t p = lockstep_comm_params_default();
    int rc = lockstep_comm_params_from_env(&p);
    if (rc == -ENOENT) {
        PyErr_SetString(PyExc_RuntimeError, "no launcher variables found: run under "
                        "`python -m lockstep.launch -n N`, torchrun or mpirun, or set LOCAL_RANK "
                        "and LOCAL_WORLD_SIZE");
        return NULL;
    }
    if (rc) {
        PyErr_Format(PyExc_ValueError,
                     "environment variable %s is missing or not valid (a size is 1 to %d, a rank 0 to size - 1)",
                     lockstep_comm_env_error(), LOCKSTEP_COMM_MAX_RANKS);
        return NULL;
    }
    return Py_BuildValue("(sii)", p.job, p.rank, p.size);
}

static PyObject *mod_reduce_isa(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    const char *isa = lockstep_reduce_isa();
    if (isa)
        return PyUnicode_FromString(isa);
    /* the refusal's message is the one the communicator's check gives: only the
     * variable can fail it for a valid one-rank communicator */
    lockstep_comm_params_t p = lockstep_comm_params_default();
    snprintf(p.job, sizeof p.job, "isa");
    p.rank = 0;
    p.size = 1;
    char msg[256];
    lockstep_comm_params_check(&p, msg, sizeof msg);
    PyErr_SetString(PyExc_ValueError, msg);
    return NULL;
}

/* names[0..n) as a tuple, for the package's tables (index = code); NULL on failure */
static PyObject *names_tuple(const char *const *names, int n)
{
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) {
        PyObject *name = PyUnicode_FromString(names[i]);
        if (!name) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, name);
    }
    return t;
}

static PyMethodDef mod_methods[] = {
    {"env_params", mod_env_params, METH_NOARGS, "(job, rank, size) from the launcher's variables"},
    {"reduce_isa", mod_reduce_isa, METH_NOARGS,
     "reduce_isa() -> 'avx512', 'avx2' or 'base': the reduction kernels' instruction set in this process"},
    {"_set_numpy", mod_set_numpy, METH_VARARGS, "_set_numpy(ndarray, empty): the calls make recv in C"},
    {"_set_torch", mod_set_torch, METH_VARARGS,
     "_set_torch(Tensor, (float32, float16, bfloat16, int32)): plain tensors are taken in C"},
    {"_set_python_paths", mod_set_python_paths, METH_VARARGS,
     "_set_python_paths(allreduce_other, broadcast, allgather, alltoall, reduce_scatter): the package's paths"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_lockstep", NULL, -1, mod_methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__lockstep(void)
{
    if (PyType_Ready(&CommType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m)
        return NULL;
    CommError = PyErr_NewExceptionWithDoc("lockstep.CommError", "a collective call failed", PyExc_RuntimeError, NULL);
    PeerDiedError = PyErr_NewExceptionWithDoc("lockstep.PeerDiedError", "a peer process died", CommError, NULL);
    PyObject *tbases = PyTuple_Pack(2, CommError, PyExc_TimeoutError);
    CommTimeoutError = PyErr_NewExceptionWithDoc("lockstep.CommTimeoutError", "a peer missed the deadline", tbases, NULL);
    Py_XDECREF(tbases);
    MismatchError = PyErr_NewExceptionWithDoc("lockstep.MismatchError", "ranks called different collectives", CommError, NULL);
    CancelledError = PyErr_NewExceptionWithDoc("lockstep.CommCancelledError", "a rank abandoned a call (a signal)",
                                               CommError, NULL);
    PeerArgumentError = PyErr_NewExceptionWithDoc(
        "lockstep.PeerArgumentError",
        "another rank's arguments to this call were invalid: the call did nothing, the communicator goes on",
        CommError, NULL);
    if (!CommError || !PeerDiedError || !CommTimeoutError || !MismatchError || !CancelledError || !PeerArgumentError)
        return NULL;
    if (intern_attrs() != 0)
        return NULL;
    Py_INCREF(&CommType);
    PyModule_AddObject(m, "Comm", (PyObject *)&CommType);
    PyModule_AddObject(m, "CommError", Py_NewRef(CommError));
    PyModule_AddObject(m, "PeerDiedError", Py_NewRef(PeerDiedError));
    PyModule_AddObject(m, "CommTimeoutError", Py_NewRef(CommTimeoutError));
    PyModule_AddObject(m, "MismatchError", Py_NewRef(MismatchError));
    PyModule_AddObject(m, "CommCancelledError", Py_NewRef(CancelledError));
    PyModule_AddObject(m, "PeerArgumentError", Py_NewRef(PeerArgumentError));
    PyModule_AddStringConstant(m, "version", lockstep_version());
    PyModule_AddIntConstant(m, "MAX_RANKS", LOCKSTEP_COMM_MAX_RANKS);
    const struct {
        const char *name;
        const char *const *names;
        int n;
    } tables[] = {{"OPS", op_names, 3},
                  {"ORDERS", order_names, 4},
                  {"XFERS", xfer_names, 2},
                  {"WAIT_POLICIES", policy_names, 4},
                  {"LOAD_MODES", mode_names, 4}};
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
        PyObject *t = names_tuple(tables[i].names, tables[i].n);
        if (!t || PyModule_AddObject(m, tables[i].name, t) != 0) { /* steals t only on success */
            Py_XDECREF(t);
            Py_DECREF(m);
            return NULL;
        }
    }
    if (lockstep_py_add_load(m) != 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
