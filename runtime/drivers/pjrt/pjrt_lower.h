/* pjrt_lower.h - eager ops as StableHLO programs over byte storages.
 *
 * An op call (tpu/kernels.h) becomes one function whose arguments are the
 * storages (u8[n] buffers) its tensors live in, and whose one result is the
 * new contents of the output's storage:
 *   - each input view is read from its storage: the bytes of its span are
 *     sliced, bitcast to the element type, and gathered by the view's sizes
 *     and strides (a reshape when the view is contiguous);
 *   - the op is computed in PyTorch's way (half types in float32, inputs
 *     broadcast to the output's sizes and converted to its dtype);
 *   - the result is bitcast back to bytes and written into the output's
 *     storage at its offset (dynamic_update_slice for contiguous outputs, a
 *     scatter into the output's span otherwise).
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

/* Where a tensor's bytes are: program argument `arg` (a storage of
 * `storage_bytes`), starting `offset` bytes in. */
typedef struct tpu_pjrt_loc_t {
  int32_t arg;
  size_t storage_bytes;
  size_t offset;
} tpu_pjrt_loc_t;

/* True if `op` (a full schema name) has a lowering. */
bool tpu_pjrt_lowerable(const char* op);

/* Writes the program of `call` into a malloc'ed string (*out_text, freed by
 * the caller). `locs` gives the location of every tensor argument in schema
 * order, then of outputs[0]; `num_args` storages, of byte sizes `arg_bytes`.
 * The function returns the output storage's new bytes. UNIMPLEMENTED for
 * calls outside the lowering (several outputs, dtypes without a type). */
tpu_status_t tpu_pjrt_lower(const tpu_k_call_t* call, const tpu_pjrt_loc_t* locs,
                            int32_t num_args, const size_t* arg_bytes, char** out_text);

#endif /* TPU_DRIVERS_PJRT_LOWER_H_ */
