/* Hand-written C compiled into pjrtkit.abi._pjrt_cffi (after the generated C answers; see
 * _build.py): the two per-call paths of jaxlib that would otherwise enter Python needlessly.
 *
 * 1. PJRT_Buffer_Destroy of a small buffer is queued here, without the GIL; Python finishes it
 *    (releases the handle, destroys the runtime Buffer) at its next entry, whatever the function
 *    (the guard of every entry point hands the queue to pjrtkit_drain_destroyed when it is not
 *    empty).
 *    At most PJRTKIT_DESTROY_QUEUE_SIZE buffers of at most PJRTKIT_DEFERRED_DESTROY_BYTES wait;
 *    a full queue, a big buffer or an unusual call is destroyed by Python at once. Memory
 *    statistics are read through Python, so they always see the queue drained.
 * 2. PJRT_LoadedExecutable_Execute is first offered to the C execute path
 *    (pjrtkit_native_execute.h), which runs an installed native plan without Python (and,
 *    when it declined for arguments not readable yet, again once Python made them readable:
 *    pjrtkit_native_retry); else it
 *    checks the shape of the call in C (one device, no execute_device, no send/recv, valid
 *    buffer handles) and hands Python the Refs only (pjrtkit_execute_inline); the runtime may
 *    decline, and then the ordinary Python callback serves the call.
 */

static pthread_mutex_t pjrtkit_destroy_mutex = PTHREAD_MUTEX_INITIALIZER;
static pjrtkit_buffer* pjrtkit_destroy_queue[PJRTKIT_DESTROY_QUEUE_SIZE];
static int pjrtkit_destroy_count = 0;  /* guarded by the mutex; read unlocked only as a hint */

static int pjrtkit_answer_PJRT_Buffer_Destroy(PJRT_Buffer_Destroy_Args* args) {
    if (!pjrtkit_c_answers || args == NULL
        || args->struct_size < PJRTKIT_FIELD_END(PJRT_Buffer_Destroy_Args, buffer)) return 0;
    pjrtkit_buffer* b = (pjrtkit_buffer*)args->buffer;
    if (b == NULL || b->head.kind != PJRTKIT_KIND_BUFFER) return 0;
    if (b->native == 1 && b->head.ref == NULL) {  /* an output of the C path: all C's */
        pjrtkit_native_buffer_destroy(args->buffer);
        return 1;
    }
    if (b->deferrable_destroy != 1) return 0;
    int queued = 0;
    pthread_mutex_lock(&pjrtkit_destroy_mutex);
    if (pjrtkit_destroy_count < PJRTKIT_DESTROY_QUEUE_SIZE) {
        b->head.kind = PJRTKIT_KIND_DEAD;  /* the handle is gone for C from now on */
        pjrtkit_destroy_queue[pjrtkit_destroy_count++] = b;
        queued = 1;
    }
    pthread_mutex_unlock(&pjrtkit_destroy_mutex);
    return queued;
}

/* Empties the queue into `taken` (under the mutex, so two threads never finish the same
 * buffer); returns how many. */
static size_t pjrtkit_take_destroyed(PJRT_Buffer** taken) {
    if (__atomic_load_n(&pjrtkit_destroy_count, __ATOMIC_RELAXED) == 0) return 0;
    pthread_mutex_lock(&pjrtkit_destroy_mutex);
    size_t count = (size_t)pjrtkit_destroy_count;
    memcpy(taken, pjrtkit_destroy_queue, count * sizeof(taken[0]));
    pjrtkit_destroy_count = 0;
    pthread_mutex_unlock(&pjrtkit_destroy_mutex);
    return count;
}

/* Called with the GIL held, at the start of every Python entry. */
static void pjrtkit_drain_if_needed(void) {
    PJRT_Buffer* taken[PJRTKIT_DESTROY_QUEUE_SIZE];
    size_t count = pjrtkit_take_destroyed(taken);
    if (count > 0) pjrtkit_drain_destroyed(taken, count);
}

#define PJRTKIT_INLINE_MAX_ARGS 64

/* 1 when the call has the shape execute_inline serves, with the inputs' Refs in `refs`; 2 when
 * it has but some inputs are buffers C made that Python has not adopted yet (no Ref: a host
 * transfer or an output of the C path), which Python adopts first (pjrtkit_adopt_buffers). */
static int pjrtkit_inline_candidate(PJRT_LoadedExecutable_Execute_Args* args, void** refs) {
    typedef PJRT_LoadedExecutable_Execute_Args A;
    if (!pjrtkit_c_answers || args == NULL
        || args->struct_size < PJRTKIT_FIELD_END(A, execute_device)) return 0;
    const pjrtkit_loaded_executable* e = (const pjrtkit_loaded_executable*)args->executable;
    if (e == NULL || e->head.kind != PJRTKIT_KIND_LOADED_EXECUTABLE || e->has_inline != 1)
        return 0;
    if (args->num_devices != 1 || args->execute_device != NULL || args->output_lists == NULL
        || args->output_lists[0] == NULL || args->num_args > PJRTKIT_INLINE_MAX_ARGS) return 0;
    if (args->num_args > 0 && (args->argument_lists == NULL || args->argument_lists[0] == NULL))
        return 0;
    const PJRT_ExecuteOptions* o = args->options;
    if (o != NULL && (o->struct_size < PJRTKIT_FIELD_END(PJRT_ExecuteOptions, num_recv_ops)
                      || o->num_send_ops != 0 || o->num_recv_ops != 0)) return 0;
    int adopt = 0;
    for (size_t i = 0; i < args->num_args; i++) {
        const pjrtkit_head* b = (const pjrtkit_head*)args->argument_lists[0][i];
        if (b == NULL || b->kind != PJRTKIT_KIND_BUFFER) return 0;
        if (b->ref == NULL) {
            if (((const pjrtkit_buffer*)b)->native != 1) return 0;
            adopt = 1;
        }
        refs[i] = b->ref;
    }
    return adopt ? 2 : 1;
}

/* After the C execute path declined a call of an executable that has a native plan, with the
 * GIL held: when some arguments' contents were not readable by C yet (buffers Python made),
 * Python makes them readable (abi/fn_executable.prepare_native) and C tries once more (any
 * other reason to decline holds again, and Python serves the call). So a chain of small
 * programs (an eager loop) runs in C from the first call its plans allow, each output feeding
 * the next call. 1 when served. */
static int pjrtkit_native_retry(PJRT_LoadedExecutable_Execute_Args* args) {
    const pjrtkit_loaded_executable* e = (const pjrtkit_loaded_executable*)args->executable;
    PJRT_Buffer* const* arguments = args->num_args > 0 ? args->argument_lists[0] : NULL;
    return pjrtkit_prepare_native(e->head.ref, arguments, args->num_args)
        && pjrtkit_native_execute(args);
}

/* 1 when the call names an executable with an enabled native plan and has its shape (one
 * device, the plan's argument count): what pjrtkit_native_retry needs. */
static int pjrtkit_native_retry_possible(PJRT_LoadedExecutable_Execute_Args* args) {
    if (!pjrtkit_c_answers || args == NULL
        || args->struct_size < PJRTKIT_FIELD_END(PJRT_LoadedExecutable_Execute_Args,
                                                 execute_device)) return 0;
    const pjrtkit_loaded_executable* e = (const pjrtkit_loaded_executable*)args->executable;
    if (e == NULL || e->head.kind != PJRTKIT_KIND_LOADED_EXECUTABLE || e->head.ref == NULL)
        return 0;
    pjrtkit_native_plan* p = __atomic_load_n(&((pjrtkit_loaded_executable*)e)->native,
                                             __ATOMIC_ACQUIRE);
    return p != NULL && __atomic_load_n(&p->enabled, __ATOMIC_ACQUIRE)
        && args->num_devices == 1 && (int64_t)args->num_args == p->num_arguments
        && (args->num_args == 0
            || (args->argument_lists != NULL && args->argument_lists[0] != NULL));
}

static PJRT_Error* pjrtkit_guarded_PJRT_LoadedExecutable_Execute(
        PJRT_LoadedExecutable_Execute_Args* args) {
    pjrtkit_fp_scope fp;  /* C's default floating-point state (pjrtkit_fp_state.h) */
    pjrtkit_fp_enter(&fp);
    if (pjrtkit_native_execute(args)) {  /* served in C (pjrtkit_native_execute.h) */
        pjrtkit_fp_leave(&fp);
        return NULL;
    }
    void* refs[PJRTKIT_INLINE_MAX_ARGS];
    int candidate = pjrtkit_inline_candidate(args, refs);
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    PJRT_Buffer* taken[PJRTKIT_DESTROY_QUEUE_SIZE];
    size_t num_taken = pjrtkit_take_destroyed(taken);
    PJRT_Error* result = NULL;
    int declined = 1;
    if (pjrtkit_native_retry_possible(args)) {
        if (num_taken > 0) pjrtkit_drain_destroyed(taken, num_taken);
        num_taken = 0;
        if (pjrtkit_native_retry(args)) {
            declined = 0;
            candidate = 0;
        }
    }
    if (candidate == 2) {  /* with the GIL: Python adopts C's buffers, then they have Refs */
        const pjrtkit_head* e = (const pjrtkit_head*)args->executable;
        candidate = e->ref != NULL
            && pjrtkit_adopt_buffers(args->argument_lists[0], args->num_args)
            ? pjrtkit_inline_candidate(args, refs) : 0;
        if (candidate != 1) candidate = 0;
    }
    if (candidate) {
        /* The queued destroys go along (one crossing into Python instead of two). */
        const pjrtkit_head* e = (const pjrtkit_head*)args->executable;
        result = pjrtkit_execute_inline(e->ref, refs, args->num_args, args->output_lists[0],
                                        args->device_complete_events, taken, num_taken,
                                        &declined);
    } else if (num_taken > 0) {
        pjrtkit_drain_destroyed(taken, num_taken);
    }
    if (declined) result = pjrtkit_PJRT_LoadedExecutable_Execute(args);
    PyErr_Restore(et, ev, etb);
    PyGILState_Release(gil);
    pjrtkit_fp_leave(&fp);
    return result;
}
