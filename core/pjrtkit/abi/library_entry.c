/* GetPjrtApi for a pjrtkit backend built as a shared library (`pjrtkit build-library`).
 *
 * Any PJRT host (XLA's plugin loader, PyTorch/XLA, Reactant, EXLA, gopjrt, the Rust pjrt crate,
 * pypjrt) dlopens libpjrtkit_<backend>.so and calls GetPjrtApi. The table it returns is the
 * same PJRT_Api pjrtkit hands JAX: every function is a cffi callback into the backend's hooks.
 *
 * pjrtkit_library_config.h (written by pjrtkit.abi.library at build time) names the backend,
 * the interpreter of the environment the library was built from, its libpython and its
 * version. At the first call:
 *   - in a host that already runs Python (Py_IsInitialized in the process), that interpreter
 *     is used; it must be the same minor version;
 *   - otherwise the recorded libpython is loaded and initialized as that interpreter would
 *     start (program name = its path, so its virtual environment's site-packages are used, and
 *     sys.executable names a real interpreter for pjrtkit's parser child), without signal
 *     handlers (they are the host's).
 * Then pjrtkit.abi.library.api_address(<backend>) builds the table. The GIL is released
 * afterwards: every PJRT function takes it itself, from whichever thread the host calls on.
 *
 * libpython is never linked: every Python function is looked up with dlsym, so the library
 * loads in any host (no undefined Py* symbols), and a host running another Python version gets
 * an error naming both versions instead of a crash. On failure GetPjrtApi prints why on stderr
 * and returns NULL (the ABI has no other error channel).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "pjrtkit_library_config.h"

struct PJRT_Api;

typedef struct {
    int (*IsInitialized)(void);
    const char *(*GetVersion)(void);
    void (*InitPythonConfig)(PyConfig *);
    PyStatus (*SetBytesString)(PyConfig *, wchar_t **, const char *);
    PyStatus (*InitializeFromConfig)(const PyConfig *);
    void (*ConfigClear)(PyConfig *);
    int (*StatusException)(PyStatus);
    PyGILState_STATE (*GILStateEnsure)(void);
    void (*GILStateRelease)(PyGILState_STATE);
    PyThreadState *(*SaveThread)(void);
    PyObject *(*ImportModule)(const char *);
    PyObject *(*GetAttrString)(PyObject *, const char *);
    PyObject *(*UnicodeFromString)(const char *);
    PyObject *(*CallOneArg)(PyObject *, PyObject *);
    void *(*LongAsVoidPtr)(PyObject *);
    PyObject *(*ErrOccurred)(void);
    void (*ErrPrint)(void);
    void (*DecRef)(PyObject *);
} PythonFunctions;

static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct PJRT_Api *api;
static int failed;

static void fail(const char *what, const char *detail) {
    fprintf(stderr, "libpjrtkit_%s: %s%s%s (this library was built for Python %s from %s)\n",
            PJRTKIT_BACKEND, what, detail ? ": " : "", detail ? detail : "",
            PJRTKIT_PYTHON_VERSION, PJRTKIT_PYTHON_EXECUTABLE);
    failed = 1;
}

/* Every function looked up in `scope` (RTLD_DEFAULT: the host's own Python; or the libpython
 * this library loaded). 0 when any is missing. */
static int resolve(void *scope, PythonFunctions *py) {
#define RESOLVE(field, name)                              \
    *(void **)(&py->field) = dlsym(scope, name);          \
    if (!py->field) return 0;
    RESOLVE(IsInitialized, "Py_IsInitialized")
    RESOLVE(GetVersion, "Py_GetVersion")
    RESOLVE(InitPythonConfig, "PyConfig_InitPythonConfig")
    RESOLVE(SetBytesString, "PyConfig_SetBytesString")
    RESOLVE(InitializeFromConfig, "Py_InitializeFromConfig")
    RESOLVE(ConfigClear, "PyConfig_Clear")
    RESOLVE(StatusException, "PyStatus_Exception")
    RESOLVE(GILStateEnsure, "PyGILState_Ensure")
    RESOLVE(GILStateRelease, "PyGILState_Release")
    RESOLVE(SaveThread, "PyEval_SaveThread")
    RESOLVE(ImportModule, "PyImport_ImportModule")
    RESOLVE(GetAttrString, "PyObject_GetAttrString")
    RESOLVE(UnicodeFromString, "PyUnicode_FromString")
    RESOLVE(CallOneArg, "PyObject_CallOneArg")
    RESOLVE(LongAsVoidPtr, "PyLong_AsVoidPtr")
    RESOLVE(ErrOccurred, "PyErr_Occurred")
    RESOLVE(ErrPrint, "PyErr_Print")
    RESOLVE(DecRef, "Py_DecRef")
#undef RESOLVE
    return 1;
}

/* "3.11" of "3.11.7 (main, ...)": the host's version must match the recorded one. */
static int same_minor_version(const char *version) {
    size_t n = strlen(PJRTKIT_PYTHON_VERSION);
    return strncmp(version, PJRTKIT_PYTHON_VERSION, n) == 0 && version[n] == '.';
}

static int start_own_interpreter(PythonFunctions *py) {
    void *libpython = dlopen(PJRTKIT_LIBPYTHON, RTLD_NOW | RTLD_GLOBAL);
    if (!libpython) {
        fail("cannot load the Python it was built with", dlerror());
        return 0;
    }
    if (!resolve(libpython, py)) {
        fail("the loaded libpython lacks a function pjrtkit needs", PJRTKIT_LIBPYTHON);
        return 0;
    }
    PyConfig config;
    py->InitPythonConfig(&config);
    config.install_signal_handlers = 0;
    config.parse_argv = 0;
    PyStatus status = py->SetBytesString(&config, &config.program_name,
                                         PJRTKIT_PYTHON_EXECUTABLE);
    if (!py->StatusException(status)) status = py->InitializeFromConfig(&config);
    py->ConfigClear(&config);
    if (py->StatusException(status)) {
        fail("cannot start Python", status.err_msg);
        return 0;
    }
    return 1;
}

/* pjrtkit.abi.library.api_address(<backend>) with the GIL held. */
static const struct PJRT_Api *build_api(PythonFunctions *py) {
    const struct PJRT_Api *result = NULL;
    PyObject *module = py->ImportModule("pjrtkit.abi.library");
    PyObject *function = module ? py->GetAttrString(module, "api_address") : NULL;
    PyObject *name = function ? py->UnicodeFromString(PJRTKIT_BACKEND) : NULL;
    PyObject *address = name ? py->CallOneArg(function, name) : NULL;
    if (address) result = (const struct PJRT_Api *)py->LongAsVoidPtr(address);
    if (!result || py->ErrOccurred()) {
        result = NULL;
        if (py->ErrOccurred()) py->ErrPrint();
        fail("pjrtkit could not build the backend's PJRT_Api (the Python error is above)", NULL);
    }
    PyObject *owned[] = {address, name, function, module};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; ++i)
        if (owned[i]) py->DecRef(owned[i]);
    return result;
}

static void start(void) {
    PythonFunctions py;
    int own = 0;
    int (*host_is_initialized)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    if (host_is_initialized && host_is_initialized()) {
        const char *(*host_version)(void) =
            (const char *(*)(void))dlsym(RTLD_DEFAULT, "Py_GetVersion");
        if (!host_version || !same_minor_version(host_version())) {
            fail("the host runs another Python", host_version ? host_version() : "unknown");
            return;
        }
        if (!resolve(RTLD_DEFAULT, &py)) {
            fail("the host's Python lacks a function pjrtkit needs", NULL);
            return;
        }
    } else if (start_own_interpreter(&py)) {
        own = 1;  /* this thread holds the GIL until SaveThread below */
    } else {
        return;
    }
    PyGILState_STATE gil = py.GILStateEnsure();
    api = build_api(&py);
    py.GILStateRelease(gil);
    if (own) py.SaveThread();
}

__attribute__((visibility("default"))) const struct PJRT_Api *GetPjrtApi(void) {
    pthread_mutex_lock(&start_lock);
    if (!api && !failed) start();
    pthread_mutex_unlock(&start_lock);
    return api;
}
