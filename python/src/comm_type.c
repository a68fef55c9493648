/* The Comm type: create (params and the cancel callback), close, the shared buffer
 * through the buffer protocol, refusals, the attributes and the method table. */
#include "module.h"

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
                             "kernel_copy", "distance", NULL};
    const char *job;
    int rank, size, policy = 0, sharers = 0, kcopy = 0, distance = LOCKSTEP_DISTANCE_AUTO;
    long long timeout_ms = 60000;
    Py_ssize_t small = 0, chunk = 0, ar_small = 0, buffer = 0, eager = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sii|Linnnninii", kwlist, &job, &rank, &size, &timeout_ms,
                                     &policy, &small, &chunk, &ar_small, &buffer, &sharers, &eager, &kcopy,
                                     &distance))
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
    p.kernel_copy = (lockstep_kernel_copy_t)kcopy;
    p.distance = (lockstep_distance_t)distance;
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
            lsp_raise_code(-errno, "cannot join the job (lockstep_comm_create)");
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

/* A collective this rank rejects before lockstep sees it (a bad buffer or op) still
 * takes its turn, refused (lockstep_comm_refuse), so that the peers' call ends at once
 * with PeerArgumentError instead of at the deadline. Not when the Comm is closed or
 * another thread is in a call (that call is this rank's turn). 0, or -1 when a signal
 * handler raised while the refusal waited (KeyboardInterrupt, set); a failure the
 * refusal met is the next call's error. */
int lsp_refuse(CommObject *self)
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

/* lsp_refuse, keeping the error already set for the caller (unless a signal handler's
 * replaces it); returns NULL */
PyObject *lsp_refused(CommObject *self)
{
#if PY_VERSION_HEX >= 0x030C0000 /* PyErr_Fetch is deprecated from 3.12 */
    PyObject *exc = PyErr_GetRaisedException();
    if (lsp_refuse(self) != 0)
        Py_XDECREF(exc);
    else
        PyErr_SetRaisedException(exc);
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (lsp_refuse(self) != 0) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    } else {
        PyErr_Restore(type, value, tb);
    }
#endif
    return NULL;
}

/* Comm.lsp_refuse(): for the package's own checks (Comm.broadcast...) */
static PyObject *comm_refuse(CommObject *self, PyObject *unused)
{
    (void)unused;
    if (lsp_refuse(self) != 0)
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
    return c ? PyBool_FromLong(lockstep_comm_kernel_copy(c) == 1) : NULL;
}

static PyObject *comm_get_distance(CommObject *self, void *closure)
{
    (void)closure;
    lockstep_comm_t *c = live(self);
    uint32_t ns = 0;
    if (!c)
        return NULL;
    int d = lockstep_comm_distance(c, &ns);
    return Py_BuildValue("(sI)", d == LOCKSTEP_DISTANCE_FAR ? "far" : "close", (unsigned)ns);
}

static PyObject *comm_get_route(CommObject *self, void *closure)
{
    (void)closure;
    static const char *const names[] = {"none", "inline", "small", "chunked", "zero-copy", "kernel-copy", "eager"};
    lockstep_comm_t *c = live(self);
    if (!c)
        return NULL;
    int r = lockstep_comm_route(c);
    return PyUnicode_FromString(r >= 0 && r < (int)(sizeof names / sizeof names[0]) ? names[r] : "none");
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
     "lsp_refuse(): take this rank's turn in the next collective only to refuse it (bad arguments)"},
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
     "whether this rank offers kernel copies (lockstep_comm_kernel_copy)", NULL},
    {"distance", (getter)comm_get_distance, NULL,
     "(\"close\" or \"far\", round trip in ns): the ranks' distance (lockstep_comm_distance)", NULL},
    {"route", (getter)comm_get_route, NULL, "the route this rank's last call took (lockstep_comm_route)", NULL},
    {"closed", (getter)comm_get_closed, NULL, "whether close() was called (or creation failed)", NULL},
    {"busy", (getter)comm_get_busy, NULL, "whether a thread is in a call on this communicator", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject lsp_CommType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "lockstep._lockstep.Comm",
    .tp_basicsize = sizeof(CommObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Comm(job, rank, size, timeout_ms=60000, wait_policy=0, small_bytes=0, chunk_bytes=0, "
              "allreduce_small_bytes=0, buffer_bytes=0, cpu_sharers=0, broadcast_eager_bytes=0, kernel_copy=0, "
              "distance=2)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)comm_init,
    .tp_dealloc = (destructor)comm_dealloc,
    .tp_methods = comm_methods,
    .tp_as_buffer = &comm_as_buffer,
    .tp_getset = comm_getset,
};

