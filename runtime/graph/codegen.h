/* codegen.h - C code generation for fused pointwise groups (internal to
 * runtime/graph).
 *
 * graph.c describes a fused group in the group's own iteration space: a
 * shape, the tensors the group reads or writes in memory ("external"
 * operands, each with its strides in that space, 0 where broadcast) and its
 * nodes in order. codegen.c turns supported groups into C functions
 *
 *     void tpu_cg_<id>(char* const* p, int64_t begin, int64_t end);
 *
 * over elements [begin, end) of the flattened iteration space (p[k]: the
 * data pointer of external operand k), so a chain is one loop whose
 * intermediates stay in registers. Groups with keepdim sums/means/amaxes over their
 * trailing dims (RMSNorm) run by rows: one pass over the row per reduction,
 * then a last pass for the full-size results. One translation unit holds every function
 * of a graph; it is compiled by the system C compiler into a shared object
 * that is cached on disk (TORCH_TPU_CACHE_DIR) under a key of the source,
 * the compiler's identity and the CPU's features, and loaded with dlopen.
 */
#ifndef TPU_GRAPH_CODEGEN_H_
#define TPU_GRAPH_CODEGEN_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/kernels.h"
#include "tpu/status.h"

enum { TPU_CG_MAX_EXT = 24 };

/* TORCH_TPU_CODEGEN: "0" never (tile interpreter), "1" always (a missing
 * compiler is an error), unset or "auto": generate when a compiler works,
 * otherwise interpret. */
typedef enum tpu_cg_mode_e { TPU_CG_OFF = 0, TPU_CG_AUTO = 1, TPU_CG_ON = 2 } tpu_cg_mode_t;
tpu_cg_mode_t tpu_cg_mode_from_env(void);

typedef struct tpu_cg_ext_t {
  int32_t dtype;
  int64_t strides[TPU_MAX_DIMS]; /* elements per step of each group dim */
} tpu_cg_ext_t;

typedef struct tpu_cg_node_t {
  const char* op; /* kernel table name, e.g. "aten::add.Tensor" */
  int32_t nargs;
  const tpu_k_value_t* args;
  /* per argument, where args[i] is a tensor: >= 0 an external operand, or
   * -1 - m for the result of the group's node m (m earlier than this one) */
  const int32_t* tensor_ref;
  int32_t dtype; /* result dtype */
  int32_t store; /* external operand the result is written to; -1 none */
  bool row;      /* result has the group's reduced dims as 1 (see reduce_from) */
} tpu_cg_node_t;

/* A group is pointwise over its shape, or (reduce_from < ndim) its
 * reductions (sum/mean/amax keeping dims) all reduce dims [reduce_from, ndim):
 * "row" nodes iterate the shape with those dims 1, the others all of it. */
typedef struct tpu_cg_group_t {
  int32_t ndim;
  const int64_t* sizes;
  int32_t reduce_from;
  int32_t next;
  const tpu_cg_ext_t* ext;
  int32_t nnodes;
  const tpu_cg_node_t* nodes;
} tpu_cg_group_t;

/* Growable C source text. */
typedef struct tpu_cg_text_t {
  char* s;
  size_t len, cap;
  bool oom;
} tpu_cg_text_t;
void tpu_cg_text_free(tpu_cg_text_t* t);

/* Appends the shared preamble every translation unit starts with. */
void tpu_cg_prelude(tpu_cg_text_t* t);
/* Appends the function for `group` named tpu_cg_<id>. Returns false, with
 * `why` set and nothing appended, when a node, dtype or layout is not one
 * code generation covers. The function runs units [begin, end) of
 * `*out_units` (elements of a pointwise group, rows of a reduction group);
 * `*out_grain` is the fewest units worth a thread. */
bool tpu_cg_emit_group(tpu_cg_text_t* t, int32_t id, const tpu_cg_group_t* group, const char** why,
                       int64_t* out_units, int64_t* out_grain);

typedef void (*tpu_cg_fn_t)(char* const* p, int64_t begin, int64_t end);

typedef struct tpu_cg_module_t tpu_cg_module_t;
/* Finds `source` in the disk cache or compiles it there, and loads it.
 * `out_cache_hit` and `out_compile_ns` say which happened and the time. */
tpu_status_t tpu_cg_load(const tpu_cg_text_t* source, tpu_cg_module_t** out_module, bool* out_cache_hit,
                         int64_t* out_compile_ns);
tpu_cg_fn_t tpu_cg_symbol(tpu_cg_module_t* module, int32_t id);
void tpu_cg_unload(tpu_cg_module_t* module);

#endif /* TPU_GRAPH_CODEGEN_H_ */
