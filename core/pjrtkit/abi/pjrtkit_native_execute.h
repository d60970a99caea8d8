/* The C execute path (declarations and the design: pjrtkit_native.h). Compiled into
 * pjrtkit.abi._pjrt_cffi after pjrtkit_fast_paths.h; pjrtkit_guarded_PJRT_LoadedExecutable_Execute
 * tries pjrtkit_native_execute before it takes the GIL.
 *
 * Nothing here takes the GIL or calls Python. Every condition C cannot vouch for makes it
 * decline (return 0) having changed nothing, and the Python path serves the call as before.
 */

/* Ledgers: one mutex for all (each critical section is a few additions). */
static pthread_mutex_t pjrtkit_ledger_mutex = PTHREAD_MUTEX_INITIALIZER;

pjrtkit_ledger* pjrtkit_ledger_new(int64_t limit_bytes, pjrtkit_ledger* pool) {
    /* Never freed: buffers of the C path may outlive their client (one per memory space). */
    pjrtkit_ledger* ledger = (pjrtkit_ledger*)calloc(1, sizeof(pjrtkit_ledger));
    if (ledger == NULL) return NULL;
    ledger->limit_bytes = limit_bytes;
    ledger->pool = pool;
    return ledger;
}

/* 0 when `nbytes` more fit, 1 past the ledger's own limit, 2 past its pool's (lock held). */
static int pjrtkit_ledger_refusal(const pjrtkit_ledger* ledger, int64_t nbytes) {
    if (nbytes <= 0) return 0;
    if (ledger->limit_bytes >= 0 && ledger->bytes_in_use + nbytes > ledger->limit_bytes) return 1;
    const pjrtkit_ledger* pool = ledger->pool;
    if (pool != NULL && pool->limit_bytes >= 0 && pool->bytes_in_use + nbytes > pool->limit_bytes)
        return 2;
    return 0;
}

int pjrtkit_ledger_check(pjrtkit_ledger* ledger, int64_t nbytes) {
    pthread_mutex_lock(&pjrtkit_ledger_mutex);
    int refusal = pjrtkit_ledger_refusal(ledger, nbytes);
    pthread_mutex_unlock(&pjrtkit_ledger_mutex);
    return refusal;
}

/* Counts `nbytes` in the ledger and its pool, or (returning 1 or 2) nothing at all. */
int pjrtkit_ledger_take(pjrtkit_ledger* ledger, int64_t nbytes) {
    pthread_mutex_lock(&pjrtkit_ledger_mutex);
    int refusal = pjrtkit_ledger_refusal(ledger, nbytes);
    if (refusal == 0) {
        ledger->bytes_in_use += nbytes;
        if (ledger->bytes_in_use > ledger->peak_bytes_in_use)
            ledger->peak_bytes_in_use = ledger->bytes_in_use;
        ledger->num_allocs += 1;
        if (nbytes > ledger->largest_alloc_size) ledger->largest_alloc_size = nbytes;
        pjrtkit_ledger* pool = ledger->pool;
        if (pool != NULL) {
            pool->bytes_in_use += nbytes;
            if (pool->bytes_in_use > pool->peak_bytes_in_use)
                pool->peak_bytes_in_use = pool->bytes_in_use;
        }
    }
    pthread_mutex_unlock(&pjrtkit_ledger_mutex);
    return refusal;
}

void pjrtkit_ledger_give(pjrtkit_ledger* ledger, int64_t nbytes) {
    pthread_mutex_lock(&pjrtkit_ledger_mutex);
    ledger->bytes_in_use -= nbytes;
    if (ledger->pool != NULL) ledger->pool->bytes_in_use -= nbytes;
    pthread_mutex_unlock(&pjrtkit_ledger_mutex);
}

/* counts[0..3] = in use, peak, allocations, largest allocation: one consistent reading. */
void pjrtkit_ledger_read(pjrtkit_ledger* ledger, int64_t* counts) {
    pthread_mutex_lock(&pjrtkit_ledger_mutex);
    counts[0] = ledger->bytes_in_use;
    counts[1] = ledger->peak_bytes_in_use;
    counts[2] = ledger->num_allocs;
    counts[3] = ledger->largest_alloc_size;
    pthread_mutex_unlock(&pjrtkit_ledger_mutex);
}

/* Storage. A buffer's `storage` pointer changes only under this mutex, so an execution that
 * takes a reference never races a detach into a freed storage. */
static pthread_mutex_t pjrtkit_storage_mutex = PTHREAD_MUTEX_INITIALIZER;
static pjrtkit_storage* pjrtkit_released = NULL;  /* Python storages C let go of (the mutex) */
static int64_t pjrtkit_native_live = 0;           /* buffers of the C path not adopted yet */

/* C-owned storage: the header and the data in one allocation, the data 64-byte aligned. */
#define PJRTKIT_STORAGE_HEADER 64

static pjrtkit_storage* pjrtkit_storage_new_c(int64_t nbytes, pjrtkit_ledger* ledger) {
    void* block = NULL;
    if (posix_memalign(&block, 64, (size_t)PJRTKIT_STORAGE_HEADER + (size_t)nbytes) != 0)
        return NULL;
    pjrtkit_storage* s = (pjrtkit_storage*)block;
    memset(s, 0, sizeof(*s));
    s->refs = 1;
    s->data = (char*)block + PJRTKIT_STORAGE_HEADER;
    s->nbytes = nbytes;
    s->ledger = ledger;
    return s;
}

pjrtkit_storage* pjrtkit_storage_new_python(void* data, int64_t nbytes) {
    pjrtkit_storage* s = (pjrtkit_storage*)calloc(1, sizeof(pjrtkit_storage));
    if (s == NULL) return NULL;
    s->refs = 1;
    s->data = data;
    s->nbytes = nbytes;
    s->python_owned = 1;
    return s;
}

void pjrtkit_storage_ref(pjrtkit_storage* storage) {
    __atomic_add_fetch(&storage->refs, 1, __ATOMIC_RELAXED);
}

static void pjrtkit_storage_release_c(pjrtkit_storage* s) {
    pjrtkit_ledger* ledger = __atomic_load_n(&s->ledger, __ATOMIC_ACQUIRE);
    if (ledger != NULL) pjrtkit_ledger_give(ledger, s->nbytes);
    free(s);
}

/* Drops a reference; returns how many are left. At 0 C-owned storage is freed; a Python
 * storage is left to the caller when Python called (it drops the payload and frees the
 * header), and queued for Python when C let go of the last reference. */
static int64_t pjrtkit_storage_unref_in(pjrtkit_storage* s, int from_python) {
    int64_t left = __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL);
    if (left != 0) return left;
    if (!s->python_owned) {
        pjrtkit_storage_release_c(s);
    } else if (!from_python) {
        pthread_mutex_lock(&pjrtkit_storage_mutex);
        s->next_released = pjrtkit_released;
        pjrtkit_released = s;
        pthread_mutex_unlock(&pjrtkit_storage_mutex);
    }
    return 0;
}

int64_t pjrtkit_storage_unref(pjrtkit_storage* storage) {
    return pjrtkit_storage_unref_in(storage, 1);
}

/* The destructor of an adopted payload's memory (ffi.gc): the data pointer of C-owned storage. */
void pjrtkit_storage_unref_data(void* data) {
    pjrtkit_storage_unref_in((pjrtkit_storage*)((char*)data - PJRTKIT_STORAGE_HEADER), 1);
}

void pjrtkit_storage_free(pjrtkit_storage* storage) {
    free(storage);
}

/* From now on a Python buffer counts the bytes: freeing the storage gives nothing back. */
void pjrtkit_storage_disown(pjrtkit_storage* storage) {
    __atomic_store_n(&storage->ledger, NULL, __ATOMIC_RELEASE);
}

size_t pjrtkit_take_released(pjrtkit_storage** taken, size_t room) {
    size_t count = 0;
    pthread_mutex_lock(&pjrtkit_storage_mutex);
    while (pjrtkit_released != NULL && count < room) {
        taken[count++] = pjrtkit_released;
        pjrtkit_released = pjrtkit_released->next_released;
    }
    pthread_mutex_unlock(&pjrtkit_storage_mutex);
    return count;
}

/* 1: `storage` is now the buffer's (it had none); 0: it already had one (the caller keeps its
 * reference). */
int pjrtkit_buffer_attach(PJRT_Buffer* buffer, pjrtkit_storage* storage) {
    pjrtkit_buffer* b = (pjrtkit_buffer*)buffer;
    int attached = 0;
    pthread_mutex_lock(&pjrtkit_storage_mutex);
    if (b->storage == NULL) {
        b->storage = storage;
        attached = 1;
    }
    pthread_mutex_unlock(&pjrtkit_storage_mutex);
    return attached;
}

/* The buffer's storage, now no longer the buffer's (the caller owns that reference), or NULL. */
pjrtkit_storage* pjrtkit_buffer_detach(PJRT_Buffer* buffer) {
    pjrtkit_buffer* b = (pjrtkit_buffer*)buffer;
    pthread_mutex_lock(&pjrtkit_storage_mutex);
    pjrtkit_storage* s = b->storage;
    b->storage = NULL;
    pthread_mutex_unlock(&pjrtkit_storage_mutex);
    return s;
}

/* PJRT_Buffer_Destroy of an output of the C path that Python never adopted. */
void pjrtkit_native_buffer_destroy(PJRT_Buffer* buffer) {
    pjrtkit_buffer* b = (pjrtkit_buffer*)buffer;
    b->head.kind = PJRTKIT_KIND_DEAD;
    pjrtkit_storage* s = pjrtkit_buffer_detach(buffer);
    if (s != NULL) pjrtkit_storage_unref_in(s, 0);
    free(b);
    __atomic_sub_fetch(&pjrtkit_native_live, 1, __ATOMIC_RELAXED);
}

int64_t pjrtkit_native_buffers_live(void) {
    return __atomic_load_n(&pjrtkit_native_live, __ATOMIC_RELAXED);
}

/* A handle struct C allocated, freed by the Ref that adopted it (ffi.gc). */
void pjrtkit_free(void* block) {
    free(block);
}

void pjrtkit_native_buffers_adopted(int64_t count) {
    __atomic_sub_fetch(&pjrtkit_native_live, count, __ATOMIC_RELAXED);
}

#define PJRTKIT_NATIVE_MAX_VALUES 64

static void pjrtkit_native_release_inputs(pjrtkit_storage** held, size_t count) {
    for (size_t i = 0; i < count; i++) pjrtkit_storage_unref_in(held[i], 0);
}

static void pjrtkit_native_drop_outputs(pjrtkit_storage** made, size_t count) {
    for (size_t o = 0; o < count; o++) pjrtkit_storage_unref_in(made[o], 0);
}

/* PJRT_LoadedExecutable_Execute answered in C: 1 when served (outputs and events written),
 * 0 when declined with nothing changed. Declines: C answers off (tracing, profiling), no plan
 * or a disabled one, any call shape but one device without send/recv, an argument that is not
 * a live buffer of the plan's device with the type, size and shape the program takes, or whose
 * contents C may not read (not ready, deleted, donated, never made readable), a memory limit
 * (Python then reports RESOURCE_EXHAUSTED), an allocation failure, or an error from the kernel
 * (Python runs the program again and reports it). */
static int pjrtkit_native_execute(PJRT_LoadedExecutable_Execute_Args* args) {
    typedef PJRT_LoadedExecutable_Execute_Args A;
    if (!pjrtkit_c_answers || args == NULL
        || args->struct_size < PJRTKIT_FIELD_END(A, execute_device)) return 0;
    const pjrtkit_loaded_executable* e = (const pjrtkit_loaded_executable*)args->executable;
    if (e == NULL || e->head.kind != PJRTKIT_KIND_LOADED_EXECUTABLE) return 0;
    pjrtkit_native_plan* p = __atomic_load_n(&((pjrtkit_loaded_executable*)e)->native,
                                             __ATOMIC_ACQUIRE);
    if (p == NULL || !__atomic_load_n(&p->enabled, __ATOMIC_ACQUIRE)) return 0;
    if (args->num_devices != 1 || args->execute_device != NULL || args->output_lists == NULL
        || args->output_lists[0] == NULL || (int64_t)args->num_args != p->num_arguments
        || p->num_arguments > PJRTKIT_NATIVE_MAX_VALUES
        || p->num_outputs > PJRTKIT_NATIVE_MAX_VALUES) return 0;
    if (args->num_args > 0 && (args->argument_lists == NULL || args->argument_lists[0] == NULL))
        return 0;
    const PJRT_ExecuteOptions* o = args->options;
    if (o != NULL && (o->struct_size < PJRTKIT_FIELD_END(PJRT_ExecuteOptions, num_recv_ops)
                      || o->num_send_ops != 0 || o->num_recv_ops != 0)) return 0;

    size_t num_args = args->num_args, num_outputs = (size_t)p->num_outputs;
    for (size_t i = 0; i < num_args; i++) {
        const pjrtkit_buffer* b = (const pjrtkit_buffer*)args->argument_lists[0][i];
        const pjrtkit_native_value* want = &p->arguments[i];
        if (b == NULL || b->head.kind != PJRTKIT_KIND_BUFFER || b->device != p->device
            || b->element_type != want->element_type
            || b->on_device_size_in_bytes != want->nbytes || b->shape_key != want->shape_key)
            return 0;
    }
    /* Inputs: a reference to each storage, so a concurrent delete cannot free it meanwhile. */
    pjrtkit_storage* held[PJRTKIT_NATIVE_MAX_VALUES];
    void* in_data[PJRTKIT_NATIVE_MAX_VALUES];
    size_t num_held = 0;
    pthread_mutex_lock(&pjrtkit_storage_mutex);
    for (; num_held < num_args; num_held++) {
        pjrtkit_storage* s = ((pjrtkit_buffer*)args->argument_lists[0][num_held])->storage;
        if (s == NULL) break;
        __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
        held[num_held] = s;
        in_data[num_held] = s->data;
    }
    pthread_mutex_unlock(&pjrtkit_storage_mutex);
    if (num_held < num_args) {
        pjrtkit_native_release_inputs(held, num_held);
        return 0;
    }
    /* Outputs: counted first (a limit refuses before anything is allocated), then allocated. */
    pjrtkit_storage* made[PJRTKIT_NATIVE_MAX_VALUES];
    pjrtkit_buffer* handles[PJRTKIT_NATIVE_MAX_VALUES];
    void* out_data[PJRTKIT_NATIVE_MAX_VALUES];
    size_t counted = 0, num_made = 0, num_handles = 0;
    int ok = 1;
    for (; counted < num_outputs; counted++) {
        const pjrtkit_native_value* out = &p->outputs[counted];
        if (pjrtkit_ledger_take(out->ledger, out->nbytes) != 0) { ok = 0; break; }
    }
    for (; ok && num_made < num_outputs; num_made++) {
        const pjrtkit_native_value* out = &p->outputs[num_made];
        made[num_made] = pjrtkit_storage_new_c(out->nbytes, out->ledger);
        if (made[num_made] == NULL) { ok = 0; break; }
        out_data[num_made] = made[num_made]->data;
    }
    for (; ok && num_handles < num_outputs; num_handles++) {
        handles[num_handles] = (pjrtkit_buffer*)calloc(1, sizeof(pjrtkit_buffer));
        if (handles[num_handles] == NULL) { ok = 0; break; }
    }
    if (ok && p->kernel(in_data, out_data, p->context) != 0) ok = 0;
    pjrtkit_native_release_inputs(held, num_held);
    if (!ok) {
        for (size_t h = 0; h < num_handles; h++) free(handles[h]);
        /* Storage made so far gives its bytes back when freed; the rest were counted only. */
        pjrtkit_native_drop_outputs(made, num_made);
        for (size_t c = num_made; c < counted; c++)
            pjrtkit_ledger_give(p->outputs[c].ledger, p->outputs[c].nbytes);
        return 0;
    }
    for (size_t k = 0; k < num_outputs; k++) {
        const pjrtkit_native_value* out = &p->outputs[k];
        pjrtkit_buffer* b = handles[k];
        b->head.kind = PJRTKIT_KIND_BUFFER;
        b->head.ref = NULL;
        b->device = p->device;
        b->memory = out->memory;
        b->element_type = out->element_type;
        b->on_device_size_in_bytes = out->nbytes;
        b->deferrable_destroy = 0;
        b->storage = made[k];
        b->native = 1;
        b->shape_key = out->shape_key;
        b->rank = out->rank;
        memcpy(b->dims, out->dims, sizeof(b->dims));
        args->output_lists[0][k] = (PJRT_Buffer*)b;
    }
    __atomic_add_fetch(&pjrtkit_native_live, (int64_t)num_outputs, __ATOMIC_RELAXED);
    if (args->device_complete_events != NULL)
        args->device_complete_events[0] = (PJRT_Event*)&pjrtkit_completed_event;
    __atomic_add_fetch(&p->executions, 1, __ATOMIC_RELAXED);
    return 1;
}

/* PJRT_Buffer_IsDeleted in C while C may read the contents (jaxlib 0.12 asks it of every
 * argument of every call): such a buffer is not deleted. Otherwise Python answers. */
static int pjrtkit_answer_PJRT_Buffer_IsDeleted(PJRT_Buffer_IsDeleted_Args* args) {
    if (!pjrtkit_c_answers || args == NULL
        || args->struct_size < PJRTKIT_FIELD_END(PJRT_Buffer_IsDeleted_Args, is_deleted))
        return 0;
    const pjrtkit_buffer* b = (const pjrtkit_buffer*)args->buffer;
    if (b == NULL || b->head.kind != PJRTKIT_KIND_BUFFER
        || __atomic_load_n(&((pjrtkit_buffer*)b)->storage, __ATOMIC_ACQUIRE) == NULL) return 0;
    args->is_deleted = false;
    return 1;
}

/* PJRT_Buffer_ReadyEvent in C while C may read the contents: such a buffer is ready without
 * error (C's outputs are complete when made; a Python buffer is made readable only once ready
 * without error), so the answer is the completed event. jaxlib asks it at every
 * block_until_ready; Python answered it by adopting the C path's output (about 20 us). */
static int pjrtkit_answer_PJRT_Buffer_ReadyEvent(PJRT_Buffer_ReadyEvent_Args* args) {
    if (!pjrtkit_c_answers || args == NULL
        || args->struct_size < PJRTKIT_FIELD_END(PJRT_Buffer_ReadyEvent_Args, event))
        return 0;
    const pjrtkit_buffer* b = (const pjrtkit_buffer*)args->buffer;
    if (b == NULL || b->head.kind != PJRTKIT_KIND_BUFFER
        || __atomic_load_n(&((pjrtkit_buffer*)b)->storage, __ATOMIC_ACQUIRE) == NULL) return 0;
    args->event = (PJRT_Event*)&pjrtkit_completed_event;
    return 1;
}

/* The shape queries of every live buffer whose struct carries its dims (rank >= 0: the C
 * path's outputs, and Python's buffers of rank <= 8; handles.BufferRef.fill): jaxlib asks
 * them at every transfer to the host. pjrtkit never pads, and its shapes are static. */
static const pjrtkit_buffer* pjrtkit_shaped_buffer(PJRT_Buffer* buffer) {
    const pjrtkit_buffer* b = (const pjrtkit_buffer*)buffer;
    if (b == NULL || b->head.kind != PJRTKIT_KIND_BUFFER || b->rank < 0 || b->rank > 8)
        return NULL;
    return b;
}

/* Both dims queries, once the caller's struct holds the outputs (checked before `buffer` is
 * read): 1 with `*dims`/`*num_dims` written when C knows them. */
static int pjrtkit_answer_dims(PJRT_Buffer* buffer, const int64_t** dims, size_t* num_dims) {
    if (!pjrtkit_c_answers) return 0;
    const pjrtkit_buffer* b = pjrtkit_shaped_buffer(buffer);
    if (b == NULL) return 0;
    *dims = b->dims;
    *num_dims = (size_t)b->rank;
    return 1;
}

static int pjrtkit_answer_PJRT_Buffer_Dimensions(PJRT_Buffer_Dimensions_Args* args) {
    return args != NULL
        && args->struct_size >= PJRTKIT_FIELD_END(PJRT_Buffer_Dimensions_Args, num_dims)
        && pjrtkit_answer_dims(args->buffer, &args->dims, &args->num_dims);
}

static int pjrtkit_answer_PJRT_Buffer_UnpaddedDimensions(
        PJRT_Buffer_UnpaddedDimensions_Args* args) {
    return args != NULL
        && args->struct_size >= PJRTKIT_FIELD_END(PJRT_Buffer_UnpaddedDimensions_Args, num_dims)
        && pjrtkit_answer_dims(args->buffer, &args->unpadded_dims, &args->num_dims);
}

static const size_t pjrtkit_no_dynamic_dims[1] = { 0 };

static int pjrtkit_answer_PJRT_Buffer_DynamicDimensionIndices(
        PJRT_Buffer_DynamicDimensionIndices_Args* args) {
    typedef PJRT_Buffer_DynamicDimensionIndices_Args A;
    if (!pjrtkit_c_answers || args == NULL
        || args->struct_size < PJRTKIT_FIELD_END(A, num_dynamic_dims)) return 0;
    if (pjrtkit_shaped_buffer(args->buffer) == NULL) return 0;
    args->dynamic_dim_indices = pjrtkit_no_dynamic_dims;
    args->num_dynamic_dims = 0;
    return 1;
}

/* pjrtkit's buffers are device memory to jaxlib (runtime.buffer.Buffer.is_on_cpu). */
static int pjrtkit_answer_PJRT_Buffer_IsOnCpu(PJRT_Buffer_IsOnCpu_Args* args) {
    if (!pjrtkit_c_answers || args == NULL
        || args->struct_size < PJRTKIT_FIELD_END(PJRT_Buffer_IsOnCpu_Args, is_on_cpu))
        return 0;
    if (pjrtkit_shaped_buffer(args->buffer) == NULL) return 0;
    args->is_on_cpu = false;
    return 1;
}

/* PJRT_Buffer_ToHostBuffer in row-major order (no host layout, or row-major without tiles)
 * of a buffer C may read: its
 * storage holds the logical contents row-major (what runtime.buffer.Buffer.to_host copies),
 * so the copy is one memcpy, done before returning, and the event is the completed one. The
 * storage is referenced meanwhile, so a concurrent delete cannot free it. */
static int pjrtkit_row_major(const PJRT_Buffer_MemoryLayout* layout, int64_t rank) {
    if (layout == NULL) return 1;
    /* Read whole, never by its struct_size: jaxlib leaves that (and its members') unset, so
     * it holds whatever its stack held (abi/layouts.require_dense). */
    if (layout->type != PJRT_Buffer_MemoryLayout_Type_Tiled) return 0;
    const PJRT_Buffer_MemoryLayout_Tiled* t = &layout->tiled;
    if (t->num_tiles != 0 || t->minor_to_major_size != (size_t)rank
        || (rank > 0 && t->minor_to_major == NULL)) return 0;
    for (int64_t i = 0; i < rank; i++)
        if (t->minor_to_major[i] != rank - 1 - i) return 0;
    return 1;
}

static int pjrtkit_answer_PJRT_Buffer_ToHostBuffer(PJRT_Buffer_ToHostBuffer_Args* args) {
    if (!pjrtkit_c_answers || args == NULL
        || args->struct_size < PJRTKIT_FIELD_END(PJRT_Buffer_ToHostBuffer_Args, event))
        return 0;
    pjrtkit_buffer* b = (pjrtkit_buffer*)pjrtkit_shaped_buffer(args->src);
    if (b == NULL || b->on_device_size_in_bytes < 0 || !pjrtkit_row_major(args->host_layout,
                                                                          b->rank)) return 0;
    size_t nbytes = (size_t)b->on_device_size_in_bytes;
    if (args->dst == NULL) {
        if (__atomic_load_n(&b->storage, __ATOMIC_ACQUIRE) == NULL) return 0;
        args->dst_size = nbytes;
        return 1;
    }
    if (args->dst_size < nbytes) return 0;  /* Python reports it */
    pthread_mutex_lock(&pjrtkit_storage_mutex);
    pjrtkit_storage* s = b->storage;
    if (s != NULL) __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pjrtkit_storage_mutex);
    if (s == NULL) return 0;
    if (s->nbytes != (int64_t)nbytes) {
        pjrtkit_native_release_inputs(&s, 1);
        return 0;
    }
    if (nbytes > 0) memcpy(args->dst, s->data, nbytes);
    pjrtkit_native_release_inputs(&s, 1);
    args->event = (PJRT_Event*)&pjrtkit_completed_event;
    return 1;
}

/* PJRT_Error_Destroy of no error: nothing to do. jaxlib destroys the (NULL) error of every
 * completed event it waited on, once per block_until_ready. */
static int pjrtkit_answer_PJRT_Error_Destroy(PJRT_Error_Destroy_Args* args) {
    if (!pjrtkit_c_answers || args == NULL
        || args->struct_size < PJRTKIT_FIELD_END(PJRT_Error_Destroy_Args, error)) return 0;
    return args->error == NULL;
}

/* A shape as the one int64 the C path compares (pjrtkit_buffer.shape_key); the Python side
 * computes the same (abi/handles.shape_key). */
int64_t pjrtkit_shape_key(int64_t rank, const int64_t* dims) {
    uint64_t key = (uint64_t)rank;
    for (int64_t i = 0; i < rank; i++) key = (key * 1000003u) ^ (uint64_t)dims[i];
    return (int64_t)(key & 0x7FFFFFFFFFFFFFFFull);
}

/* From now on C may make buffers in `memory` (its `device` written before), counted in
 * `ledger`. */
void pjrtkit_memory_open(pjrtkit_memory* memory, pjrtkit_ledger* ledger) {
    __atomic_store_n(&memory->ledger, ledger, __ATOMIC_RELEASE);
}

/* Bytes per element of the types C copies whole bytes of; -1 for the rest (sub-byte types,
 * tokens, invalid), which Python serves. */
static int64_t pjrtkit_element_size(int64_t type) {
    switch (type) {
    case PJRT_Buffer_Type_PRED: case PJRT_Buffer_Type_S8: case PJRT_Buffer_Type_U8:
    case PJRT_Buffer_Type_F8E5M2: case PJRT_Buffer_Type_F8E4M3FN:
    case PJRT_Buffer_Type_F8E4M3B11FNUZ: case PJRT_Buffer_Type_F8E5M2FNUZ:
    case PJRT_Buffer_Type_F8E4M3FNUZ: case PJRT_Buffer_Type_F8E4M3:
    case PJRT_Buffer_Type_F8E3M4: case PJRT_Buffer_Type_F8E8M0FNU:
        return 1;
    case PJRT_Buffer_Type_S16: case PJRT_Buffer_Type_U16: case PJRT_Buffer_Type_F16:
    case PJRT_Buffer_Type_BF16:
        return 2;
    case PJRT_Buffer_Type_S32: case PJRT_Buffer_Type_U32: case PJRT_Buffer_Type_F32:
        return 4;
    case PJRT_Buffer_Type_S64: case PJRT_Buffer_Type_U64: case PJRT_Buffer_Type_F64:
    case PJRT_Buffer_Type_C64:
        return 8;
    case PJRT_Buffer_Type_C128:
        return 16;
    default:
        return -1;
    }
}

/* PJRT_Client_BufferFromHostBuffer answered in C: the contents copied into C storage counted
 * in the memory's ledger, a buffer handle like an output of the C path (no Python object
 * until Python needs one: abi/native.adopt), done_with_host_buffer complete (the copy is
 * taken before returning, which satisfies every host_buffer_semantics). Only into a device's
 * default memory that Python opened to C (pjrtkit_memory.ledger), with dense row-major data
 * of a whole-byte type, no device layout, rank <= 8. Anything else, a memory limit
 * (RESOURCE_EXHAUSTED from Python) or an allocation failure declines with nothing changed. */
static int pjrtkit_answer_PJRT_Client_BufferFromHostBuffer(
        PJRT_Client_BufferFromHostBuffer_Args* args) {
    typedef PJRT_Client_BufferFromHostBuffer_Args A;
    if (!pjrtkit_c_answers || args == NULL || args->struct_size < PJRTKIT_FIELD_END(A, buffer))
        return 0;
    const pjrtkit_head* client = (const pjrtkit_head*)args->client;
    if (client == NULL || client->kind != PJRTKIT_KIND_CLIENT || args->device_layout != NULL)
        return 0;
    /* jaxlib names the memory (and no device) or the device (its default memory). */
    pjrtkit_memory* memory = (pjrtkit_memory*)args->memory;
    const pjrtkit_device* device = (const pjrtkit_device*)args->device;
    if (memory == NULL) {
        if (device == NULL || device->head.kind != PJRTKIT_KIND_DEVICE) return 0;
        memory = (pjrtkit_memory*)device->default_memory;
        if (memory == NULL) return 0;
    }
    if (memory->head.kind != PJRTKIT_KIND_MEMORY) return 0;
    pjrtkit_ledger* ledger = __atomic_load_n(&memory->ledger, __ATOMIC_ACQUIRE);
    if (ledger == NULL) return 0;
    if (device == NULL) device = (const pjrtkit_device*)memory->device;
    else if ((PJRT_Device*)device != memory->device) return 0;
    size_t rank = args->num_dims;
    if (rank > 8 || (rank > 0 && args->dims == NULL)) return 0;
    int64_t nbytes = pjrtkit_element_size((int64_t)args->type);
    if (nbytes < 0) return 0;
    for (size_t i = 0; i < rank; i++) {
        int64_t d = args->dims[i];
        if (d < 0 || (d > 0 && nbytes > INT64_MAX / d)) return 0;
        nbytes *= d;
    }
    if (nbytes > 0 && args->data == NULL) return 0;
    if (nbytes > 0 && args->byte_strides != NULL && args->num_byte_strides != 0) {
        if (args->num_byte_strides != rank) return 0;
        int64_t dense = pjrtkit_element_size((int64_t)args->type);
        for (size_t i = rank; i-- > 0;) {
            if (args->dims[i] > 1 && args->byte_strides[i] != dense) return 0;
            dense *= args->dims[i];
        }
    }
    if (pjrtkit_ledger_take(ledger, nbytes) != 0) return 0;
    pjrtkit_storage* storage = pjrtkit_storage_new_c(nbytes, ledger);
    pjrtkit_buffer* b = (pjrtkit_buffer*)calloc(1, sizeof(pjrtkit_buffer));
    if (storage == NULL || b == NULL) {
        free(b);
        if (storage != NULL) pjrtkit_storage_release_c(storage);  /* gives the bytes back */
        else pjrtkit_ledger_give(ledger, nbytes);
        return 0;
    }
    if (nbytes > 0) memcpy(storage->data, args->data, (size_t)nbytes);
    b->head.kind = PJRTKIT_KIND_BUFFER;
    b->head.ref = NULL;
    b->device = (PJRT_Device*)device;
    b->memory = (PJRT_Memory*)memory;
    b->element_type = (int64_t)args->type;
    b->on_device_size_in_bytes = nbytes;
    b->deferrable_destroy = 0;
    b->storage = storage;
    b->native = 1;
    b->rank = (int64_t)rank;
    for (size_t i = 0; i < rank; i++) b->dims[i] = args->dims[i];
    b->shape_key = pjrtkit_shape_key((int64_t)rank, b->dims);
    __atomic_add_fetch(&pjrtkit_native_live, 1, __ATOMIC_RELAXED);
    args->buffer = (PJRT_Buffer*)b;
    args->done_with_host_buffer = (PJRT_Event*)&pjrtkit_completed_event;
    return 1;
}
