/* The loader's part of the _lockstep extension (load_module.c). */
#ifndef LOCKSTEP_PY_LOAD_MODULE_H
#define LOCKSTEP_PY_LOAD_MODULE_H
#include <Python.h>
int lockstep_py_add_load(PyObject *m);
#endif
