/* reduce.c - kernel family "reduce" (see tpu/kernels.h for the ABI). */
#include "kernels/kutil.h"

const tpu_k_entry_t tpu_k_reduce_entries[] = {
    {NULL, NULL, NULL, 0},
};
const size_t tpu_k_reduce_count = 0;
