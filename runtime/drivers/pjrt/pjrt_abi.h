/* pjrt_abi.h - the part of the PJRT C API (OpenXLA's plugin interface) this
 * driver calls, declared for layout compatibility with API 0.x plugins
 * (libtpu, XLA's CPU and GPU plugins).
 *
 * The PJRT ABI rules this file relies on:
 * - A plugin exports `const PJRT_Api* GetPjrtApi(void)`. The table starts with
 *   its own byte size and the API version, then holds one function pointer
 *   per entry point, in a fixed order; new entries are only appended within a
 *   major version. Entries this driver never calls are declared as anonymous
 *   slots, so only the offsets of the used ones matter.
 * - Every entry point takes one argument struct whose first field is the
 *   caller's `struct_size` (the byte size of the struct up to its last field
 *   as the caller compiled it) and returns a PJRT_Error* (NULL on success)
 *   that the caller destroys.
 * - Argument structs only grow at their end, so a caller built against an
 *   older minor version stays valid for a newer plugin.
 * Every argument struct is declared whole, as of API 0.81: a plugin may
 * reject a struct_size smaller than the one of the version it was built for.
 * Private to runtime/drivers/pjrt. */
#ifndef TPU_DRIVERS_PJRT_ABI_H_
#define TPU_DRIVERS_PJRT_ABI_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The API version these declarations follow (the oldest plugin probed). */
#define TPU_PJRT_ABI_MAJOR 0
#define TPU_PJRT_ABI_MINOR 81

/* Byte size of `type` up to and including `field`: what PJRT calls the
 * struct size of an argument struct whose last field is `field`. */
#define TPU_PJRT_SIZE(type, field) (offsetof(type, field) + sizeof(((type*)0)->field))

typedef struct PJRT_Error PJRT_Error;
typedef struct PJRT_Client PJRT_Client;
typedef struct PJRT_Device PJRT_Device;
typedef struct PJRT_DeviceDescription PJRT_DeviceDescription;
typedef struct PJRT_Buffer PJRT_Buffer;
typedef struct PJRT_Event PJRT_Event;
typedef struct PJRT_LoadedExecutable PJRT_LoadedExecutable;
typedef struct PJRT_Executable PJRT_Executable;
typedef struct PJRT_SerializedExecutable PJRT_SerializedExecutable;
typedef struct PJRT_Extension_Base PJRT_Extension_Base;

/* Error codes: those of absl::Status. */
typedef enum {
  PJRT_Error_Code_OK = 0,
  PJRT_Error_Code_INVALID_ARGUMENT = 3,
  PJRT_Error_Code_NOT_FOUND = 5,
  PJRT_Error_Code_RESOURCE_EXHAUSTED = 8,
  PJRT_Error_Code_FAILED_PRECONDITION = 9,
  PJRT_Error_Code_UNIMPLEMENTED = 12,
  PJRT_Error_Code_INTERNAL = 13,
  PJRT_Error_Code_UNAVAILABLE = 14,
} PJRT_Error_Code;

/* Element types (the subset used; values are the ABI's). */
typedef enum {
  PJRT_Buffer_Type_PRED = 1,
  PJRT_Buffer_Type_S8 = 2,
  PJRT_Buffer_Type_S16 = 3,
  PJRT_Buffer_Type_S32 = 4,
  PJRT_Buffer_Type_S64 = 5,
  PJRT_Buffer_Type_U8 = 6,
  PJRT_Buffer_Type_F16 = 10,
  PJRT_Buffer_Type_F32 = 11,
  PJRT_Buffer_Type_F64 = 12,
  PJRT_Buffer_Type_BF16 = 13,
} PJRT_Buffer_Type;

typedef enum {
  PJRT_HostBufferSemantics_kImmutableOnlyDuringCall = 0,
  PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes = 1,
} PJRT_HostBufferSemantics;

typedef enum {
  PJRT_NamedValue_kString = 0,
  PJRT_NamedValue_kInt64 = 1,
  PJRT_NamedValue_kInt64List = 2,
  PJRT_NamedValue_kFloat = 3,
  PJRT_NamedValue_kBool = 4,
} PJRT_NamedValue_Type;

typedef struct PJRT_NamedValue {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* name;
  size_t name_size;
  PJRT_NamedValue_Type type;
  union {
    const char* string_value;
    int64_t int64_value;
    const int64_t* int64_array_value;
    float float_value;
    bool bool_value;
  };
  size_t value_size; /* string length, list length, else 1 */
} PJRT_NamedValue;

/* ---- argument structs (field order is the ABI's) ---- */
typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Error* error;
} PJRT_Error_Destroy_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Error* error;
  const char* message; /* out, owned by the error */
  size_t message_size; /* out */
} PJRT_Error_Message_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Error* error;
  PJRT_Error_Code code; /* out */
} PJRT_Error_GetCode_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
} PJRT_Plugin_Initialize_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
} PJRT_Event_Args; /* Destroy, Error and Await share this layout */

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
  bool is_ready; /* out */
} PJRT_Event_IsReady_Args;

/* Called once the event is ready, on a thread of the plugin's choice (or on
 * the registering thread if it already is); it owns `error` (NULL: none) and
 * destroys it. */
typedef void (*PJRT_Event_OnReadyCallback)(PJRT_Error* error, void* user_arg);

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
  PJRT_Event_OnReadyCallback callback;
  void* user_arg; /* the caller's; must live until the callback ran */
} PJRT_Event_OnReady_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_NamedValue* create_options;
  size_t num_options;
  void* kv_get_callback;
  void* kv_get_user_arg;
  void* kv_put_callback;
  void* kv_put_user_arg;
  PJRT_Client* client; /* out */
  void* kv_try_get_callback;
  void* kv_try_get_user_arg;
} PJRT_Client_Create_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
} PJRT_Client_Destroy_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const char* text; /* out: platform name or version, owned by the client */
  size_t text_size; /* out */
} PJRT_Client_Text_Args; /* PlatformName and PlatformVersion */

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Device* const* addressable_devices; /* out, owned by the client */
  size_t num_addressable_devices;          /* out */
} PJRT_Client_AddressableDevices_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  char* code;
  size_t code_size;
  const char* format; /* "mlir" (StableHLO text or bytecode) or "hlo" */
  size_t format_size;
} PJRT_Program;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const PJRT_Program* program;
  const char* compile_options; /* serialized xla.CompileOptionsProto */
  size_t compile_options_size;
  PJRT_LoadedExecutable* executable; /* out */
} PJRT_Client_Compile_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const void* data;
  PJRT_Buffer_Type type;
  const int64_t* dims;
  size_t num_dims;
  const int64_t* byte_strides; /* NULL: dense row-major */
  size_t num_byte_strides;
  PJRT_HostBufferSemantics host_buffer_semantics;
  PJRT_Device* device;
  void* memory;        /* PJRT_Memory*, NULL: the device's default */
  void* device_layout; /* NULL: default layout */
  PJRT_Event* done_with_host_buffer; /* out: `data` may be reused after it */
  PJRT_Buffer* buffer;               /* out */
} PJRT_Client_BufferFromHostBuffer_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  int id; /* out */
} PJRT_DeviceDescription_Id_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  const char* text; /* out: kind or debug string */
  size_t text_size; /* out */
} PJRT_DeviceDescription_Text_Args; /* Kind and DebugString */

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  PJRT_DeviceDescription* device_description; /* out */
} PJRT_Device_GetDescription_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  int64_t bytes_in_use; /* out; the *_is_set flags say which others are */
  int64_t peak_bytes_in_use;
  bool peak_bytes_in_use_is_set;
  int64_t num_allocs;
  bool num_allocs_is_set;
  int64_t largest_alloc_size;
  bool largest_alloc_size_is_set;
  int64_t bytes_limit;
  bool bytes_limit_is_set;
  int64_t bytes_reserved;
  bool bytes_reserved_is_set;
  int64_t peak_bytes_reserved;
  bool peak_bytes_reserved_is_set;
  int64_t bytes_reservable_limit;
  bool bytes_reservable_limit_is_set;
  int64_t largest_free_block_bytes;
  bool largest_free_block_bytes_is_set;
  int64_t pool_bytes;
  bool pool_bytes_is_set;
  int64_t peak_pool_bytes;
  bool peak_pool_bytes_is_set;
} PJRT_Device_MemoryStats_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
} PJRT_LoadedExecutable_Destroy_Args;

/* Executables on disk: a loaded executable's executable, serialized, and
 * loaded back. */
typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* loaded_executable;
  PJRT_Executable* executable; /* out; freed with PJRT_Executable_Destroy */
} PJRT_LoadedExecutable_GetExecutable_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
} PJRT_Executable_Destroy_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Executable* executable;
  const char* serialized_bytes;   /* out, lives as long as serialized_executable */
  size_t serialized_bytes_size;   /* out */
  PJRT_SerializedExecutable* serialized_executable;                     /* out */
  void (*serialized_executable_deleter)(PJRT_SerializedExecutable* exec); /* out */
} PJRT_Executable_Serialize_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const char* serialized_executable;
  size_t serialized_executable_size;
  PJRT_LoadedExecutable* loaded_executable; /* out */
  const char* overridden_serialized_compile_options; /* NULL: the serialized ones */
  size_t overridden_serialized_compile_options_size;
} PJRT_Executable_DeserializeAndLoad_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  void** send_callbacks;
  void** recv_callbacks;
  size_t num_send_ops;
  size_t num_recv_ops;
  int launch_id;
  const int64_t* non_donatable_input_indices;
  size_t num_non_donatable_input_indices;
  void* context; /* PJRT_ExecuteContext* */
  const char* call_location;
  size_t num_tasks;
  int* task_ids;
  int64_t* incarnation_ids;
} PJRT_ExecuteOptions;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
  PJRT_ExecuteOptions* options;
  PJRT_Buffer* const* const* argument_lists; /* [num_devices][num_args] */
  size_t num_devices;
  size_t num_args;
  PJRT_Buffer** const* output_lists;   /* [num_devices][outputs], filled */
  PJRT_Event** device_complete_events; /* [num_devices], optional */
  PJRT_Device* execute_device;         /* portable executables only */
} PJRT_LoadedExecutable_Execute_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
} PJRT_Buffer_Destroy_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* src;
  void* host_layout; /* NULL: dense row-major */
  void* dst;         /* NULL: only query dst_size */
  size_t dst_size;
  PJRT_Event* event; /* out: the copy is done when it is ready */
} PJRT_Buffer_ToHostBuffer_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Event* event; /* out */
} PJRT_Buffer_ReadyEvent_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Device* dst_device;
  PJRT_Buffer* dst_buffer; /* out */
} PJRT_Buffer_CopyToDevice_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  int major_version;
  int minor_version;
} PJRT_Api_Version;

/* ---- the function table ---- */
typedef void (*tpu_pjrt_slot_t)(void); /* an entry point this driver never calls */

typedef struct PJRT_Api {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Api_Version pjrt_api_version;

  void (*PJRT_Error_Destroy)(PJRT_Error_Destroy_Args*);
  void (*PJRT_Error_Message)(PJRT_Error_Message_Args*);
  PJRT_Error* (*PJRT_Error_GetCode)(PJRT_Error_GetCode_Args*);
  PJRT_Error* (*PJRT_Plugin_Initialize)(PJRT_Plugin_Initialize_Args*);
  tpu_pjrt_slot_t Plugin_Attributes;
  PJRT_Error* (*PJRT_Event_Destroy)(PJRT_Event_Args*);
  PJRT_Error* (*PJRT_Event_IsReady)(PJRT_Event_IsReady_Args*);
  PJRT_Error* (*PJRT_Event_Error)(PJRT_Event_Args*);
  PJRT_Error* (*PJRT_Event_Await)(PJRT_Event_Args*);
  PJRT_Error* (*PJRT_Event_OnReady)(PJRT_Event_OnReady_Args*);
  PJRT_Error* (*PJRT_Client_Create)(PJRT_Client_Create_Args*);
  PJRT_Error* (*PJRT_Client_Destroy)(PJRT_Client_Destroy_Args*);
  PJRT_Error* (*PJRT_Client_PlatformName)(PJRT_Client_Text_Args*);
  tpu_pjrt_slot_t Client_ProcessIndex;
  PJRT_Error* (*PJRT_Client_PlatformVersion)(PJRT_Client_Text_Args*);
  tpu_pjrt_slot_t Client_Devices;
  PJRT_Error* (*PJRT_Client_AddressableDevices)(PJRT_Client_AddressableDevices_Args*);
  tpu_pjrt_slot_t Client_LookupDevice;
  tpu_pjrt_slot_t Client_LookupAddressableDevice;
  tpu_pjrt_slot_t Client_AddressableMemories;
  PJRT_Error* (*PJRT_Client_Compile)(PJRT_Client_Compile_Args*);
  tpu_pjrt_slot_t Client_DefaultDeviceAssignment;
  PJRT_Error* (*PJRT_Client_BufferFromHostBuffer)(PJRT_Client_BufferFromHostBuffer_Args*);
  PJRT_Error* (*PJRT_DeviceDescription_Id)(PJRT_DeviceDescription_Id_Args*);
  tpu_pjrt_slot_t DeviceDescription_ProcessIndex;
  tpu_pjrt_slot_t DeviceDescription_Attributes;
  PJRT_Error* (*PJRT_DeviceDescription_Kind)(PJRT_DeviceDescription_Text_Args*);
  PJRT_Error* (*PJRT_DeviceDescription_DebugString)(PJRT_DeviceDescription_Text_Args*);
  tpu_pjrt_slot_t DeviceDescription_ToString;
  PJRT_Error* (*PJRT_Device_GetDescription)(PJRT_Device_GetDescription_Args*);
  tpu_pjrt_slot_t Device_IsAddressable;
  tpu_pjrt_slot_t Device_LocalHardwareId;
  tpu_pjrt_slot_t Device_AddressableMemories;
  tpu_pjrt_slot_t Device_DefaultMemory;
  PJRT_Error* (*PJRT_Device_MemoryStats)(PJRT_Device_MemoryStats_Args*);
  tpu_pjrt_slot_t Memory_Id;
  tpu_pjrt_slot_t Memory_Kind;
  tpu_pjrt_slot_t Memory_DebugString;
  tpu_pjrt_slot_t Memory_ToString;
  tpu_pjrt_slot_t Memory_AddressableByDevices;
  PJRT_Error* (*PJRT_Executable_Destroy)(PJRT_Executable_Destroy_Args*);
  tpu_pjrt_slot_t Executable_Name;
  tpu_pjrt_slot_t Executable_NumReplicas;
  tpu_pjrt_slot_t Executable_NumPartitions;
  tpu_pjrt_slot_t Executable_NumOutputs;
  tpu_pjrt_slot_t Executable_SizeOfGeneratedCodeInBytes;
  tpu_pjrt_slot_t Executable_GetCostAnalysis;
  tpu_pjrt_slot_t Executable_OutputMemoryKinds;
  tpu_pjrt_slot_t Executable_OptimizedProgram;
  PJRT_Error* (*PJRT_Executable_Serialize)(PJRT_Executable_Serialize_Args*);
  PJRT_Error* (*PJRT_LoadedExecutable_Destroy)(PJRT_LoadedExecutable_Destroy_Args*);
  PJRT_Error* (*PJRT_LoadedExecutable_GetExecutable)(PJRT_LoadedExecutable_GetExecutable_Args*);
  tpu_pjrt_slot_t LoadedExecutable_AddressableDevices;
  tpu_pjrt_slot_t LoadedExecutable_Delete;
  tpu_pjrt_slot_t LoadedExecutable_IsDeleted;
  PJRT_Error* (*PJRT_LoadedExecutable_Execute)(PJRT_LoadedExecutable_Execute_Args*);
  PJRT_Error* (*PJRT_Executable_DeserializeAndLoad)(PJRT_Executable_DeserializeAndLoad_Args*);
  tpu_pjrt_slot_t LoadedExecutable_Fingerprint;
  PJRT_Error* (*PJRT_Buffer_Destroy)(PJRT_Buffer_Destroy_Args*);
  tpu_pjrt_slot_t Buffer_ElementType;
  tpu_pjrt_slot_t Buffer_Dimensions;
  tpu_pjrt_slot_t Buffer_UnpaddedDimensions;
  tpu_pjrt_slot_t Buffer_DynamicDimensionIndices;
  tpu_pjrt_slot_t Buffer_GetMemoryLayout;
  tpu_pjrt_slot_t Buffer_OnDeviceSizeInBytes;
  tpu_pjrt_slot_t Buffer_Device;
  tpu_pjrt_slot_t Buffer_Memory;
  tpu_pjrt_slot_t Buffer_Delete;
  tpu_pjrt_slot_t Buffer_IsDeleted;
  PJRT_Error* (*PJRT_Buffer_CopyToDevice)(PJRT_Buffer_CopyToDevice_Args*);
  PJRT_Error* (*PJRT_Buffer_ToHostBuffer)(PJRT_Buffer_ToHostBuffer_Args*);
  tpu_pjrt_slot_t Buffer_IsOnCpu;
  PJRT_Error* (*PJRT_Buffer_ReadyEvent)(PJRT_Buffer_ReadyEvent_Args*);
  /* Later entries are not used; the plugin's table is longer. */
} PJRT_Api;

/* Bytes of the table this driver reads: a plugin whose struct_size is
 * smaller lacks an entry point used here. */
#define TPU_PJRT_API_USED_SIZE TPU_PJRT_SIZE(PJRT_Api, PJRT_Buffer_ReadyEvent)

typedef const PJRT_Api* (*tpu_pjrt_get_api_fn_t)(void);

#endif /* TPU_DRIVERS_PJRT_ABI_H_ */
