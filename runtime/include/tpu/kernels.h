/* tpu/kernels.h - the C kernel ABI.
 *
 * Kernels are destination-passing: the caller (the PyTorch bridge, or the
 * graph executor) has already computed every output's sizes, strides and
 * dtype (from PyTorch's meta functions) and allocated device memory for it.
 * A kernel reads its arguments, writes its outputs, allocates nothing, keeps
 * no global state and is reentrant.
 *
 * Kernels are looked up by the full ATen schema name "ns::name.overload"
 * ("aten::add.Tensor", "aten::mm", "aten::add_.Scalar"). Arguments come in
 * schema order, the out= tensors of an .out overload included. `outputs`
 * lists the tensors the op returns; for in-place and out= ops they alias the
 * corresponding arguments.
 *
 * Each entry has two functions:
 *   check(call)  runs synchronously on the caller's thread before the work is
 *                queued. It validates what can be validated without reading
 *                device data: dtypes, ranks, argument kinds. Unsupported
 *                dtype -> TPU_STATUS_UNIMPLEMENTED with a message naming the
 *                op and the dtype. May be NULL.
 *   run(call)    runs on the device queue's worker thread. Data-dependent
 *                errors (an index out of range) are returned from here and
 *                surface at the next synchronisation.
 * Neither may abort, assert or print.
 */
#ifndef TPU_KERNELS_H_
#define TPU_KERNELS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/base.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. Values are stable (they cross the bridge). */
typedef enum tpu_dtype_e {
  TPU_DTYPE_INVALID = 0,
  TPU_DTYPE_F32 = 1,
  TPU_DTYPE_F64 = 2,
  TPU_DTYPE_F16 = 3,
  TPU_DTYPE_BF16 = 4,
  TPU_DTYPE_I64 = 5,
  TPU_DTYPE_I32 = 6,
  TPU_DTYPE_I16 = 7,
  TPU_DTYPE_I8 = 8,
  TPU_DTYPE_U8 = 9,
  TPU_DTYPE_BOOL = 10,
  TPU_DTYPE_COUNT_ = 11,
} tpu_dtype_t;

/* Bytes per element (0 for INVALID). */
size_t tpu_dtype_size(tpu_dtype_t dtype);
/* PyTorch-style name: "float32", "bfloat16", "int64", "bool", ... */
const char* tpu_dtype_name(tpu_dtype_t dtype);
bool tpu_dtype_is_floating(tpu_dtype_t dtype);

#define TPU_MAX_DIMS 16

/* A strided view of device memory. `data` points at element [0,...,0]
 * (storage offset applied). Strides are in elements; inputs may have zero
 * (broadcast) or overlapping strides; outputs never overlap themselves.
 * ndim == 0 is a scalar (one element). numel == 0 is legal: kernels then do
 * nothing and must not dereference `data` (it may be NULL). */
typedef struct tpu_tensor_t {
  void* data;
  int32_t dtype; /* tpu_dtype_t */
  int32_t ndim;
  int64_t sizes[TPU_MAX_DIMS];
  int64_t strides[TPU_MAX_DIMS];
} tpu_tensor_t;

int64_t tpu_tensor_numel(const tpu_tensor_t* t);
/* Elements from the first to the last one the view reaches, both included
 * (non-negative strides): its footprint in its storage; 0 when empty. */
int64_t tpu_tensor_span(const tpu_tensor_t* t);
bool tpu_tensor_is_contiguous(const tpu_tensor_t* t);

typedef enum tpu_k_value_kind_e {
  TPU_K_NONE = 0,    /* None / absent optional / Generator (see rng_*) */
  TPU_K_TENSOR = 1,  /* v.tensor */
  TPU_K_INT = 2,     /* v.i  (int, SymInt, int Scalar, MemoryFormat, Layout) */
  TPU_K_DOUBLE = 3,  /* v.d  (float, float Scalar) */
  TPU_K_BOOL = 4,    /* v.b  (bool, bool Scalar) */
  TPU_K_INTS = 5,    /* v.ints (int[], SymInt[], bool[] as 0/1) */
  TPU_K_TENSORS = 6, /* v.tensors (Tensor[] and Tensor?[]: an absent entry has
                        data == NULL and dtype == TPU_DTYPE_INVALID) */
  TPU_K_STRING = 7,  /* v.s (e.g. rounding_mode, approximate) */
  TPU_K_DTYPE = 8,   /* v.dtype (ScalarType); INVALID if not representable */
  TPU_K_DOUBLES = 9, /* v.doubles (float[]) */
} tpu_k_value_kind_t;

typedef struct tpu_k_value_t {
  int32_t kind; /* tpu_k_value_kind_t */
  union {
    const tpu_tensor_t* tensor;
    int64_t i;
    double d;
    bool b;
    int32_t dtype;
    const char* s;
    struct {
      const int64_t* data;
      int64_t len;
    } ints;
    struct {
      const double* data;
      int64_t len;
    } doubles;
    struct {
      const tpu_tensor_t* data;
      int64_t len;
    } tensors;
  } v;
} tpu_k_value_t;

typedef struct tpu_k_call_t {
  const char* op;               /* full schema name */
  int32_t num_args;
  const tpu_k_value_t* args;    /* schema order */
  int32_t num_outputs;
  const tpu_tensor_t* outputs;  /* returned tensors, allocated by caller */
  tpu_threadpool_t* pool;       /* for tpu_parallel_for; may be NULL */
  /* For entries flagged TPU_K_FLAG_RANDOM: Philox key and the first counter
   * reserved for this call. The caller reserved enough counters for
   * tpu_k_random_counters(call) values (see below). */
  uint64_t rng_seed;
  uint64_t rng_offset;
  uint32_t flags;               /* TPU_K_CALL_* below; 0: strict */
} tpu_k_call_t;

/* tpu_k_call_t.flags: permissions the caller captured when the op was issued,
 * for entries flagged TPU_K_FLAG_MATMUL (0 for the others; a kernel may ignore
 * them). */
enum {
  /* float32 matrix products may round their operands to bfloat16 and
   * accumulate in float32 (torch.set_float32_matmul_precision("medium"),
   * torch.tpu.precision(Precision.DEFAULT)). */
  TPU_K_CALL_BF16_PRODUCTS = 1u << 0,
};

typedef tpu_status_t (*tpu_k_fn_t)(const tpu_k_call_t* call);
/* Bytes of every defined tensor of `call` (tensor arguments, members of
 * tensor lists, outputs), numel * element size each: what a profiler shows
 * as the bytes an op reads and writes (views count their own elements). */
int64_t tpu_k_call_bytes(const tpu_k_call_t* call);

/* Output shapes of data-dependent ops (nonzero, unique, masked_select, ...),
 * which PyTorch's meta functions cannot compute. Called synchronously on the
 * caller's thread after the device queue has drained, with call->outputs
 * NULL and num_outputs set. May read input data (the host driver's memory is
 * host-addressable; a driver whose memory is not must stage the inputs to
 * the host first). Writes each output's dtype, ndim and sizes into
 * `out_shapes[0..num_outputs)`; data and strides are ignored: the caller
 * allocates contiguous outputs, then queues run(). */
typedef tpu_status_t (*tpu_k_shape_fn_t)(const tpu_k_call_t* call, tpu_tensor_t* out_shapes);

enum {
  TPU_K_FLAG_RANDOM = 1u << 0, /* consumes random numbers */
  TPU_K_FLAG_LIST = 1u << 1,   /* a list op: see "List ops" below */
  TPU_K_FLAG_MATMUL = 1u << 2, /* a matrix product: reads TPU_K_CALL_BF16_PRODUCTS */
};

typedef struct tpu_k_entry_t {
  const char* name; /* "aten::add.Tensor" */
  tpu_k_fn_t run;
  tpu_k_fn_t check; /* may be NULL */
  uint32_t flags;
  tpu_k_shape_fn_t shape; /* only for data-dependent output shapes; else NULL */
} tpu_k_entry_t;

/* Finds the native kernel of an op; NULL when there is none. */
const tpu_k_entry_t* tpu_k_lookup(const char* name);
/* Checks the kernels' environment variables: TORCH_TPU_KERNEL_ISA ("generic"
 * or "avx2") and TORCH_TPU_CONV_PATH ("direct", "gemm" or "blocked"). INVALID_ARGUMENT
 * naming the variable and its value for anything else (the kernels read an
 * invalid value as unset: call this once at start-up to report it). */
tpu_status_t tpu_k_check_environment(void);
/* Every entry, for listing. */
size_t tpu_k_entry_count(void);
const tpu_k_entry_t* tpu_k_entry_at(size_t index);

/* ---- List ops (torch._foreach_*, entries flagged TPU_K_FLAG_LIST) ---------
 * A list op applies an elementwise per-tensor kernel, its base
 * (aten::_foreach_mul_.Scalar -> aten::mul_.Scalar), to element i of every
 * Tensor[] argument, for each i; a Scalar[] argument (TPU_K_DOUBLES) gives
 * element i its own scalar. In-place list ops return nothing and write their
 * first list; the others return one output per element (call->outputs).
 * Each element splits into pieces: chunks of TPU_K_LIST_CHUNK elements when
 * the element's tensors are all contiguous with equal sizes (and any plain
 * Tensor argument is 0-dim), else one piece. Pieces are independent unless
 * the lists alias each other, which tpu_k_list_footprint lets a caller
 * check (see tpu_hal_work_t.parts). */
#define TPU_K_LIST_CHUNK 32768

typedef struct tpu_k_list_op_t {
  const tpu_k_entry_t* base; /* the per-tensor kernel */
  int32_t extra_ones;        /* trailing base arguments the list op lacks
                                (add.Scalar's alpha): passed as 1 */
} tpu_k_list_op_t;

typedef void (*tpu_k_range_fn_t)(void* vctx, uintptr_t begin, uintptr_t end, bool write);

/* Resolves a list op by name; false if `name` is not one. */
bool tpu_k_list_op(const char* name, tpu_k_list_op_t* out);
/* Elements per list (0 for an empty list). */
int64_t tpu_k_list_length(const tpu_k_call_t* call);
/* Pieces of element i (>= 1). */
int64_t tpu_k_list_pieces(const tpu_k_call_t* call, int64_t i);
/* Runs piece k of element i through the base kernel. */
tpu_status_t tpu_k_list_run_piece(const tpu_k_list_op_t* op, const tpu_k_call_t* call, int64_t i,
                                  int64_t k);
/* Calls visit for every byte range piece k of element i reads or writes. */
void tpu_k_list_footprint(const tpu_k_call_t* call, int64_t i, int64_t k, tpu_k_range_fn_t visit,
                          void* vctx);

/* Counters a random op consumes: each output element takes at most 4 Philox
 * 32-bit draws; the caller advances the generator's offset by this. */
uint64_t tpu_k_random_counters(const tpu_k_call_t* call);

#ifdef __cplusplus
}
#endif
#endif /* TPU_KERNELS_H_ */
