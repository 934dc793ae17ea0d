/* graph.c - graph IR, fusion of pointwise chains, liveness memory planning
 * and one-submission execution (see tpu/graph.h). */
#define _POSIX_C_SOURCE 200809L
#include "tpu/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpu/base.h"
#include "tpu/hal.h"
#include "tpu/runtime.h"
#include "tpu/trace.h"

#include "codegen.h"

/* Elements per fused tile: a handful of float32 tiles of this size stay in
 * the L2 cache while a chain runs over them. */
#define TILE_ELEMS 32768
/* Limits for a node to join a fused group (the tile loop keeps its argument
 * copies on the stack). */
#define GROUP_MAX_ARGS 16
#define GROUP_MAX_TENSORS 8
#define ALIGN 64
/* GEMM-headed groups tile the product's columns (multiples of linalg.c's
 * 32-column micro-panels; it splits columns itself, so this costs it
 * nothing; A is packed again per tile, which is cheap while A has few rows).
 * A product with GEMM_MIN_ROWS rows or more per pool thread heads no group:
 * tiling its rows would pack all of B again per tile; the GEMM runs on its
 * own and its consumers form a generated group. */
#define GEMM_MIN_ROWS 128
#define GEMM_COL_ALIGN 32
#define GEMM_MAX_COLS 1024
/* Groups headed by a convolution or a group norm (its epilogue after it):
 * a convolution's tiles are bands of output rows (its first spatial dim),
 * all channels, reading the band of input rows they need; a group norm's
 * are whole groups of channels. About two tiles per pool thread, of at most
 * SLAB_TILE_ELEMS output elements (a tile's output stays in cache while the
 * epilogue reads it). Where that gives fewer tiles than the pool has
 * threads, an output of at most SLAB_ONE_TILE_ELEMS is one tile (its kernel
 * and epilogue each use the pool), a larger one heads no group. */
#define SLAB_TILE_ELEMS (4 * TILE_ELEMS)
#define SLAB_ONE_TILE_ELEMS (32 * TILE_ELEMS)

typedef struct buf_t {
  int32_t kind;  /* TPU_GRAPH_BUF_* */
  int32_t index; /* input number / output buffer number */
  int64_t bytes;
  int64_t offset;   /* arena offset (INTERNAL) */
  int32_t def_step; /* liveness, in steps */
  int32_t last_step;
  bool scratch; /* every byte lives in fused tiles: no memory */
  int32_t prod_val; /* the node output that created it, -1 for inputs */
} buf_t;

typedef struct val_t {
  int32_t buf;
  int64_t off; /* bytes from the buffer's pointer */
  tpu_tensor_t meta;
  int32_t producer; /* node id, -1 for inputs and views */
  int32_t views;    /* other values aliasing this (produced) value's buffer */
  bool scratch;
} val_t;

/* GROUPS: sliced along slot_dim in units of the group's `unit` channels (a
 * group norm's mean and rstd, one entry per group of channels) */
/* WINDOW: a convolution's input, narrowed along slot_dim to the rows its
 * output tile reads (and the padding argument adjusted to match) */
enum { SLOT_WHOLE = 0, SLOT_SLICE = 1, SLOT_SCRATCH = 2, SLOT_GROUPS = 3, SLOT_WINDOW = 4 };

/* What heads a fused group: nothing (pointwise/reduction chain), a 2-D mm /
 * addmm (tiled along its columns), a convolution (tiled along output rows)
 * or a group norm (tiled along channels, in whole groups). */
enum { HEAD_NONE = 0, HEAD_GEMM = 1, HEAD_CONV = 2, HEAD_NORM = 3 };

typedef struct node_t {
  const tpu_k_entry_t* entry;
  uint32_t flags;
  int32_t nargs;
  tpu_k_value_t* vals;
  int32_t ntens; /* tensor slots: argument tensors, then outputs */
  int32_t nargtens;
  tpu_tensor_t* tens;
  int32_t* tens_vid; /* -1: absent optional tensor */
  int32_t nout;
  int32_t* out_vid;
  int32_t* out_alias;
  int32_t group; /* -1 standalone */
  int32_t step;
  /* per slot, inside a fused group */
  uint8_t* slot_mode;
  int32_t* slot_dim;     /* SLICE: the sliced dim */
  int64_t* slot_scratch; /* SCRATCH: byte offset in the tile scratch */
  int64_t ns;             /* profiling: time of the step it starts */
  void** owned;          /* copied argument payloads */
  int32_t nowned;
} node_t;

typedef struct group_t {
  int32_t first, count; /* nodes [first, first+count) in order */
  int32_t ndim;
  int64_t sizes[TPU_MAX_DIMS];
  int32_t axis; /* tiled dim, -1: one tile */
  int64_t inner;
  int64_t rows_per_tile;
  int64_t ntiles;
  int64_t scratch_bytes;
  /* generated code (codegen.h): function id, -1 interpreted */
  int32_t cg;
  tpu_cg_fn_t fn;
  int64_t cg_units, cg_grain;
  int32_t next; /* external operands: node and tensor slot holding the pointer */
  int32_t ext_node[TPU_CG_MAX_EXT];
  int32_t ext_slot[TPU_CG_MAX_EXT];
  /* Head (node `first`, see HEAD_*): the tiled dim of its output (GEMM:
   * 1, the columns of [M, N]; convolution: 2, the rows; group norm: 1, the
   * channels), -1 for groups without a head. */
  int32_t gemm_dim;
  int32_t head;
  int64_t unit; /* conv / norm head: the tiled dim is cut in multiples of this (a group norm: C / group) */
  /* conv / norm head with generated code: the epilogue (nodes after the
   * head) is `fn` over the group's shape with the tiled dim outermost; a
   * tile runs the head, then fn over its elements (`inner` per row) */
  bool cg_epilogue;
  int64_t inner_elems;
  bool float_only; /* every member has float results and float or bool operands */
} group_t;

typedef struct step_t {
  int32_t node;  /* >= 0: standalone node */
  int32_t group; /* >= 0: fused group */
  int32_t count;  /* > 1: nodes [node, node + count) are one-row products of one row (batch_gemvs) */
  int64_t cols;   /* their columns per block */
  int64_t blocks; /* blocks of all of them */
} step_t;

struct tpu_graph_t {
  tpu_object_t object;
  int32_t device_index;
  tpu_hal_device_t* device;
  bool compiled;
  buf_t* bufs;
  int32_t nbufs, capbufs;
  val_t* vals;
  int32_t nvals, capvals;
  node_t* nodes;
  int32_t nnodes, capnodes;
  group_t* groups;
  int32_t ngroups;
  step_t* steps;
  int32_t nsteps;
  int32_t ninputs;
  int32_t noutputs;
  void* arena;
  int64_t arena_bytes;
  int64_t unplanned_bytes;
  /* tile scratch: one slot per pool thread */
  void* scratch;
  int64_t slot_bytes;
  int32_t nslots;
  int32_t* slot_busy;
  tpu_graph_stats_t stats;
  int32_t profiling; /* atomic */
  int32_t cg_mode;   /* tpu_cg_mode_t */
  tpu_cg_module_t* cg_module;
  /* the driver runs the graph (HAL run_graph): its description */
  bool driver_graph;
  tpu_hal_graph_t hal;
  tpu_hal_graph_buffer_t* hal_bufs;
  tpu_hal_graph_node_t* hal_nodes;
  tpu_k_call_t* hal_calls;
  int32_t* hal_slot_buf;
  int64_t* hal_slot_off;
  /* the running execution's TPU_K_CALL_* flags for matrix-product nodes */
  uint32_t call_flags;
};

_Static_assert((int)TPU_HAL_GRAPH_INPUT == (int)TPU_GRAPH_BUF_INPUT &&
                   (int)TPU_HAL_GRAPH_OUTPUT == (int)TPU_GRAPH_BUF_OUTPUT &&
                   (int)TPU_HAL_GRAPH_INTERNAL == (int)TPU_GRAPH_BUF_INTERNAL,
               "graph buffer kinds are the HAL's");

/* ---- small helpers ---------------------------------------------------------- */

static tpu_status_t grow(void** items, int32_t* cap, int32_t need, size_t item) {
  if (need <= *cap) return TPU_OK;
  int32_t ncap = *cap ? *cap * 2 : 64;
  while (ncap < need) ncap *= 2;
  void* p = realloc(*items, (size_t)ncap * item);
  if (!p) return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "graph: out of host memory");
  *items = p;
  *cap = ncap;
  return TPU_OK;
}

static int64_t extent_bytes(const tpu_tensor_t* t) {
  return tpu_tensor_span(t) * (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
}

static int64_t align_up(int64_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static tpu_status_t check_meta(const tpu_tensor_t* m) {
  if (!m || m->ndim < 0 || m->ndim > TPU_MAX_DIMS || tpu_dtype_size((tpu_dtype_t)m->dtype) == 0) {
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "graph: bad tensor metadata (ndim %d, dtype %d)",
                     m ? m->ndim : -1, m ? m->dtype : -1);
  }
  for (int32_t d = 0; d < m->ndim; ++d) {
    if (m->sizes[d] < 0 || m->strides[d] < 0) {
      return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "graph: negative size or stride in dim %d", d);
    }
  }
  return TPU_OK;
}

static tpu_status_t add_buf(tpu_graph_t* g, int32_t kind, int64_t bytes, int32_t* out) {
  TPU_RETURN_IF_ERROR(grow((void**)&g->bufs, &g->capbufs, g->nbufs + 1, sizeof(buf_t)));
  buf_t* b = &g->bufs[g->nbufs];
  memset(b, 0, sizeof(*b));
  b->kind = kind;
  b->bytes = bytes;
  b->def_step = -1;
  b->last_step = -1;
  b->prod_val = -1;
  *out = g->nbufs++;
  return TPU_OK;
}

static tpu_status_t add_val(tpu_graph_t* g, int32_t buf, int64_t off, const tpu_tensor_t* meta,
                            int32_t producer, int32_t* out) {
  TPU_RETURN_IF_ERROR(grow((void**)&g->vals, &g->capvals, g->nvals + 1, sizeof(val_t)));
  val_t* v = &g->vals[g->nvals];
  memset(v, 0, sizeof(*v));
  v->buf = buf;
  v->off = off;
  v->meta = *meta;
  v->meta.data = NULL;
  v->producer = producer;
  if (producer >= 0) g->bufs[buf].prod_val = g->nvals;
  *out = g->nvals++;
  return TPU_OK;
}

static tpu_status_t check_building(const tpu_graph_t* g) {
  if (!g) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "graph: NULL graph");
  if (g->compiled) return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION, "graph: already compiled");
  return TPU_OK;
}

static tpu_status_t check_value(const tpu_graph_t* g, int64_t v, const char* op) {
  if (v < 0 || v >= g->nvals) {
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "graph: %s: no value %lld (graph has %d)", op,
                     (long long)v, g->nvals);
  }
  return TPU_OK;
}

/* ---- object ----------------------------------------------------------------- */

static void node_free(node_t* n) {
  for (int32_t i = 0; i < n->nowned; ++i) free(n->owned[i]);
  free(n->owned);
  free(n->vals);
  free(n->tens);
  free(n->tens_vid);
  free(n->out_vid);
  free(n->out_alias);
  free(n->slot_mode);
  free(n->slot_dim);
  free(n->slot_scratch);
}

static void graph_destroy(tpu_object_t* object) {
  tpu_graph_t* g = (tpu_graph_t*)object;
  if (g->device) {
    const tpu_hal_device_vtable_t* vt = tpu_hal_device_vt(g->device);
    vt->deallocate(g->device, g->arena);
    vt->deallocate(g->device, g->scratch);
  }
  for (int32_t i = 0; i < g->nnodes; ++i) node_free(&g->nodes[i]);
  free(g->nodes);
  free(g->vals);
  free(g->bufs);
  free(g->groups);
  free(g->steps);
  free(g->slot_busy);
  tpu_cg_unload(g->cg_module);
  free(g->hal_bufs);
  free(g->hal_nodes);
  free(g->hal_calls);
  free(g->hal_slot_buf);
  free(g->hal_slot_off);
  free(g);
}

static const tpu_object_vtable_t kGraphVtable = {graph_destroy};

tpu_status_t tpu_graph_create(int32_t device_index, tpu_graph_t** out_graph) {
  if (!out_graph) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "graph: NULL out_graph");
  *out_graph = NULL;
  tpu_hal_device_t* device = NULL;
  TPU_RETURN_IF_ERROR(tpu_runtime_device(device_index, &device));
  tpu_hal_device_properties_t props;
  const tpu_hal_device_vtable_t* vt = tpu_hal_device_vt(device);
  vt->query_properties(device, &props);
  bool driver_graph = vt->run_graph && vt->check_graph_node;
  if (!props.host_addressable && !driver_graph)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED,
                     "graph: tpu:%d (%s driver) has memory the C graph compiler cannot address",
                     device_index, props.driver);
  tpu_graph_t* g = calloc(1, sizeof(*g));
  if (!g) return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "graph: out of host memory");
  tpu_object_init(&g->object, &kGraphVtable);
  g->device_index = device_index;
  g->device = device;
  g->driver_graph = driver_graph;
  g->cg_mode = (int32_t)tpu_cg_mode_from_env();
  *out_graph = g;
  return TPU_OK;
}

void tpu_graph_release(tpu_graph_t* graph) { tpu_object_release(graph ? &graph->object : NULL); }

void tpu_graph_set_codegen(tpu_graph_t* g, int32_t mode) {
  if (g) g->cg_mode = mode;
}

/* ---- building ---------------------------------------------------------------- */

tpu_status_t tpu_graph_input(tpu_graph_t* g, const tpu_tensor_t* meta, int32_t* out_value) {
  TPU_RETURN_IF_ERROR(check_building(g));
  TPU_RETURN_IF_ERROR(check_meta(meta));
  int32_t b;
  TPU_RETURN_IF_ERROR(add_buf(g, TPU_GRAPH_BUF_INPUT, extent_bytes(meta), &b));
  g->bufs[b].index = g->ninputs++;
  return add_val(g, b, 0, meta, -1, out_value);
}

tpu_status_t tpu_graph_view(tpu_graph_t* g, int32_t base, const tpu_tensor_t* meta, int64_t byte_delta,
                            int32_t* out_value) {
  TPU_RETURN_IF_ERROR(check_building(g));
  TPU_RETURN_IF_ERROR(check_value(g, base, "view"));
  TPU_RETURN_IF_ERROR(check_meta(meta));
  const val_t* bv = &g->vals[base];
  int64_t off = bv->off + byte_delta;
  if (off == bv->off && meta->dtype == bv->meta.dtype && meta->ndim == bv->meta.ndim &&
      memcmp(meta->sizes, bv->meta.sizes, sizeof(int64_t) * (size_t)meta->ndim) == 0 &&
      memcmp(meta->strides, bv->meta.strides, sizeof(int64_t) * (size_t)meta->ndim) == 0) {
    *out_value = base; /* an identity view */
    return TPU_OK;
  }
  buf_t* b = &g->bufs[bv->buf];
  if (b->kind != TPU_GRAPH_BUF_INPUT && off < 0) {
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "graph: view starts %lld bytes before its buffer",
                     (long long)-off);
  }
  int64_t end = off + extent_bytes(meta);
  if (b->kind != TPU_GRAPH_BUF_INPUT && end > b->bytes) b->bytes = end;
  int32_t bufi = bv->buf;
  if (b->prod_val >= 0) g->vals[b->prod_val].views++;
  return add_val(g, bufi, off, meta, -1, out_value);
}

tpu_status_t tpu_graph_empty(tpu_graph_t* g, const tpu_tensor_t* meta, int32_t* out_value) {
  TPU_RETURN_IF_ERROR(check_building(g));
  TPU_RETURN_IF_ERROR(check_meta(meta));
  int32_t b;
  TPU_RETURN_IF_ERROR(add_buf(g, TPU_GRAPH_BUF_INTERNAL, extent_bytes(meta), &b));
  return add_val(g, b, 0, meta, -1, out_value);
}

static void* own(node_t* n, const void* src, size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  void** list = realloc(n->owned, (size_t)(n->nowned + 1) * sizeof(void*));
  if (!p || !list) {
    free(p);
    if (list) n->owned = list;
    return NULL;
  }
  n->owned = list;
  if (bytes) memcpy(p, src, bytes);
  n->owned[n->nowned++] = p;
  return p;
}

static tpu_status_t fill_node(tpu_graph_t* g, node_t* n, int32_t num_args, const tpu_graph_arg_t* args,
                              int32_t num_outputs, const tpu_tensor_t* out_metas, const int32_t* out_alias,
                              int32_t node_id, int32_t* out_values, const char* op) {
  int32_t ntens = num_outputs;
  for (int32_t i = 0; i < num_args; ++i) {
    if (args[i].kind == TPU_K_TENSOR) ntens += 1;
    if (args[i].kind == TPU_K_TENSORS) ntens += (int32_t)args[i].len;
  }
  n->nargs = num_args;
  n->ntens = ntens;
  n->nout = num_outputs;
  n->vals = calloc((size_t)(num_args ? num_args : 1), sizeof(tpu_k_value_t));
  n->tens = calloc((size_t)(ntens ? ntens : 1), sizeof(tpu_tensor_t));
  n->tens_vid = calloc((size_t)(ntens ? ntens : 1), sizeof(int32_t));
  n->out_vid = calloc((size_t)(num_outputs ? num_outputs : 1), sizeof(int32_t));
  n->out_alias = calloc((size_t)(num_outputs ? num_outputs : 1), sizeof(int32_t));
  n->slot_mode = calloc((size_t)(ntens ? ntens : 1), 1);
  n->slot_dim = calloc((size_t)(ntens ? ntens : 1), sizeof(int32_t));
  n->slot_scratch = calloc((size_t)(ntens ? ntens : 1), sizeof(int64_t));
  if (!n->vals || !n->tens || !n->tens_vid || !n->out_vid || !n->out_alias || !n->slot_mode ||
      !n->slot_dim || !n->slot_scratch) {
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "graph: out of host memory");
  }
  int32_t k = 0;
  for (int32_t i = 0; i < num_args; ++i) {
    const tpu_graph_arg_t* a = &args[i];
    tpu_k_value_t* v = &n->vals[i];
    v->kind = a->kind;
    switch (a->kind) {
      case TPU_K_NONE:
        break;
      case TPU_K_TENSOR:
        TPU_RETURN_IF_ERROR(check_value(g, a->i, op));
        n->tens[k] = g->vals[a->i].meta;
        n->tens_vid[k] = (int32_t)a->i;
        v->v.tensor = &n->tens[k++];
        break;
      case TPU_K_TENSORS:
        v->v.tensors.data = &n->tens[k];
        v->v.tensors.len = a->len;
        for (int64_t j = 0; j < a->len; ++j) {
          if (a->ints[j] < 0) {
            n->tens_vid[k] = -1;
            k++;
            continue;
          }
          TPU_RETURN_IF_ERROR(check_value(g, a->ints[j], op));
          n->tens[k] = g->vals[a->ints[j]].meta;
          n->tens_vid[k++] = (int32_t)a->ints[j];
        }
        break;
      case TPU_K_INT:
        v->v.i = a->i;
        break;
      case TPU_K_BOOL:
        v->v.b = a->i != 0;
        break;
      case TPU_K_DTYPE:
        v->v.dtype = (int32_t)a->i;
        break;
      case TPU_K_DOUBLE:
        v->v.d = a->d;
        break;
      case TPU_K_INTS:
        v->v.ints.data = own(n, a->ints, (size_t)a->len * sizeof(int64_t));
        v->v.ints.len = a->len;
        if (!v->v.ints.data) return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "graph: out of host memory");
        break;
      case TPU_K_DOUBLES:
        v->v.doubles.data = own(n, a->doubles, (size_t)a->len * sizeof(double));
        v->v.doubles.len = a->len;
        if (!v->v.doubles.data) return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "graph: out of host memory");
        break;
      case TPU_K_STRING:
        v->v.s = own(n, a->s ? a->s : "", strlen(a->s ? a->s : "") + 1);
        if (!v->v.s) return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "graph: out of host memory");
        break;
      default:
        return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "graph: %s: argument %d has unknown kind %d", op, i,
                         a->kind);
    }
  }
  n->nargtens = k;
  for (int32_t j = 0; j < num_outputs; ++j) {
    int32_t alias = out_alias ? out_alias[j] : -1;
    n->out_alias[j] = alias;
    if (out_metas[j].dtype == TPU_DTYPE_INVALID && alias < 0) {
      /* an output the caller does not want: the kernel sees dtype INVALID */
      memset(&n->tens[k], 0, sizeof(n->tens[k]));
      n->tens_vid[k++] = -1;
      n->out_vid[j] = -1;
      out_values[j] = -1;
      continue;
    }
    TPU_RETURN_IF_ERROR(check_meta(&out_metas[j]));
    int32_t vid;
    if (alias >= 0) {
      if (alias >= num_args || args[alias].kind != TPU_K_TENSOR) {
        return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "graph: %s: output %d aliases argument %d, not a tensor",
                         op, j, alias);
      }
      vid = (int32_t)args[alias].i;
    } else {
      int32_t b;
      TPU_RETURN_IF_ERROR(add_buf(g, TPU_GRAPH_BUF_INTERNAL, extent_bytes(&out_metas[j]), &b));
      TPU_RETURN_IF_ERROR(add_val(g, b, 0, &out_metas[j], node_id, &vid));
    }
    n->tens[k] = g->vals[vid].meta;
    n->tens_vid[k++] = vid;
    n->out_vid[j] = vid;
    out_values[j] = vid;
  }
  return TPU_OK;
}

tpu_status_t tpu_graph_node(tpu_graph_t* g, const char* op, uint32_t flags, int32_t num_args,
                            const tpu_graph_arg_t* args, int32_t num_outputs, const tpu_tensor_t* out_metas,
                            const int32_t* out_alias, int32_t* out_values) {
  TPU_RETURN_IF_ERROR(check_building(g));
  if (!op || num_args < 0 || num_outputs < 0 || (num_args && !args) || (num_outputs && (!out_metas || !out_values))) {
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "graph: bad node arguments");
  }
  const tpu_k_entry_t* entry = tpu_k_lookup(op);
  if (!entry) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "graph: no kernel named %s", op);
  if (entry->shape) {
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "graph: %s has data-dependent output shapes", op);
  }
  if (entry->flags & TPU_K_FLAG_RANDOM) {
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "graph: %s draws random numbers (runs eagerly)", op);
  }
  int32_t first_val = g->nvals, first_buf = g->nbufs;
  TPU_RETURN_IF_ERROR(grow((void**)&g->nodes, &g->capnodes, g->nnodes + 1, sizeof(node_t)));
  node_t* n = &g->nodes[g->nnodes];
  memset(n, 0, sizeof(*n));
  n->entry = entry;
  n->flags = flags;
  n->group = -1;
  tpu_status_t st = fill_node(g, n, num_args, args, num_outputs, out_metas, out_alias, g->nnodes, out_values, op);
  if (st == TPU_OK && entry->check) {
    tpu_k_call_t call;
    memset(&call, 0, sizeof(call));
    call.op = entry->name;
    call.num_args = n->nargs;
    call.args = n->vals;
    call.num_outputs = n->nout;
    call.outputs = n->tens + n->nargtens;
    st = entry->check(&call);
    if (st != TPU_OK) st = tpu_status_annotate(st, "%s", entry->name);
  }
  if (st == TPU_OK && g->driver_graph) {
    tpu_k_call_t call = {.op = entry->name, .num_args = n->nargs, .args = n->vals, .num_outputs = n->nout,
                         .outputs = n->tens + n->nargtens};
    st = tpu_hal_device_vt(g->device)->check_graph_node(g->device, &call);
    if (st != TPU_OK) st = tpu_status_annotate(st, "graph: tpu:%d", g->device_index);
  }
  if (st != TPU_OK) {  /* roll back: the graph stays usable */
    node_free(n);
    g->nvals = first_val;
    g->nbufs = first_buf;
    return st;
  }
  g->nnodes++;
  return TPU_OK;
}

tpu_status_t tpu_graph_mark_output(tpu_graph_t* g, int32_t value) {
  TPU_RETURN_IF_ERROR(check_building(g));
  TPU_RETURN_IF_ERROR(check_value(g, value, "mark_output"));
  buf_t* b = &g->bufs[g->vals[value].buf];
  if (b->kind == TPU_GRAPH_BUF_INTERNAL) {
    b->kind = TPU_GRAPH_BUF_OUTPUT;
    b->index = g->noutputs++;
  }
  return TPU_OK;
}

/* ---- compile: fusion -------------------------------------------------------- */

/* The shape a fusable node iterates over: its output's for pointwise nodes,
 * its input's for reductions (which keep the reduced dims as 1). */
static const tpu_tensor_t* iter_shape(const tpu_graph_t* g, const node_t* n) {
  if (n->flags & TPU_GRAPH_NODE_REDUCTION) return &g->vals[n->tens_vid[0]].meta;
  return &g->vals[n->out_vid[0]].meta;
}

/* Every element of `t` at its own address, no gaps: its strides are a
 * contiguous tensor's, in some order of the dims (a permuted layout, as a
 * pointwise op on a transposed input gives). */
static bool dense(const tpu_tensor_t* t) {
  bool used[TPU_MAX_DIMS] = {false};
  int64_t expect = 1;
  for (int32_t k = 0; k < t->ndim; ++k) { /* the dim with stride `expect` next, size-1 dims skipped */
    int32_t pick = -1;
    for (int32_t d = 0; d < t->ndim && pick < 0; ++d) {
      if (!used[d] && t->sizes[d] > 1 && t->strides[d] == expect) pick = d;
    }
    if (pick < 0) break;
    used[pick] = true;
    expect *= t->sizes[pick];
  }
  return expect == tpu_tensor_numel(t);
}

/* A node that can run on tiles: pointwise (every tensor argument
 * broadcastable to its output) or a keepdim reduction of its first argument;
 * one fresh output, contiguous (pointwise: dense in any dim order, which
 * tiles and generated code index through its strides); no tensor lists. */
static bool fusable(const tpu_graph_t* g, const node_t* n) {
  if (!(n->flags & (TPU_GRAPH_NODE_POINTWISE | TPU_GRAPH_NODE_REDUCTION))) return false;
  if (n->nout != 1 || n->out_alias[0] >= 0) return false;
  if (n->nargs > GROUP_MAX_ARGS || n->ntens > GROUP_MAX_TENSORS || n->nargtens < 1) return false;
  const tpu_tensor_t* out = &g->vals[n->out_vid[0]].meta;
  if (tpu_tensor_numel(out) == 0) return false;
  if (!tpu_tensor_is_contiguous(out) && ((n->flags & TPU_GRAPH_NODE_REDUCTION) || !dense(out))) return false;
  for (int32_t i = 0; i < n->nargs; ++i) {
    if (n->vals[i].kind == TPU_K_TENSORS) return false;
  }
  for (int32_t k = 0; k < n->nargtens; ++k) {
    if (n->tens_vid[k] < 0) return false;
  }
  if (n->flags & TPU_GRAPH_NODE_REDUCTION) {
    if (n->nargtens != 1) return false;
    const tpu_tensor_t* in = &g->vals[n->tens_vid[0]].meta;
    if (in->ndim != out->ndim) return false; /* keepdim only */
    for (int32_t d = 0; d < out->ndim; ++d) {
      if (out->sizes[d] != in->sizes[d] && out->sizes[d] != 1) return false;
    }
    return true;
  }
  for (int32_t k = 0; k < n->nargtens; ++k) {
    const tpu_tensor_t* t = &g->vals[n->tens_vid[k]].meta;
    if (t->ndim > out->ndim) return false;
    for (int32_t d = 0; d < t->ndim; ++d) {
      int64_t od = out->sizes[out->ndim - t->ndim + d];
      if (t->sizes[d] != od && t->sizes[d] != 1) return false;
    }
  }
  return true;
}

/* Every dim of `t` equals the group's or is 1 (same rank). */
static bool within(const tpu_tensor_t* t, int32_t ndim, const int64_t* sizes) {
  if (t->ndim != ndim) return false;
  for (int32_t d = 0; d < ndim; ++d) {
    if (t->sizes[d] != sizes[d] && t->sizes[d] != 1 && sizes[d] != 1) return false;
  }
  return true;
}

/* Tensor slots of a 2-D GEMM that can head a group (A, B, and the added
 * input or -1); false for any other node. */
/* A 2-D mm/addmm with a contiguous output: its A, B and added-input slots
 * (c = -1 for mm). */
static bool mm_slots(const tpu_graph_t* g, const node_t* n, int32_t* a, int32_t* b, int32_t* c) {
  if (strcmp(n->entry->name, "aten::mm") == 0 && n->nargtens == 2) {
    *a = 0, *b = 1, *c = -1;
  } else if (strcmp(n->entry->name, "aten::addmm") == 0 && n->nargtens == 3) {
    *a = 1, *b = 2, *c = 0;
  } else {
    return false;
  }
  if (n->nout != 1 || n->out_alias[0] >= 0 || n->nargs > GROUP_MAX_ARGS || n->ntens > GROUP_MAX_TENSORS) return false;
  for (int32_t k = 0; k < n->nargtens; ++k) {
    if (n->tens_vid[k] < 0) return false;
  }
  const tpu_tensor_t* out = &g->vals[n->out_vid[0]].meta;
  return out->ndim == 2 && tpu_tensor_is_contiguous(out) && tpu_tensor_numel(out) > 0 &&
         g->vals[n->tens_vid[*a]].meta.ndim == 2 && g->vals[n->tens_vid[*b]].meta.ndim == 2;
}

/* mm_slots of a product allowed to head a fused group */
static bool gemm_slots(const tpu_graph_t* g, const node_t* n, int32_t* a, int32_t* b, int32_t* c) {
  return (n->flags & TPU_GRAPH_NODE_GEMM) && mm_slots(g, n, a, b, c);
}

/* `v` is the GEMM product of group `gr` seen in the group's shape: a
 * contiguous view of the same bytes with its rows split over leading dims. */
static bool gemm_row_view(const tpu_graph_t* g, const group_t* gr, const val_t* v) {
  const val_t* pv = &g->vals[g->nodes[gr->first].out_vid[0]];
  if (gr->head != HEAD_GEMM || v->buf != pv->buf || v->off != pv->off || v->meta.ndim != gr->ndim) return false;
  for (int32_t d = 0; d < gr->ndim; ++d) {
    if (v->meta.sizes[d] != gr->sizes[d]) return false;
  }
  return tpu_tensor_is_contiguous(&v->meta);
}

/* Can fusable node `n` join group `gr` (nodes so far: first..first+count)?
 * Its iteration shape and output must fit the group's shape, where a size
 * of 1 on either side stands for a reduced or broadcast dim. */
static bool joins(const tpu_graph_t* g, const group_t* gr, const node_t* n) {
  if (!within(iter_shape(g, n), gr->ndim, gr->sizes)) return false;
  if (!within(&g->vals[n->out_vid[0]].meta, gr->ndim, gr->sizes)) return false;
  for (int32_t k = 0; k < n->nargtens; ++k) {
    const val_t* v = &g->vals[n->tens_vid[k]];
    /* A value read from a buffer the group writes must be exactly the value
     * the group produced (the same tile of it), never another view of it. */
    for (int32_t m = gr->first; m < gr->first + gr->count; ++m) {
      const val_t* pv = &g->vals[g->nodes[m].out_vid[0]];
      if (pv->buf == v->buf && v != pv && !(m == gr->first && gemm_row_view(g, gr, v))) return false;
    }
  }
  return true;
}

static void widen(group_t* gr, const tpu_tensor_t* t) {
  for (int32_t d = 0; d < gr->ndim; ++d) {
    if (t->sizes[d] > gr->sizes[d]) gr->sizes[d] = t->sizes[d];
  }
}

/* Can fusable node `n` join the group headed by a GEMM? The first consumer
 * fixes the group's shape (the product's [M, N], or a view of it with the
 * rows split, as linear() on 3-D input gives), tiled along its columns; a
 * product with many rows heads no group (see GEMM_MIN_ROWS). Later nodes
 * keep the tiled dim whole and do not widen the shape. */
static bool gemm_joins(const tpu_graph_t* g, group_t* gr, const node_t* n) {
  const val_t* pv = &g->vals[g->nodes[gr->first].out_vid[0]];
  group_t c = *gr;
  if (c.count == 1) {
    const tpu_tensor_t* s = iter_shape(g, n);
    int64_t M = pv->meta.sizes[0], N = pv->meta.sizes[1], rows = 1;
    if (s->ndim < 2 || s->sizes[s->ndim - 1] != N) return false;
    for (int32_t d = 0; d < s->ndim - 1; ++d) rows *= s->sizes[d];
    if (rows != M || M >= (int64_t)tpu_threadpool_size(tpu_runtime_threadpool()) * GEMM_MIN_ROWS) return false;
    c.ndim = s->ndim;
    memcpy(c.sizes, s->sizes, sizeof(c.sizes));
    bool reads = false;
    for (int32_t k = 0; k < n->nargtens; ++k) reads = reads || g->vals[n->tens_vid[k]].buf == pv->buf;
    if (!reads) return false;
    c.axis = c.ndim - 1;
    c.gemm_dim = 1;
  }
  for (int32_t k = 0; k < n->nargtens; ++k) { /* the product only in the group's shape */
    const val_t* v = &g->vals[n->tens_vid[k]];
    if (v->buf == pv->buf && !gemm_row_view(g, &c, v)) return false;
  }
  const tpu_tensor_t* shapes[2] = {iter_shape(g, n), &g->vals[n->out_vid[0]].meta};
  for (int32_t i = 0; i < 2; ++i) {
    if (shapes[i]->ndim != c.ndim || shapes[i]->sizes[c.axis] != c.sizes[c.axis]) return false;
    for (int32_t d = 0; d < c.ndim; ++d) {
      if (shapes[i]->sizes[d] > c.sizes[d]) return false;
    }
  }
  if (!joins(g, &c, n)) return false;
  *gr = c;
  return true;
}

/* ---- groups headed by a convolution or a group norm ------------------------- */

/* What node `n` (flagged TPU_GRAPH_NODE_CHANNELS) can head: HEAD_CONV
 * (tpu::conv_fwd, not transposed), HEAD_NORM (tpu::group_norm), or
 * HEAD_NONE; `*out_unit`: the tiled dim is cut in multiples of it. Its
 * output is contiguous, at least 3-D and not empty. */
static int32_t slab_head(const tpu_graph_t* g, const node_t* n, int64_t* out_unit) {
  if (!(n->flags & TPU_GRAPH_NODE_CHANNELS)) return HEAD_NONE;
  int32_t kind = HEAD_NONE;
  if (strcmp(n->entry->name, "tpu::conv_fwd") == 0 && n->nout == 1 && n->nargs == 9) {
    /* stride, padding, dilation as lists; transposed (6) false */
    bool lists = n->vals[3].kind == TPU_K_INTS && n->vals[4].kind == TPU_K_INTS && n->vals[5].kind == TPU_K_INTS &&
                 n->vals[3].v.ints.len >= 1 && n->vals[4].v.ints.len >= 1 && n->vals[5].v.ints.len >= 1 &&
                 n->vals[4].v.ints.len <= TPU_MAX_DIMS;
    if (lists && n->vals[6].kind == TPU_K_BOOL && !n->vals[6].v.b && n->vals[0].kind == TPU_K_TENSOR &&
        n->vals[1].kind == TPU_K_TENSOR) {
      kind = HEAD_CONV;
    }
  } else if (strcmp(n->entry->name, "tpu::group_norm") == 0 && n->nout == 3 && n->nargs == 5 &&
             n->vals[3].kind == TPU_K_INT && n->vals[3].v.i >= 1) {
    kind = HEAD_NORM;
  }
  if (kind == HEAD_NONE || n->nargs > GROUP_MAX_ARGS || n->ntens > GROUP_MAX_TENSORS || n->out_vid[0] < 0) {
    return HEAD_NONE;
  }
  for (int32_t j = 0; j < n->nout; ++j) {
    if (n->out_alias[j] >= 0) return HEAD_NONE;
  }
  for (int32_t k = 0; k < n->nargtens; ++k) {
    if (n->tens_vid[k] < 0) return HEAD_NONE;
  }
  const tpu_tensor_t* out = &g->vals[n->out_vid[0]].meta;
  if (out->ndim < 3 || !tpu_tensor_is_contiguous(out) || tpu_tensor_numel(out) == 0) return HEAD_NONE;
  if (kind == HEAD_CONV && n->vals[0].v.tensor->ndim != out->ndim) return HEAD_NONE;
  if (kind == HEAD_NORM && out->sizes[1] % n->vals[3].v.i != 0) return HEAD_NONE;
  *out_unit = kind == HEAD_NORM ? out->sizes[1] / n->vals[3].v.i : 1;
  return kind;
}

/* Entries of the tiled dim per tile of conv/norm-headed group `gr` (see SLAB_*). */
static int64_t slab_per_tile(const tpu_graph_t* g, const group_t* gr) {
  const tpu_tensor_t* out = &g->vals[g->nodes[gr->first].out_vid[0]].meta;
  int64_t D = out->sizes[gr->gemm_dim], slab = tpu_tensor_numel(out) / D, u = gr->unit;
  int64_t threads = tpu_threadpool_size(tpu_runtime_threadpool());
  int64_t per = (D + 2 * threads - 1) / (2 * threads);
  per = (per + u - 1) / u * u;
  while (per > u && per * slab > SLAB_TILE_ELEMS) per -= u;
  per = per < 1 ? 1 : per > D ? D : per;
  if ((D + per - 1) / per < threads && tpu_tensor_numel(out) <= SLAB_ONE_TILE_ELEMS) per = D;
  return per;
}

/* Enough tiles for the pool, or one small tile (see SLAB_*). */
static bool slab_tiles_ok(const tpu_graph_t* g, const group_t* gr) {
  const tpu_tensor_t* out = &g->vals[g->nodes[gr->first].out_vid[0]].meta;
  int64_t D = out->sizes[gr->gemm_dim], per = slab_per_tile(g, gr), tiles = (D + per - 1) / per;
  if (tiles == 1) return tpu_tensor_numel(out) <= SLAB_ONE_TILE_ELEMS;
  return tiles >= (int64_t)tpu_threadpool_size(tpu_runtime_threadpool());
}

/* Can fusable node `n` join the conv/norm-headed group `gr`? It reads the
 * head's output itself (no view of it, none of a group norm's statistics),
 * iterates within the output's shape and keeps the tiled dim whole. */
static bool slab_joins(const tpu_graph_t* g, group_t* gr, const node_t* n) {
  const node_t* h = &g->nodes[gr->first];
  bool reads = false;
  for (int32_t k = 0; k < n->nargtens; ++k) {
    int32_t vid = n->tens_vid[k];
    for (int32_t j = 0; j < h->nout; ++j) {
      if (h->out_vid[j] < 0 || g->vals[vid].buf != g->vals[h->out_vid[j]].buf) continue;
      if (j > 0 || vid != h->out_vid[0]) return false;
      reads = true;
    }
  }
  if (gr->count == 1 && (!reads || !slab_tiles_ok(g, gr))) return false;
  const tpu_tensor_t* shapes[2] = {iter_shape(g, n), &g->vals[n->out_vid[0]].meta};
  for (int32_t i = 0; i < 2; ++i) {
    if (shapes[i]->ndim != gr->ndim || shapes[i]->sizes[gr->axis] != gr->sizes[gr->axis]) return false;
    for (int32_t d = 0; d < gr->ndim; ++d) {
      if (shapes[i]->sizes[d] > gr->sizes[d]) return false;
    }
  }
  return joins(g, gr, n);
}

/* The argument whose tensor is slot `k` of `n`; -1 for an output slot. */
static int32_t arg_of_slot(const node_t* n, int32_t k) {
  for (int32_t i = 0; i < n->nargs; ++i) {
    if (n->vals[i].kind == TPU_K_TENSOR && n->vals[i].v.tensor == n->tens + k) return i;
  }
  return -1;
}

static bool is_float_dtype(int32_t dt) { return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_BF16 || dt == TPU_DTYPE_F16; }

/* Float results from float or bool operands: what generated code covers.
 * Other nodes (integer index arithmetic, comparisons) do not join a group of
 * such nodes, nor these theirs, so that one of them does not send a whole
 * chain to the tile interpreter. */
static bool float_only(const tpu_graph_t* g, const node_t* n) {
  if (!is_float_dtype(g->vals[n->out_vid[0]].meta.dtype)) return false;
  for (int32_t k = 0; k < n->nargtens; ++k) {
    int32_t dt = g->vals[n->tens_vid[k]].meta.dtype;
    if (!is_float_dtype(dt) && dt != TPU_DTYPE_BOOL) return false;
  }
  return true;
}

static group_t* open_group(tpu_graph_t* g, int32_t i, const tpu_tensor_t* shape) {
  group_t* gr = &g->groups[g->ngroups];
  memset(gr, 0, sizeof(*gr));
  gr->first = i;
  gr->count = 1;
  gr->ndim = shape->ndim;
  memcpy(gr->sizes, shape->sizes, sizeof(gr->sizes));
  gr->gemm_dim = -1;
  gr->cg = -1;
  node_t* n = &g->nodes[i];
  gr->float_only = float_only(g, n);
  n->group = g->ngroups++;
  n->step = g->nsteps;
  g->steps[g->nsteps++] = (step_t){-1, n->group};
  return gr;
}

/* A reduction over a leading dim while a later dim stays whole (a column
 * sum, as the weight gradient of a norm): generated code reduces trailing
 * dims only, so with code generation on it runs as a plain node instead of
 * sending the row-wise nodes around it to the tile interpreter. */
static bool column_reduction(const tpu_graph_t* g, const node_t* n) {
  if (!(n->flags & TPU_GRAPH_NODE_REDUCTION)) return false;
  const tpu_tensor_t* in = &g->vals[n->tens_vid[0]].meta;
  const tpu_tensor_t* out = &g->vals[n->out_vid[0]].meta;
  bool reduced = false;
  for (int32_t d = 0; d < out->ndim; ++d) {
    if (out->sizes[d] != in->sizes[d]) reduced = true;
    else if (reduced && out->sizes[d] > 1) return true;
  }
  return false;
}

static tpu_status_t form_groups(tpu_graph_t* g) {
  g->groups = calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof(group_t));
  g->steps = calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof(step_t));
  if (!g->groups || !g->steps) return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "graph: out of host memory");
  group_t* open = NULL;
  for (int32_t i = 0; i < g->nnodes; ++i) {
    node_t* n = &g->nodes[i];
    int32_t ga, gb, gc, slab;
    int64_t unit = 1;
    if (gemm_slots(g, n, &ga, &gb, &gc)) { /* heads a group; its consumers may follow */
      open = open_group(g, i, &g->vals[n->out_vid[0]].meta);
      open->gemm_dim = 1;
      open->head = HEAD_GEMM;
    } else if ((slab = slab_head(g, n, &unit)) != HEAD_NONE) { /* likewise, by output rows / channels */
      open = open_group(g, i, &g->vals[n->out_vid[0]].meta);
      open->gemm_dim = open->axis = slab == HEAD_CONV ? 2 : 1;
      open->head = slab;
      open->unit = unit;
    } else if (fusable(g, n) && !(g->cg_mode != TPU_CG_OFF && column_reduction(g, n))) {
      if (open && open->first + open->count == i &&
          (open->head == HEAD_GEMM   ? gemm_joins(g, open, n)
           : open->head != HEAD_NONE ? slab_joins(g, open, n)
                                     : (g->cg_mode == TPU_CG_OFF || open->float_only == float_only(g, n)) &&
                                           joins(g, open, n))) {
        open->count++;
        widen(open, iter_shape(g, n));
        n->group = (int32_t)(open - g->groups);
        n->step = g->nsteps - 1;
        continue;
      }
      open = open_group(g, i, iter_shape(g, n));
    } else {
      open = NULL;
      n->step = g->nsteps;
      g->steps[g->nsteps++] = (step_t){i, -1};
    }
  }
  /* Groups of one node run as plain nodes. */
  for (int32_t s = 0; s < g->nsteps; ++s) {
    if (g->steps[s].group >= 0 && g->groups[g->steps[s].group].count == 1) {
      int32_t ni = g->groups[g->steps[s].group].first;
      g->nodes[ni].group = -1;
      g->steps[s] = (step_t){ni, -1};
    }
  }
  return TPU_OK;
}

/* ---- compile: batched one-row products ------------------------------------------
 * Consecutive standalone products of the same one-row A by different B (a
 * decoder's q, k and v projections while decoding one token) run as one
 * step: their columns are cut into blocks of one parallel loop. Run apart,
 * each is a loop of its own whose small blocks of B (k and v: 192 rows of
 * 576 floats in SmolLM2) end in a join before the next starts. */

/* The node whose output `vid` is, or a view of: -1 for inputs. */
static int32_t producer_of(const tpu_graph_t* g, int32_t vid) {
  const val_t* v = &g->vals[vid];
  if (v->producer >= 0) return v->producer;
  int32_t pv = g->bufs[v->buf].prod_val;
  return pv >= 0 ? g->vals[pv].producer : -1;
}

/* A standalone mm of one row by a matrix of several columns, float dtypes. */
static bool gemv_node(const tpu_graph_t* g, const node_t* n) {
  int32_t a, b, c;
  if (n->group >= 0 || !mm_slots(g, n, &a, &b, &c) || c >= 0) return false;
  const tpu_tensor_t* am = &g->vals[n->tens_vid[a]].meta;
  const tpu_tensor_t* bm = &g->vals[n->tens_vid[b]].meta;
  const tpu_tensor_t* om = &g->vals[n->out_vid[0]].meta;
  return am->sizes[0] == 1 && bm->sizes[1] > 1 && is_float_dtype(am->dtype) && is_float_dtype(bm->dtype) &&
         is_float_dtype(om->dtype);
}

static int64_t gemv_cols(const tpu_graph_t* g, const node_t* n) { return g->vals[n->out_vid[0]].meta.sizes[1]; }

/* Blocks of `cols` columns of product n (the last one may be shorter). */
static int64_t gemv_blocks(const tpu_graph_t* g, const node_t* n, int64_t cols) {
  return (gemv_cols(g, n) + cols - 1) / cols;
}

/* Values x and y are the same elements (each linear() views its input anew). */
static bool same_elements(const tpu_graph_t* g, int32_t x, int32_t y) {
  const val_t* a = &g->vals[x];
  const val_t* b = &g->vals[y];
  if (x == y) return true;
  if (a->buf != b->buf || a->off != b->off || a->meta.dtype != b->meta.dtype || a->meta.ndim != b->meta.ndim) {
    return false;
  }
  for (int32_t d = 0; d < a->meta.ndim; ++d) {
    if (a->meta.sizes[d] != b->meta.sizes[d] || (a->meta.sizes[d] > 1 && a->meta.strides[d] != b->meta.strides[d])) {
      return false;
    }
  }
  return true;
}

static void batch_gemvs(tpu_graph_t* g) {
  int32_t threads = tpu_threadpool_size(tpu_runtime_threadpool());
  int32_t* renum = malloc((size_t)(g->nsteps ? g->nsteps : 1) * sizeof(int32_t));
  if (!renum) return; /* an optimisation: without memory, run the products apart */
  int32_t out = 0;
  for (int32_t s = 0; s < g->nsteps;) {
    step_t st = g->steps[s];
    int32_t count = 1;
    if (st.node >= 0 && gemv_node(g, &g->nodes[st.node])) {
      const node_t* first = &g->nodes[st.node];
      while (s + count < g->nsteps && g->steps[s + count].node == st.node + count) {
        const node_t* n = &g->nodes[st.node + count];
        if (!gemv_node(g, n) || !same_elements(g, n->tens_vid[0], first->tens_vid[0]) ||
            g->vals[n->tens_vid[1]].meta.dtype != g->vals[first->tens_vid[1]].meta.dtype ||
            g->vals[n->out_vid[0]].meta.dtype != g->vals[first->out_vid[0]].meta.dtype ||
            producer_of(g, n->tens_vid[1]) >= st.node) {
          break;
        }
        count++;
      }
    }
    if (count > 1) {
      int64_t total = 0;
      for (int32_t k = 0; k < count; ++k) total += gemv_cols(g, &g->nodes[st.node + k]);
      /* about 4 blocks per thread, multiples of 8 columns (linalg.c's GEMV blocks) */
      int64_t cols = (total + 4 * threads - 1) / (4 * threads);
      st.count = count;
      st.cols = cols < 8 ? 8 : (cols + 7) / 8 * 8;
      for (int32_t k = 0; k < count; ++k) st.blocks += gemv_blocks(g, &g->nodes[st.node + k], st.cols);
      g->stats.gemv_batches++;
      g->stats.gemv_batched += count;
    }
    for (int32_t k = 0; k < count; ++k) renum[s + k] = out;
    g->steps[out++] = st;
    s += count;
  }
  for (int32_t i = 0; i < g->nnodes; ++i) g->nodes[i].step = renum[g->nodes[i].step];
  g->nsteps = out;
  free(renum);
}

/* Every other value aliasing the product of GEMM node `n` (group `gr`) is
 * its row view in the group's shape, so it can live in tiles. */
static bool gemm_views_in_tiles(const tpu_graph_t* g, const node_t* n, const val_t* pv) {
  if (n->group < 0 || g->groups[n->group].head != HEAD_GEMM || g->groups[n->group].first != (int32_t)(n - g->nodes)) {
    return false;
  }
  for (int32_t i = 0; i < g->nvals; ++i) {
    const val_t* v = &g->vals[i];
    if (v != pv && v->buf == pv->buf && !gemm_row_view(g, &g->groups[n->group], v)) return false;
  }
  return true;
}

/* Columns per tile of a GEMM-headed group (its tiled dim is `rows` long):
 * a tile computes the product's columns (A whole) the tile covers; at least
 * two tiles per pool thread where the sizes allow. */
static int64_t gemm_rows_per_tile(const tpu_graph_t* g, const group_t* gr, int64_t rows) {
  const tpu_tensor_t* out = &g->vals[g->nodes[gr->first].out_vid[0]].meta;
  int64_t threads = tpu_threadpool_size(tpu_runtime_threadpool());
  int64_t per = (out->sizes[1] + 2 * threads - 1) / (2 * threads);
  per = (per + GEMM_COL_ALIGN - 1) / GEMM_COL_ALIGN * GEMM_COL_ALIGN;
  if (per > GEMM_MAX_COLS) per = GEMM_MAX_COLS;
  while (per > GEMM_COL_ALIGN && per * out->sizes[0] > 4 * TILE_ELEMS) per -= GEMM_COL_ALIGN;
  return per < 1 ? 1 : per > rows ? rows : per;
}

/* Intermediates that only their group reads live in tile scratch. */
static void plan_groups(tpu_graph_t* g) {
  /* a conv/norm head whose epilogue is all float pointwise nodes: generated code may run the
   * epilogue on each tile, reading the head's tile from memory (see generate) */
  for (int32_t gi = 0; gi < g->ngroups; ++gi) {
    group_t* gr = &g->groups[gi];
    gr->cg_epilogue = (gr->head == HEAD_CONV || gr->head == HEAD_NORM) && gr->count >= 2 && g->cg_mode != TPU_CG_OFF;
    for (int32_t m = gr->first + 1; m < gr->first + gr->count && gr->cg_epilogue; ++m) {
      const node_t* n = &g->nodes[m];
      gr->cg_epilogue = (n->flags & TPU_GRAPH_NODE_POINTWISE) && !(n->flags & TPU_GRAPH_NODE_REDUCTION) &&
                        float_only(g, n);
    }
  }
  /* consumers outside the producing group */
  for (int32_t i = 0; i < g->nnodes; ++i) {
    const node_t* n = &g->nodes[i];
    bool cg_head = n->group >= 0 && g->groups[n->group].cg_epilogue && g->groups[n->group].first == i;
    for (int32_t j = 0; j < n->nout; ++j) {
      if (n->out_vid[j] < 0) continue;
      val_t* v = &g->vals[n->out_vid[j]];
      /* a head's other outputs (a group norm's statistics) are written to memory */
      v->scratch = n->group >= 0 && j == 0 && !cg_head && n->out_alias[j] < 0 &&
                   (v->views == 0 || gemm_views_in_tiles(g, n, v)) && g->bufs[v->buf].kind == TPU_GRAPH_BUF_INTERNAL;
    }
  }
  for (int32_t i = 0; i < g->nnodes; ++i) {
    const node_t* n = &g->nodes[i];
    for (int32_t k = 0; k < n->nargtens; ++k) {
      int32_t vid = n->tens_vid[k];
      if (vid < 0) continue;
      val_t* v = &g->vals[vid];
      if (v->producer < 0 && g->bufs[v->buf].prod_val >= 0) v = &g->vals[g->bufs[v->buf].prod_val]; /* a view */
      if (v->scratch && (v->producer < 0 || g->nodes[v->producer].group != n->group)) v->scratch = false;
    }
  }
  for (int32_t gi = 0; gi < g->ngroups; ++gi) {
    group_t* gr = &g->groups[gi];
    if (gr->count < 2) continue;
    /* Tiled dim: the first one every member output spans fully (a reduced
     * dim cannot be split); none -> one tile. */
    if (gr->gemm_dim < 0) gr->axis = -1; /* a GEMM head chose it */
    for (int32_t d = 0; d < gr->ndim && gr->gemm_dim < 0 && gr->axis < 0; ++d) {
      if (gr->sizes[d] <= 1) continue;
      bool full = true;
      for (int32_t m = gr->first; m < gr->first + gr->count && full; ++m) {
        full = g->vals[g->nodes[m].out_vid[0]].meta.sizes[d] == gr->sizes[d];
      }
      if (full) gr->axis = d;
    }
    gr->inner = 1;
    int64_t rows = 1;
    if (gr->axis >= 0) {
      rows = gr->sizes[gr->axis];
      for (int32_t d = 0; d < gr->ndim; ++d) {
        if (d != gr->axis) gr->inner *= gr->sizes[d];
      }
    }
    gr->rows_per_tile = TILE_ELEMS / gr->inner;
    if (gr->rows_per_tile < 1) gr->rows_per_tile = 1;
    if (gr->rows_per_tile > rows) gr->rows_per_tile = rows;
    if (gr->head == HEAD_GEMM) gr->rows_per_tile = gemm_rows_per_tile(g, gr, rows);
    if (gr->head == HEAD_CONV || gr->head == HEAD_NORM) gr->rows_per_tile = slab_per_tile(g, gr);
    gr->ntiles = (rows + gr->rows_per_tile - 1) / gr->rows_per_tile;
    int64_t scratch = 0;
    for (int32_t m = gr->first; m < gr->first + gr->count; ++m) {
      node_t* n = &g->nodes[m];
      val_t* ov = &g->vals[n->out_vid[0]];
      bool head = m == gr->first && gr->gemm_dim >= 0;
      if (ov->scratch) {
        int64_t elems = 1;
        for (int32_t d = 0; d < ov->meta.ndim; ++d) {
          elems *= d == (head ? gr->gemm_dim : gr->axis) ? gr->rows_per_tile : ov->meta.sizes[d];
        }
        n->slot_scratch[n->nargtens] = scratch;
        scratch += align_up(elems * (int64_t)tpu_dtype_size((tpu_dtype_t)ov->meta.dtype));
        g->bufs[ov->buf].scratch = true;
        g->stats.scratch_values++;
      }
      int32_t ga = -1, gb = -1, gc = -1;
      if (head) gemm_slots(g, n, &ga, &gb, &gc);
      for (int32_t k = 0; k < n->ntens; ++k) {
        n->slot_mode[k] = SLOT_WHOLE;
        if (n->tens_vid[k] < 0) continue; /* an output not wanted (a group norm's statistics) */
        const val_t* v = &g->vals[n->tens_vid[k]];
        if (!v->scratch && v->producer < 0 && g->bufs[v->buf].scratch) {
          v = &g->vals[g->bufs[v->buf].prod_val]; /* a GEMM product seen through its row view */
        }
        if (v->scratch) {
          n->slot_mode[k] = SLOT_SCRATCH;
          n->slot_dim[k] = head ? gr->gemm_dim : gr->axis; /* resized per tile */
          /* its producer is this node or an earlier one of the group */
          const node_t* p = &g->nodes[v->producer];
          n->slot_scratch[k] = p->slot_scratch[p->nargtens];
          continue;
        }
        if (gr->axis < 0) continue;
        if (head && gr->head == HEAD_CONV) { /* output rows, the input rows they read, weight and bias whole */
          int32_t arg = arg_of_slot(n, k);
          if (k == n->nargtens || arg == 0) {
            n->slot_mode[k] = arg == 0 ? SLOT_WINDOW : SLOT_SLICE;
            n->slot_dim[k] = 2;
          }
          continue;
        }
        if (head && gr->head == HEAD_NORM) { /* channels of input, weight, bias, output; groups of the statistics */
          int32_t arg = arg_of_slot(n, k);
          n->slot_mode[k] = arg < 0 && k > n->nargtens ? SLOT_GROUPS : SLOT_SLICE;
          n->slot_dim[k] = arg == 1 || arg == 2 ? 0 : 1;
          continue;
        }
        if (head) { /* A's rows or B's columns as the tile's; the added input and the output like pointwise */
          int32_t d = k == ga ? 0 : k == gb ? 1 : -1;
          if (d >= 0 || k == gc || k == n->nargtens) {
            int32_t ad = gr->gemm_dim - (2 - v->meta.ndim);
            int64_t full = g->vals[n->out_vid[0]].meta.sizes[gr->gemm_dim];
            if (d >= 0 ? d == gr->gemm_dim : ad >= 0 && v->meta.sizes[ad] == full && full > 1) {
              n->slot_mode[k] = SLOT_SLICE;
              n->slot_dim[k] = d >= 0 ? d : ad;
            }
          }
          continue;
        }
        int32_t ad = gr->axis - (gr->ndim - v->meta.ndim);
        if (ad >= 0 && v->meta.sizes[ad] == gr->sizes[gr->axis]) {
          n->slot_mode[k] = SLOT_SLICE;
          n->slot_dim[k] = ad;
        }
      }
    }
    gr->scratch_bytes = scratch;
    if (scratch > g->slot_bytes) g->slot_bytes = scratch;
    g->stats.fused_groups++;
    g->stats.fused_nodes += gr->count;
    if (gr->head == HEAD_GEMM) g->stats.gemm_groups++;
    if (gr->head == HEAD_CONV) g->stats.conv_groups++;
    if (gr->head == HEAD_NORM) g->stats.norm_groups++;
  }
}

/* ---- compile: code generation ------------------------------------------------ */

static int32_t ext_of(tpu_graph_t* g, group_t* gr, tpu_cg_ext_t* ext, int32_t* ext_vid, int32_t vid, int32_t node,
                      int32_t slot) {
  for (int32_t e = 0; e < gr->next; ++e) {
    if (ext_vid[e] == vid) return e;
  }
  if (gr->next == TPU_CG_MAX_EXT) return -1;
  int32_t e = gr->next++;
  const tpu_tensor_t* m = &g->vals[vid].meta;
  ext[e].dtype = m->dtype;
  for (int32_t d = 0; d < gr->ndim; ++d) {
    int32_t ad = d - (gr->ndim - m->ndim); /* broadcasting aligns trailing dims */
    bool spans = ad >= 0 && m->sizes[ad] != 1 && gr->sizes[d] != 1;
    ext[e].strides[d] = spans ? m->strides[ad] : 0;
  }
  ext_vid[e] = vid;
  gr->ext_node[e] = node;
  gr->ext_slot[e] = slot;
  return e;
}

static bool same_sizes(const tpu_tensor_t* t, int32_t ndim, const int64_t* sizes) {
  return t->ndim == ndim && memcmp(t->sizes, sizes, sizeof(int64_t) * (size_t)ndim) == 0;
}

/* Describes group gi for codegen.c; false when it is not one loop over the
 * group's shape, or rows with reductions over its trailing dims. */
static bool describe(tpu_graph_t* g, int32_t gi, tpu_cg_ext_t* ext, tpu_cg_node_t* cn, int32_t* refs,
                     int32_t* reduce_from, int32_t* out_count, int64_t* sizes) {
  group_t* gr = &g->groups[gi];
  int32_t ext_vid[TPU_CG_MAX_EXT];
  if (gr->head == HEAD_GEMM) return false; /* a GEMM head: the tile interpreter */
  if (gr->head != HEAD_NONE && !gr->cg_epilogue) return false;
  /* a conv/norm head's epilogue: its nodes after the head, which is read from memory */
  const int32_t first = gr->first + (gr->head != HEAD_NONE ? 1 : 0), count = gr->first + gr->count - first;
  /* the reduced dims: those a reduction's output has as 1; they must be the
   * same for every reduction and come after every kept dim */
  int64_t row[TPU_MAX_DIMS];
  *reduce_from = gr->ndim;
  *out_count = count;
  for (int32_t m = first; m < first + count; ++m) {
    const node_t* n = &g->nodes[m];
    if (!(n->flags & TPU_GRAPH_NODE_REDUCTION)) continue;
    const tpu_tensor_t* o = &g->vals[n->out_vid[0]].meta;
    if (!same_sizes(&g->vals[n->tens_vid[0]].meta, gr->ndim, gr->sizes)) return false;
    int32_t rf = gr->ndim;
    for (int32_t d = gr->ndim - 1; d >= 0 && (gr->sizes[d] == 1 || o->sizes[d] == 1); --d) {
      if (gr->sizes[d] > 1) rf = d;
    }
    for (int32_t d = 0; d < rf; ++d) {
      if (o->sizes[d] != gr->sizes[d]) return false;
    }
    if (*reduce_from < gr->ndim && rf != *reduce_from) return false;
    *reduce_from = rf;
  }
  for (int32_t d = 0; d < gr->ndim; ++d) row[d] = d < *reduce_from ? gr->sizes[d] : 1;
  gr->next = 0;
  for (int32_t i = 0; i < count; ++i) {
    int32_t m = first + i;
    const node_t* n = &g->nodes[m];
    const val_t* ov = &g->vals[n->out_vid[0]];
    bool is_row = *reduce_from < gr->ndim && same_sizes(&ov->meta, gr->ndim, row);
    if (!is_row && !same_sizes(&ov->meta, gr->ndim, gr->sizes)) return false;
    int32_t* r = refs + (size_t)i * GROUP_MAX_ARGS;
    for (int32_t a = 0; a < n->nargs; ++a) {
      r[a] = 0;
      if (n->vals[a].kind != TPU_K_TENSOR) continue;
      int32_t slot = (int32_t)(n->vals[a].v.tensor - n->tens);
      int32_t vid = n->tens_vid[slot];
      int32_t p = g->vals[vid].producer;
      if (p >= first && p < m && g->nodes[p].out_vid[0] == vid) {
        r[a] = -1 - (p - first);
      } else {
        r[a] = ext_of(g, gr, ext, ext_vid, vid, m, slot);
        if (r[a] < 0) return false;
      }
    }
    int32_t store = -1;
    if (!ov->scratch) {
      store = ext_of(g, gr, ext, ext_vid, n->out_vid[0], m, n->nargtens);
      if (store < 0) return false;
    }
    cn[i] = (tpu_cg_node_t){n->entry->name, n->nargs, n->vals, r, ov->meta.dtype, store, is_row};
  }
  memcpy(sizes, gr->sizes, sizeof(int64_t) * (size_t)gr->ndim);
  if (gr->head != HEAD_NONE) {
    /* the tiled dim outermost, so that a tile's elements are one range of the function's units */
    int32_t ax = gr->axis;
    for (int32_t d = ax; d > 0; --d) sizes[d] = sizes[d - 1];
    sizes[0] = gr->sizes[ax];
    for (int32_t e = 0; e < gr->next; ++e) {
      int64_t sa = ext[e].strides[ax];
      for (int32_t d = ax; d > 0; --d) ext[e].strides[d] = ext[e].strides[d - 1];
      ext[e].strides[0] = sa;
    }
    gr->inner_elems = 1;
    for (int32_t d = 1; d < gr->ndim; ++d) gr->inner_elems *= sizes[d];
  }
  return true;
}

/* Generates, compiles (or finds cached) and binds code for every group it
 * covers; the others stay on the tile interpreter. */
static tpu_status_t generate(tpu_graph_t* g) {
  if (g->cg_mode == TPU_CG_OFF || g->ngroups == 0) return TPU_OK;
  tpu_status_t st = TPU_OK;
  tpu_cg_text_t src = {0};
  /* each distinct function's body (from its '(') as offset and length in src */
  size_t* uniq_body = malloc(sizeof(size_t) * (size_t)g->ngroups);
  size_t* uniq_len = malloc(sizeof(size_t) * (size_t)g->ngroups);
  tpu_cg_ext_t* ext = malloc(sizeof(tpu_cg_ext_t) * TPU_CG_MAX_EXT);
  int32_t maxc = 0;
  for (int32_t gi = 0; gi < g->ngroups; ++gi) {
    if (g->groups[gi].count > maxc) maxc = g->groups[gi].count;
  }
  tpu_cg_node_t* cn = malloc(sizeof(tpu_cg_node_t) * (size_t)(maxc ? maxc : 1));
  int32_t* refs = malloc(sizeof(int32_t) * GROUP_MAX_ARGS * (size_t)(maxc ? maxc : 1));
  int32_t nuniq = 0;
  if (!uniq_body || !uniq_len || !ext || !cn || !refs) {
    st = TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "graph: out of host memory");
    goto done;
  }
  tpu_cg_prelude(&src);
  for (int32_t gi = 0; gi < g->ngroups; ++gi) {
    group_t* gr = &g->groups[gi];
    int32_t reduce_from = 0, count = 0;
    int64_t sizes[TPU_MAX_DIMS];
    if (gr->count < 2 || !describe(g, gi, ext, cn, refs, &reduce_from, &count, sizes)) continue;
    tpu_cg_group_t desc = {gr->ndim, sizes, reduce_from, gr->next, ext, count, cn};
    /* Emitted straight into the unit under the next free id; identical
     * groups (every layer of a model) share one function, so a body equal
     * to an earlier one (past its name) is cut off again. */
    const size_t start = src.len;
    const char* why = NULL;
    if (!tpu_cg_emit_group(&src, nuniq, &desc, &why, &gr->cg_units, &gr->cg_grain)) continue;
    if (src.oom) break;
    const char* body = strchr(src.s + start, '(');
    const size_t blen = src.len - (size_t)(body - src.s);
    int32_t u = 0;
    while (u < nuniq && !(uniq_len[u] == blen && memcmp(src.s + uniq_body[u], body, blen) == 0)) ++u;
    if (u == nuniq) {
      uniq_body[nuniq] = (size_t)(body - src.s);
      uniq_len[nuniq++] = blen;
    } else {
      src.len = start;
      src.s[start] = 0;
    }
    gr->cg = u;
  }
  if (nuniq == 0) goto done;
  bool hit = false;
  int64_t ns = 0;
  st = tpu_cg_load(&src, &g->cg_module, &hit, &ns);
  if (st != TPU_OK) {
    g->stats.codegen_unavailable = 1;
    if (g->cg_mode != TPU_CG_ON) {
      tpu_status_free(st);
      st = TPU_OK;
    }
    for (int32_t gi = 0; gi < g->ngroups; ++gi) g->groups[gi].cg = -1;
    goto done;
  }
  g->stats.codegen_cache_hits = hit ? 1 : 0;
  g->stats.codegen_compile_ns = ns;
  g->stats.codegen_functions = nuniq;
  for (int32_t gi = 0; gi < g->ngroups; ++gi) {
    group_t* gr = &g->groups[gi];
    if (gr->cg < 0) continue;
    gr->fn = tpu_cg_symbol(g->cg_module, gr->cg);
    if (!gr->fn) {
      st = TPU_ERROR(TPU_STATUS_INTERNAL, "graph codegen: function tpu_cg_%d missing from its module", gr->cg);
      goto done;
    }
    g->stats.codegen_groups++;
  }
done:
  free(uniq_body);
  free(uniq_len);
  free(ext);
  free(cn);
  free(refs);
  tpu_cg_text_free(&src);
  return st;
}

/* ---- compile: memory planning ------------------------------------------------ */

typedef struct placed_t {
  int64_t offset, bytes;
  int32_t def, last;
} placed_t;

typedef struct sized_t {
  int64_t bytes;
  int32_t buf;
} sized_t;

/* Largest first; ties by buffer id, so plans are deterministic. */
static int by_size_desc(const void* a, const void* b) {
  const sized_t* x = a;
  const sized_t* y = b;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
  return x->buf - y->buf;
}

static tpu_status_t plan_memory(tpu_graph_t* g) {
  for (int32_t i = 0; i < g->nnodes; ++i) {
    const node_t* n = &g->nodes[i];
    for (int32_t k = 0; k < n->ntens; ++k) {
      if (n->tens_vid[k] < 0) continue;
      buf_t* b = &g->bufs[g->vals[n->tens_vid[k]].buf];
      if (b->def_step < 0 || n->step < b->def_step) b->def_step = n->step;
      if (n->step > b->last_step) b->last_step = n->step;
    }
  }
  sized_t* order = malloc((size_t)(g->nbufs ? g->nbufs : 1) * sizeof(sized_t));
  placed_t* placed = malloc((size_t)(g->nbufs ? g->nbufs : 1) * sizeof(placed_t));
  if (!order || !placed) {
    free(order);
    free(placed);
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "graph: out of host memory");
  }
  int32_t n = 0;
  for (int32_t b = 0; b < g->nbufs; ++b) {
    buf_t* bf = &g->bufs[b];
    if (bf->kind != TPU_GRAPH_BUF_INTERNAL || bf->scratch || bf->bytes == 0) continue;
    if (bf->def_step < 0) continue; /* never used */
    g->unplanned_bytes += align_up(bf->bytes);
    order[n++] = (sized_t){bf->bytes, b};
  }
  qsort(order, (size_t)n, sizeof(sized_t), by_size_desc);
  int32_t nplaced = 0;
  int64_t total = 0;
  for (int32_t i = 0; i < n; ++i) {
    buf_t* bf = &g->bufs[order[i].buf];
    int64_t bytes = align_up(bf->bytes);
    /* lowest offset that overlaps no live-overlapping placed buffer */
    int64_t off = 0;
    bool moved = true;
    while (moved) {
      moved = false;
      for (int32_t j = 0; j < nplaced; ++j) {
        const placed_t* p = &placed[j];
        bool live = !(p->last < bf->def_step || bf->last_step < p->def);
        bool overlap = off < p->offset + p->bytes && p->offset < off + bytes;
        if (live && overlap) {
          off = p->offset + p->bytes;
          moved = true;
        }
      }
    }
    bf->offset = off;
    placed[nplaced++] = (placed_t){off, bytes, bf->def_step, bf->last_step};
    if (off + bytes > total) total = off + bytes;
  }
  free(order);
  free(placed);
  g->arena_bytes = total;
  return TPU_OK;
}

/* The graph as the driver runs it (HAL run_graph): buffers, and per node
 * its call and where each tensor slot lives. */
static tpu_status_t describe_for_driver(tpu_graph_t* g) {
  int64_t nslots = 0;
  for (int32_t i = 0; i < g->nnodes; ++i) nslots += g->nodes[i].ntens;
  g->hal_bufs = calloc((size_t)(g->nbufs ? g->nbufs : 1), sizeof(*g->hal_bufs));
  g->hal_nodes = calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof(*g->hal_nodes));
  g->hal_calls = calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof(*g->hal_calls));
  g->hal_slot_buf = calloc((size_t)(nslots ? nslots : 1), sizeof(int32_t));
  g->hal_slot_off = calloc((size_t)(nslots ? nslots : 1), sizeof(int64_t));
  if (!g->hal_bufs || !g->hal_nodes || !g->hal_calls || !g->hal_slot_buf || !g->hal_slot_off)
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "graph: out of host memory");
  for (int32_t b = 0; b < g->nbufs; ++b) {
    const buf_t* bf = &g->bufs[b];
    g->hal_bufs[b] = (tpu_hal_graph_buffer_t){
        .kind = bf->kind, .index = bf->kind == TPU_GRAPH_BUF_INTERNAL ? -1 : bf->index, .bytes = bf->bytes};
  }
  int64_t slot = 0;
  for (int32_t i = 0; i < g->nnodes; ++i) {
    const node_t* n = &g->nodes[i];
    g->hal_calls[i] = (tpu_k_call_t){.op = n->entry->name, .num_args = n->nargs, .args = n->vals,
                                     .num_outputs = n->nout, .outputs = n->tens + n->nargtens};
    g->hal_nodes[i] = (tpu_hal_graph_node_t){
        .call = &g->hal_calls[i], .buffer = g->hal_slot_buf + slot, .offset = g->hal_slot_off + slot};
    for (int32_t k = 0; k < n->ntens; ++k, ++slot) {
      int32_t vid = n->tens_vid[k];
      g->hal_slot_buf[slot] = vid < 0 ? -1 : g->vals[vid].buf;
      g->hal_slot_off[slot] = vid < 0 ? 0 : g->vals[vid].off;
    }
  }
  g->hal = (tpu_hal_graph_t){.num_buffers = g->nbufs, .buffers = g->hal_bufs, .num_nodes = g->nnodes,
                             .nodes = g->hal_nodes, .num_inputs = g->ninputs, .num_outputs = g->noutputs};
  g->stats.nodes = g->nnodes;
  g->stats.steps = 1;
  g->stats.driver_graph = 1;
  g->compiled = true;
  return TPU_OK;
}

tpu_status_t tpu_graph_compile(tpu_graph_t* g) {
  TPU_RETURN_IF_ERROR(check_building(g));
  if (g->driver_graph) return describe_for_driver(g);
  TPU_RETURN_IF_ERROR(form_groups(g));
  batch_gemvs(g);
  plan_groups(g);
  TPU_RETURN_IF_ERROR(plan_memory(g));
  TPU_RETURN_IF_ERROR(generate(g));
  /* tile scratch: only groups left to the interpreter use it */
  g->slot_bytes = 0;
  for (int32_t gi = 0; gi < g->ngroups; ++gi) {
    const group_t* gr = &g->groups[gi];
    if (gr->count >= 2 && !gr->fn && gr->scratch_bytes > g->slot_bytes) g->slot_bytes = gr->scratch_bytes;
  }
  const tpu_hal_device_vtable_t* vt = tpu_hal_device_vt(g->device);
  if (g->arena_bytes > 0) TPU_RETURN_IF_ERROR(vt->allocate(g->device, (size_t)g->arena_bytes, &g->arena));
  if (g->slot_bytes > 0) {
    g->nslots = tpu_threadpool_size(tpu_runtime_threadpool());
    g->slot_busy = calloc((size_t)g->nslots, sizeof(int32_t));
    if (!g->slot_busy) return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "graph: out of host memory");
    TPU_RETURN_IF_ERROR(vt->allocate(g->device, (size_t)(g->slot_bytes * g->nslots), &g->scratch));
  }
  g->stats.nodes = g->nnodes;
  g->stats.steps = g->nsteps;
  g->stats.arena_bytes = g->arena_bytes;
  g->stats.unplanned_bytes = g->unplanned_bytes;
  g->compiled = true;
  return TPU_OK;
}

/* ---- queries ----------------------------------------------------------------- */

int32_t tpu_graph_num_inputs(const tpu_graph_t* g) { return g ? g->ninputs : 0; }
int32_t tpu_graph_num_output_buffers(const tpu_graph_t* g) { return g ? g->noutputs : 0; }

size_t tpu_graph_output_buffer_bytes(const tpu_graph_t* g, int32_t k) {
  if (!g) return 0;
  for (int32_t b = 0; b < g->nbufs; ++b) {
    if (g->bufs[b].kind == TPU_GRAPH_BUF_OUTPUT && g->bufs[b].index == k) return (size_t)g->bufs[b].bytes;
  }
  return 0;
}

tpu_status_t tpu_graph_locate(const tpu_graph_t* g, int32_t value, int32_t* out_kind, int32_t* out_index,
                              int64_t* out_byte_offset) {
  if (!g) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "graph: NULL graph");
  TPU_RETURN_IF_ERROR(check_value(g, value, "locate"));
  const val_t* v = &g->vals[value];
  const buf_t* b = &g->bufs[v->buf];
  if (b->kind == TPU_GRAPH_BUF_INTERNAL) {
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION, "graph: value %d was not marked as an output", value);
  }
  *out_kind = b->kind;
  *out_index = b->index;
  *out_byte_offset = v->off;
  return TPU_OK;
}

tpu_status_t tpu_graph_value_meta(const tpu_graph_t* g, int32_t value, tpu_tensor_t* out_meta) {
  if (!g) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "graph: NULL graph");
  TPU_RETURN_IF_ERROR(check_value(g, value, "value_meta"));
  *out_meta = g->vals[value].meta;
  return TPU_OK;
}

void tpu_graph_get_stats(const tpu_graph_t* g, tpu_graph_stats_t* out) {
  memset(out, 0, sizeof(*out));
  if (g) *out = g->stats;
}

/* ---- execution --------------------------------------------------------------- */

typedef struct run_t {
  tpu_graph_t* g;
  void** inputs;
  void** outputs;
  uint32_t call_flags; /* TPU_K_CALL_* for the matrix-product kernels */
} run_t;

static char* buf_base(const tpu_graph_t* g, const run_t* r, const buf_t* b) {
  switch (b->kind) {
    case TPU_GRAPH_BUF_INPUT:
      return r->inputs[b->index];
    case TPU_GRAPH_BUF_OUTPUT:
      return r->outputs[b->index];
    default:
      return (char*)g->arena + b->offset;
  }
}

static void bind(tpu_graph_t* g, const run_t* r) {
  for (int32_t i = 0; i < g->nnodes; ++i) {
    node_t* n = &g->nodes[i];
    for (int32_t k = 0; k < n->ntens; ++k) {
      int32_t vid = n->tens_vid[k];
      if (vid < 0) continue;
      const val_t* v = &g->vals[vid];
      const buf_t* b = &g->bufs[v->buf];
      n->tens[k].data = b->scratch ? NULL : buf_base(g, r, b) + v->off;
    }
  }
}

static tpu_status_t run_node(const tpu_graph_t* g, const node_t* n, tpu_threadpool_t* pool, tpu_k_value_t* vals,
                             tpu_tensor_t* tens) {
  tpu_k_call_t call;
  memset(&call, 0, sizeof(call));
  call.op = n->entry->name;
  call.flags = (n->entry->flags & TPU_K_FLAG_MATMUL) ? g->call_flags : 0u;
  call.num_args = n->nargs;
  call.args = vals;
  call.num_outputs = n->nout;
  call.outputs = tens + n->nargtens;
  call.pool = pool;
  tpu_status_t st = n->entry->run(&call);
  return st == TPU_OK ? TPU_OK : tpu_status_annotate(st, "%s", n->entry->name);
}

typedef struct tile_ctx_t {
  tpu_graph_t* g;
  const group_t* gr;
  tpu_status_t* first_error; /* guarded by atomics: first writer wins */
  tpu_threadpool_t* pool;    /* a group of one tile: its kernels use the pool */
  char* const* ptrs;         /* a head's generated epilogue: its operands */
} tile_ctx_t;

static int32_t acquire_slot(tpu_graph_t* g) {
  for (;;) {
    for (int32_t s = 0; s < g->nslots; ++s) {
      int32_t expected = 0;
      if (__atomic_compare_exchange_n(&g->slot_busy[s], &expected, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        return s;
      }
    }
  }
}

/* A private copy of node n's arguments (vals pointing into tens) to resize. */
static void copy_args(const node_t* n, tpu_k_value_t* vals, tpu_tensor_t* tens) {
  memcpy(tens, n->tens, (size_t)n->ntens * sizeof(tpu_tensor_t));
  memcpy(vals, n->vals, (size_t)n->nargs * sizeof(tpu_k_value_t));
  for (int32_t i = 0; i < n->nargs; ++i) {
    if (vals[i].kind == TPU_K_TENSOR) vals[i].v.tensor = tens + (n->vals[i].v.tensor - n->tens);
  }
}

/* t narrowed to [start, start + len) along dim d */
static void narrow(tpu_tensor_t* t, int32_t d, int64_t start, int64_t len) {
  t->data = (char*)t->data + start * t->strides[d] * (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
  t->sizes[d] = len;
}

/* The input rows output rows [r0, r0 + nr) of convolution node `n` read:
 * its input (slot k of the tile's copy) narrowed to them along dim 2, and
 * the padding argument (copied into `pad`) made the rows' own. Rows past
 * either end of the input stay out of the view, where the kernel's bounds
 * checks read them as the zero padding they are. */
static void conv_window(const node_t* n, tpu_k_value_t* vals, tpu_tensor_t* t, int64_t r0, int64_t nr, int64_t* pad) {
  const tpu_tensor_t* w = vals[1].v.tensor;
  int32_t nd = w->ndim - 2;
  const tpu_k_value_t* st = &n->vals[3];
  const tpu_k_value_t* pd = &n->vals[4];
  const tpu_k_value_t* dl = &n->vals[5];
  for (int32_t j = 0; j < nd; ++j) pad[j] = pd->v.ints.data[pd->v.ints.len == 1 ? 0 : j];
  int64_t s = st->v.ints.data[0], d = dl->v.ints.data[0], K = w->sizes[2], H = t->sizes[2];
  int64_t lo = r0 * s - pad[0], hi = (r0 + nr - 1) * s - pad[0] + (K - 1) * d + 1;
  int64_t start = lo < 0 ? 0 : lo > H ? H : lo, end = hi > H ? H : hi < start ? start : hi;
  narrow(t, 2, start, end - start);
  pad[0] = start - lo;
  vals[4].v.ints.data = pad;
  vals[4].v.ints.len = nd;
}

/* Keeps the first error of a parallel loop (first writer wins). */
static void keep_first_error(tpu_status_t* first_error, tpu_status_t st) {
  tpu_status_t none = TPU_OK;
  if (!__atomic_compare_exchange_n(first_error, &none, st, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
    tpu_status_free(st);
  }
}

typedef struct cg_ctx_t {
  tpu_cg_fn_t fn;
  char* const* ptrs;
} cg_ctx_t;

static void cg_range(void* ctx, int64_t begin, int64_t end) {
  const cg_ctx_t* c = ctx;
  c->fn(c->ptrs, begin, end);
}

static void run_tiles(void* ctx, int64_t begin, int64_t end) {
  tile_ctx_t* c = ctx;
  tpu_graph_t* g = c->g;
  const group_t* gr = c->gr;
  int32_t slot = g->slot_bytes > 0 ? acquire_slot(g) : -1;
  char* scratch = slot >= 0 ? (char*)g->scratch + (int64_t)slot * g->slot_bytes : NULL;
  int64_t rows = gr->axis >= 0 ? gr->sizes[gr->axis] : 1;
  tpu_k_value_t vals[GROUP_MAX_ARGS];
  tpu_tensor_t tens[GROUP_MAX_TENSORS];
  int64_t pad[TPU_MAX_DIMS];
  for (int64_t tile = begin; tile < end; ++tile) {
    int64_t r0 = tile * gr->rows_per_tile;
    int64_t nr = rows - r0 < gr->rows_per_tile ? rows - r0 : gr->rows_per_tile;
    for (int32_t m = gr->first; m < gr->first + gr->count; ++m) {
      const node_t* n = &g->nodes[m];
      copy_args(n, vals, tens);
      for (int32_t k = 0; k < n->ntens; ++k) {
        tpu_tensor_t* t = &tens[k];
        if (n->slot_mode[k] == SLOT_SLICE) {
          narrow(t, n->slot_dim[k], r0, nr);
        } else if (n->slot_mode[k] == SLOT_GROUPS) {
          if (n->tens_vid[k] >= 0) narrow(t, n->slot_dim[k], r0 / gr->unit, nr / gr->unit);
        } else if (n->slot_mode[k] == SLOT_WINDOW) {
          conv_window(n, vals, t, r0, nr, pad);
        } else if (n->slot_mode[k] == SLOT_SCRATCH) {
          t->data = scratch + n->slot_scratch[k];
          if (gr->axis >= 0) t->sizes[n->slot_dim[k]] = nr;
          int64_t s = 1;
          for (int32_t d = t->ndim - 1; d >= 0; --d) {
            t->strides[d] = s;
            s *= t->sizes[d];
          }
        }
      }
      if (m == gr->first && gr->head == HEAD_NORM) vals[3].v.i = nr / gr->unit; /* the tile's groups */
      tpu_status_t st = run_node(g, n, c->pool, vals, tens);
      if (st != TPU_OK) {
        keep_first_error(c->first_error, st);
        goto done;
      }
      if (gr->fn) { /* the epilogue's generated code over the tile (tiled dim outermost) */
        if (c->pool) { /* one tile: the whole epilogue, over the pool */
          cg_ctx_t cc = {gr->fn, c->ptrs};
          tpu_parallel_for(c->pool, nr * gr->inner_elems, gr->cg_grain, cg_range, &cc);
        } else {
          gr->fn(c->ptrs, r0 * gr->inner_elems, (r0 + nr) * gr->inner_elems);
        }
        break;
      }
    }
  }
done:
  if (slot >= 0) __atomic_store_n(&g->slot_busy[slot], 0, __ATOMIC_RELEASE);
}

typedef struct gemv_ctx_t {
  const tpu_graph_t* g;
  const step_t* st;
  tpu_status_t* first_error;
} gemv_ctx_t;

/* Blocks of a batch_gemvs step: block t is `cols` columns of one product
 * (products in order, each cut from its first column). */
static void run_gemv_blocks(void* ctx, int64_t begin, int64_t end) {
  const gemv_ctx_t* c = ctx;
  const int64_t cols = c->st->cols;
  tpu_k_value_t vals[GROUP_MAX_ARGS];
  tpu_tensor_t tens[GROUP_MAX_TENSORS];
  for (int64_t t = begin; t < end; ++t) {
    int32_t m = c->st->node;
    int64_t b = t;
    for (int64_t nb; b >= (nb = gemv_blocks(c->g, &c->g->nodes[m], cols)); ++m) b -= nb;
    const node_t* n = &c->g->nodes[m];
    int64_t c0 = b * cols, ncols = gemv_cols(c->g, n) - c0 < cols ? gemv_cols(c->g, n) - c0 : cols;
    copy_args(n, vals, tens);
    narrow(&tens[1], 1, c0, ncols);           /* B's columns */
    narrow(&tens[n->nargtens], 1, c0, ncols); /* the output's */
    tpu_status_t st = run_node(c->g, n, NULL, vals, tens);
    if (st != TPU_OK) {
      keep_first_error(c->first_error, st);
      return;
    }
  }
}

static tpu_status_t run_step(tpu_graph_t* g, const step_t* st, tpu_threadpool_t* pool) {
  if (st->node >= 0 && st->count > 1) {
    tpu_status_t first_error = TPU_OK;
    gemv_ctx_t c = {g, st, &first_error};
    tpu_parallel_for(pool, st->blocks, 1, run_gemv_blocks, &c);
    return first_error;
  }
  if (st->node >= 0) {
    node_t* n = &g->nodes[st->node];
    return run_node(g, n, pool, n->vals, n->tens);
  }
  const group_t* gr = &g->groups[st->group];
  char* ptrs[TPU_CG_MAX_EXT];
  if (gr->fn) {
    for (int32_t e = 0; e < gr->next; ++e) ptrs[e] = g->nodes[gr->ext_node[e]].tens[gr->ext_slot[e]].data;
  }
  if (gr->fn && gr->head == HEAD_NONE) {
    cg_ctx_t c = {gr->fn, ptrs};
    tpu_parallel_for(pool, gr->cg_units, gr->cg_grain, cg_range, &c);
    return TPU_OK;
  }
  tpu_status_t first_error = TPU_OK;
  tile_ctx_t c = {g, gr, &first_error, NULL, ptrs};
  if (gr->ntiles > 1) {
    tpu_parallel_for(pool, gr->ntiles, 1, run_tiles, &c);
  } else {
    c.pool = pool; /* one tile (e.g. a reduction over the tiled dim too): parallel kernels instead */
    run_tiles(&c, 0, 1);
  }
  return first_error;
}

static int64_t node_bytes(const node_t* n, bool memory_only) {
  int64_t b = 0;
  for (int32_t k = 0; k < n->ntens; ++k) {
    const tpu_tensor_t* t = &n->tens[k];
    if (n->tens_vid[k] < 0 || t->dtype == TPU_DTYPE_INVALID) continue;
    if (memory_only && n->slot_mode && n->slot_mode[k] == SLOT_SCRATCH) continue;
    b += tpu_tensor_numel(t) * (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
  }
  return b;
}

/* Appends `op` without its namespace to label (for fused-group names). */
static void label_add(char* label, size_t cap, const char* op, bool first) {
  const char* s = strstr(op, "::");
  s = s ? s + 2 : op;
  size_t len = strlen(label);
  if (len + 2 >= cap) return;
  snprintf(label + len, cap - len, "%s%s", first ? "" : "+", s);
}

/* One trace event (tpu/trace.h) for step `st`, which ran from t0 to now:
 * a kernel (its op), one-row products batched together, or a fused group
 * labelled by its members' ops. Bytes: the tensors the step's kernels read
 * and write in memory (tile scratch excluded). */
static void trace_step(const tpu_graph_t* g, const step_t* st, int64_t t0) {
  tpu_trace_event_t e = {.kind = TPU_TRACE_STEP, .device = g->device_index, .start_ns = t0,
                         .end_ns = (int64_t)tpu_now_ns()};
  if (st->node >= 0) {
    int32_t count = st->count > 1 ? st->count : 1;
    if (count > 1) {
      snprintf(e.name, sizeof(e.name), "batched %d x %s", count, g->nodes[st->node].entry->name);
    } else {
      snprintf(e.name, sizeof(e.name), "%s", g->nodes[st->node].entry->name);
    }
    for (int32_t i = 0; i < count; ++i) e.bytes += node_bytes(&g->nodes[st->node + i], false);
  } else {
    const group_t* gr = &g->groups[st->group];
    snprintf(e.name, sizeof(e.name), "fused(");
    for (int32_t i = 0; i < gr->count; ++i) {
      label_add(e.name, sizeof(e.name) - 1, g->nodes[gr->first + i].entry->name, i == 0);
      e.bytes += node_bytes(&g->nodes[gr->first + i], true);
    }
    size_t len = strlen(e.name);
    if (len < sizeof(e.name) - 1) {
      e.name[len] = ')';
      e.name[len + 1] = '\0';
    }
  }
  tpu_trace_record(&e);
}

static tpu_status_t execute(void* ctx) {
  run_t* r = ctx;
  tpu_graph_t* g = r->g;
  tpu_threadpool_t* pool = tpu_runtime_threadpool();
  bool profiling = __atomic_load_n(&g->profiling, __ATOMIC_RELAXED) != 0;
  bool tracing = tpu_trace_enabled();
  bind(g, r);
  g->call_flags = r->call_flags; /* the queue runs one item at a time: no other run reads it now */
  for (int32_t s = 0; s < g->nsteps; ++s) {
    const step_t* st = &g->steps[s];
    int64_t t0 = profiling || tracing ? (int64_t)tpu_now_ns() : 0;
    TPU_RETURN_IF_ERROR(run_step(g, st, pool));
    if (tracing) trace_step(g, st, t0);
    if (profiling) {
      node_t* first = &g->nodes[st->node >= 0 ? st->node : g->groups[st->group].first];
      first->ns += (int64_t)tpu_now_ns() - t0;
    }
  }
  return TPU_OK;
}

void tpu_graph_set_profiling(tpu_graph_t* g, bool on) {
  if (g) __atomic_store_n(&g->profiling, on ? 1 : 0, __ATOMIC_RELAXED);
}

bool tpu_graph_group_generated(const tpu_graph_t* g, int32_t group) {
  return g && group >= 0 && group < g->ngroups && g->groups[group].fn != NULL;
}

tpu_status_t tpu_graph_node_profile(const tpu_graph_t* g, int32_t i, const char** out_op, int64_t* out_ns,
                                    int32_t* out_group) {
  if (!g || i < 0 || i >= g->nnodes) {
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "graph: no node %d", i);
  }
  *out_op = g->nodes[i].entry->name;
  *out_ns = g->nodes[i].ns;
  *out_group = g->nodes[i].group;
  return TPU_OK;
}

static void run_cleanup(void* ctx) {
  run_t* r = ctx;
  tpu_graph_release(r->g);
  free(r);
}

tpu_status_t tpu_graph_run(tpu_graph_t* g, void* const* inputs, void* const* outputs, uint32_t call_flags) {
  if (!g) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "graph: NULL graph");
  if (!g->compiled) return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION, "graph: run before compile");
  if ((g->ninputs && !inputs) || (g->noutputs && !outputs)) {
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "graph: missing input or output pointers");
  }
  if (g->driver_graph) return tpu_hal_device_vt(g->device)->run_graph(g->device, &g->hal, inputs, outputs);
  size_t nptr = (size_t)g->ninputs + (size_t)g->noutputs;
  run_t* r = malloc(sizeof(run_t) + (nptr ? nptr : 1) * sizeof(void*));
  if (!r) return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "graph: out of host memory");
  r->g = g;
  r->call_flags = call_flags;
  r->inputs = (void**)(r + 1);
  r->outputs = r->inputs + g->ninputs;
  if (g->ninputs) memcpy(r->inputs, inputs, (size_t)g->ninputs * sizeof(void*));
  if (g->noutputs) memcpy(r->outputs, outputs, (size_t)g->noutputs * sizeof(void*));
  tpu_object_retain(&g->object);
  tpu_hal_work_t work = {"tpu::graph", execute, run_cleanup, r};
  return tpu_hal_device_vt(g->device)->submit(g->device, &work);
}
