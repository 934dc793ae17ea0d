/* registry.c - the table of native kernels: every family file exports an
 * entry array and its length; lookup is by full schema name. The table is
 * constant data, built by the linker: no registration at start-up. Lookups
 * go through a hash index of the names, built once on first use (the
 * bridge looks up the ops it queues by name on every call; a linear scan
 * compared about a thousand names). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tpu/base.h"

#include "kernels/kutil.h"

#define TPU_K_FAMILY(f)                         \
  extern const tpu_k_entry_t tpu_k_##f##_entries[]; \
  extern const size_t tpu_k_##f##_count;
TPU_K_FAMILY(copy)
TPU_K_FAMILY(elementwise)
TPU_K_FAMILY(random)
TPU_K_FAMILY(reduce)
TPU_K_FAMILY(linalg)
TPU_K_FAMILY(index)
TPU_K_FAMILY(loss)
TPU_K_FAMILY(select)
TPU_K_FAMILY(attention)
TPU_K_FAMILY(conv)
TPU_K_FAMILY(misc)
TPU_K_FAMILY(solve)
TPU_K_FAMILY(fused)
TPU_K_FAMILY(moe)
TPU_K_FAMILY(optim)
TPU_K_FAMILY(foreach)
TPU_K_FAMILY(quant)
TPU_K_FAMILY(special)
TPU_K_FAMILY(pool)
TPU_K_FAMILY(factor)
TPU_K_FAMILY(fft)
TPU_K_FAMILY(norm)
#undef TPU_K_FAMILY

typedef struct {
  const tpu_k_entry_t* entries;
  const size_t* count;
} tpu_k_family_t;

static const tpu_k_family_t kFamilies[] = {
    {tpu_k_copy_entries, &tpu_k_copy_count},
    {tpu_k_elementwise_entries, &tpu_k_elementwise_count},
    {tpu_k_random_entries, &tpu_k_random_count},
    {tpu_k_reduce_entries, &tpu_k_reduce_count},
    {tpu_k_linalg_entries, &tpu_k_linalg_count},
    {tpu_k_index_entries, &tpu_k_index_count},
    {tpu_k_loss_entries, &tpu_k_loss_count},
    {tpu_k_select_entries, &tpu_k_select_count},
    {tpu_k_attention_entries, &tpu_k_attention_count},
    {tpu_k_conv_entries, &tpu_k_conv_count},
    {tpu_k_misc_entries, &tpu_k_misc_count},
    {tpu_k_solve_entries, &tpu_k_solve_count},
    {tpu_k_fused_entries, &tpu_k_fused_count},
    {tpu_k_moe_entries, &tpu_k_moe_count},
    {tpu_k_optim_entries, &tpu_k_optim_count},
    {tpu_k_foreach_entries, &tpu_k_foreach_count},
    {tpu_k_quant_entries, &tpu_k_quant_count},
    {tpu_k_special_entries, &tpu_k_special_count},
    {tpu_k_pool_entries, &tpu_k_pool_count},
    {tpu_k_factor_entries, &tpu_k_factor_count},
    {tpu_k_fft_entries, &tpu_k_fft_count},
    {tpu_k_norm_entries, &tpu_k_norm_count},
};
#define TPU_K_NUM_FAMILIES (sizeof(kFamilies) / sizeof(kFamilies[0]))

static const tpu_k_entry_t* scan(const char* name) {
  for (size_t f = 0; f < TPU_K_NUM_FAMILIES; ++f) {
    for (size_t i = 0; i < *kFamilies[f].count; ++i) {
      if (strcmp(kFamilies[f].entries[i].name, name) == 0) return &kFamilies[f].entries[i];
    }
  }
  return NULL;
}

/* Open addressing, linear probing; slots hold the first entry of each name
 * in family order (what the scan returns). NULL index: the allocation
 * failed, lookups scan. */
static const tpu_k_entry_t** g_index;
static size_t g_mask;
static pthread_once_t g_index_once = PTHREAD_ONCE_INIT;

static size_t slot_of(const char* name) { return (size_t)tpu_fnv1a(TPU_FNV1A_INIT, name, strlen(name)) & g_mask; }

static void build_index(void) {
  size_t n = 0;
  for (size_t f = 0; f < TPU_K_NUM_FAMILIES; ++f) n += *kFamilies[f].count;
  size_t cap = 64;
  while (cap < 2 * n) cap *= 2;
  const tpu_k_entry_t** index = calloc(cap, sizeof(*index));
  if (!index) return;
  g_mask = cap - 1;
  for (size_t f = 0; f < TPU_K_NUM_FAMILIES; ++f) {
    for (size_t i = 0; i < *kFamilies[f].count; ++i) {
      const tpu_k_entry_t* e = &kFamilies[f].entries[i];
      size_t s = slot_of(e->name);
      while (index[s] && strcmp(index[s]->name, e->name) != 0) s = (s + 1) & g_mask;
      if (!index[s]) index[s] = e;
    }
  }
  g_index = index;
}

const tpu_k_entry_t* tpu_k_lookup(const char* name) {
  if (!name) return NULL;
  pthread_once(&g_index_once, build_index);
  if (!g_index) return scan(name);
  for (size_t s = slot_of(name); g_index[s]; s = (s + 1) & g_mask) {
    if (strcmp(g_index[s]->name, name) == 0) return g_index[s];
  }
  return NULL;
}

size_t tpu_k_entry_count(void) {
  size_t n = 0;
  for (size_t f = 0; f < TPU_K_NUM_FAMILIES; ++f) n += *kFamilies[f].count;
  return n;
}

const tpu_k_entry_t* tpu_k_entry_at(size_t index) {
  for (size_t f = 0; f < TPU_K_NUM_FAMILIES; ++f) {
    if (index < *kFamilies[f].count) return &kFamilies[f].entries[index];
    index -= *kFamilies[f].count;
  }
  return NULL;
}

uint64_t tpu_k_random_counters(const tpu_k_call_t* call) {
  uint64_t n = 0;
  for (int32_t i = 0; i < call->num_outputs; ++i) n += (uint64_t)tpu_tensor_numel(&call->outputs[i]);
  return n * 4u;
}
