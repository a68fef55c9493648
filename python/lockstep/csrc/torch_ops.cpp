// torch.ops.lockstep.*'s CPU kernels in C++: the dispatcher calls the library here
// without Python in between. lockstep/torch_ops.py defines the schemas, the fake
// kernels and the autograd formulas, builds this file against the installed torch
// (_torch_build.py) and imports it as lockstep._torch_ops; that import registers these
// kernels for the CPU key. The module's bind(handle, comm._c, rank, size) makes a Comm
// callable under an integer handle.
//
// The dispatcher runs kernels without the GIL. A kernel takes it to look the handle up,
// check its arguments and begin the call (the Comm's one-call-at-a-time rule lives
// under the GIL, capi.h), lets it go for the library's call, and takes it again to end
// the call. Every failure is a Python exception, the one the Comm methods raise (its
// type and message), carried through torch as a python_error: a rank whose arguments
// are wrong refuses the call first, so the peers' call ends with PeerArgumentError.
#include <torch/csrc/Exceptions.h> // python_error (and Python.h)

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <torch/library.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "capi.h"

namespace {

const lsp_capi *api; // set by the module's import

struct bound {
    PyObject *obj; // the Comm's ._c (owned)
    int rank, size;
};
std::unordered_map<int64_t, bound> comms; // by handle; under the GIL

struct gil {
    PyGILState_STATE s = PyGILState_Ensure();
    ~gil() { PyGILState_Release(s); }
};

// The Python error already set, thrown through torch to the caller
[[noreturn]] void raise_set()
{
    python_error e;
    e.persist();
    throw e;
}

// One collective on the Comm bound to handle, made without the GIL. The GIL is taken
// as few times as a call allows, since each taking costs most when the collective
// before has pushed the interpreter out of the caches: checks that need no
// communicator run first without it; begin() takes it once to look the Comm up,
// resolve the op's name and enter the call; finish() once to leave and raise. A
// failed check takes it to refuse the call (refuse()), so that the peers' call ends.
class call {
public:
    call(int64_t handle, const char *what) : handle_(handle), what_(what) {}
    ~call()
    {
        if (!obj_) // never looked up, or finish() let it go
            return;
        gil g;
        if (entered_)
            api->leave(obj_);
        Py_DECREF(obj_);
    }
    call(const call &) = delete;
    call &operator=(const call &) = delete;

    // This rank's arguments are wrong: raise type(msg) here and refuse the call, so
    // the peers' call ends at once
    [[noreturn]] void refuse(PyObject *type, const std::string &msg)
    {
        gil g;
        look_up();
        PyErr_SetString(type, msg.c_str());
        api->refuse(obj_);
        raise_set();
    }
    // The checks every op makes before its call: no autograd graph through it, a CPU
    // tensor (the kernel is registered for CPU only, so only the graph is left)
    // (the checks and their messages are lockstep._lockstep's, which the Python kernels
    // share: python/src/op_checks.c)
    void no_grad(const at::Tensor &t, const char *op)
    {
        if (t.requires_grad() && c10::GradMode::is_enabled()) {
            char msg[LSP_CHECK_MSG_BYTES];
            api->no_grad_message(op, msg, sizeof msg);
            refuse(PyExc_RuntimeError, msg);
        }
    }
    lockstep_dtype_t dtype(const at::Tensor &t)
    {
        switch (t.scalar_type()) {
        case at::kFloat: return LOCKSTEP_DTYPE_F32;
        case at::kHalf: return LOCKSTEP_DTYPE_F16;
        case at::kBFloat16: return LOCKSTEP_DTYPE_BF16;
        case at::kInt: return LOCKSTEP_DTYPE_I32;
        default: {
            char msg[LSP_CHECK_MSG_BYTES];
            api->dtype_message(what_, std::string(c10::getDtypeNames(t.scalar_type()).first).c_str(), msg, sizeof msg);
            refuse(PyExc_TypeError, msg);
        }
        }
    }
    // The communicator's size and rank, for checks that need them (one taking of the GIL)
    int size()
    {
        if (!obj_) { // only this thread touches the call
            gil g;
            look_up();
        }
        return size_;
    }
    int rank()
    {
        size();
        return rank_;
    }

    // Begin the call, with the op's name when it has one (*code gets it): from here
    // the library runs it; finish(rc) ends it
    lockstep_comm_t *begin(c10::string_view op = {}, lockstep_op_t *code = nullptr)
    {
        gil g;
        look_up();
        if (code) {
            int c = api->op_code(std::string(op).c_str());
            if (c < 0) {
                api->refuse(obj_);
                raise_set();
            }
            *code = (lockstep_op_t)c;
        }
        if (api->enter(obj_, what_, &comm_) != 0)
            raise_set();
        entered_ = true;
        return comm_;
    }
    // End the call and let the Comm go, in the one taking of the GIL a call ends with
    void finish(int rc)
    {
        gil g;
        api->leave(obj_);
        entered_ = false;
        Py_DECREF(obj_);
        obj_ = nullptr;
        if (rc) {
            api->raise_code(rc, what_);
            raise_set();
        }
    }

private:
    // Under the GIL: the Comm bound to handle_, held until the call ends (an
    // unregister meanwhile does not free it); raises when none is
    void look_up()
    {
        if (obj_)
            return;
        auto it = comms.find(handle_);
        if (it == comms.end()) {
            char msg[LSP_CHECK_MSG_BYTES];
            api->unbound_message((long long)handle_, msg, sizeof msg);
            PyErr_SetString(PyExc_ValueError, msg);
            raise_set();
        }
        obj_ = it->second.obj;
        rank_ = it->second.rank;
        size_ = it->second.size;
        Py_INCREF(obj_);
    }

    int64_t handle_;
    const char *what_;
    PyObject *obj_ = nullptr;
    int rank_ = 0, size_ = 1;
    lockstep_comm_t *comm_ = nullptr;
    bool entered_ = false;
};

// tensor's memory, contiguous: itself, or a copy the caller writes back
at::Tensor dense(const at::Tensor &t)
{
    return t.is_contiguous() ? t : t.contiguous();
}

// in place on t (its contiguous copy, written back), with the version bump autograd
// needs to see an in-place change
template <class F> void in_place(at::Tensor &t, F run)
{
    at::Tensor d = dense(t);
    run(d);
    if (!d.is_same(t))
        t.copy_(d);
    else if (!t.is_inference())
        t.unsafeGetTensorImpl()->bump_version();
}

void reduce_into(call &c, at::Tensor &t, lockstep_dtype_t dt, c10::string_view op)
{
    lockstep_op_t code;
    lockstep_comm_t *comm = c.begin(op, &code);
    c.finish(api->allreduce(comm, t.data_ptr(), t.data_ptr(), (size_t)t.numel(), dt, code));
}

void broadcast_into(call &c, at::Tensor &t, int root)
{
    lockstep_comm_t *comm = c.begin();
    c.finish(api->broadcast(comm, t.data_ptr(), t.nbytes(), root, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL));
}

int check_root(call &c, int64_t root)
{
    char msg[LSP_CHECK_MSG_BYTES];
    int r = api->check_root(root, c.size(), msg, sizeof msg);
    if (r < 0)
        c.refuse(PyExc_ValueError, msg);
    return r;
}

void all_reduce_(at::Tensor &t, int64_t handle, c10::string_view op)
{
    call c(handle, "allreduce");
    c.no_grad(t, "all_reduce_");
    lockstep_dtype_t dt = c.dtype(t);
    in_place(t, [&](at::Tensor &d) { reduce_into(c, d, dt, op); });
}

void broadcast_(at::Tensor &t, int64_t handle, int64_t root)
{
    call c(handle, "broadcast");
    c.no_grad(t, "broadcast_");
    int r = check_root(c, root);
    in_place(t, [&](at::Tensor &d) { broadcast_into(c, d, r); });
}

at::Tensor all_reduce_named(const at::Tensor &t, int64_t handle, c10::string_view op, const char *name)
{
    call c(handle, "allreduce");
    c.no_grad(t, name);
    lockstep_dtype_t dt = c.dtype(t);
    at::Tensor out = t.clone(at::MemoryFormat::Contiguous);
    reduce_into(c, out, dt, op);
    return out;
}

at::Tensor broadcast_named(const at::Tensor &t, int64_t handle, int64_t root, const char *name)
{
    call c(handle, "broadcast");
    c.no_grad(t, name);
    int r = check_root(c, root);
    at::Tensor out = c.rank() == r ? t.clone(at::MemoryFormat::Contiguous) : at::empty(t.sizes(), t.options());
    broadcast_into(c, out, r);
    return out;
}

// dim as an index into t's dimensions, checked
int64_t check_dim(call &c, const at::Tensor &t, int64_t dim, const char *op, const char *name = "dim")
{
    char msg[LSP_CHECK_MSG_BYTES];
    int d = api->check_dim(t.dim(), dim, op, name, msg, sizeof msg);
    if (d < 0)
        c.refuse(PyExc_ValueError, msg);
    return d;
}

// t's shape with dim divided by size (checked)
std::vector<int64_t> split_shape(call &c, const at::Tensor &t, int size, int64_t dim, const char *op)
{
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    char msg[LSP_CHECK_MSG_BYTES];
    if (api->check_split(shape[dim], size, dim, op, msg, sizeof msg) < 0)
        c.refuse(PyExc_ValueError, msg);
    shape[dim] /= size;
    return shape;
}

// t split along dim into size parts, as one contiguous (size, *part) tensor
at::Tensor parts(const at::Tensor &t, int size, int64_t dim, const std::vector<int64_t> &part)
{
    std::vector<int64_t> split(t.sizes().begin(), t.sizes().begin() + dim);
    split.push_back(size);
    split.insert(split.end(), part.begin() + dim, part.end());
    return t.reshape(split).movedim(dim, 0).contiguous();
}

at::Tensor all_gather_named(const at::Tensor &t, int64_t handle, int64_t dim, const char *name)
{
    call c(handle, "allgather");
    c.no_grad(t, name);
    dim = check_dim(c, t, dim, "all_gather");
    int size = c.size();
    at::Tensor in = dense(t);
    std::vector<int64_t> blocks{size};
    blocks.insert(blocks.end(), t.sizes().begin(), t.sizes().end());
    at::Tensor out = at::empty(blocks, t.options());
    lockstep_comm_t *comm = c.begin();
    c.finish(api->allgather(comm, in.data_ptr(), out.data_ptr(), in.nbytes(), LOCKSTEP_ORDER_LINEAR,
                            LOCKSTEP_XFER_PULL));
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    shape[dim] *= size;
    return dim == 0 ? out.view(shape) : out.movedim(0, dim).reshape(shape); // rank r's at r * t.size(dim)
}

at::Tensor reduce_scatter_named(const at::Tensor &t, int64_t handle, c10::string_view op, int64_t dim,
                                const char *name)
{
    call c(handle, "reduce_scatter");
    c.no_grad(t, name);
    dim = check_dim(c, t, dim, "reduce_scatter");
    std::vector<int64_t> shape = split_shape(c, t, c.size(), dim, "reduce_scatter");
    lockstep_dtype_t dt = c.dtype(t);
    at::Tensor in = parts(t, c.size(), dim, shape), out = at::empty(shape, t.options());
    lockstep_op_t code;
    lockstep_comm_t *comm = c.begin(op, &code);
    c.finish(api->reduce_scatter(comm, in.data_ptr(), out.data_ptr(), (size_t)out.numel(), dt, code));
    return out;
}

at::Tensor all_to_all_named(const at::Tensor &t, int64_t handle, int64_t scatter_dim, int64_t gather_dim,
                            const char *name)
{
    call c(handle, "alltoall");
    c.no_grad(t, name);
    scatter_dim = check_dim(c, t, scatter_dim, "all_to_all", "scatter_dim");
    int size = c.size();
    std::vector<int64_t> part = split_shape(c, t, size, scatter_dim, "all_to_all");
    gather_dim = check_dim(c, t, gather_dim, "all_to_all", "gather_dim");
    at::Tensor in = parts(t, size, scatter_dim, part), got = at::empty(in.sizes(), t.options());
    lockstep_comm_t *comm = c.begin();
    c.finish(api->alltoall(comm, in.data_ptr(), got.data_ptr(), in.nbytes() / (size_t)size));
    std::vector<int64_t> shape = part;
    shape[gather_dim] *= size;
    return got.movedim(0, gather_dim).reshape(shape); // got[k]: rank k's part, as torch.cat along gather_dim
}

// torch's dispatch and nothing else: the benchmark's floor for any op
void noop_(at::Tensor &, int64_t) {}

PyObject *bind(PyObject *, PyObject *args)
{
    long long handle;
    PyObject *obj;
    int rank, size;
    if (!PyArg_ParseTuple(args, "LO!ii", &handle, api->comm_type, &obj, &rank, &size))
        return nullptr;
    Py_INCREF(obj);
    auto [it, added] = comms.emplace(handle, bound{obj, rank, size});
    if (!added) {
        Py_DECREF(it->second.obj);
        it->second = bound{obj, rank, size};
    }
    Py_RETURN_NONE;
}

PyObject *unbind(PyObject *, PyObject *arg)
{
    long long handle = PyLong_AsLongLong(arg);
    if (handle == -1 && PyErr_Occurred())
        return nullptr;
    auto it = comms.find(handle);
    if (it != comms.end()) {
        Py_DECREF(it->second.obj);
        comms.erase(it);
    }
    Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS, "bind(handle, comm._c, rank, size): the ops' handle for this communicator"},
    {"unbind", unbind, METH_O, "unbind(handle)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_torch_ops", nullptr, -1, methods, nullptr, nullptr, nullptr, nullptr};

} // namespace

TORCH_LIBRARY_IMPL(lockstep, CPU, m)
{
    m.impl("all_reduce_", all_reduce_);
    m.impl("broadcast_", broadcast_);
    m.impl("_noop_", noop_);
    m.impl("all_reduce", [](const at::Tensor &t, int64_t h, c10::string_view op) {
        return all_reduce_named(t, h, op, "all_reduce");
    });
    m.impl("all_reduce_autograd", [](const at::Tensor &t, int64_t h, c10::string_view op) {
        return all_reduce_named(t, h, op, "all_reduce_autograd");
    });
    m.impl("broadcast", [](const at::Tensor &t, int64_t h, int64_t root) {
        return broadcast_named(t, h, root, "broadcast");
    });
    m.impl("broadcast_autograd", [](const at::Tensor &t, int64_t h, int64_t root) {
        return broadcast_named(t, h, root, "broadcast_autograd");
    });
    m.impl("all_gather", [](const at::Tensor &t, int64_t h, int64_t dim) {
        return all_gather_named(t, h, dim, "all_gather");
    });
    m.impl("all_gather_autograd", [](const at::Tensor &t, int64_t h, int64_t dim) {
        return all_gather_named(t, h, dim, "all_gather_autograd");
    });
    m.impl("reduce_scatter", [](const at::Tensor &t, int64_t h, c10::string_view op, int64_t dim) {
        return reduce_scatter_named(t, h, op, dim, "reduce_scatter");
    });
    m.impl("reduce_scatter_autograd", [](const at::Tensor &t, int64_t h, c10::string_view op, int64_t dim) {
        return reduce_scatter_named(t, h, op, dim, "reduce_scatter_autograd");
    });
    m.impl("all_to_all", [](const at::Tensor &t, int64_t h, int64_t sd, int64_t gd) {
        return all_to_all_named(t, h, sd, gd, "all_to_all");
    });
    m.impl("all_to_all_autograd", [](const at::Tensor &t, int64_t h, int64_t sd, int64_t gd) {
        return all_to_all_named(t, h, sd, gd, "all_to_all_autograd");
    });
}

PyMODINIT_FUNC PyInit__torch_ops(void)
{
    api = static_cast<const lsp_capi *>(PyCapsule_Import(LSP_CAPI_NAME, 0));
    if (!api)
        return nullptr;
    if (api->version != LSP_CAPI_VERSION) {
        PyErr_Format(PyExc_ImportError,
                     "lockstep._torch_ops was built for C API version %d, but lockstep._lockstep has %d: clear the "
                     "cache (LOCKSTEP_CACHE, else ~/.cache/lockstep) to rebuild it",
                     LSP_CAPI_VERSION, api->version);
        api = nullptr;
        return nullptr;
    }
    return PyModule_Create(&moddef);
}
