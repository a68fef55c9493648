/* What a call takes of its arguments: keyword arguments and names (op, order, xfer),
 * buffers (numpy arrays, torch CPU tensors, anything with the buffer protocol), the
 * shape of a recv a call makes, and the package's Python paths for the rest. */
#include "module.h"

int lsp_overlap(const void *a, const void *b, Py_ssize_t n)
{
    const char *x = a, *y = b;
    return n > 0 && x < y + n && y < x + n;
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
int lsp_refuse_objects(Py_buffer *view, const char *what)
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
int lsp_writable_buffer(PyObject *obj, Py_buffer *view, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0)
        return lsp_refuse_objects(view, what);
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
int lsp_dtype_of(const Py_buffer *v)
{
    const char *f = v->format ? v->format : "B";
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    if (strcmp(f, "f") == 0 && v->itemsize == 4)
        return LOCKSTEP_DTYPE_F32;
    if (strcmp(f, "e") == 0 && v->itemsize == 2)
        return LOCKSTEP_DTYPE_F16;
    if ((strcmp(f, "i") == 0 || strcmp(f, "l") == 0) && v->itemsize == 4)
        return LOCKSTEP_DTYPE_I32;
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
 * (lsp_intern_attrs). */
static struct {
    PyObject *is_cpu, *requires_grad, *dtype, *is_contiguous, *data_ptr, *nbytes, *shape, *new_empty;
} attr;

int lsp_intern_attrs(void)
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

PyObject *lsp_mod_set_torch(PyObject *m, PyObject *args)
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

PyObject *lsp_mod_set_numpy(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *type, *empty;
    if (!PyArg_ParseTuple(args, "O!O", &PyType_Type, &type, &empty))
        return NULL;
    Py_XSETREF(np_ndarray, Py_NewRef(type));
    Py_XSETREF(np_empty, Py_NewRef(empty));
    Py_RETURN_NONE;
}


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

/* _lockstep.recv_shape(shape, kind, size): the rule above, for the package's Python
 * paths, so that C and Python make recvs of one shape */
PyObject *lsp_mod_recv_shape(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *shape;
    int kind, size;
    if (!PyArg_ParseTuple(args, "O!ii", &PyTuple_Type, &shape, &kind, &size))
        return NULL;
    if (kind < RECV_GATHER || kind > RECV_SCATTER || size < 1) {
        PyErr_SetString(PyExc_ValueError, "recv_shape(shape, kind 0-2, size >= 1)");
        return NULL;
    }
    return recv_shape(shape, kind, size);
}

/* A new recv for a call on send that was given none, of the shape recv_shape gives
 * and send's dtype: numpy.empty for a numpy array, new_empty for a plain torch tensor.
 * NULL with no exception set for any other send, or when making it fails: the Python
 * path then makes it (or says what is wrong). */
PyObject *lsp_new_recv(PyObject *send, int kind, int size)
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
int lsp_take(PyObject *obj, int how, mem_t *m)
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
    m->dt = how & TAKE_DTYPE ? lsp_dtype_of(&m->view) : -1;
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

void lsp_release_mem(mem_t *m)
{
    if (m->held)
        PyBuffer_Release(&m->view);
}

PyObject *lsp_python_path[PY_PATHS];

PyObject *lsp_mod_set_python_paths(PyObject *m, PyObject *args)
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
        Py_XSETREF(lsp_python_path[i], Py_NewRef(fn[i]));
    Py_RETURN_NONE;
}

/* Hand a call, with the caller's own arguments, to its Python path (comm first). */
PyObject *lsp_to_python(CommObject *self, int which, PyObject *const *args, Py_ssize_t n, PyObject *kwnames)
{
    if (!lsp_python_path[which]) {
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
    PyObject *r = PyObject_Vectorcall(lsp_python_path[which], all, (size_t)n + 1, kwnames);
    if (all != local)
        PyMem_Free(all);
    return r;
}

/* A METH_FASTCALL | METH_KEYWORDS call's arguments by parameter name, positional ones
 * first, into arg[0..nnames) (NULL where not given); 0, or -1 when they do not fit,
 * with *bad the keyword that names no parameter or one already given (else NULL). */
int lsp_named_args(PyObject *const *args, Py_ssize_t n, PyObject *kwnames, const char *const *names, int nnames,
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
int lsp_name_code(PyObject *obj, const char *const *names, int n, int absent)
{
    if (!obj)
        return absent;
    if (PyUnicode_Check(obj))
        for (int i = 0; i < n; i++)
            if (PyUnicode_CompareWithASCIIString(obj, names[i]) == 0)
                return i;
    return -1;
}

const char *const lsp_op_names[] = {"sum", "max", "min"};                       /* lockstep_op_t */
const char *const lsp_order_names[] = {"linear", "rotated", "random", "topology"}; /* lockstep_order_t */
const char *const lsp_xfer_names[] = {"pull", "push"};                          /* lockstep_xfer_t */
/* named only in Python (the C methods take the codes): exported so the package's names
 * and codes follow these tables */
const char *const lsp_policy_names[] = {"default", "auto", "active", "passive"}; /* lockstep_wait_policy_t */
const char *const lsp_mode_names[] = {"auto", "alias", "copy", "buffered", "map"}; /* lockstep_load_mode_t */
/* each table is the enum in code order */
_Static_assert(LOCKSTEP_OP_SUM == 0 && LOCKSTEP_OP_MAX == 1 && LOCKSTEP_OP_MIN == 2, "lsp_op_names");
_Static_assert(LOCKSTEP_ORDER_LINEAR == 0 && LOCKSTEP_ORDER_ROTATED == 1 && LOCKSTEP_ORDER_RANDOM == 2 &&
                   LOCKSTEP_ORDER_TOPOLOGY == 3,
               "lsp_order_names");
_Static_assert(LOCKSTEP_XFER_PULL == 0 && LOCKSTEP_XFER_PUSH == 1, "lsp_xfer_names");
_Static_assert(LOCKSTEP_WAIT_DEFAULT == 0 && LOCKSTEP_WAIT_AUTO == 1 && LOCKSTEP_WAIT_ACTIVE == 2 &&
                   LOCKSTEP_WAIT_PASSIVE == 3,
               "lsp_policy_names");
_Static_assert(LOCKSTEP_LOAD_AUTO == 0 && LOCKSTEP_LOAD_ALIAS == 1 && LOCKSTEP_LOAD_COPY == 2 &&
                   LOCKSTEP_LOAD_BUFFERED == 3 && LOCKSTEP_LOAD_MAP == 4,
               "lsp_mode_names");

/* "sum", "max" or "min" as LOCKSTEP_OP_SUM..., or -1 with ValueError */
int lsp_op_code(PyObject *op)
{
    int code = lsp_name_code(op, lsp_op_names, 3, LOCKSTEP_OP_SUM);
    if (code < 0)
        PyErr_Format(PyExc_ValueError, "op must be one of max, min, sum, not %R", op);
    return code;
}

