/* module.c - torch_tpu._C, the CPython binding of the C runtime: devices,
 * memory statistics, synchronisation, fallback counters. Written in C
 * against the CPython API; it knows nothing of PyTorch except the exception
 * class torch.OutOfMemoryError, looked up at import. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

#include "tpu/drivers.h"
#include "tpu/kernels.h"
#include "tpu/runtime.h"
#include "tpu/trace.h"

static PyObject* g_oom_error = NULL; /* torch.OutOfMemoryError */

/* Raises the Python exception for `st` (consumed); returns NULL. */
static PyObject* raise_status(tpu_status_t st) {
  PyObject* type = PyExc_RuntimeError;
  switch (tpu_status_code(st)) {
    case TPU_STATUS_OUT_OF_MEMORY: type = g_oom_error ? g_oom_error : PyExc_MemoryError; break;
    case TPU_STATUS_INVALID_ARGUMENT: type = PyExc_ValueError; break;
    case TPU_STATUS_UNIMPLEMENTED: type = PyExc_NotImplementedError; break;
    case TPU_STATUS_OUT_OF_RANGE: type = PyExc_IndexError; break;
    default: break;
  }
  PyErr_SetString(type, tpu_status_message(st));
  tpu_status_free(st);
  return NULL;
}

static tpu_status_t ensure_init(void) {
  return tpu_runtime_is_initialized() ? TPU_OK : tpu_runtime_initialize();
}

/* Resolves an index argument (-1 = current device) to a device. */
static tpu_hal_device_t* get_device(int index) {
  tpu_status_t st = ensure_init();
  if (st != TPU_OK) {
    raise_status(st);
    return NULL;
  }
  if (index < 0) index = tpu_runtime_current_device();
  tpu_hal_device_t* d = NULL;
  st = tpu_runtime_device(index, &d);
  if (st != TPU_OK) {
    raise_status(st);
    return NULL;
  }
  return d;
}

/* The device a Python int names (-1: the current one); NULL with an exception set. */
static tpu_hal_device_t* device_arg(PyObject* arg) {
  int index = (int)PyLong_AsLong(arg);
  if (index == -1 && PyErr_Occurred()) return NULL;
  return get_device(index);
}

static PyObject* py_init(PyObject* self, PyObject* noargs) {
  tpu_status_t st = tpu_k_check_environment();
  if (st == TPU_OK) st = ensure_init();
  if (st != TPU_OK) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject* py_device_count(PyObject* self, PyObject* noargs) {
  tpu_status_t st = ensure_init();
  if (st != TPU_OK) return raise_status(st);
  return PyLong_FromLong(tpu_runtime_device_count());
}

static PyObject* py_current_device(PyObject* self, PyObject* noargs) {
  tpu_status_t st = ensure_init();
  if (st != TPU_OK) return raise_status(st);
  return PyLong_FromLong(tpu_runtime_current_device());
}

static PyObject* py_set_device(PyObject* self, PyObject* arg) {
  long index = PyLong_AsLong(arg);
  if (index == -1 && PyErr_Occurred()) return NULL;
  tpu_status_t st = ensure_init();
  if (st == TPU_OK) st = tpu_runtime_set_current_device((int32_t)index);
  if (st != TPU_OK) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject* py_synchronize(PyObject* self, PyObject* arg) {
  tpu_hal_device_t* d = device_arg(arg);
  if (!d) return NULL;
  tpu_status_t st;
  Py_BEGIN_ALLOW_THREADS st = tpu_hal_device_vt(d)->synchronize(d);
  Py_END_ALLOW_THREADS if (st != TPU_OK) return raise_status(st);
  Py_RETURN_NONE;
}

#define SET_U64(dict, key, value)                                   \
  do {                                                              \
    PyObject* v_ = PyLong_FromUnsignedLongLong((unsigned long long)(value)); \
    if (!v_ || PyDict_SetItemString(dict, key, v_) < 0) {           \
      Py_XDECREF(v_);                                               \
      Py_DECREF(dict);                                              \
      return NULL;                                                  \
    }                                                               \
    Py_DECREF(v_);                                                  \
  } while (0)

static PyObject* py_queue_stats(PyObject* self, PyObject* arg) {
  tpu_hal_device_t* d = device_arg(arg);
  if (!d) return NULL;
  tpu_hal_queue_stats_t s = {0};
  if (tpu_hal_device_vt(d)->queue_stats) tpu_hal_device_vt(d)->queue_stats(d, &s);
  PyObject* out = PyDict_New();
  if (!out) return NULL;
  SET_U64(out, "works", s.works);
  SET_U64(out, "list_groups", s.list_groups);
  SET_U64(out, "list_works", s.list_works);
  SET_U64(out, "list_conflicts", s.list_conflicts);
  SET_U64(out, "programs", s.programs);
  SET_U64(out, "program_compiles", s.program_compiles);
  SET_U64(out, "program_loads", s.program_loads);
  return out;
}

static PyObject* py_memory_stats(PyObject* self, PyObject* arg) {
  tpu_hal_device_t* d = device_arg(arg);
  if (!d) return NULL;
  tpu_hal_memory_stats_t s;
  tpu_hal_device_vt(d)->memory_stats(d, &s);
  PyObject* out = PyDict_New();
  if (!out) return NULL;
  SET_U64(out, "allocated_bytes", s.allocated_bytes);
  SET_U64(out, "reserved_bytes", s.reserved_bytes);
  SET_U64(out, "peak_allocated_bytes", s.peak_allocated_bytes);
  SET_U64(out, "peak_reserved_bytes", s.peak_reserved_bytes);
  SET_U64(out, "requested_bytes", s.requested_bytes);
  SET_U64(out, "num_allocs", s.num_allocs);
  SET_U64(out, "num_frees", s.num_frees);
  SET_U64(out, "num_cache_hits", s.num_cache_hits);
  SET_U64(out, "num_segments", s.num_segments);
  SET_U64(out, "num_device_allocs", s.num_device_allocs);
  SET_U64(out, "num_device_frees", s.num_device_frees);
  SET_U64(out, "num_ooms", s.num_ooms);
  SET_U64(out, "budget_bytes", s.budget_bytes);
  return out;
}

static PyObject* py_device_properties(PyObject* self, PyObject* arg) {
  tpu_hal_device_t* d = device_arg(arg);
  if (!d) return NULL;
  tpu_hal_device_properties_t p;
  memset(&p, 0, sizeof(p));
  tpu_hal_device_vt(d)->query_properties(d, &p);
  return Py_BuildValue("{s:s,s:s,s:s,s:i,s:i,s:K,s:O}", "name", p.name, "driver", p.driver,
                       "platform", p.platform, "index", p.index, "compute_units", p.compute_units,
                       "total_memory", (unsigned long long)p.total_memory, "host_addressable",
                       p.host_addressable ? Py_True : Py_False);
}

static PyObject* py_mem_get_info(PyObject* self, PyObject* arg) {
  tpu_hal_device_t* d = device_arg(arg);
  if (!d) return NULL;
  uint64_t free_b = 0, total = 0;
  tpu_hal_device_vt(d)->memory_info(d, &free_b, &total);
  return Py_BuildValue("(KK)", (unsigned long long)free_b, (unsigned long long)total);
}

static PyObject* py_reset_peak(PyObject* self, PyObject* arg) {
  tpu_hal_device_t* d = device_arg(arg);
  if (!d) return NULL;
  tpu_hal_device_vt(d)->reset_peak_stats(d);
  Py_RETURN_NONE;
}

static PyObject* py_reset_accumulated(PyObject* self, PyObject* arg) {
  tpu_hal_device_t* d = device_arg(arg);
  if (!d) return NULL;
  tpu_hal_device_vt(d)->reset_accumulated_stats(d);
  Py_RETURN_NONE;
}

static PyObject* py_empty_cache(PyObject* self, PyObject* noargs) {
  tpu_status_t st = ensure_init();
  if (st != TPU_OK) return raise_status(st);
  for (int32_t i = 0; i < tpu_runtime_device_count(); ++i) {
    tpu_hal_device_t* d = get_device(i);
    if (!d) return NULL;
    Py_BEGIN_ALLOW_THREADS tpu_hal_device_vt(d)->empty_cache(d);
    Py_END_ALLOW_THREADS
  }
  Py_RETURN_NONE;
}

/* ---- graph capture (torch.tpu.graph): a capture is a capsule "tpu_capture"
 * whose context is the device index; released by capture_release or when
 * the capsule dies. */
static const char kCaptureName[] = "tpu_capture";

static tpu_hal_device_t* capture_device(tpu_hal_device_t* d) {
  if (!tpu_hal_device_vt(d)->capture_begin) {
    tpu_hal_device_properties_t p;
    memset(&p, 0, sizeof(p));
    tpu_hal_device_vt(d)->query_properties(d, &p);
    PyErr_Format(PyExc_NotImplementedError,
                 "torch.tpu.graph: the %s driver of tpu:%d cannot capture work (only the host driver can)", p.driver,
                 p.index);
    return NULL;
  }
  return d;
}

static void capture_destroy(PyObject* capsule) {
  tpu_hal_capture_t* c = PyCapsule_GetPointer(capsule, kCaptureName);
  if (!c) {
    PyErr_Clear();
    return;
  }
  int index = (int)(intptr_t)PyCapsule_GetContext(capsule);
  tpu_hal_device_t* d = NULL;
  tpu_status_t st = tpu_runtime_is_initialized() ? tpu_runtime_device(index, &d) : TPU_OK;
  if (st != TPU_OK || !d) {
    tpu_status_free(st); /* runtime gone: its memory went with it */
    return;
  }
  Py_BEGIN_ALLOW_THREADS tpu_hal_device_vt(d)->capture_release(d, c);
  Py_END_ALLOW_THREADS
}

static PyObject* py_capture_begin(PyObject* self, PyObject* arg) {
  tpu_hal_device_t* d = device_arg(arg);
  if (!d || !capture_device(d)) return NULL;
  tpu_status_t st = tpu_hal_device_vt(d)->capture_begin(d);
  if (st != TPU_OK) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject* py_capture_end(PyObject* self, PyObject* arg) {
  tpu_hal_device_t* d = device_arg(arg);
  if (!d || !capture_device(d)) return NULL;
  tpu_hal_device_properties_t p;
  memset(&p, 0, sizeof(p));
  tpu_hal_device_vt(d)->query_properties(d, &p);
  tpu_hal_capture_t* c = NULL;
  tpu_status_t st;
  Py_BEGIN_ALLOW_THREADS st = tpu_hal_device_vt(d)->capture_end(d, &c);
  Py_END_ALLOW_THREADS
  if (st != TPU_OK) return raise_status(st);
  PyObject* capsule = PyCapsule_New(c, kCaptureName, capture_destroy);
  if (!capsule) {
    tpu_hal_device_vt(d)->capture_release(d, c);
    return NULL;
  }
  PyCapsule_SetContext(capsule, (void*)(intptr_t)p.index);
  return capsule;
}

/* The capture and its device; NULL with an exception set (released or not a capture). */
static tpu_hal_capture_t* capture_arg(PyObject* capsule, tpu_hal_device_t** out_d) {
  tpu_hal_capture_t* c = PyCapsule_IsValid(capsule, kCaptureName) ? PyCapsule_GetPointer(capsule, kCaptureName) : NULL;
  if (!c) {
    PyErr_Clear();
    PyErr_SetString(PyExc_RuntimeError, "torch.tpu.TPUGraph: the graph was reset (or never captured)");
    return NULL;
  }
  *out_d = get_device((int)(intptr_t)PyCapsule_GetContext(capsule));
  return *out_d ? c : NULL;
}

static PyObject* py_capture_replay(PyObject* self, PyObject* capsule) {
  tpu_hal_device_t* d = NULL;
  tpu_hal_capture_t* c = capture_arg(capsule, &d);
  if (!c) return NULL;
  tpu_status_t st = tpu_hal_device_vt(d)->capture_replay(d, c);
  if (st != TPU_OK) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject* py_capture_works(PyObject* self, PyObject* capsule) {
  tpu_hal_device_t* d = NULL;
  tpu_hal_capture_t* c = capture_arg(capsule, &d);
  if (!c) return NULL;
  return PyLong_FromLongLong((long long)tpu_hal_device_vt(d)->capture_works(c));
}

static PyObject* py_capture_release(PyObject* self, PyObject* capsule) {
  tpu_hal_device_t* d = NULL;
  tpu_hal_capture_t* c = capture_arg(capsule, &d);
  if (!c) return NULL;
  /* A capsule cannot hold NULL: point it at a static marker that capture_arg refuses. */
  if (PyCapsule_SetName(capsule, "tpu_capture (released)") != 0) return NULL;
  Py_BEGIN_ALLOW_THREADS tpu_hal_device_vt(d)->capture_release(d, c);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

static void add_fallback(void* ctx, const char* name, uint64_t count) {
  PyObject* dict = (PyObject*)ctx;
  PyObject* v = PyLong_FromUnsignedLongLong((unsigned long long)count);
  if (v) {
    PyDict_SetItemString(dict, name, v);
    Py_DECREF(v);
  }
}

static PyObject* py_fallback_report(PyObject* self, PyObject* noargs) {
  PyObject* out = PyDict_New();
  if (!out) return NULL;
  tpu_stats_fallback_foreach(add_fallback, out);
  if (PyErr_Occurred()) {
    Py_DECREF(out);
    return NULL;
  }
  return out;
}

static PyObject* py_fallback_reset(PyObject* self, PyObject* noargs) {
  tpu_stats_fallback_reset();
  Py_RETURN_NONE;
}

static PyObject* py_native_count(PyObject* self, PyObject* noargs) {
  return PyLong_FromUnsignedLongLong((unsigned long long)tpu_stats_native_count());
}

static PyObject* py_native_ops(PyObject* self, PyObject* noargs) {
  size_t n = tpu_k_entry_count();
  PyObject* out = PyList_New((Py_ssize_t)n);
  if (!out) return NULL;
  for (size_t i = 0; i < n; ++i) {
    PyObject* s = PyUnicode_FromString(tpu_k_entry_at(i)->name);
    if (!s) {
      Py_DECREF(out);
      return NULL;
    }
    PyList_SET_ITEM(out, (Py_ssize_t)i, s);
  }
  return out;
}

/* The driver TORCH_TPU_DRIVER selects (the runtime's rule, before it starts). */
static PyObject* py_selected_driver(PyObject* self, PyObject* noargs) {
  const char* name = NULL;
  tpu_status_t st = tpu_drivers_selected(&name);
  if (st != TPU_OK) return raise_status(st);
  return PyUnicode_FromString(name);
}

static PyObject* py_tpu_present(PyObject* self, PyObject* noargs) {
  return PyBool_FromLong(tpu_drivers_tpu_present());
}

/* The kernel ops a graph on `device` may contain: every kernel, or, when
 * the device's driver runs graphs itself, those it lowers. */
static PyObject* py_graph_ops(PyObject* self, PyObject* arg) {
  tpu_hal_device_t* d = device_arg(arg);
  if (!d) return NULL;
  const tpu_hal_device_vtable_t* vt = tpu_hal_device_vt(d);
  bool by_driver = vt->run_graph && vt->supports_op;
  PyObject* out = PyList_New(0);
  if (!out) return NULL;
  size_t n = tpu_k_entry_count();
  for (size_t i = 0; i < n; ++i) {
    const char* name = tpu_k_entry_at(i)->name;
    if (by_driver && !vt->supports_op(d, name)) continue;
    PyObject* s = PyUnicode_FromString(name);
    if (!s || PyList_Append(out, s) < 0) {
      Py_XDECREF(s);
      Py_DECREF(out);
      return NULL;
    }
    Py_DECREF(s);
  }
  return out;
}

/* ---- device-queue trace (tpu/trace.h) ---- */
static PyObject* py_trace_start(PyObject* self, PyObject* arg) {
  long long cap = PyLong_AsLongLong(arg);
  if (cap == -1 && PyErr_Occurred()) return NULL;
  if (cap < 0) {
    PyErr_Format(PyExc_ValueError, "trace capacity must be >= 0, got %lld", cap);
    return NULL;
  }
  tpu_status_t st = tpu_trace_start((size_t)cap);
  if (st != TPU_OK) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject* py_trace_stop(PyObject* self, PyObject* unused) {
  tpu_trace_stop();
  Py_RETURN_NONE;
}

/* ([(name, kind, device, seq, cpu_tid, queued_ns, start_ns, end_ns, bytes)], dropped) */
static PyObject* py_trace_take(PyObject* self, PyObject* unused) {
  tpu_trace_event_t* ev = NULL;
  uint64_t dropped = 0;
  size_t n = tpu_trace_take(&ev, &dropped);
  PyObject* list = PyList_New((Py_ssize_t)n);
  if (!list) {
    free(ev);
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    const tpu_trace_event_t* e = &ev[i];
    PyObject* t = Py_BuildValue("(siiKKLLLL)", e->name, (int)e->kind, (int)e->device,
                                (unsigned long long)e->seq, (unsigned long long)e->cpu_tid,
                                (long long)e->queued_ns, (long long)e->start_ns, (long long)e->end_ns,
                                (long long)e->bytes);
    if (!t) {
      free(ev);
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, t);
  }
  free(ev);
  return Py_BuildValue("(NK)", list, (unsigned long long)dropped);
}

static PyObject* py_now_ns(PyObject* self, PyObject* unused) {
  return PyLong_FromUnsignedLongLong((unsigned long long)tpu_now_ns());
}

/* [(address, size, requested, allocated)] of a device's caching allocator. */
static PyObject* py_memory_blocks(PyObject* self, PyObject* arg) {
  tpu_hal_device_t* d = device_arg(arg);
  if (!d) return NULL;
  const tpu_hal_device_vtable_t* vt = tpu_hal_device_vt(d);
  if (!vt->memory_blocks) {
    tpu_hal_device_properties_t p;
    vt->query_properties(d, &p);
    PyErr_Format(PyExc_NotImplementedError,
                 "tpu: the %s driver cannot list its allocator's blocks (no memory snapshots on it)",
                 p.driver);
    return NULL;
  }
  tpu_hal_memory_block_t* blocks = NULL;
  size_t n = vt->memory_blocks(d, NULL, 0);
  for (;;) { /* blocks may appear between the count and the copy: retry until they fit */
    size_t cap = n + 16;
    tpu_hal_memory_block_t* b = realloc(blocks, cap * sizeof(*b));
    if (!b) {
      free(blocks);
      return PyErr_NoMemory();
    }
    blocks = b;
    n = vt->memory_blocks(d, blocks, cap);
    if (n <= cap) break;
  }
  PyObject* list = PyList_New((Py_ssize_t)n);
  if (!list) {
    free(blocks);
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    PyObject* t = Py_BuildValue("(KKKO)", (unsigned long long)blocks[i].address, (unsigned long long)blocks[i].size,
                                (unsigned long long)blocks[i].requested, blocks[i].allocated ? Py_True : Py_False);
    if (!t) {
      free(blocks);
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, t);
  }
  free(blocks);
  return list;
}

static PyMethodDef kMethods[] = {
    {"init", py_init, METH_NOARGS, "Initialise the runtime (idempotent)."},
    {"device_count", py_device_count, METH_NOARGS, "Number of tpu devices."},
    {"current_device", py_current_device, METH_NOARGS, "Calling thread's device."},
    {"set_device", py_set_device, METH_O, "Set the calling thread's device."},
    {"synchronize", py_synchronize, METH_O, "Wait for a device's queue (-1: current)."},
    {"memory_stats", py_memory_stats, METH_O, "Allocator statistics of a device."},
    {"queue_stats", py_queue_stats, METH_O, "Queue counters of a device."},
    {"device_properties", py_device_properties, METH_O, "Properties of a device."},
    {"mem_get_info", py_mem_get_info, METH_O, "(free, total) bytes of a device."},
    {"reset_peak_memory_stats", py_reset_peak, METH_O, "Reset peak statistics."},
    {"reset_accumulated_memory_stats", py_reset_accumulated, METH_O, "Reset counters."},
    {"empty_cache", py_empty_cache, METH_NOARGS, "Release cached blocks of every device."},
    {"capture_begin", py_capture_begin, METH_O, "Start recording a device's work (torch.tpu.graph)."},
    {"capture_end", py_capture_end, METH_O, "Stop recording; returns the capture."},
    {"capture_replay", py_capture_replay, METH_O, "Queue one run of a capture's works."},
    {"capture_works", py_capture_works, METH_O, "Number of works in a capture."},
    {"capture_release", py_capture_release, METH_O, "Free a capture and its held memory."},
    {"fallback_report", py_fallback_report, METH_NOARGS, "{op name: CPU fallback count}."},
    {"fallback_reset", py_fallback_reset, METH_NOARGS, "Clear the fallback counters."},
    {"native_count", py_native_count, METH_NOARGS, "Ops run by native kernels so far."},
    {"native_ops", py_native_ops, METH_NOARGS, "Names of the ops with native kernels."},
    {"selected_driver", py_selected_driver, METH_NOARGS, "The driver TORCH_TPU_DRIVER selects."},
    {"tpu_present", py_tpu_present, METH_NOARGS, "Whether a TPU is on this machine's PCI bus."},
    {"graph_ops", py_graph_ops, METH_O, "Kernel ops a compiled graph on a device may contain."},
    {"trace_start", py_trace_start, METH_O, "Start the device-queue trace (capacity in events, 0: default)."},
    {"trace_stop", py_trace_stop, METH_NOARGS, "Stop the device-queue trace."},
    {"trace_take", py_trace_take, METH_NOARGS, "Recorded device-queue events and the dropped count."},
    {"now_ns", py_now_ns, METH_NOARGS, "The runtime's clock (CLOCK_MONOTONIC) in ns."},
    {"memory_blocks", py_memory_blocks, METH_O, "Blocks of a device's caching allocator."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_C", "torch_tpu C runtime binding", -1, kMethods,
                                     NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__C(void) {
  PyObject* torch = PyImport_ImportModule("torch");
  if (!torch) return NULL;
  g_oom_error = PyObject_GetAttrString(torch, "OutOfMemoryError");
  Py_DECREF(torch);
  if (!g_oom_error) PyErr_Clear();
  return PyModule_Create(&kModule);
}
