/* tpu/graph.h - the graph compiler: a whole ATen graph (from torch.compile)
 * built once, planned once, run with one device submission per call.
 *
 * Building. A graph belongs to one device. Its values are strided views of
 * buffers; a buffer is
 *   - an INPUT (bound at run time to a caller's pointer),
 *   - an OUTPUT (a buffer the caller allocates per run, of the size the
 *     compiled graph reports, and keeps: it is what the graph returns), or
 *   - an INTERNAL buffer, placed by the memory planner into the graph's arena
 *     (one device allocation per graph, made once at compile time and reused
 *     by every run).
 * tpu_graph_input() adds an input; tpu_graph_view() aliases an existing
 * value's buffer (view ops: no node, no work); tpu_graph_node() adds a kernel
 * call (a tpu/kernels.h table entry) whose tensor arguments are value ids and
 * whose outputs are new INTERNAL buffers, or alias an argument for in-place /
 * out= ops. tpu_graph_mark_output() asks for a value to be returned.
 *
 * Compiling (tpu_graph_compile) runs each kernel's check(), fuses chains of
 * pointwise nodes (flag TPU_GRAPH_NODE_POINTWISE) into tiled groups whose
 * intermediates never reach memory, plans INTERNAL buffers by liveness into
 * one arena, and turns marked outputs' buffers into OUTPUT buffers.
 * Fusion covers runs of pointwise nodes and keepdim reductions (flag
 * TPU_GRAPH_NODE_REDUCTION) over one iteration shape, tiled along the first
 * dim no member reduces. A 2-D GEMM (flag TPU_GRAPH_NODE_GEMM) may head such
 * a group when the next nodes consume its output (directly or through a view
 * that splits its rows, as linear() on 3-D inputs does) and the product has
 * fewer than 128 rows per pool thread: each tile computes a block of the
 * product's columns (A whole) and runs the epilogue on it while it is in
 * cache; the raw product lives in tile scratch when only the group reads it.
 * A product with more rows is computed whole (tiling its rows would pack B
 * again per tile) and its consumers form their own group. A convolution
 * (tpu::conv_fwd, not transposed) or a group norm (tpu::group_norm) flagged
 * TPU_GRAPH_NODE_CHANNELS may head a group the same way when its consumers
 * read its contiguous output in its own shape: each tile computes a band of
 * the convolution's output rows (first spatial dim; all channels, from the
 * band of input rows it reads, the padding adjusted per band) or whole
 * groups of the group norm's channels (with their statistics, `group` set to
 * their count), then runs the epilogue (bias or time-embedding adds, SiLU,
 * residual adds) on it while it is in cache. It heads a group only when its
 * tiles are at least one per pool thread, or one tile small enough to stay
 * in cache. With generated
 * code on, a reduction over a leading dim runs as a plain node. Consecutive
 * standalone mm nodes of one row by different B that read the same row
 * (q, k and v while decoding) run as one step: one parallel loop over
 * blocks of all their columns.
 *
 * Code generation: a fused group of pointwise nodes that all iterate the
 * group's shape, over float32/bfloat16/float16 values, becomes one generated
 * C loop (runtime/graph/codegen.c), compiled by the system C compiler and
 * cached on disk (TORCH_TPU_CACHE_DIR); so does the float pointwise epilogue
 * of a convolution or group norm head (the head writes its tile to memory,
 * the loop runs over the tile's elements); other groups, and every group
 * when TORCH_TPU_CODEGEN=0 or no compiler works, run on the tile
 * interpreter.
 *
 * Drivers that run graphs themselves (the HAL's run_graph: PJRT, whose
 * memory the host cannot address) get the graph as built instead: no
 * fusion, planning or code generation here; a node the driver cannot run is
 * refused by tpu_graph_node (UNIMPLEMENTED, the caller runs it eagerly), and
 * each run is one tpu_hal_graph_t run (one compiled program).
 *
 * Running (tpu_graph_run) queues one work item on the device; kernel errors
 * surface at the next synchronisation, named by op, like eager kernels.
 * Runs of one graph execute in submission order (one in-order queue per
 * device), so the arena is never used by two runs at once.
 */
#ifndef TPU_GRAPH_H_
#define TPU_GRAPH_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/kernels.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_graph_t tpu_graph_t;

/* A kernel argument while building: like tpu_k_value_t, but tensors are
 * value ids. TENSOR: `i` is the value id. TENSORS: `ints[0..len)` are value
 * ids, -1 for an absent optional entry. INT/BOOL: `i`. DOUBLE: `d`. INTS:
 * `ints`. DOUBLES: `doubles`. STRING: `s`. DTYPE: `i`. Everything is copied. */
typedef struct tpu_graph_arg_t {
  int32_t kind; /* tpu_k_value_kind_t */
  int64_t i;
  double d;
  const int64_t* ints;
  const double* doubles;
  int64_t len;
  const char* s;
} tpu_graph_arg_t;

enum {
  TPU_GRAPH_NODE_POINTWISE = 1u << 0, /* elementwise with broadcasting: fusable */
  TPU_GRAPH_NODE_REDUCTION = 1u << 1, /* reduction of argument 0 keeping reduced dims as 1:
                                         fusable when the tiled dim is not reduced */
  TPU_GRAPH_NODE_GEMM = 1u << 2,      /* aten::mm / aten::addmm (2-D): may head a fused group
                                         whose pointwise epilogue consumes its output */
  TPU_GRAPH_NODE_CHANNELS = 1u << 3,  /* tpu::conv_fwd (not transposed) / tpu::group_norm:
                                         may head a fused group tiled along output rows /
                                         whole groups of channels */
};

/* Buffer kinds reported for outputs. */
enum { TPU_GRAPH_BUF_INPUT = 0, TPU_GRAPH_BUF_OUTPUT = 1, TPU_GRAPH_BUF_INTERNAL = 2 };

typedef struct tpu_graph_stats_t {
  int64_t nodes;          /* kernel nodes */
  int64_t fused_groups;   /* groups of >= 2 pointwise nodes run tile by tile */
  int64_t fused_nodes;    /* nodes inside those groups */
  int64_t scratch_values; /* intermediates kept in tiles, never in memory */
  int64_t steps;          /* kernel launches per run (a fused group is one) */
  int64_t arena_bytes;    /* planned arena */
  int64_t unplanned_bytes;/* sum of INTERNAL buffer sizes before planning */
  int64_t codegen_groups;    /* fused groups run by generated C code */
  int64_t codegen_functions; /* distinct generated functions (identical groups share one) */
  int64_t codegen_cache_hits;/* 1 when the compiled code came from the disk cache */
  int64_t codegen_compile_ns;/* time spent in the C compiler (0 on a cache hit) */
  int64_t codegen_unavailable;/* 1 when code generation was wanted but no compiler worked */
  int64_t gemm_groups;    /* fused groups headed by a GEMM (its epilogue runs on its tiles) */
  int64_t conv_groups;    /* fused groups headed by a convolution (epilogue on its channel tiles) */
  int64_t norm_groups;    /* fused groups headed by a group norm (epilogue on its channel tiles) */
  int64_t gemv_batches;   /* steps running >= 2 one-row products of the same row as one parallel loop */
  int64_t gemv_batched;   /* products inside those steps */
  int64_t driver_graph;   /* 1: the device's driver runs the whole graph as one program per run */
} tpu_graph_stats_t;

/* New empty graph for device `device_index` (must exist). */
tpu_status_t tpu_graph_create(int32_t device_index, tpu_graph_t** out_graph);
/* Drops the caller's reference; queued runs keep the graph (and its arena)
 * alive until they have executed. NULL-safe. */
void tpu_graph_release(tpu_graph_t* graph);

/* Code generation for this graph's fused groups (tpu_cg_mode_t in
 * runtime/graph/codegen.h: 0 off, 1 auto, 2 required); default from
 * TORCH_TPU_CODEGEN. Call before tpu_graph_compile. */
void tpu_graph_set_codegen(tpu_graph_t* graph, int32_t mode);

/* Adds input number `tpu_graph_num_inputs()` (before the call). `meta`
 * gives dtype, ndim, sizes, strides (data ignored); at run time the input
 * pointer points at element [0,...,0]. */
tpu_status_t tpu_graph_input(tpu_graph_t* graph, const tpu_tensor_t* meta, int32_t* out_value);
/* A view of `base`'s buffer: `meta` describes the view, `byte_delta` is its
 * first element's distance in bytes from `base`'s first element. A view
 * identical to `base` (same dtype, sizes, strides, offset: alias(), a full
 * slice) is `base` itself, so fusion sees one value. */
tpu_status_t tpu_graph_view(tpu_graph_t* graph, int32_t base, const tpu_tensor_t* meta,
                            int64_t byte_delta, int32_t* out_value);
/* A new uninitialised INTERNAL buffer described by `meta`, for a node to
 * write through an aliased output (lowering a functional op to its out=
 * variant or to copy_). */
tpu_status_t tpu_graph_empty(tpu_graph_t* graph, const tpu_tensor_t* meta, int32_t* out_value);
/* Adds a call of kernel `op`. `out_metas[j]` describes output j (data
 * ignored; dtype TPU_DTYPE_INVALID: an output not wanted, value id -1); `out_alias[j]` >= 0 makes output j the tensor value passed as
 * argument out_alias[j] (in-place / out= ops), -1 a new buffer. UNIMPLEMENTED
 * when the kernel table has no `op` or the op has data-dependent shapes. */
tpu_status_t tpu_graph_node(tpu_graph_t* graph, const char* op, uint32_t flags, int32_t num_args,
                            const tpu_graph_arg_t* args, int32_t num_outputs,
                            const tpu_tensor_t* out_metas, const int32_t* out_alias,
                            int32_t* out_values);
/* Requests value `value` as a result. Call before compile. */
tpu_status_t tpu_graph_mark_output(tpu_graph_t* graph, int32_t value);
tpu_status_t tpu_graph_compile(tpu_graph_t* graph);

int32_t tpu_graph_num_inputs(const tpu_graph_t* graph);
int32_t tpu_graph_num_output_buffers(const tpu_graph_t* graph);
/* After compile: bytes of OUTPUT buffer `k`. */
size_t tpu_graph_output_buffer_bytes(const tpu_graph_t* graph, int32_t k);
/* After compile: where value `value` lives: buffer kind (INPUT or OUTPUT),
 * its index among inputs / output buffers, and the byte offset of its first
 * element from that buffer's pointer. */
tpu_status_t tpu_graph_locate(const tpu_graph_t* graph, int32_t value, int32_t* out_kind,
                              int32_t* out_index, int64_t* out_byte_offset);
/* Metadata of a value (data NULL). */
tpu_status_t tpu_graph_value_meta(const tpu_graph_t* graph, int32_t value, tpu_tensor_t* out_meta);
void tpu_graph_get_stats(const tpu_graph_t* graph, tpu_graph_stats_t* out_stats);

/* Per-step timing (off by default; costs two clock reads per step). When
 * on, every run adds each step's wall time to its first node's counter. */
void tpu_graph_set_profiling(tpu_graph_t* graph, bool on);
/* Node `i`'s op name, accumulated nanoseconds, and its fused group (-1 if
 * none); after compile. INVALID_ARGUMENT when `i` is out of range. */
tpu_status_t tpu_graph_node_profile(const tpu_graph_t* graph, int32_t i, const char** out_op, int64_t* out_ns,
                                    int32_t* out_group);
/* Whether fused group `group` (as tpu_graph_node_profile reports it) runs
 * generated code (else the tile interpreter). */
bool tpu_graph_group_generated(const tpu_graph_t* graph, int32_t group);

/* Queues one run. `inputs[k]` is input k's pointer, `outputs[k]` output
 * buffer k (allocated by the caller on the graph's device, at least
 * tpu_graph_output_buffer_bytes(k) bytes). The arrays are copied.
 * `call_flags`: TPU_K_CALL_* bits (tpu/kernels.h) this run hands to its
 * matrix-product nodes (entries with TPU_K_FLAG_MATMUL), as an eager call
 * issued now would get them (e.g. TPU_K_CALL_BF16_PRODUCTS under torch's
 * "medium" float32 matmul precision); 0 for none. A graph the driver runs
 * itself (run_graph) ignores them. */
tpu_status_t tpu_graph_run(tpu_graph_t* graph, void* const* inputs, void* const* outputs, uint32_t call_flags);

#ifdef __cplusplus
}
#endif
#endif /* TPU_GRAPH_H_ */
