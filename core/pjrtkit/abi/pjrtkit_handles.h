/* The C structs behind every PJRT handle pjrtkit gives out.
 *
 * A handle (PJRT_Buffer*, PJRT_Event*, ...) points at one of these structs. Python allocates it
 * (abi/handles.py; the Python Ref owns the memory) and fills `head` plus the object's immutable
 * facts before C ever sees the pointer. The PJRT functions that only read such a fact are
 * answered in C from the struct (see C_ANSWERS in _build.py), with no call into Python; anything
 * unusual (a NULL or wrong-kind handle, a caller's struct too small, a fact not known) falls
 * back to the Python callback, which gives the same answer or the proper PJRT error.
 *
 * A fact is "unknown" (so C defers to Python) when an integer fact is negative or a pointer
 * fact is NULL; facts are written once, before the handle is handed out, and never change.
 * Plain C without preprocessor lines: the same text goes to ffi.cdef and to the C compiler.
 */

/* Every struct opens with this: `kind` tags the object type so a handle of the wrong kind is
 * caught (it becomes PJRTKIT_KIND_DEAD when C destroys the handle), `ref` is the ffi.new_handle
 * of the Python Ref behind the handle. */
typedef struct pjrtkit_head {
    uint32_t kind;
    void* ref;
} pjrtkit_head;

enum pjrtkit_kind {
    PJRTKIT_KIND_DEAD = 0,
    PJRTKIT_KIND_ERROR = 0x706b0001,
    PJRTKIT_KIND_EVENT = 0x706b0002,
    PJRTKIT_KIND_CLIENT = 0x706b0003,
    PJRTKIT_KIND_DEVICE = 0x706b0004,
    PJRTKIT_KIND_DESCRIPTION = 0x706b0005,
    PJRTKIT_KIND_MEMORY = 0x706b0006,
    PJRTKIT_KIND_TOPOLOGY = 0x706b0007,
    PJRTKIT_KIND_EXECUTABLE = 0x706b0008,
    PJRTKIT_KIND_LOADED_EXECUTABLE = 0x706b0009,
    PJRTKIT_KIND_BUFFER = 0x706b000a,
    PJRTKIT_KIND_EXECUTE_CONTEXT = 0x706b000b,
    PJRTKIT_KIND_BLOB = 0x706b000c
};

/* Handles with no facts kept in C: errors, clients, topologies, loaded executables, execute
 * contexts, serialized blobs. */
typedef struct pjrtkit_plain {
    pjrtkit_head head;
} pjrtkit_plain;

typedef struct pjrtkit_event {
    pjrtkit_head head;
    /* 1 only for pjrtkit_completed_event: ready, no error, never destroyed. */
    int64_t complete_ok;
} pjrtkit_event;

typedef struct pjrtkit_description {
    pjrtkit_head head;
    int64_t id;
    int64_t process_index;
} pjrtkit_description;

typedef struct pjrtkit_device {
    pjrtkit_head head;
    int64_t local_hardware_id;
    int64_t is_addressable;
    PJRT_DeviceDescription* description;
    PJRT_Memory* default_memory;
} pjrtkit_device;

typedef struct pjrtkit_memory {
    pjrtkit_head head;
    int64_t id;
    int64_t kind_id;
    const char* kind;    /* owned by the MemoryRef, like the string Python hands out */
    int64_t kind_size;
    /* Mutable, set once (device first): the ledger of this memory's bytes and the one device
     * it is attached to, when C may make buffers here (PJRT_Client_BufferFromHostBuffer
     * answered in C: pjrtkit_native_execute.h), else NULL. Python sets them when it installs
     * a native plan whose outputs live here. */
    PJRT_Device* device;
    struct pjrtkit_ledger* ledger;
} pjrtkit_memory;

typedef struct pjrtkit_executable {
    pjrtkit_head head;
    int64_t num_replicas;
    int64_t num_partitions;
    int64_t num_outputs;
} pjrtkit_executable;

typedef struct pjrtkit_buffer {
    pjrtkit_head head;
    PJRT_Device* device;
    PJRT_Memory* memory;
    int64_t element_type;
    int64_t on_device_size_in_bytes;
    /* 1: PJRT_Buffer_Destroy may be queued in C and finished by Python at its next entry
     * (small buffers only, so what waits in the queue is bounded). */
    int64_t deferrable_destroy;
    /* The C execute path (pjrtkit_native.h). Mutable, unlike the facts above: `storage` is the
     * host memory of the ready contents while C may read them (NULL: C must not; changed only
     * under the storage mutex), `native` 1 for an output of the C path that has no Python
     * object yet, 2 once Python adopted it. `shape_key`, `rank` and `dims` are facts. */
    struct pjrtkit_storage* storage;
    int64_t native;
    int64_t shape_key;
    int64_t rank;
    int64_t dims[8];
} pjrtkit_buffer;

typedef struct pjrtkit_loaded_executable {
    pjrtkit_head head;
    /* 1: the runtime object has execute_inline; C then tries it first (pjrtkit_fast_paths.h). */
    int64_t has_inline;
    /* How C runs it without Python (pjrtkit_native.h), once Python installed a plan; NULL
     * until then. Written once, read atomically. */
    struct pjrtkit_native_plan* native;
} pjrtkit_loaded_executable;

/* The one event handle for work that is already done without error (inline executions, host
 * transfers taken synchronously): every PJRT_Event_* function that needs no Python is answered
 * in C for it, and PJRT_Event_Destroy leaves it alone. */
extern pjrtkit_event pjrtkit_completed_event;

/* 1: answer from the structs in C; 0: every call goes to Python (PJRTKIT_TRACE_ABI and
 * PJRTKIT_PROFILE turn it off so that they see every call; tests compare both answers). */
extern int pjrtkit_c_answers;

/* How many destroys may wait in the queue (each of a buffer of at most
 * PJRTKIT_DEFERRED_DESTROY_BYTES). */
#define PJRTKIT_DESTROY_QUEUE_SIZE 64
#define PJRTKIT_DEFERRED_DESTROY_BYTES 65536
