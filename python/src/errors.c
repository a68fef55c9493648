/* The package's exceptions, and lockstep's error codes as them. */
#include "module.h"

PyObject *CommError, *PeerDiedError, *CommTimeoutError, *MismatchError, *CancelledError, *PeerArgumentError;

/* A negative lockstep/errno code as the matching exception; returns NULL. */
PyObject *lsp_raise_code(int rc, const char *what)
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


int lsp_add_errors(PyObject *m)
{
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
        return -1;
    PyModule_AddObject(m, "CommError", Py_NewRef(CommError));
    PyModule_AddObject(m, "PeerDiedError", Py_NewRef(PeerDiedError));
    PyModule_AddObject(m, "CommTimeoutError", Py_NewRef(CommTimeoutError));
    PyModule_AddObject(m, "MismatchError", Py_NewRef(MismatchError));
    PyModule_AddObject(m, "CommCancelledError", Py_NewRef(CancelledError));
    PyModule_AddObject(m, "PeerArgumentError", Py_NewRef(PeerArgumentError));
    return 0;
}
