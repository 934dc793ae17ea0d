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
} tpu_pjrt_node_t;

/* True if `op` (a full schema name) has a lowering. */
bool tpu_pjrt_lowerable(const char* op);

/* Writes the program into a malloc'ed string (*out_text, freed by the
 * caller). Arguments are the storages with arg >= 0 (numbered 0..n-1
 * without gaps), results those marked `result`, in storage order.
 * UNIMPLEMENTED, naming the op, for a call outside the lowering. */
tpu_status_t tpu_pjrt_lower(const tpu_pjrt_storage_t* storages, int32_t num_storages,
                            const tpu_pjrt_node_t* nodes, int32_t num_nodes, char** out_text);

#endif /* TPU_DRIVERS_PJRT_LOWER_H_ */
