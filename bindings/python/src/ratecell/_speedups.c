/*
 * ratecell._speedups: Limiter.check and Limiter.allow without ctypes, and
 * the leased check of ratecell.redis.RedisLimiter.
 *
 * Owns the two hot calls only: argument checks for the common key and cost
 * types, the direct call into the C ABI, and the Decision built from its
 * answer. Everything else (other key types, values to refuse, acquire and
 * anything that may sleep) stays on the ctypes path of ratecell._limiter,
 * which is also what runs when this module is not built.
 *
 * Not linked against the ratecell library: ratecell._ffi loads it with
 * ctypes and passes init() the addresses of the two functions called here,
 * ratecell_check (with a ratecell_request filled on the C stack) and
 * ratecell_allow (the yes/no call for one request of cost 1, now).
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

/* struct ratecell_request of include/ratecell.h; init() checks that its
 * size is ctypes' size of _ffi.CRequest. */
struct request {
    uint32_t size;
    uint32_t tier;
    uint64_t key_id;
    const uint8_t *key_bytes;
    size_t key_len;
    uint64_t cost;
    uint64_t at_ns;
};

/* RATECELL_NOW: at_ns of a request decided at the limiter's clock. */
#define NOW UINT64_MAX

/* RATECELL_DENIED: ratecell_allow's answer for a request not admitted
 * (RATECELL_OK, 0, for one admitted; anything else is an error). */
#define DENIED 40u

typedef uint32_t (*check_fn)(const void *limiter, const struct request *request,
                             struct decision *out);
typedef uint32_t (*allow_fn)(const void *limiter, uint64_t key);
typedef uint32_t (*lease_check_fn)(const void *leases, const struct request *request,
                                   uint32_t *step_out, struct decision *out, void **grant_out);
typedef void (*grant_free_fn)(void *grant);

/* Set once by init(); the module is per-interpreter state free (the ratecell
 * library is process-wide anyway). */
static check_fn c_check;
static allow_fn c_allow;
static lease_check_fn c_lease_check; /* set by init_leases() */
static grant_free_fn c_grant_free;
static PyObject *decision_type;  /* ratecell.Decision */
static newfunc decision_new;     /* its tp_new (object.__new__) */
static PyObject *raise_error;    /* ratecell._limiter._raise_error */
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

/* The exception of a failed call's status, raised: raise_error(status,
 * handle, tier) builds it (the tier and the limiter's count of tiers for
 * RATECELL_INVALID_TIER). */
static PyObject *raise_status(uint32_t status, PyObject *handle, PyObject *tier) {
    PyObject *err = PyObject_CallFunction(raise_error, "kOO", (unsigned long)status, handle, tier);
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
 * *data, *len; a str's UTF-8, cached by the str). A str with no UTF-8 form
 * (a lone surrogate) is for the ctypes path, which refuses it with
 * ratecell's InvalidKey; -1 with an exception set on any other failure. */
static int read_key(PyObject *key, uint64_t *k, const char **data, Py_ssize_t *len) {
    if (PyLong_CheckExact(key)) {
        return exact_u64(key, k) ? KEY_INT : KEY_OTHER;
    }
    if (PyUnicode_CheckExact(key)) {
        *data = PyUnicode_AsUTF8AndSize(key, len);
        if (*data != NULL) {
            return KEY_BYTES;
        }
        if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
            PyErr_Clear();
            return KEY_OTHER;
        }
        return -1;
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

/* Fills *req from (handle, key, cost, at, tier): 1 when done, 0 when the
 * arguments are for the ctypes path (also a handle of None: a closed
 * limiter) (which refuses what is to be refused,
 * with the same messages), -1 on an exception. `at` is None (now) or an
 * exact int below RATECELL_NOW; `tier` None (tier 0) or an exact int that
 * fits a uint32_t (the library refuses a tier the limiter does not have). */
static int read_request(PyObject *const *args, struct request *req) {
    if (args[0] == Py_None) {
        return 0; /* a closed limiter: the ctypes path raises LimiterClosed */
    }
    uint64_t k = 0;
    const char *data = NULL;
    Py_ssize_t len = 0;
    int kind = read_key(args[1], &k, &data, &len);
    if (kind <= 0) {
        return kind;
    }
    req->size = (uint32_t)sizeof(struct request);
    req->key_id = k;
    req->key_bytes = (const uint8_t *)data;
    req->key_len = (size_t)len;
    if (!exact_u64(args[2], &req->cost)) {
        return 0;
    }
    req->at_ns = NOW;
    if (args[3] != Py_None && (!exact_u64(args[3], &req->at_ns) || req->at_ns == NOW)) {
        return 0;
    }
    req->tier = 0;
    if (args[4] != Py_None) {
        uint64_t tier;
        if (!exact_u64(args[4], &tier) || tier > UINT32_MAX) {
            return 0;
        }
        req->tier = (uint32_t)tier;
    }
    return 1;
}

/* Runs the check; 1 when done, 0 when the arguments are for the ctypes
 * path, -1 on an exception. */
static int run_check(PyObject *const *args, Py_ssize_t nargs, struct decision *out) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "expected (handle, key, cost, at, tier)");
        return -1;
    }
    if (!ready()) {
        return -1;
    }
    struct request req;
    int done = read_request(args, &req);
    if (done <= 0) {
        return done;
    }
    const void *limiter;
    if (handle_pointer(args[0], &limiter) < 0) {
        return -1;
    }
    uint32_t status = c_check(limiter, &req, out);
    if (status != 0) {
        raise_status(status, args[0], args[4]);
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
             "check(handle, key, cost, at, tier) -> Decision | None\n\n"
             "Limiter.check for an exact int key in 0 ..= 2**64 - 1, or an exact str or\n"
             "bytes key, an exact int cost in range, `at` None or an exact int below\n"
             "2**64 - 1 and `tier` None or an exact int below 2**32. None for any other\n"
             "arguments, and for a handle of None (a closed limiter): the caller takes the\n"
             "ctypes path, which checks and refuses them.");

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
             "allow(handle, key, cost, at, tier) -> bool | None\n\n"
             "Limiter.allow for the arguments check() takes: an int key with cost 1, now\n"
             "and no tier is ratecell_allow, others a check whose decision is not built.\n"
             "None for any other arguments, as check().");

static PyObject *speedups_allow(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    uint64_t k, cost;
    if (nargs == 5 && args[0] != Py_None && args[3] == Py_None && args[4] == Py_None &&
        exact_u64(args[1], &k) && exact_u64(args[2], &cost) && cost == 1) {
        if (!ready()) {
            return NULL;
        }
        const void *limiter;
        if (handle_pointer(args[0], &limiter) < 0) {
            return NULL;
        }
        uint32_t status = c_allow(limiter, k);
        if (status != 0 && status != DENIED) {
            return raise_status(status, args[0], args[4]);
        }
        return PyBool_FromLong(status == 0);
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

PyDoc_STRVAR(lease_check_doc,
             "lease_check(handle, key, cost, at, tier) -> Decision | tuple | None\n\n"
             "ratecell_leases_check on the leases' own clock (or `at`), for the arguments\n"
             "check() takes. A Decision when the check was decided here with nothing to\n"
             "send (the hot path: units spent); else (step, Decision or None, grant\n"
             "address or None), the grant now owned by the caller. None for arguments\n"
             "that are the ctypes path's, as check().");

static PyObject *speedups_lease_check(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "expected (handle, key, cost, at, tier)");
        return NULL;
    }
    if (!ready()) {
        return NULL;
    }
    if (c_lease_check == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ratecell._speedups.init_leases() has not been called");
        return NULL;
    }
    struct request req;
    int done = read_request(args, &req);
    if (done < 0) {
        return NULL;
    }
    if (done == 0) {
        Py_RETURN_NONE;
    }
    const void *leases;
    if (handle_pointer(args[0], &leases) < 0) {
        return NULL;
    }
    struct decision out = {0}; /* written by the library; zeroed for gcc */
    void *grant = NULL;
    uint32_t step = 0;
    uint32_t status = c_lease_check(leases, &req, &step, &out, &grant);
    if (status != 0) {
        return raise_status(status, args[0], args[4]);
    }
    if (step == 0) {
        return build_decision(&out);
    }
    /* Every failure below frees the grant: it is the caller's only once
     * the tuple holding its address is returned. */
    PyObject *d;
    if (step == 1) {
        d = build_decision(&out);
    } else {
        d = Py_None;
        Py_INCREF(d);
    }
    PyObject *g;
    if (grant == NULL) {
        g = Py_None;
        Py_INCREF(g);
    } else {
        g = PyLong_FromVoidPtr(grant);
    }
    PyObject *result = NULL;
    if (d != NULL && g != NULL) {
        result = Py_BuildValue("(lOO)", (long)step, d, g);
    }
    Py_XDECREF(d);
    Py_XDECREF(g);
    if (result == NULL && grant != NULL) {
        c_grant_free(grant);
    }
    return result;
}

/* Reads the first n arguments of `caller` as function addresses into
 * fns; -1 with an exception set when one is not an address or is NULL. */
static int function_addresses(PyObject *const *args, void **fns, int n, const char *caller) {
    for (int i = 0; i < n; i++) {
        fns[i] = PyLong_AsVoidPtr(args[i]);
        if (fns[i] == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_ValueError, "%s(): a NULL function address", caller);
            }
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(init_leases_doc,
             "init_leases(lease_check, grant_free)\n\n"
             "Binds lease_check(): the addresses of ratecell_leases_check and\n"
             "ratecell_grant_free in the loaded library (after init()).");

static PyObject *speedups_init_leases(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "init_leases() takes 2 arguments");
        return NULL;
    }
    void *fns[2];
    if (function_addresses(args, fns, 2, "init_leases") < 0) {
        return NULL;
    }
    c_lease_check = (lease_check_fn)(uintptr_t)fns[0];
    c_grant_free = (grant_free_fn)(uintptr_t)fns[1];
    Py_RETURN_NONE;
}

PyDoc_STRVAR(init_doc,
             "init(check, allow, request_size, decision_size, decision, raise_error)\n\n"
             "Binds the module: the addresses of ratecell_check and ratecell_allow in the\n"
             "loaded library, ctypes' sizes of struct ratecell_request and struct\n"
             "ratecell_decision, the Decision class and the function that makes a failed\n"
             "call's exception from (status, handle, tier).");

static PyObject *speedups_init(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "init() takes 6 arguments");
        return NULL;
    }
    void *fns[2];
    if (function_addresses(args, fns, 2, "init") < 0) {
        return NULL;
    }
    static const struct {
        const char *name;
        Py_ssize_t size;
    } sizes[2] = {
        {"ratecell_request", (Py_ssize_t)sizeof(struct request)},
        {"ratecell_decision", (Py_ssize_t)sizeof(struct decision)},
    };
    for (int i = 0; i < 2; i++) {
        Py_ssize_t size = PyLong_AsSsize_t(args[2 + i]);
        if (size == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (size != sizes[i].size) {
            PyErr_Format(PyExc_ImportError,
                         "ratecell._speedups: struct %s is %zd bytes, expected %zd",
                         sizes[i].name, size, sizes[i].size);
            return NULL;
        }
    }
    if (!PyType_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "init(): decision must be a class");
        return NULL;
    }
    if (!PyCallable_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "init(): raise_error must be callable");
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
    c_allow = (allow_fn)(uintptr_t)fns[1];
    decision_new = (newfunc)(uintptr_t) new;
    PyObject *old_type = decision_type, *old_raise = raise_error;
    Py_INCREF(args[4]);
    decision_type = args[4];
    Py_INCREF(args[5]);
    raise_error = args[5];
    Py_XDECREF(old_type);
    Py_XDECREF(old_raise);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"check", (PyCFunction)(void (*)(void))speedups_check, METH_FASTCALL, check_doc},
    {"allow", (PyCFunction)(void (*)(void))speedups_allow, METH_FASTCALL, allow_doc},
    {"init", (PyCFunction)(void (*)(void))speedups_init, METH_FASTCALL, init_doc},
    {"lease_check", (PyCFunction)(void (*)(void))speedups_lease_check, METH_FASTCALL,
     lease_check_doc},
    {"init_leases", (PyCFunction)(void (*)(void))speedups_init_leases, METH_FASTCALL,
     init_leases_doc},
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
