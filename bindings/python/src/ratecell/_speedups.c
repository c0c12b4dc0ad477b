/*
 * ratecell._speedups: Limiter.check and Limiter.allow without ctypes.
 *
 * Owns the two hot calls only: argument checks for the common key and cost
 * types, the direct call into the C ABI, and the Decision built from its
 * answer. Everything else (other key types, values to refuse, acquire and
 * anything that may sleep) stays on the ctypes path of ratecell._limiter,
 * which is also what runs when this module is not built.
 *
 * Not linked against the ratecell library: ratecell._ffi loads it with
 * ctypes and passes init() the addresses of the three functions called here.
 * Built against the stable ABI (abi3) of Python 3.10, so one build serves
 * every CPython from 3.10 on.
 *
 * The calls hold the GIL while in C: a check takes tens of nanoseconds and
 * never blocks, far less than releasing and taking back the GIL. It also
 * means no Python code runs during the call, and the caller's frame holds
 * the limiter's handle object, so the native limiter outlives the call as it
 * does on the ctypes path.
 */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030A0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* struct ratecell_decision of include/ratecell.h; init() checks that its
 * size is ctypes' size of _ffi.CDecision. */
struct decision {
    bool allowed;
    uint64_t limit;
    uint64_t remaining;
    uint64_t retry_after_ns;
    uint64_t reset_after_ns;
    uint64_t wait_ns;
};

typedef uint32_t (*check_fn)(const void *limiter, uint64_t key, uint64_t cost,
                             struct decision *out);
typedef uint32_t (*check_bytes_fn)(const void *limiter, const uint8_t *key, size_t key_len,
                                   uint64_t cost, struct decision *out);
typedef int32_t (*allow_key_fn)(const void *limiter, uint64_t key);

/* Set once by init(); the module is per-interpreter state free (the ratecell
 * library is process-wide anyway). */
static check_fn c_check;
static check_bytes_fn c_check_bytes;
static allow_key_fn c_allow_key;
static PyObject *decision_type;  /* ratecell.Decision */
static newfunc decision_new;     /* its tp_new (object.__new__) */
static PyObject *error_for_status; /* ratecell._errors.error_for_status */
static PyObject *empty_tuple;
static PyObject *str_value;
static PyObject *field_names[6];

static const char *const FIELDS[6] = {
    "allowed", "limit", "remaining", "retry_after_ns", "reset_after_ns", "wait_ns",
};

/* The native limiter of a LimiterHandle (a ctypes c_void_p): its `value`. */
static int handle_pointer(PyObject *handle, const void **out) {
    PyObject *value = PyObject_GetAttr(handle, str_value);
    if (value == NULL) {
        return -1;
    }
    *out = value == Py_None ? NULL : PyLong_AsVoidPtr(value);
    Py_DECREF(value);
    return *out == NULL && PyErr_Occurred() ? -1 : 0;
}

/* The exception of a failed call's status, raised. */
static PyObject *raise_status(uint32_t status) {
    PyObject *err = PyObject_CallFunction(error_for_status, "k", (unsigned long)status);
    if (err != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(err), err);
        Py_DECREF(err);
    }
    return NULL;
}

/* An int in 0 ..= 2**64 - 1 of exact type int: 1 and *out set; 0 for
 * anything else (no exception set), which the caller leaves to the ctypes
 * path so that refusals read the same. */
static int exact_u64(PyObject *obj, uint64_t *out) {
    if (!PyLong_CheckExact(obj)) {
        return 0;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* negative or too large */
        return 0;
    }
    *out = (uint64_t)v;
    return 1;
}

enum key_kind { KEY_OTHER, KEY_INT, KEY_BYTES };

/* Reads the key: an exact int (into *k) or an exact str / bytes (into
 * *data, *len; a str's UTF-8, cached by the str). -1 with an exception set
 * for a str that is not encodable (lone surrogates), as str.encode(). */
static int read_key(PyObject *key, uint64_t *k, const char **data, Py_ssize_t *len) {
    if (PyLong_CheckExact(key)) {
        return exact_u64(key, k) ? KEY_INT : KEY_OTHER;
    }
    if (PyUnicode_CheckExact(key)) {
        *data = PyUnicode_AsUTF8AndSize(key, len);
        return *data == NULL ? -1 : KEY_BYTES;
    }
    if (PyBytes_CheckExact(key)) {
        char *p;
        if (PyBytes_AsStringAndSize(key, &p, len) < 0) {
            return -1;
        }
        *data = p;
        return KEY_BYTES;
    }
    return KEY_OTHER;
}

static int ready(void) {
    if (decision_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ratecell._speedups.init() has not been called");
        return 0;
    }
    return 1;
}

/* Runs the check; 1 when done, 0 when the arguments are for the ctypes
 * path, -1 on an exception. */
static int run_check(PyObject *const *args, Py_ssize_t nargs, struct decision *out) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "expected (handle, key, cost)");
        return -1;
    }
    if (!ready()) {
        return -1;
    }
    uint64_t k = 0, cost;
    const char *data = NULL;
    Py_ssize_t len = 0;
    int kind = read_key(args[1], &k, &data, &len);
    if (kind <= 0) {
        return kind;
    }
    if (!exact_u64(args[2], &cost)) {
        return 0;
    }
    const void *limiter;
    if (handle_pointer(args[0], &limiter) < 0) {
        return -1;
    }
    uint32_t status = kind == KEY_INT
                          ? c_check(limiter, k, cost, out)
                          : c_check_bytes(limiter, (const uint8_t *)data, (size_t)len, cost, out);
    if (status != 0) {
        raise_status(status);
        return -1;
    }
    return 1;
}

static PyObject *build_decision(const struct decision *d) {
    PyObject *obj = decision_new((PyTypeObject *)decision_type, empty_tuple, NULL);
    if (obj == NULL) {
        return NULL;
    }
    PyObject *values[6] = {
        PyBool_FromLong(d->allowed),
        PyLong_FromUnsignedLongLong(d->limit),
        PyLong_FromUnsignedLongLong(d->remaining),
        PyLong_FromUnsignedLongLong(d->retry_after_ns),
        PyLong_FromUnsignedLongLong(d->reset_after_ns),
        PyLong_FromUnsignedLongLong(d->wait_ns),
    };
    int failed = 0;
    for (int i = 0; i < 6; i++) {
        /* object.__setattr__: Decision is a frozen dataclass, whose own
         * __setattr__ refuses every write. */
        if (failed || values[i] == NULL ||
            PyObject_GenericSetAttr(obj, field_names[i], values[i]) < 0) {
            failed = 1;
        }
        Py_XDECREF(values[i]);
    }
    if (failed) {
        Py_DECREF(obj);
        return NULL;
    }
    return obj;
}

PyDoc_STRVAR(check_doc,
             "check(handle, key, cost) -> Decision | None\n\n"
             "Limiter.check for an exact int key in 0 ..= 2**64 - 1, or an exact str or\n"
             "bytes key, and an exact int cost in range. None for any other arguments:\n"
             "the caller takes the ctypes path, which checks and refuses them.");

static PyObject *speedups_check(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    struct decision out = {0}; /* written by the library; zeroed for gcc */
    int done = run_check(args, nargs, &out);
    if (done < 0) {
        return NULL;
    }
    if (done == 0) {
        Py_RETURN_NONE;
    }
    return build_decision(&out);
}

PyDoc_STRVAR(allow_doc,
             "allow(handle, key, cost) -> bool | None\n\n"
             "Limiter.allow for the arguments check() takes: an int key with cost 1 is\n"
             "ratecell_allow_key, others a check whose decision is not built. None for\n"
             "any other arguments, as check().");

static PyObject *speedups_allow(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    uint64_t k, cost;
    if (nargs == 3 && exact_u64(args[1], &k) && exact_u64(args[2], &cost) && cost == 1) {
        if (!ready()) {
            return NULL;
        }
        const void *limiter;
        if (handle_pointer(args[0], &limiter) < 0) {
            return NULL;
        }
        int32_t answer = c_allow_key(limiter, k);
        if (answer < 0) {
            return raise_status((uint32_t)-answer);
        }
        return PyBool_FromLong(answer == 1);
    }
    struct decision out = {0}; /* written by the library; zeroed for gcc */
    int done = run_check(args, nargs, &out);
    if (done < 0) {
        return NULL;
    }
    if (done == 0) {
        Py_RETURN_NONE;
    }
    return PyBool_FromLong(out.allowed);
}

PyDoc_STRVAR(init_doc,
             "init(check, check_bytes, allow_key, decision_size, decision, error_for_status)\n\n"
             "Binds the module: the addresses of ratecell_check, ratecell_check_bytes and\n"
             "ratecell_allow_key in the loaded library, ctypes' size of struct\n"
             "ratecell_decision, the Decision class and the function that maps a status\n"
             "to its exception.");

static PyObject *speedups_init(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "init() takes 6 arguments");
        return NULL;
    }
    void *fns[3];
    for (int i = 0; i < 3; i++) {
        fns[i] = PyLong_AsVoidPtr(args[i]);
        if (fns[i] == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_ValueError, "init(): a NULL function address");
            }
            return NULL;
        }
    }
    Py_ssize_t size = PyLong_AsSsize_t(args[3]);
    if (size == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (size != (Py_ssize_t)sizeof(struct decision)) {
        PyErr_Format(PyExc_ImportError,
                     "ratecell._speedups: struct ratecell_decision is %zd bytes, expected %zd",
                     size, (Py_ssize_t)sizeof(struct decision));
        return NULL;
    }
    if (!PyType_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "init(): decision must be a class");
        return NULL;
    }
    if (!PyCallable_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "init(): error_for_status must be callable");
        return NULL;
    }
    void *new = PyType_GetSlot((PyTypeObject *)args[4], Py_tp_new);
    if (new == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "init(): decision cannot be instantiated");
        }
        return NULL;
    }
    /* Function pointers from object pointers (addresses, slots): POSIX
     * guarantees they convert; ISO C does not, hence the detour through an
     * integer. */
    c_check = (check_fn)(uintptr_t)fns[0];
    c_check_bytes = (check_bytes_fn)(uintptr_t)fns[1];
    c_allow_key = (allow_key_fn)(uintptr_t)fns[2];
    decision_new = (newfunc)(uintptr_t) new;
    PyObject *old_type = decision_type, *old_errors = error_for_status;
    Py_INCREF(args[4]);
    decision_type = args[4];
    Py_INCREF(args[5]);
    error_for_status = args[5];
    Py_XDECREF(old_type);
    Py_XDECREF(old_errors);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"check", (PyCFunction)(void (*)(void))speedups_check, METH_FASTCALL, check_doc},
    {"allow", (PyCFunction)(void (*)(void))speedups_allow, METH_FASTCALL, allow_doc},
    {"init", (PyCFunction)(void (*)(void))speedups_init, METH_FASTCALL, init_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "ratecell._speedups",
    "Limiter.check and Limiter.allow in C (see ratecell._limiter).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    if (empty_tuple == NULL) {
        empty_tuple = PyTuple_New(0);
        str_value = PyUnicode_InternFromString("value");
        if (empty_tuple == NULL || str_value == NULL) {
            return NULL;
        }
        for (int i = 0; i < 6; i++) {
            field_names[i] = PyUnicode_InternFromString(FIELDS[i]);
            if (field_names[i] == NULL) {
                return NULL;
            }
        }
    }
    return PyModule_Create(&module_def);
}
