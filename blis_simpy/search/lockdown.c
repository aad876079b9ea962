/* The native calls of a candidate's lock-down (blis_simpy.search.jail; docs/security.md), and
   the zygote's fork of a candidate's process as the template's child (fork_sibling).

   A candidate's process makes these calls before candidate code runs. Made here rather than
   through ctypes, the candidate's process never loads ctypes: a candidate that got past the
   static check finds no way to run machine code of its own (ctypes is not in sys.modules,
   and once the seccomp filter is on, importing it fails: loading _ctypes needs open).
   Each function raises OSError with the errno when the kernel refuses. Linux only. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static PyObject *refused(const char *what) {
    return PyErr_SetFromErrnoWithFilename(PyExc_OSError, what);
}

PyDoc_STRVAR(personality_doc,
"personality(persona) -> int\n\n"
"Set the calling thread's execution domain and flags (0xFFFFFFFF: only query them); the\n"
"previous value.");

static PyObject *lockdown_personality(PyObject *module, PyObject *arg) {
    unsigned long persona = PyLong_AsUnsignedLong(arg);
    if (persona == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    int previous = personality(persona);
    if (previous == -1)
        return refused("personality");
    return PyLong_FromLong(previous);
}

PyDoc_STRVAR(die_with_parent_doc,
"die_with_parent(signal)\n\n"
"Have the kernel send `signal` to this process when its parent ends (PR_SET_PDEATHSIG).");

static PyObject *lockdown_die_with_parent(PyObject *module, PyObject *arg) {
    long signal = PyLong_AsLong(arg);
    if (signal == -1 && PyErr_Occurred())
        return NULL;
    if (prctl(PR_SET_PDEATHSIG, (unsigned long)signal, 0UL, 0UL, 0UL) != 0)
        return refused("prctl(PR_SET_PDEATHSIG)");
    Py_RETURN_NONE;
}

PyDoc_STRVAR(no_new_privs_doc,
"no_new_privs()\n\n"
"This process and what it starts gain no privileges for good (PR_SET_NO_NEW_PRIVS).");

static PyObject *lockdown_no_new_privs(PyObject *module, PyObject *unused) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) != 0)
        return refused("prctl(PR_SET_NO_NEW_PRIVS)");
    Py_RETURN_NONE;
}

PyDoc_STRVAR(seccomp_doc,
"seccomp(program)\n\n"
"Install the classic BPF program `program` (bytes: 8-byte struct sock_filter instructions)\n"
"as this process's seccomp filter, for good (PR_SET_SECCOMP, SECCOMP_MODE_FILTER). The\n"
"kernel copies the program.");

static PyObject *lockdown_seccomp(PyObject *module, PyObject *arg) {
    Py_buffer program;
    if (PyObject_GetBuffer(arg, &program, PyBUF_SIMPLE) != 0)
        return NULL;
    Py_ssize_t count = program.len / (Py_ssize_t)sizeof(struct sock_filter);
    if (program.len % (Py_ssize_t)sizeof(struct sock_filter) != 0 || count == 0
            || count > USHRT_MAX) {
        PyBuffer_Release(&program);
        PyErr_Format(PyExc_ValueError, "a seccomp program is 1 to %d instructions of %d bytes,"
                     " not %zd bytes", USHRT_MAX, (int)sizeof(struct sock_filter),
                     program.len);
        return NULL;
    }
    struct sock_fprog filter = {(unsigned short)count, (struct sock_filter *)program.buf};
    int result = prctl(PR_SET_SECCOMP, (unsigned long)SECCOMP_MODE_FILTER,
                       (unsigned long)&filter, 0UL, 0UL);
    int error = errno;
    PyBuffer_Release(&program);
    if (result != 0) {
        errno = error;
        return refused("prctl(PR_SET_SECCOMP)");
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(map_zeros_doc,
"map_zeros(start, size)\n\n"
"Replace the pages at [start, start + size) with zero pages, read-only (mmap MAP_FIXED |\n"
"MAP_ANONYMOUS | MAP_PRIVATE).");

static PyObject *lockdown_map_zeros(PyObject *module, PyObject *const *args,
                                    Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "map_zeros takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    unsigned long start = PyLong_AsUnsignedLong(args[0]);
    if (start == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    size_t size = PyLong_AsSize_t(args[1]);
    if (size == (size_t)-1 && PyErr_Occurred())
        return NULL;
    void *mapped = mmap((void *)start, size, PROT_READ,
                        MAP_PRIVATE | MAP_FIXED | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED)
        return refused("mmap");
    if (mapped != (void *)start) {
        errno = EFAULT;
        return refused("mmap");
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(fork_sibling_doc,
"fork_sibling() -> int\n\n"
"fork(), but the child is the calling process's parent's child (clone CLONE_PARENT |\n"
"SIGCHLD: that parent reaps it): 0 in the child, its pid in the caller. The sandbox's\n"
"zygote forks candidates' processes so for the template. Like os.fork, with the\n"
"interpreter's fork hooks around it; for a single-threaded caller.");

static PyObject *lockdown_fork_sibling(PyObject *module, PyObject *unused) {
    PyOS_BeforeFork();
    long pid = syscall(SYS_clone, (unsigned long)(CLONE_PARENT | SIGCHLD), 0UL, 0UL, 0UL, 0UL);
    if (pid == 0) {
        PyOS_AfterFork_Child();
        return PyLong_FromLong(0);
    }
    int error = errno;
    PyOS_AfterFork_Parent();
    if (pid < 0) {
        errno = error;
        return refused("clone");
    }
    return PyLong_FromLong(pid);
}

static PyMethodDef lockdown_methods[] = {
    {"fork_sibling", lockdown_fork_sibling, METH_NOARGS, fork_sibling_doc},
    {"personality", lockdown_personality, METH_O, personality_doc},
    {"die_with_parent", lockdown_die_with_parent, METH_O, die_with_parent_doc},
    {"no_new_privs", lockdown_no_new_privs, METH_NOARGS, no_new_privs_doc},
    {"seccomp", lockdown_seccomp, METH_O, seccomp_doc},
    {"map_zeros", (PyCFunction)(void (*)(void))lockdown_map_zeros, METH_FASTCALL,
     map_zeros_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef lockdown_module = {
    PyModuleDef_HEAD_INIT, "blis_simpy.search.lockdown",
    "The native calls of a candidate's lock-down, without ctypes (blis_simpy.search.jail).",
    0, lockdown_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_lockdown(void) {
    return PyModuleDef_Init(&lockdown_module);
}
