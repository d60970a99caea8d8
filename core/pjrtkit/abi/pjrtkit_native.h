/* The C execute path: what C needs to run a cached program without entering Python.
 *
 * Declarations shared by ffi.cdef and the C compiler (plain C, no preprocessor lines); the
 * code is in pjrtkit_native_execute.h, the Python side in abi/native.py, the design in
 * ARCHITECTURE.md ("The C execute path").
 *
 * - A ledger counts the bytes of one memory space (or of the host pool several share) against
 *   a limit. The runtime's Memory and MemoryPool count through it (abi/native.CLedger), so the
 *   C path and Python see one count: memory_stats() and PJRTKIT_<BACKEND>_MEMORY_LIMIT hold
 *   for buffers either side made.
 * - A storage is the host memory behind a buffer's contents, reference counted: the buffer's
 *   handle holds one reference while the buffer is usable (not deleted, donated or destroyed:
 *   Python detaches it then), an execution reading it holds one meanwhile, and an adopted
 *   payload one (see below). Storage C allocated (an output of the C path) is freed by C when
 *   the last reference goes; storage of a Python payload is given back to Python, which drops
 *   its reference to the payload.
 * - A native plan says how C runs one loaded executable: the plugin's kernel
 *   (pjrtkit.types.NativeKernel: int kernel(void* const* arguments, void* const* outputs,
 *   void* context), 0 on success), the device, and each argument's and output's type, size and
 *   shape. An output of the C path is a buffer handle with no Python object behind it
 *   (native == 1, head.ref NULL) until Python needs one: then abi/native.adopt makes it.
 */

typedef struct pjrtkit_ledger {
    int64_t bytes_in_use;
    int64_t peak_bytes_in_use;
    int64_t num_allocs;
    int64_t largest_alloc_size;
    int64_t limit_bytes;            /* < 0: no limit */
    struct pjrtkit_ledger* pool;    /* the pool this memory also draws from, or NULL */
} pjrtkit_ledger;

typedef struct pjrtkit_storage {
    int64_t refs;
    void* data;
    int64_t nbytes;
    /* C-owned storage: the ledger its bytes are counted in until it is freed (NULL once a
     * Python buffer counts them instead: see adopt). */
    pjrtkit_ledger* ledger;
    int64_t python_owned;           /* 1: the data is a Python payload's; Python releases it */
    struct pjrtkit_storage* next_released;
} pjrtkit_storage;

typedef struct pjrtkit_native_value {
    int64_t element_type;
    int64_t nbytes;
    int64_t shape_key;
    int64_t rank;
    int64_t dims[8];
    PJRT_Memory* memory;            /* outputs: where the buffer lives */
    pjrtkit_ledger* ledger;         /* outputs: that memory's ledger */
} pjrtkit_native_value;

typedef int (*pjrtkit_native_kernel)(void* const* arguments, void* const* outputs, void* context);

typedef struct pjrtkit_native_plan {
    int64_t enabled;                /* 0: C declines every call (Python turns it off) */
    pjrtkit_native_kernel kernel;
    void* context;
    PJRT_Device* device;
    int64_t num_arguments;
    int64_t num_outputs;
    pjrtkit_native_value* arguments;
    pjrtkit_native_value* outputs;
    int64_t executions;             /* calls C served (atomic; tests and statistics) */
} pjrtkit_native_plan;

pjrtkit_ledger* pjrtkit_ledger_new(int64_t limit_bytes, pjrtkit_ledger* pool);
int pjrtkit_ledger_take(pjrtkit_ledger* ledger, int64_t nbytes);
int pjrtkit_ledger_check(pjrtkit_ledger* ledger, int64_t nbytes);
void pjrtkit_ledger_give(pjrtkit_ledger* ledger, int64_t nbytes);
void pjrtkit_ledger_read(pjrtkit_ledger* ledger, int64_t* counts);

pjrtkit_storage* pjrtkit_storage_new_python(void* data, int64_t nbytes);
void pjrtkit_storage_ref(pjrtkit_storage* storage);
int64_t pjrtkit_storage_unref(pjrtkit_storage* storage);
void pjrtkit_storage_unref_data(void* data);
void pjrtkit_storage_free(pjrtkit_storage* storage);
void pjrtkit_storage_disown(pjrtkit_storage* storage);
size_t pjrtkit_take_released(pjrtkit_storage** taken, size_t room);

int pjrtkit_buffer_attach(PJRT_Buffer* buffer, pjrtkit_storage* storage);
pjrtkit_storage* pjrtkit_buffer_detach(PJRT_Buffer* buffer);
void pjrtkit_native_buffer_destroy(PJRT_Buffer* buffer);
int64_t pjrtkit_native_buffers_live(void);
void pjrtkit_native_buffers_adopted(int64_t count);
void pjrtkit_free(void* block);
int64_t pjrtkit_shape_key(int64_t rank, const int64_t* dims);
void pjrtkit_memory_open(pjrtkit_memory* memory, pjrtkit_ledger* ledger);
