/* The loader's part of the _lockstep extension (load_module.c). */
#ifndef LOCKSTEP_PY_LOAD_MODULE_H
#define LOCKSTEP_PY_LOAD_MODULE_H
#include <Python.h>
int lockstep_py_add_load(PyObject *m);
/* lockstep_load_mode_t's names in code order (intake.c) */
extern const char *const lsp_mode_names[5];

/* Python 3.9 (the oldest pyproject.toml accepts) has no Py_NewRef: it came in 3.10 */
#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *lockstep_py_newref(PyObject *o)
{
    Py_INCREF(o);
    return o;
}
#define Py_NewRef lockstep_py_newref
#endif
#endif
