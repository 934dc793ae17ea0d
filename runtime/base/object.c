#include "tpu/base.h"

void tpu_object_init(tpu_object_t* object, const void* vtable) {
  __atomic_store_n(&object->refcount, 1, __ATOMIC_RELAXED);
  object->vtable = vtable;
}

void tpu_object_retain(tpu_object_t* object) {
  if (object) __atomic_fetch_add(&object->refcount, 1, __ATOMIC_RELAXED);
}

void tpu_object_release(tpu_object_t* object) {
  if (!object) return;
  if (__atomic_sub_fetch(&object->refcount, 1, __ATOMIC_ACQ_REL) == 0) {
    const tpu_object_vtable_t* vt = (const tpu_object_vtable_t*)object->vtable;
    if (vt && vt->destroy) vt->destroy(object);
  }
}
