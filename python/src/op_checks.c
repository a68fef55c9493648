/* The torch ops' argument checks and their messages, in one place for both kernels:
 * the C++ kernels call them through the capsule (lockstep/csrc/capi.h) without the
 * GIL, and raise only when one fails; the Python kernels (and Comm.broadcast's root)
 * through the module's check_* functions below, which raise the same exception with
 * the same message. */
#include "module.h"
#include "op_checks.h"

int lsp_check_dim(int64_t ndim, int64_t dim, const char *op, const char *name, char *msg, size_t len)
{
    if (ndim == 0) {
        snprintf(msg, len, "%s needs a tensor of at least one dimension (use .reshape(1))", op);
        return -1;
    }
    if (dim < -ndim || dim >= ndim) {
        snprintf(msg, len, "%s's %s must be from %lld to %lld for this %lld-dimensional tensor, not %lld", op, name,
                 (long long)-ndim, (long long)(ndim - 1), (long long)ndim, (long long)dim);
        return -1;
    }
    return (int)(dim < 0 ? dim + ndim : dim);
}

int lsp_check_split(int64_t extent, int size, int64_t dim, const char *op, char *msg, size_t len)
{
    if (extent % size == 0)
        return 0;
    snprintf(msg, len,
             "%s splits dimension %lld into %d equal parts, one per rank, but it has %lld elements: pad it to a "
             "multiple of %d",
             op, (long long)dim, size, (long long)extent, size);
    return -1;
}

#define ROOT_MESSAGE "root must be a rank from 0 to %d, not %s"

int lsp_check_root(int64_t root, int size, char *msg, size_t len)
{
    if (root >= 0 && root < size)
        return (int)root;
    char given[24];
    snprintf(given, sizeof given, "%lld", (long long)root);
    snprintf(msg, len, ROOT_MESSAGE, size - 1, given);
    return -1;
}

void lsp_no_grad_message(const char *op, char *msg, size_t len)
{
    size_t n = strlen(op);
    int base = (int)(n && op[n - 1] == '_' ? n - 1 : n);
    snprintf(msg, len,
             "torch.ops.lockstep.%s has no backward (torch.ops.lockstep.%.*s_autograd has one): call it under "
             "torch.no_grad() or torch.inference_mode(), or on a tensor that does not require grad",
             op, base, op);
}

void lsp_dtype_message(const char *what, const char *dtype, char *msg, size_t len)
{
    snprintf(msg, len, "%s supports float32, float16, bfloat16 and int32 tensors, not torch.%s", what, dtype);
}

void lsp_unbound_message(long long handle, char *msg, size_t len)
{
    snprintf(msg, len, "no communicator registered under handle %lld: call lockstep.torch_ops.register(comm)",
             handle);
}

/* ---- the same for the Python kernels: each raises what the C++ kernel raises -------- */

PyObject *lsp_mod_check_dim(PyObject *mod, PyObject *args)
{
    (void)mod;
    long long ndim, dim;
    const char *op, *name = "dim";
    if (!PyArg_ParseTuple(args, "LLs|s", &ndim, &dim, &op, &name))
        return NULL;
    char msg[LSP_CHECK_MSG];
    int d = lsp_check_dim(ndim, dim, op, name, msg, sizeof msg);
    if (d < 0) {
        PyErr_SetString(PyExc_ValueError, msg);
        return NULL;
    }
    return PyLong_FromLong(d);
}

PyObject *lsp_mod_check_split(PyObject *mod, PyObject *args)
{
    (void)mod;
    long long extent, dim;
    int size;
    const char *op;
    if (!PyArg_ParseTuple(args, "LiLs", &extent, &size, &dim, &op))
        return NULL;
    char msg[LSP_CHECK_MSG];
    if (size < 1 || lsp_check_split(extent, size, dim, op, msg, sizeof msg) < 0) {
        PyErr_SetString(PyExc_ValueError, size < 1 ? "size must be at least 1" : msg);
        return NULL;
    }
    Py_RETURN_NONE;
}

PyObject *lsp_mod_check_root(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *obj;
    int size, overflow = 0;
    if (!PyArg_ParseTuple(args, "O!i", &PyLong_Type, &obj, &size))
        return NULL;
    long long root = PyLong_AsLongLongAndOverflow(obj, &overflow);
    char msg[LSP_CHECK_MSG];
    if (overflow) { /* past any rank: the same message, with the number as given */
        PyObject *str = PyObject_Str(obj);
        const char *given = str ? PyUnicode_AsUTF8(str) : NULL;
        if (given)
            snprintf(msg, sizeof msg, ROOT_MESSAGE, size - 1, given);
        Py_XDECREF(str);
        if (given)
            PyErr_SetString(PyExc_ValueError, msg);
        return NULL;
    }
    int r = lsp_check_root(root, size, msg, sizeof msg);
    if (r < 0) {
        PyErr_SetString(PyExc_ValueError, msg);
        return NULL;
    }
    return PyLong_FromLong(r);
}

PyObject *lsp_mod_no_grad_error(PyObject *mod, PyObject *arg)
{
    (void)mod;
    const char *op = PyUnicode_AsUTF8(arg);
    if (!op)
        return NULL;
    char msg[LSP_CHECK_MSG];
    lsp_no_grad_message(op, msg, sizeof msg);
    return PyObject_CallFunction(PyExc_RuntimeError, "s", msg);
}

PyObject *lsp_mod_unbound_error(PyObject *mod, PyObject *arg)
{
    (void)mod;
    long long handle = PyLong_AsLongLong(arg);
    if (handle == -1 && PyErr_Occurred())
        return NULL;
    char msg[LSP_CHECK_MSG];
    lsp_unbound_message(handle, msg, sizeof msg);
    return PyObject_CallFunction(PyExc_ValueError, "s", msg);
}
