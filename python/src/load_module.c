/* _lockstep.load: the loader for Python. Returns a Loaded object that owns the
 * lockstep_loaded_t and exports its region through the buffer protocol (read-only in
 * alias mode), with the metadata, the tensor table and the stats; lockstep/load.py
 * turns it into numpy arrays that view the region, so no byte is copied twice. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>

#include "lockstep/lockstep.h"
#include "load_module.h"

static PyObject *LoadError, *BadFileError, *LoadCancelled;

typedef struct {
    PyObject_HEAD
    lockstep_loaded_t *l;
    void *base;
    size_t len;
    int readonly;
    PyObject *meta, *stats;
} LoadedObject;

static void loaded_dealloc(LoadedObject *self)
{
    Py_XDECREF(self->meta);
    Py_XDECREF(self->stats);
    lockstep_loaded_free(self->l);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int loaded_getbuffer(LoadedObject *self, Py_buffer *view, int flags)
{
    static char empty;
    return PyBuffer_FillInfo(view, (PyObject *)self, self->base ? self->base : &empty,
                             (Py_ssize_t)self->len, self->readonly, flags);
}

static PyBufferProcs loaded_as_buffer = {(getbufferproc)loaded_getbuffer, NULL};

static PyObject *tensor_item(const lockstep_tensor_info_t *t, unsigned long long offset);

static PyObject *loaded_get(LoadedObject *self, void *which)
{
    return Py_NewRef(which == (void *)0 ? self->meta : self->stats);
}

/* The selected tensors as loaded (the part's dims, the type after any conversion), built
 * at each call: the table is read once, and need not live as long as the memory (its
 * tuples, held, would count toward Python's next garbage collection). */
static PyObject *loaded_tensors(LoadedObject *self, void *unused)
{
    (void)unused;
    PyObject *list = PyList_New(0);
    for (size_t i = 0, nt = lockstep_model_tensor_count(lockstep_loaded_model(self->l)); list && i < nt; i++) {
        unsigned char *d = lockstep_loaded_data(self->l, i);
        if (!d)
            continue; /* not selected */
        PyObject *item = tensor_item(lockstep_loaded_tensor(self->l, i), (unsigned long long)(d - (unsigned char *)self->base));
        if (!item || PyList_Append(list, item))
            Py_CLEAR(list);
        Py_XDECREF(item);
    }
    return list;
}

static PyGetSetDef loaded_getset[] = {
    {"meta", (getter)loaded_get, NULL, "list of (key, value)", (void *)0},
    {"tensors", (getter)loaded_tensors, NULL, "list of (name, type, dims, offset in region, size)", NULL},
    {"stats", (getter)loaded_get, NULL, "dict: bytes, seconds, cpu_seconds, mode, ...", (void *)1},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject LoadedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "lockstep._lockstep.Loaded",
    .tp_basicsize = sizeof(LoadedObject),
    .tp_dealloc = (destructor)loaded_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "tensors loaded by lockstep_load; a buffer over their memory",
    .tp_as_buffer = &loaded_as_buffer,
    .tp_getset = loaded_getset,
};

/* ---- metadata values to Python -------------------------------------------------------- */

static PyObject *scalar(uint32_t type, const unsigned char *p)
{
    switch (type) {
    case LOCKSTEP_GGUF_U8: return PyLong_FromUnsignedLong(p[0]);
    case LOCKSTEP_GGUF_I8: return PyLong_FromLong((int8_t)p[0]);
    case LOCKSTEP_GGUF_BOOL: return PyBool_FromLong(p[0] != 0);
    case LOCKSTEP_GGUF_U16: { uint16_t x; memcpy(&x, p, 2); return PyLong_FromUnsignedLong(x); }
    case LOCKSTEP_GGUF_I16: { int16_t x; memcpy(&x, p, 2); return PyLong_FromLong(x); }
    case LOCKSTEP_GGUF_U32: { uint32_t x; memcpy(&x, p, 4); return PyLong_FromUnsignedLong(x); }
    case LOCKSTEP_GGUF_I32: { int32_t x; memcpy(&x, p, 4); return PyLong_FromLong(x); }
    case LOCKSTEP_GGUF_F32: { float x; memcpy(&x, p, 4); return PyFloat_FromDouble(x); }
    case LOCKSTEP_GGUF_U64: { uint64_t x; memcpy(&x, p, 8); return PyLong_FromUnsignedLongLong(x); }
    case LOCKSTEP_GGUF_I64: { int64_t x; memcpy(&x, p, 8); return PyLong_FromLongLong(x); }
    case LOCKSTEP_GGUF_F64: { double x; memcpy(&x, p, 8); return PyFloat_FromDouble(x); }
    }
    PyErr_Format(PyExc_ValueError, "unknown metadata type %u", type);
    return NULL;
}

static PyObject *value(const lockstep_value_t *v)
{
    switch (v->type) {
    case LOCKSTEP_GGUF_STRING:
        return PyUnicode_DecodeUTF8(v->v.s, (Py_ssize_t)v->count, "replace");
    case LOCKSTEP_GGUF_U8: case LOCKSTEP_GGUF_U16: case LOCKSTEP_GGUF_U32: case LOCKSTEP_GGUF_U64:
        return PyLong_FromUnsignedLongLong(v->v.u);
    case LOCKSTEP_GGUF_BOOL:
        return PyBool_FromLong(v->v.u != 0);
    case LOCKSTEP_GGUF_I8: case LOCKSTEP_GGUF_I16: case LOCKSTEP_GGUF_I32: case LOCKSTEP_GGUF_I64:
        return PyLong_FromLongLong(v->v.i);
    case LOCKSTEP_GGUF_F32: case LOCKSTEP_GGUF_F64:
        return PyFloat_FromDouble(v->v.f);
    case LOCKSTEP_GGUF_ARRAY: {
        PyObject *list = PyList_New((Py_ssize_t)v->count);
        if (!list)
            return NULL;
        for (uint64_t i = 0; i < v->count; i++) {
            PyObject *item;
            if (v->elem_type == LOCKSTEP_GGUF_STRING || v->elem_type == LOCKSTEP_GGUF_ARRAY)
                item = value(&v->v.items[i]);
            else
                item = scalar(v->elem_type, (const unsigned char *)v->v.raw + i * (uint64_t)lockstep_gguf_scalar_size(v->elem_type));
            if (!item) {
                Py_DECREF(list);
                return NULL;
            }
            PyList_SET_ITEM(list, (Py_ssize_t)i, item);
        }
        return list;
    }
    }
    PyErr_Format(PyExc_ValueError, "unknown metadata type %u", v->type);
    return NULL;
}

/* [(key, value)] of a parsed file */
static PyObject *meta_list(const lockstep_model_t *md)
{
    PyObject *list = PyList_New(0);
    for (size_t i = 0, nm = lockstep_model_meta_count(md); list && i < nm; i++) {
        const lockstep_meta_t *kv = lockstep_model_meta(md, i);
        PyObject *v = value(&kv->value);
        PyObject *item = v ? Py_BuildValue("(sN)", kv->key, v) : NULL;
        if (!item || PyList_Append(list, item))
            Py_CLEAR(list);
        Py_XDECREF(item);
    }
    return list;
}

/* (name, type name, dims as the file orders them, absolute file offset, bytes) */
static PyObject *tensor_item(const lockstep_tensor_info_t *t, unsigned long long offset)
{
    PyObject *dims = PyTuple_New(t->n_dims);
    if (!dims)
        return NULL;
    for (uint32_t k = 0; k < t->n_dims; k++)
        PyTuple_SET_ITEM(dims, k, PyLong_FromUnsignedLongLong(t->dims[k]));
    return Py_BuildValue("(ssNKK)", t->name, t->type_name, dims, offset, (unsigned long long)t->size);
}

/* A shard plan from Python: None, or (rank, world, [(pattern, dim)]); the rules point
 * into *keep's strings, which the caller releases after the load. */
static int shard_arg(PyObject *o, lockstep_shard_t *plan, lockstep_shard_rule_t **rules, PyObject **keep)
{
    PyObject *list;
    *rules = NULL;
    *keep = NULL;
    if (!PyArg_ParseTuple(o, "iiO", &plan->rank, &plan->world, &list))
        return -1;
    if (!(*keep = PySequence_Fast(list, "shard rules must be a list of (pattern, dim)")))
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(*keep);
    if (!(*rules = PyMem_Calloc((size_t)n + 1, sizeof **rules))) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(*keep, i), "si", &(*rules)[i].pattern, &(*rules)[i].dim))
            return -1;
    plan->rules = *rules;
    plan->n_rules = (size_t)n;
    return 0;
}

/* ---- load ---------------------------------------------------------------------------- */

struct progress_ctx { PyObject *fn; int raised; };

static int call_progress(void *arg, uint64_t done, uint64_t total)
{
    struct progress_ctx *c = arg;
    PyGILState_STATE g = PyGILState_Ensure();
    int stop = 1;
    if (!c->raised) {
        PyObject *r = PyObject_CallFunction(c->fn, "KK", (unsigned long long)done, (unsigned long long)total);
        if (!r) {
            c->raised = 1; /* keep the exception; the load is cancelled */
        } else {
            stop = PyObject_IsTrue(r) == 1;
            Py_DECREF(r);
        }
    }
    PyGILState_Release(g);
    return stop;
}

static PyObject *load_error(const char *path, const lockstep_load_error_t *err, int e)
{
    if (e == EBADMSG) {
        PyObject *exc = PyObject_CallFunction(BadFileError, "s", err->message);
        if (exc) {
            PyObject *off = PyLong_FromUnsignedLongLong(err->offset);
            PyObject_SetAttrString(exc, "offset", off);
            Py_XDECREF(off);
            PyErr_SetObject(BadFileError, exc);
            Py_DECREF(exc);
        }
        return NULL;
    }
    if (e == ECANCELED) {
        PyErr_SetString(LoadCancelled, err->message);
        return NULL;
    }
    if (err->code == -ENOENT && strstr(err->message, "no tensor named")) {
        PyErr_SetString(PyExc_KeyError, err->message);
        return NULL;
    }
    if (e == EINVAL) {
        PyErr_SetString(PyExc_ValueError, err->message[0] ? err->message : "bad load arguments");
        return NULL;
    }
    if (e == ENOMEM)
        return PyErr_NoMemory();
    if (e == ENOENT || e == EACCES || e == EISDIR || e == EIO || e == EPERM) {
        errno = e;
        return PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
    }
    PyErr_Format(LoadError, "%s: %s", path, err->message[0] ? err->message : strerror(e));
    return NULL;
}

/* load(path, names: list[str] | None, mode: int, check: bool, readers: int, progress,
 *      shard: (rank, world, [(pattern, dim)]) | None, to_type: str | None,
 *      numa: int (lockstep_numa_t), numa_node: int) */
static PyObject *mod_load(PyObject *m, PyObject *args)
{
    const char *path;
    PyObject *names = Py_None, *progress_fn = Py_None, *shard = Py_None, *keep = NULL;
    const char *to_type = NULL;
    int mode = 0, check = 0, readers = 0, numa = 0, numa_node = 0;
    if (!PyArg_ParseTuple(args, "sOipiO|Ozii", &path, &names, &mode, &check, &readers, &progress_fn, &shard,
                          &to_type, &numa, &numa_node))
        return NULL;
    lockstep_shard_t plan;
    lockstep_shard_rule_t *rules = NULL;
    if (shard != Py_None && shard_arg(shard, &plan, &rules, &keep)) {
        PyMem_Free(rules);
        Py_XDECREF(keep);
        return NULL;
    }
    lockstep_load_params_t p = lockstep_load_params_default();
    p.shard = shard != Py_None ? &plan : NULL;
    p.to_type = to_type;
    p.numa = (lockstep_numa_t)numa;
    p.numa_node = numa_node;
    p.mode = (lockstep_load_mode_t)mode;
    p.check = check;
    p.n_readers = readers;
    const char **cnames = NULL;
    PyObject *seq = NULL;
    if (names != Py_None) {
        seq = PySequence_Fast(names, "names must be a list of tensor names");
        if (!seq)
            goto fail_args;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        cnames = PyMem_Calloc((size_t)n + 1, sizeof *cnames);
        if (!cnames) {
            PyErr_NoMemory();
            goto fail_args;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *s = PySequence_Fast_GET_ITEM(seq, i);
            if (!PyUnicode_Check(s) || !(cnames[i] = PyUnicode_AsUTF8(s))) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_TypeError, "names must be strings");
                goto fail_args;
            }
        }
        p.names = cnames;
        p.n_names = (size_t)n;
    }
    struct progress_ctx pc = {progress_fn, 0};
    if (progress_fn != Py_None) {
        p.progress = call_progress;
        p.progress_arg = &pc;
    }
    lockstep_load_error_t err;
    lockstep_loaded_t *l;
    int e;
    Py_BEGIN_ALLOW_THREADS
    l = lockstep_load(path, &p, &err);
    e = errno;
    Py_END_ALLOW_THREADS
    PyMem_Free(cnames);
    Py_XDECREF(seq);
    PyMem_Free(rules);
    Py_XDECREF(keep);
    if (!l) {
        if (pc.raised)
            return NULL; /* the progress callback's own exception */
        return load_error(path, &err, e);
    }
    LoadedObject *o = PyObject_New(LoadedObject, &LoadedType);
    if (!o) {
        lockstep_loaded_free(l);
        return NULL;
    }
    o->l = l;
    o->meta = o->stats = NULL;
    o->base = NULL;
    o->len = 0;
    lockstep_load_stats_t st;
    lockstep_loaded_stats(l, &st);
    o->readonly = st.mode == LOCKSTEP_LOAD_ALIAS;
    lockstep_loaded_region(l, &o->base, &o->len);
    const lockstep_model_t *md = lockstep_loaded_model(l);
    if (!(o->meta = meta_list(md)))
        goto fail;
    o->stats = Py_BuildValue("{s:s,s:K,s:K,s:d,s:d,s:s,s:O,s:K,s:d,s:i}", "format",
                             lockstep_model_format(md) == LOCKSTEP_FORMAT_GGUF ? "gguf" : "safetensors", "bytes", (unsigned long long)st.bytes,
                             "bytes_read", (unsigned long long)st.bytes_read,
                             "seconds", st.seconds, "cpu_seconds", st.cpu_seconds,
                             "mode", lsp_mode_names[st.mode], "direct_fallback", st.direct_fallback ? Py_True : Py_False,
                             "fallback_offset", (unsigned long long)st.fallback_offset,
                             "resident", st.resident, "numa_node", st.numa_node);
    if (!o->stats)
        goto fail;
    return (PyObject *)o;
fail:
    Py_DECREF(o);
    return NULL;
fail_args:
    PyMem_Free(cnames);
    Py_XDECREF(seq);
    PyMem_Free(rules);
    Py_XDECREF(keep);
    return NULL;
}

/* The parsed header of path, or NULL with the Python error set */
static lockstep_model_t *open_model(const char *path)
{
    lockstep_load_error_t err = {0};
    lockstep_model_t *md;
    int e;
    Py_BEGIN_ALLOW_THREADS
    md = lockstep_model_open(path, &err);
    e = errno;
    Py_END_ALLOW_THREADS
    if (!md && e != EBADMSG && e != ENOMEM) { /* the open or mapping failed: errno says why */
        errno = e;
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
    } else if (!md) {
        load_error(path, &err, e);
    }
    return md;
}

/* inspect(path) -> (format, [(key, value)], [(name, type, dims, file offset, bytes)]):
 * the hardened parser's reading of a file's header, nothing loaded */
static PyObject *mod_inspect(PyObject *m, PyObject *args)
{
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path))
        return NULL;
    lockstep_model_t *md = open_model(path);
    if (!md)
        return NULL;
    PyObject *meta = meta_list(md), *tensors = meta ? PyList_New(0) : NULL;
    for (size_t i = 0, nt = lockstep_model_tensor_count(md); tensors && i < nt; i++) {
        const lockstep_tensor_info_t *t = lockstep_model_tensor(md, i);
        PyObject *item = tensor_item(t, (unsigned long long)t->offset);
        if (!item || PyList_Append(tensors, item))
            Py_CLEAR(tensors);
        Py_XDECREF(item);
    }
    const char *format = lockstep_model_format(md) == LOCKSTEP_FORMAT_GGUF ? "gguf" : "safetensors";
    double resident = 0;
    lockstep_model_resident(md, &resident); /* md was opened from a file: cannot fail */
    lockstep_model_free(md);
    if (!tensors) {
        Py_XDECREF(meta);
        return NULL;
    }
    return Py_BuildValue("(sNNd)", format, meta, tensors, resident);
}

/* shard_plan(path, (rank, world, [(pattern, dim)])) -> [(name, dim, start, count, shape
 * outermost first, bytes)]: the part of every tensor the plan gives the rank */
static PyObject *mod_shard_plan(PyObject *m, PyObject *args)
{
    const char *path;
    PyObject *shard, *keep = NULL, *out = NULL;
    if (!PyArg_ParseTuple(args, "sO", &path, &shard))
        return NULL;
    lockstep_shard_t plan;
    lockstep_shard_rule_t *rules = NULL;
    lockstep_load_error_t err = {0};
    lockstep_model_t *md = NULL;
    if (shard_arg(shard, &plan, &rules, &keep) || !(md = open_model(path)))
        goto out;
    out = PyList_New(0);
    for (size_t i = 0, nt = lockstep_model_tensor_count(md); out && i < nt; i++) {
        lockstep_shard_part_t pt;
        if (lockstep_shard_part(md, i, &plan, &pt, &err) != 0) {
            PyErr_SetString(PyExc_ValueError, err.message);
            Py_CLEAR(out);
            break;
        }
        PyObject *shape = PyTuple_New(pt.n_dims);
        for (uint32_t d = 0; shape && d < pt.n_dims; d++)
            PyTuple_SET_ITEM(shape, d, PyLong_FromUnsignedLongLong(pt.shape[d]));
        PyObject *item = shape ? Py_BuildValue("(siKKNK)", lockstep_model_tensor(md, i)->name, pt.dim,
                                               (unsigned long long)pt.start, (unsigned long long)pt.count, shape,
                                               (unsigned long long)pt.size) : NULL;
        if (!item || PyList_Append(out, item))
            Py_CLEAR(out);
        Py_XDECREF(item);
    }
out:
    lockstep_model_free(md);
    PyMem_Free(rules);
    Py_XDECREF(keep);
    return out;
}

static PyMethodDef load_methods[] = {
    {"load", mod_load, METH_VARARGS, "load(path, names, mode, check, readers, progress) -> Loaded"},
    {"shard_plan", mod_shard_plan, METH_VARARGS, "shard_plan(path, (rank, world, rules)) -> parts"},
    {"inspect", mod_inspect, METH_VARARGS, "inspect(path) -> (format, metadata, tensors with file offsets, fraction in the page cache)"},
    {NULL, NULL, 0, NULL}};

int lockstep_py_add_load(PyObject *m)
{
    if (PyType_Ready(&LoadedType) < 0)
        return -1;
    LoadError = PyErr_NewExceptionWithDoc("lockstep.LoadError", "loading a model file failed",
                                          PyExc_RuntimeError, NULL);
    PyObject *bases = LoadError ? PyTuple_Pack(2, LoadError, PyExc_ValueError) : NULL;
    BadFileError = bases ? PyErr_NewExceptionWithDoc("lockstep.BadFileError",
        "the file is malformed or holds bad values; .offset is the byte where", bases, NULL) : NULL;
    Py_XDECREF(bases);
    LoadCancelled = LoadError ? PyErr_NewExceptionWithDoc("lockstep.LoadCancelled",
        "the progress callback cancelled the load", LoadError, NULL) : NULL;
    if (!BadFileError || !LoadCancelled)
        return -1;
    for (PyMethodDef *d = load_methods; d->ml_name; d++) {
        PyObject *f = PyCFunction_New(d, NULL);
        if (!f || PyModule_AddObject(m, d->ml_name, f)) {
            Py_XDECREF(f);
            return -1;
        }
    }
    PyModule_AddObject(m, "LoadError", Py_NewRef(LoadError));
    PyModule_AddObject(m, "BadFileError", Py_NewRef(BadFileError));
    PyModule_AddObject(m, "LoadCancelled", Py_NewRef(LoadCancelled));
    PyObject *warm = PyFloat_FromDouble(LOCKSTEP_LOAD_WARM_FRACTION);
    if (!warm || PyModule_AddObject(m, "LOAD_WARM_FRACTION", warm)) {
        Py_XDECREF(warm);
        return -1;
    }
    return 0;
}
