/* The collectives' entry points on a Comm: the fast paths that run the whole call in C
 * for numpy arrays and plain torch tensors, the _ptr entry points the package uses for
 * memory it has checked, and the hand-over to the package's Python paths for the rest. */
#include "module.h"

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
PyObject *comm_allreduce_ptr(CommObject *self, PyObject *const *args, Py_ssize_t n)
{
    if (n != 4) {
        PyErr_SetString(PyExc_TypeError, "allreduce_ptr(address, count, dtype, op)");
        return lsp_refused(self);
    }
    lockstep_comm_t *c = live(self);
    if (!c)
        return NULL;
    void *addr = PyLong_AsVoidPtr(args[0]);
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    long dt = PyLong_AsLong(args[2]), op = PyLong_AsLong(args[3]);
    if (PyErr_Occurred())
        return lsp_refused(self);
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "count must be >= 0");
        return lsp_refused(self);
    }
    return allreduce_bytes(self, c, addr, (size_t)count, (int)dt, (int)op);
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
        return lsp_raise_code(rc, "reduce_scatter");
    Py_RETURN_NONE;
}

/* reduce_scatter_ptr(send address, recv address, count, dtype, op): the package checks
 * the arrays or tensors behind the addresses (Comm.reduce_scatter) */
PyObject *comm_reduce_scatter_ptr(CommObject *self, PyObject *const *args, Py_ssize_t n)
{
    if (n != 5) {
        PyErr_SetString(PyExc_TypeError, "reduce_scatter_ptr(send, recv, count, dtype, op)");
        return lsp_refused(self);
    }
    lockstep_comm_t *c = live(self);
    if (!c)
        return NULL;
    void *send = PyLong_AsVoidPtr(args[0]), *recv = PyLong_AsVoidPtr(args[1]);
    Py_ssize_t count = PyLong_AsSsize_t(args[2]);
    long dt = PyLong_AsLong(args[3]), op = PyLong_AsLong(args[4]);
    if (PyErr_Occurred())
        return lsp_refused(self);
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "count must be >= 0");
        return lsp_refused(self);
    }
    return reduce_scatter_bytes(self, c, send, recv, count, (int)dt, (int)op);
}

/* A call's result as the Comm method's: the buffer written into, or NULL */
static PyObject *returned(PyObject *r, PyObject *buffer)
{
    if (!r)
        return NULL;
    Py_DECREF(r);
    return Py_NewRef(buffer);
}

/* allreduce of obj when lsp_take() takes it (*taken 1): obj, or NULL with the call's
 * error; else *taken 0, nothing done, no exception set. */
static PyObject *allreduce_taken(CommObject *self, lockstep_comm_t *c, PyObject *obj, int op, int *taken)
{
    mem_t m;
    if (!(*taken = lsp_take(obj, TAKE_WRITE | TAKE_DTYPE, &m)))
        return NULL;
    PyObject *r = allreduce_bytes(self, c, m.buf, (size_t)m.len / lockstep_dtype_size((lockstep_dtype_t)m.dt), m.dt,
                                  op);
    lsp_release_mem(&m);
    return returned(r, obj);
}

/* allreduce(buffer, op="sum") -> buffer: in place on what lsp_take() takes (numpy arrays,
 * plain torch tensors); other objects go to its Python path. Called straight from Python (the
 * package binds it on each Comm), so this is the whole per-call path for numpy. */
PyObject *comm_allreduce(CommObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kwnames)
{
    static const char *const names[] = {"buf", "op"};
    PyObject *a[2], *bad;
    if (lsp_named_args(args, n, kwnames, names, 2, a, &bad) != 0 || !a[0]) {
        if (bad)
            PyErr_Format(PyExc_TypeError, "allreduce(buf, op=\"sum\"): unexpected or repeated argument %R", bad);
        else
            PyErr_SetString(PyExc_TypeError, "allreduce(buf, op=\"sum\") takes the buffer and at most an op");
        return lsp_refused(self);
    }
    PyObject *obj = a[0];
    int op = lsp_op_code(a[1]);
    if (op < 0)
        return lsp_refused(self);
    lockstep_comm_t *c = live(self);
    if (!c)
        return NULL;
    int taken;
    PyObject *r = allreduce_taken(self, c, obj, op, &taken);
    if (taken)
        return r;
    if (!PyObject_CheckBuffer(obj) && lsp_python_path[PY_ALLREDUCE]) {
        PyObject *code = PyLong_FromLong(op);
        r = code ? PyObject_CallFunctionObjArgs(lsp_python_path[PY_ALLREDUCE], (PyObject *)self, obj, code, NULL) : NULL;
        Py_XDECREF(code);
        if (r != Py_None)
            return r; /* obj, or NULL with its error */
        Py_DECREF(r);  /* not a tensor either: writable_buffer says what is wrong */
    }
    Py_buffer v; /* what lsp_take() did not take: say why */
    if (lsp_writable_buffer(obj, &v, "allreduce") != 0)
        return lsp_refused(self);
    int dt = lsp_dtype_of(&v);
    PyBuffer_Release(&v);
    if (dt >= 0) /* lsp_take() refused what these accept: not expected */
        PyErr_SetString(PyExc_ValueError, "allreduce could not take this buffer");
    return lsp_refused(self);
}

/* try_allreduce(obj, op code) -> obj, or None when obj is not a buffer or plain tensor
 * that allreduce takes as it is (nothing done, nothing lsp_refused): the torch.distributed
 * back end's common case in one call. */
PyObject *comm_try_allreduce(CommObject *self, PyObject *const *args, Py_ssize_t n)
{
    if (n != 2) {
        PyErr_SetString(PyExc_TypeError, "try_allreduce(obj, op code)");
        return lsp_refused(self);
    }
    long op = PyLong_AsLong(args[1]);
    if (op < 0 || op >= (long)(sizeof lsp_op_names / sizeof *lsp_op_names)) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "try_allreduce's op is a code from 0 to 2 (_lockstep.OPS), not %ld", op);
        return lsp_refused(self);
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
        return lsp_refused(self);
    }
    if (rlen != slen * size) {
        PyErr_Format(PyExc_ValueError, "allgather's recv must hold size * len(send) = %zd bytes, not %zd",
                     slen * size, rlen);
        return lsp_refused(self);
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
                    : lsp_overlap(send, recv, slen) ? "alltoall's recv must not overlap send" : NULL;
    if (why) {
        PyErr_Format(PyExc_ValueError, "%s (size %d, send %zd bytes, recv %zd)", why, size, slen, rlen);
        return lsp_refused(self);
    }
    if (enter(self, "alltoall") != 0)
        return NULL;
    RUN_CALL(slen, rc = lockstep_comm_alltoall(c, send, recv, (size_t)(slen / size)));
    return left(self, rc, "alltoall");
}

PyObject *comm_broadcast_buf(CommObject *self, PyObject *args)
{
    PyObject *obj;
    int root, order = 0, xfer = 0;
    if (!PyArg_ParseTuple(args, "Oi|ii", &obj, &root, &order, &xfer))
        return lsp_refused(self);
    lockstep_comm_t *c = live(self);
    if (!c)
        return NULL;
    Py_buffer v;
    if (lsp_writable_buffer(obj, &v, "broadcast") != 0)
        return lsp_refused(self);
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
    if (lsp_refuse_objects(s, what) != 0)
        return -1;
    snprintf(what, sizeof what, "%s's recv", call);
    if (lsp_writable_buffer(robj, r, what) != 0) {
        PyBuffer_Release(s);
        return -1;
    }
    return 0;
}

PyObject *comm_allgather_buf(CommObject *self, PyObject *args)
{
    PyObject *sobj, *robj;
    int order = 0, xfer = 0;
    if (!PyArg_ParseTuple(args, "OO|ii", &sobj, &robj, &order, &xfer))
        return lsp_refused(self);
    lockstep_comm_t *c = live(self);
    Py_buffer s, r;
    if (!c)
        return NULL;
    if (send_recv_buffers(sobj, robj, &s, &r, "allgather") != 0)
        return lsp_refused(self);
    PyObject *out = allgather_bytes(self, c, s.buf, s.len, r.buf, r.len, order, xfer);
    PyBuffer_Release(&s);
    PyBuffer_Release(&r);
    return out;
}

PyObject *comm_alltoall_buf(CommObject *self, PyObject *args)
{
    PyObject *sobj, *robj;
    if (!PyArg_ParseTuple(args, "OO", &sobj, &robj))
        return lsp_refused(self);
    lockstep_comm_t *c = live(self);
    Py_buffer s, r;
    if (!c)
        return NULL;
    if (send_recv_buffers(sobj, robj, &s, &r, "alltoall") != 0)
        return lsp_refused(self);
    PyObject *out = alltoall_bytes(self, c, s.buf, s.len, r.buf, r.len);
    PyBuffer_Release(&s);
    PyBuffer_Release(&r);
    return out;
}

/* Arguments that do not fit a method's parameters: its Python path raises the
 * TypeError Python gives for them, and this rank refuses the call. */
static PyObject *misfit(CommObject *self, int which, PyObject *const *args, Py_ssize_t n, PyObject *kwnames)
{
    PyObject *r = lsp_to_python(self, which, args, n, kwnames);
    return r ? r : lsp_refused(self);
}

/* The Comm methods themselves, bound on each Comm by the package: what lsp_take() takes
 * (buffers, plain tensors) with plain arguments (an int root in range, order and xfer
 * by name; a recv given, or one new_recv makes) runs here without a Python frame;
 * anything else goes to the Python path with the caller's arguments (other tensors
 * and sends, what to convert or lsp_refuse). */
PyObject *comm_broadcast(CommObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kwnames)
{
    static const char *const names[] = {"buf", "root", "order", "xfer"};
    PyObject *a[4], *bad;
    int root = 0, overflow = 0, order, xfer;
    if (lsp_named_args(args, n, kwnames, names, 4, a, &bad) != 0 || !a[0])
        return misfit(self, PY_BROADCAST, args, n, kwnames);
    if (!live(self))
        return NULL;
    if (a[1]) {
        long v = PyLong_CheckExact(a[1]) ? PyLong_AsLongAndOverflow(a[1], &overflow) : -1;
        if (overflow || v < 0 || v >= lockstep_comm_size(self->comm))
            return lsp_to_python(self, PY_BROADCAST, args, n, kwnames);
        root = (int)v;
    }
    order = lsp_name_code(a[2], lsp_order_names, 4, LOCKSTEP_ORDER_LINEAR);
    xfer = lsp_name_code(a[3], lsp_xfer_names, 2, LOCKSTEP_XFER_PULL);
    if (order < 0 || xfer < 0)
        return lsp_to_python(self, PY_BROADCAST, args, n, kwnames);
    mem_t m;
    if (!lsp_take(a[0], TAKE_WRITE, &m))
        return lsp_to_python(self, PY_BROADCAST, args, n, kwnames);
    PyObject *r = broadcast_bytes(self, self->comm, m.buf, m.len, root, order, xfer);
    lsp_release_mem(&m);
    return returned(r, a[0]);
}

/* allgather and alltoall: send and recv both buffers, order and xfer by name */
static PyObject *send_recv_call(CommObject *self, int which, PyObject *const *args, Py_ssize_t n,
                                PyObject *kwnames)
{
    static const char *const names[] = {"send", "recv", "order", "xfer"};
    PyObject *a[4], *bad;
    if (lsp_named_args(args, n, kwnames, names, which == PY_ALLGATHER ? 4 : 2, a, &bad) != 0 || !a[0])
        return misfit(self, which, args, n, kwnames);
    if (!live(self))
        return NULL;
    int order = 0, xfer = 0;
    if (which == PY_ALLGATHER) {
        order = lsp_name_code(a[2], lsp_order_names, 4, LOCKSTEP_ORDER_LINEAR);
        xfer = lsp_name_code(a[3], lsp_xfer_names, 2, LOCKSTEP_XFER_PULL);
        if (order < 0 || xfer < 0)
            return lsp_to_python(self, which, args, n, kwnames);
    }
    PyObject *made = NULL, *recv = a[1];
    int kind = which == PY_ALLGATHER ? RECV_GATHER : RECV_SAME;
    if ((!recv || recv == Py_None) && !(recv = made = lsp_new_recv(a[0], kind, lockstep_comm_size(self->comm))))
        return lsp_to_python(self, which, args, n, kwnames);
    mem_t s, r;
    int taken = lsp_take(a[0], 0, &s);
    if (taken && !(taken = lsp_take(recv, TAKE_WRITE, &r)))
        lsp_release_mem(&s);
    if (!taken) {
        Py_XDECREF(made);
        return lsp_to_python(self, which, args, n, kwnames);
    }
    PyObject *out = which == PY_ALLGATHER ? allgather_bytes(self, self->comm, s.buf, s.len, r.buf, r.len, order, xfer)
                                          : alltoall_bytes(self, self->comm, s.buf, s.len, r.buf, r.len);
    lsp_release_mem(&s);
    lsp_release_mem(&r);
    out = returned(out, recv);
    Py_XDECREF(made);
    return out;
}

PyObject *comm_allgather(CommObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kwnames)
{
    return send_recv_call(self, PY_ALLGATHER, args, n, kwnames);
}

PyObject *comm_alltoall(CommObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kwnames)
{
    return send_recv_call(self, PY_ALLTOALL, args, n, kwnames);
}

/* reduce_scatter(send, recv=None, op="sum") -> recv: send and recv (given, or made by
 * lsp_new_recv) taken by lsp_take(), of one dtype lockstep reduces, recv writable and one
 * block of send; anything else (other tensors and sends, errors to explain) goes to
 * the Python path. */
PyObject *comm_reduce_scatter(CommObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kwnames)
{
    static const char *const names[] = {"send", "recv", "op"};
    PyObject *a[3], *bad;
    if (lsp_named_args(args, n, kwnames, names, 3, a, &bad) != 0 || !a[0])
        return misfit(self, PY_REDUCE_SCATTER, args, n, kwnames);
    if (!live(self))
        return NULL;
    int op = lsp_name_code(a[2], lsp_op_names, 3, LOCKSTEP_OP_SUM), size = lockstep_comm_size(self->comm), fits = 0;
    PyObject *made = NULL, *recv = a[1], *out = NULL;
    if (op >= 0 && (!recv || recv == Py_None))
        recv = made = lsp_new_recv(a[0], RECV_SCATTER, size);
    mem_t s, r;
    if (op >= 0 && recv && lsp_take(a[0], TAKE_DTYPE, &s)) {
        if (lsp_take(recv, TAKE_WRITE | TAKE_DTYPE, &r)) {
            Py_ssize_t esize = (Py_ssize_t)lockstep_dtype_size((lockstep_dtype_t)s.dt);
            fits = r.dt == s.dt && s.len % (esize * size) == 0 && r.len == s.len / size;
            if (fits)
                out = returned(reduce_scatter_bytes(self, self->comm, s.buf, r.buf, r.len / esize, s.dt, op), recv);
            lsp_release_mem(&r);
        }
        lsp_release_mem(&s);
    }
    Py_XDECREF(made);
    return fits ? out : lsp_to_python(self, PY_REDUCE_SCATTER, args, n, kwnames);
}

/* The _ptr entry points' arguments: n addresses and byte lengths (n pairs), then the
 * ints that follow (root, order, xfer); -1 with an exception (the call lsp_refused). */
static int ptr_args(CommObject *self, PyObject *const *args, Py_ssize_t n, int pairs, int ints, const char *usage,
                    void **addr, Py_ssize_t *len, int *rest)
{
    if (n != 2 * pairs + ints) {
        PyErr_SetString(PyExc_TypeError, usage);
        lsp_refused(self);
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
        lsp_refused(self);
        return -1;
    }
    return 0;
}

PyObject *comm_broadcast_ptr(CommObject *self, PyObject *const *args, Py_ssize_t n)
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

PyObject *comm_allgather_ptr(CommObject *self, PyObject *const *args, Py_ssize_t n)
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

PyObject *comm_alltoall_ptr(CommObject *self, PyObject *const *args, Py_ssize_t n)
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

PyObject *comm_barrier(CommObject *self, PyObject *unused)
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

PyObject *comm_tag(CommObject *self, PyObject *arg)
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

PyObject *comm_peers(CommObject *self, PyObject *arg)
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
        return lsp_raise_code(rc, "peers");
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
PyObject *comm_bench_call(CommObject *self, PyObject *args)
{
    static const char *const calls[] = {"allreduce", "broadcast", "allgather", "alltoall", "reduce_scatter"};
    PyObject *name;
    Py_ssize_t count, iters;
    if (!PyArg_ParseTuple(args, "Unn", &name, &count, &iters))
        return NULL;
    lockstep_comm_t *c = live(self);
    if (!c)
        return NULL;
    int call = lsp_name_code(name, calls, 5, -1);
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
            RUN_CALL(bytes, rc = lockstep_comm_allreduce(c, send, send, n, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM));
            break;
        case 1:
            RUN_CALL(bytes, rc = lockstep_comm_broadcast(c, send, bytes, 0, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL));
            break;
        case 2:
            RUN_CALL(bytes * size, rc = lockstep_comm_allgather(c, send, recv, bytes, LOCKSTEP_ORDER_LINEAR,
                                                                 LOCKSTEP_XFER_PULL));
            break;
        case 3:
            RUN_CALL(bytes, rc = lockstep_comm_alltoall(c, send, recv, bytes / size));
            break;
        default:
            RUN_CALL(bytes, rc = lockstep_comm_reduce_scatter(c, send, recv, n / size, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM));
        }
    }
    uint64_t dt = lockstep_now_ns() - t0;
    leave(self);
    PyMem_Free(send);
    PyMem_Free(recv);
    if (rc)
        return lsp_raise_code(rc, calls[call]);
    return PyFloat_FromDouble((double)dt / (double)iters);
}

