/* lockstep._lockstep — the CPython extension over liblockstep's communicator and
 * loader. Kept thin: argument conversion, buffer checks, and errors mapped to
 * exceptions; module.h says which file holds what. */
#include "module.h"
#include "load_module.h"

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
    int isa = lockstep_reduce_isa();
    if (isa >= 0)
        return PyUnicode_FromString(lockstep_isa_name((lockstep_isa_t)isa));
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
    {"check_dim", lsp_mod_check_dim, METH_VARARGS,
     "check_dim(ndim, dim, op, name='dim') -> dim as an index; ValueError as the torch ops raise it"},
    {"check_split", lsp_mod_check_split, METH_VARARGS,
     "check_split(extent, size, dim, op): ValueError unless extent splits into size equal parts"},
    {"check_root", lsp_mod_check_root, METH_VARARGS, "check_root(root, size) -> root; ValueError past the ranks"},
    {"no_grad_error", lsp_mod_no_grad_error, METH_O, "no_grad_error(op) -> the RuntimeError to raise"},
    {"unbound_error", lsp_mod_unbound_error, METH_O, "unbound_error(handle) -> the ValueError to raise"},
    {"reduce_isa", mod_reduce_isa, METH_NOARGS,
     "reduce_isa() -> 'avx512', 'avx2' or 'base': the reduction kernels' instruction set in this process"},
    {"_set_numpy", lsp_mod_set_numpy, METH_VARARGS, "_set_numpy(ndarray, empty): the calls make recv in C"},
    {"_set_torch", lsp_mod_set_torch, METH_VARARGS,
     "_set_torch(Tensor, (float32, float16, bfloat16, int32)): plain tensors are taken in C"},
    {"recv_shape", lsp_mod_recv_shape, METH_VARARGS,
     "recv_shape(shape, kind, size): the shape of the recv a call makes (0 allgather, 1 alltoall, 2 reduce_scatter)"},
    {"_set_python_paths", lsp_mod_set_python_paths, METH_VARARGS,
     "_set_python_paths(allreduce_other, broadcast, allgather, alltoall, reduce_scatter): the package's paths"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_lockstep", NULL, -1, mod_methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__lockstep(void)
{
    if (PyType_Ready(&lsp_CommType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m)
        return NULL;
    if (lsp_add_errors(m) != 0 || lsp_add_capi(m) != 0)
        return NULL;
    if (lsp_intern_attrs() != 0)
        return NULL;
    Py_INCREF(&lsp_CommType);
    PyModule_AddObject(m, "Comm", (PyObject *)&lsp_CommType);
    PyModule_AddStringConstant(m, "version", lockstep_version());
    PyModule_AddIntConstant(m, "MAX_RANKS", LOCKSTEP_COMM_MAX_RANKS);
    const struct {
        const char *name;
        const char *const *names;
        int n;
    } tables[] = {{"OPS", lsp_op_names, 3},
                  {"ORDERS", lsp_order_names, 4},
                  {"XFERS", lsp_xfer_names, 2},
                  {"WAIT_POLICIES", lsp_policy_names, 4},
                  {"LOAD_MODES", lsp_mode_names, 5}};
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

