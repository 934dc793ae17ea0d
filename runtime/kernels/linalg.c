/* linalg.c - kernel family "linalg" (see tpu/kernels.h for the ABI). */
#include "kernels/kutil.h"

const tpu_k_entry_t tpu_k_linalg_entries[] = {
    {NULL, NULL, NULL, 0},
};
const size_t tpu_k_linalg_count = 0;
