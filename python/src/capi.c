/* The capsule lockstep._lockstep._C_API (capi.h): the Comm type's call rules and the
 * library's calls, for extensions that call lockstep without Python in between. */
#include "module.h"
#include "../lockstep/csrc/capi.h"
#include "op_checks.h"

_Static_assert(LSP_CHECK_MSG_BYTES == LSP_CHECK_MSG, "one size for the checks' messages");

static int capi_enter(PyObject *obj, const char *what, lockstep_comm_t **comm)
{
    if (enter((CommObject *)obj, what) != 0)
        return -1;
    *comm = ((CommObject *)obj)->comm;
    return 0;
}

static void capi_leave(PyObject *obj)
{
    leave((CommObject *)obj);
}

static void capi_refuse(PyObject *obj)
{
    lsp_refused((CommObject *)obj);
}

static void capi_raise_code(int rc, const char *what)
{
    lsp_raise_code(rc, what);
}

static int capi_op_code(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(name, lsp_op_names[i]) == 0)
            return i;
    PyErr_Format(PyExc_ValueError, "op must be one of max, min, sum, not '%s'", name);
    return -1;
}

static const lsp_capi capi = {
    LSP_CAPI_VERSION, &lsp_CommType, capi_enter, capi_leave, capi_refuse, capi_raise_code, capi_op_code,
    lockstep_comm_allreduce, lockstep_comm_reduce_scatter, lockstep_comm_alltoall, lockstep_comm_broadcast,
    lockstep_comm_allgather, lockstep_comm_rank, lockstep_comm_size, lsp_check_dim, lsp_check_split,
    lsp_check_root, lsp_no_grad_message, lsp_dtype_message, lsp_unbound_message,
};

int lsp_add_capi(PyObject *m)
{
    PyObject *cap = PyCapsule_New((void *)&capi, LSP_CAPI_NAME, NULL);
    if (!cap)
        return -1;
    if (PyModule_AddObject(m, "_C_API", cap) != 0) { /* steals cap only on success */
        Py_DECREF(cap);
        return -1;
    }
    return 0;
}
