/* pjrt_lower.h - ops and whole graphs as StableHLO programs over byte
 * storages.
 *
 * A program is one function over storages: u8[n] byte arrays, some of them
 * arguments (PJRT buffers of allocations), others fresh (zero-filled at the
 * start: a graph's intermediate buffers). Its nodes are kernel calls
 * (tpu/kernels.h) whose tensors name a storage and a byte offset in it:
 *   - each input view is read from the current value of its storage: the
 *     bytes of its span are sliced, bitcast to the element type, and
 *     gathered by the view's sizes and strides (a reshape when the view is
 *     contiguous);
 *   - the op is computed in PyTorch's way (half types in float32, inputs
 *     broadcast to the output's sizes and converted to its dtype);
 *   - the result is bitcast back to bytes and written into the output's
 *     storage at its offset (dynamic_update_slice for contiguous outputs, a
 *     scatter into the output's span otherwise), which gives that storage a
 *     new value for the nodes after it.
 * The function returns the final value of every storage marked `result`.
 * An eager op is a program of one node; a graph from torch.compile is one
 * program for all its nodes (one PJRT execution per run).
 * Offsets, sizes, strides and scalar arguments are part of the program text,
 * so the text is the cache key of its executable.
 * Private to runtime/drivers/pjrt. */
#ifndef TPU_DRIVERS_PJRT_LOWER_H_
#define TPU_DRIVERS_PJRT_LOWER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/kernels.h"
#include "tpu/status.h"

typedef struct tpu_pjrt_storage_t {
  size_t bytes;
  int32_t arg; /* program argument number, -1: starts as zeros */
  bool result; /* its final value is a result of the program */
} tpu_pjrt_storage_t;

/* Where a tensor's bytes are: `offset` bytes into storage `storage`. */
typedef struct tpu_pjrt_loc_t {
  int32_t storage;
  size_t offset;
} tpu_pjrt_loc_t;

/* A node: `call`'s tensors (their data pointers are not read) at `locs`:
 * every tensor argument in schema order (members of tensor lists
 * included), then every output. storage -1: a tensor without bytes (absent,
 * or empty). */
typedef struct tpu_pjrt_node_t {
  const tpu_k_call_t* call;
  const tpu_pjrt_loc_t* locs;
  /* A random op's 16 bytes {rng_seed, rng_offset} (two little-endian u64),
   * an argument storage given per run so that the text does not depend on
   * them; NULL: the node has none, and random ops refuse to lower. */
  const tpu_pjrt_loc_t* rng;
} tpu_pjrt_node_t;

/* A device-side index check (the asynchronous bounds check of an index-taking
 * op: index_select, gather, scatter, index_put, ...). Out-of-range indices
 * never fault in StableHLO (gather clamps, scatter drops), so the program
 * computes, for every check, one row [pos, value] of its check output: `pos`
 * is the row-major position of the first index outside its range ([0, size),
 * or [-size, size) for ops taking negative indices) and
 * `value` that index, or pos = INT64_MAX (TPU_PJRT_CHECK_NONE) when all are in
 * range. What the message needs besides the value stays on the host here. */
#define TPU_PJRT_CHECK_NONE INT64_MAX

/* tpu_pjrt_check_t.dim of masked_scatter's check: positions in the
 * flattened source, whose size is the check's size. */
#define TPU_PJRT_CHECK_SOURCE (-1)

typedef struct tpu_pjrt_check_t {
  char op[64];  /* the call's schema name */
  int32_t dim;  /* the indexed dimension, or TPU_PJRT_CHECK_SOURCE */
  int64_t size; /* its size */
} tpu_pjrt_check_t;

/* A lowered program: its text and its checks. With num_checks > 0 the
 * program returns one more result after the storages: tensor<num_checks x
 * 2 x i64>, row i for checks[i]. Both arrays are malloc'ed and owned by the
 * caller (tpu_pjrt_program_free). */
typedef struct tpu_pjrt_program_t {
  char* text;
  tpu_pjrt_check_t* checks;
  int32_t num_checks;
} tpu_pjrt_program_t;

void tpu_pjrt_program_free(tpu_pjrt_program_t* p);

/* The error of a check row (TPU_OK when it has no hit): OUT_OF_RANGE with
 * the host kernels' message "<op>: index <value> is out of bounds for
 * dimension <dim> with size <size>". */
tpu_status_t tpu_pjrt_check_status(const tpu_pjrt_check_t* c, const int64_t row[2]);

/* True if `op` (a full schema name) has a lowering. */
bool tpu_pjrt_lowerable(const char* op);

/* Writes the program into *out (zeroed first; the caller frees it with
 * tpu_pjrt_program_free, also after an error). Arguments are the storages
 * with arg >= 0 (numbered 0..n-1 without gaps), results those marked
 * `result`, in storage order, then the check output when there are checks.
 * UNIMPLEMENTED, naming the op, for a call outside the lowering. */
tpu_status_t tpu_pjrt_lower(const tpu_pjrt_storage_t* storages, int32_t num_storages,
                            const tpu_pjrt_node_t* nodes, int32_t num_nodes, tpu_pjrt_program_t* out);

#endif /* TPU_DRIVERS_PJRT_LOWER_H_ */
