/* PJRT_Client_UpdateGlobalProcessInfo, answered in C (compiled into pjrtkit.abi._pjrt_cffi
 * after the fast paths; see _build.py).
 *
 * jaxlib calls it from its own process-watcher thread whenever the coordination service sees a
 * process's state change, including while this process is exiting (the others disconnect): a
 * Python callback would then wait for the GIL that the exiting main thread holds while it waits
 * for that thread, and the process would hang. So the states are written here without Python,
 * one entry per task id, and Python reads them (pjrtkit_process_state) when a collective fails.
 */

#define PJRTKIT_MAX_PROCESSES 65536

typedef struct pjrtkit_process_entry {
    int known;          /* 0 until jaxlib reports the task */
    int state;          /* PJRT_ProcessState */
    int error_code;
    uint64_t incarnation;
} pjrtkit_process_entry;

static pthread_mutex_t pjrtkit_process_mutex = PTHREAD_MUTEX_INITIALIZER;
static pjrtkit_process_entry pjrtkit_processes[PJRTKIT_MAX_PROCESSES];

static int pjrtkit_answer_PJRT_Client_UpdateGlobalProcessInfo(
        PJRT_Client_UpdateGlobalProcessInfo_Args* args) {
    typedef PJRT_Client_UpdateGlobalProcessInfo_Args A;
    if (args == NULL || args->struct_size < PJRTKIT_FIELD_END(A, num_process_infos)) return 0;
    const pjrtkit_head* client = (const pjrtkit_head*)args->client;
    if (client == NULL || client->kind != PJRTKIT_KIND_CLIENT) return 0;
    if (args->num_process_infos > 0 && args->process_infos == NULL) return 0;
    for (size_t i = 0; i < args->num_process_infos; ++i) {
        const PJRT_ProcessInfo* info = &args->process_infos[i];
        if (info->struct_size < PJRTKIT_FIELD_END(PJRT_ProcessInfo, error_code)) return 0;
        if (info->task_id < 0 || info->task_id >= PJRTKIT_MAX_PROCESSES) return 0;
    }
    pthread_mutex_lock(&pjrtkit_process_mutex);
    for (size_t i = 0; i < args->num_process_infos; ++i) {
        const PJRT_ProcessInfo* info = &args->process_infos[i];
        pjrtkit_process_entry* e = &pjrtkit_processes[info->task_id];
        e->known = 1;
        e->state = (int)info->state;
        e->error_code = info->error_code;
        e->incarnation = info->incarnation_id;
    }
    pthread_mutex_unlock(&pjrtkit_process_mutex);
    return 1;
}

/* The last state reported for `task`: 1 and the fields, or 0 when none was. */
int pjrtkit_process_state(int task, int* state, int* error_code) {
    if (task < 0 || task >= PJRTKIT_MAX_PROCESSES) return 0;
    pthread_mutex_lock(&pjrtkit_process_mutex);
    pjrtkit_process_entry e = pjrtkit_processes[task];
    pthread_mutex_unlock(&pjrtkit_process_mutex);
    if (!e.known) return 0;
    *state = e.state;
    *error_code = e.error_code;
    return 1;
}
