/* A PJRT host that is not JAX: what XLA's plugin loader, PyTorch/XLA or gopjrt do with a plugin
 * library, in plain C against pjrtkit's own declarations of the ABI (pjrt_declarations.h).
 *
 *   pjrt_host PLUGIN.so PROGRAM COMPILE_OPTIONS OUT_PREFIX INPUT:TYPE:DIMS...
 *
 * dlopen, GetPjrtApi, Plugin_Initialize, Client_Create, compile PROGRAM (StableHLO, format
 * "mlir") with the serialized CompileOptionsProto in COMPILE_OPTIONS, transfer each input (raw
 * little-endian bytes; TYPE f32 or s32; DIMS like 8x16, or "scalar"), execute on the first
 * addressable device, read every output back into OUT_PREFIX.<i>.bin and print one line per
 * output ("output <i> type <code> dims <d0>x<d1>..."). It knows no expected numbers: the test
 * runs it on two plugin libraries and compares what they wrote.
 * With THREADS=1 in the environment, every call after GetPjrtApi is made from a thread the host
 * starts (PJRT functions may be called from any thread).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pjrt_declarations.h"

#define MAX_INPUTS 16
#define MAX_OUTPUTS 16
#define MAX_DIMS 8

static const PJRT_Api *api;

static void check(PJRT_Error *error, const char *what) {
    if (!error) return;
    PJRT_Error_Message_Args message = {sizeof message, NULL, error, NULL, 0};
    api->PJRT_Error_Message(&message);
    PJRT_Error_GetCode_Args code = {sizeof code, NULL, error, 0};
    api->PJRT_Error_GetCode(&code);
    fprintf(stderr, "pjrt_host: %s failed: code %d: %.*s\n", what, (int)code.code,
            (int)message.message_size, message.message);
    exit(2);
}

static void await_and_destroy(PJRT_Event *event, const char *what) {
    if (!event) return;
    PJRT_Event_Await_Args wait = {sizeof wait, NULL, event};
    check(api->PJRT_Event_Await(&wait), what);
    PJRT_Event_Destroy_Args destroy = {sizeof destroy, NULL, event};
    check(api->PJRT_Event_Destroy(&destroy), "PJRT_Event_Destroy");
}

static char *read_file(const char *path, size_t *size) {
    FILE *file = fopen(path, "rb");
    if (!file) { perror(path); exit(2); }
    fseek(file, 0, SEEK_END);
    long length = ftell(file);
    fseek(file, 0, SEEK_SET);
    char *data = malloc(length > 0 ? (size_t)length : 1);
    if (length > 0 && fread(data, 1, (size_t)length, file) != (size_t)length) {
        perror(path);
        exit(2);
    }
    fclose(file);
    *size = (size_t)length;
    return data;
}

typedef struct {
    char *data;
    PJRT_Buffer_Type type;
    int64_t dims[MAX_DIMS];
    size_t num_dims;
} Input;

static Input parse_input(char *spec) {
    Input input = {0};
    char *type = strchr(spec, ':');
    char *dims = type ? strchr(type + 1, ':') : NULL;
    if (!dims) { fprintf(stderr, "pjrt_host: input %s is not PATH:TYPE:DIMS\n", spec); exit(2); }
    *type++ = 0;
    *dims++ = 0;
    if (strcmp(type, "f32") == 0) input.type = PJRT_Buffer_Type_F32;
    else if (strcmp(type, "s32") == 0) input.type = PJRT_Buffer_Type_S32;
    else { fprintf(stderr, "pjrt_host: type %s is not f32 or s32\n", type); exit(2); }
    if (strcmp(dims, "scalar") != 0) {
        for (char *d = strtok(dims, "x"); d; d = strtok(NULL, "x")) {
            if (input.num_dims == MAX_DIMS) { fprintf(stderr, "pjrt_host: rank > 8\n"); exit(2); }
            input.dims[input.num_dims++] = atoll(d);
        }
    }
    size_t expected = 4, size;
    for (size_t i = 0; i < input.num_dims; ++i) expected *= (size_t)input.dims[i];
    input.data = read_file(spec, &size);
    if (size != expected) {
        fprintf(stderr, "pjrt_host: %s holds %zu bytes, its dims need %zu\n", spec, size, expected);
        exit(2);
    }
    return input;
}

typedef struct {
    int argc;
    char **argv;
} Job;

static void *run(void *arg) {
    Job *job = arg;
    char **argv = job->argv;
    size_t program_size, options_size;
    char *program_code = read_file(argv[2], &program_size);
    char *options = read_file(argv[3], &options_size);
    const char *out_prefix = argv[4];
    int num_inputs = job->argc - 5;
    if (num_inputs > MAX_INPUTS) { fprintf(stderr, "pjrt_host: too many inputs\n"); exit(2); }

    PJRT_Plugin_Initialize_Args init = {sizeof init, NULL};
    check(api->PJRT_Plugin_Initialize(&init), "PJRT_Plugin_Initialize");
    PJRT_Client_Create_Args create = {0};
    create.struct_size = sizeof create;
    check(api->PJRT_Client_Create(&create), "PJRT_Client_Create");
    PJRT_Client *client = create.client;

    PJRT_Client_PlatformName_Args platform = {sizeof platform, NULL, client, NULL, 0};
    check(api->PJRT_Client_PlatformName(&platform), "PJRT_Client_PlatformName");
    printf("platform %.*s\n", (int)platform.platform_name_size, platform.platform_name);

    PJRT_Client_AddressableDevices_Args devices = {sizeof devices, NULL, client, NULL, 0};
    check(api->PJRT_Client_AddressableDevices(&devices), "PJRT_Client_AddressableDevices");
    if (devices.num_addressable_devices == 0) { fprintf(stderr, "pjrt_host: no devices\n"); exit(2); }
    PJRT_Device *device = devices.addressable_devices[0];

    PJRT_Program program = {sizeof program, NULL, program_code, program_size, "mlir", 4};
    PJRT_Client_Compile_Args compile = {sizeof compile, NULL, client, &program, options,
                                        options_size, NULL};
    check(api->PJRT_Client_Compile(&compile), "PJRT_Client_Compile");

    PJRT_Buffer *arguments[MAX_INPUTS];
    for (int i = 0; i < num_inputs; ++i) {
        Input input = parse_input(argv[5 + i]);
        PJRT_Client_BufferFromHostBuffer_Args transfer = {0};
        transfer.struct_size = sizeof transfer;
        transfer.client = client;
        transfer.data = input.data;
        transfer.type = input.type;
        transfer.dims = input.dims;
        transfer.num_dims = input.num_dims;
        transfer.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
        transfer.device = device;
        check(api->PJRT_Client_BufferFromHostBuffer(&transfer), "PJRT_Client_BufferFromHostBuffer");
        await_and_destroy(transfer.done_with_host_buffer, "the host buffer transfer");
        free(input.data);
        arguments[i] = transfer.buffer;
    }

    PJRT_LoadedExecutable_GetExecutable_Args get = {sizeof get, NULL, compile.executable, NULL};
    check(api->PJRT_LoadedExecutable_GetExecutable(&get), "PJRT_LoadedExecutable_GetExecutable");
    PJRT_Executable_NumOutputs_Args count = {sizeof count, NULL, get.executable, 0};
    check(api->PJRT_Executable_NumOutputs(&count), "PJRT_Executable_NumOutputs");
    if (count.num_outputs > MAX_OUTPUTS) { fprintf(stderr, "pjrt_host: too many outputs\n"); exit(2); }

    PJRT_ExecuteOptions execute_options = {0};
    execute_options.struct_size = sizeof execute_options;
    PJRT_Buffer *const *argument_lists[1] = {arguments};
    PJRT_Buffer *outputs[MAX_OUTPUTS] = {0};
    PJRT_Buffer **output_lists[1] = {outputs};
    PJRT_Event *complete[1] = {NULL};
    PJRT_LoadedExecutable_Execute_Args execute = {0};
    execute.struct_size = sizeof execute;
    execute.executable = compile.executable;
    execute.options = &execute_options;
    execute.argument_lists = argument_lists;
    execute.num_devices = 1;
    execute.num_args = (size_t)num_inputs;
    execute.output_lists = output_lists;
    execute.device_complete_events = complete;
    check(api->PJRT_LoadedExecutable_Execute(&execute), "PJRT_LoadedExecutable_Execute");
    await_and_destroy(complete[0], "the execution");

    for (size_t i = 0; i < count.num_outputs; ++i) {
        PJRT_Buffer_ElementType_Args type = {sizeof type, NULL, outputs[i], 0};
        check(api->PJRT_Buffer_ElementType(&type), "PJRT_Buffer_ElementType");
        PJRT_Buffer_Dimensions_Args dims = {sizeof dims, NULL, outputs[i], NULL, 0};
        check(api->PJRT_Buffer_Dimensions(&dims), "PJRT_Buffer_Dimensions");
        PJRT_Buffer_ToHostBuffer_Args size = {sizeof size, NULL, outputs[i], NULL, NULL, 0, NULL};
        check(api->PJRT_Buffer_ToHostBuffer(&size), "PJRT_Buffer_ToHostBuffer (size)");
        void *host = malloc(size.dst_size ? size.dst_size : 1);
        PJRT_Buffer_ToHostBuffer_Args copy = {sizeof copy, NULL, outputs[i], NULL, host,
                                              size.dst_size, NULL};
        check(api->PJRT_Buffer_ToHostBuffer(&copy), "PJRT_Buffer_ToHostBuffer");
        await_and_destroy(copy.event, "the device-to-host copy");
        char path[4096];
        snprintf(path, sizeof path, "%s.%zu.bin", out_prefix, i);
        FILE *file = fopen(path, "wb");
        if (!file || fwrite(host, 1, size.dst_size, file) != size.dst_size) { perror(path); exit(2); }
        fclose(file);
        free(host);
        printf("output %zu type %d dims ", i, (int)type.type);
        for (size_t d = 0; d < dims.num_dims; ++d)
            printf("%s%lld", d ? "x" : "", (long long)dims.dims[d]);
        printf("%s\n", dims.num_dims ? "" : "scalar");
        PJRT_Buffer_Destroy_Args destroy = {sizeof destroy, NULL, outputs[i]};
        check(api->PJRT_Buffer_Destroy(&destroy), "PJRT_Buffer_Destroy");
    }
    for (int i = 0; i < num_inputs; ++i) {
        PJRT_Buffer_Destroy_Args destroy = {sizeof destroy, NULL, arguments[i]};
        check(api->PJRT_Buffer_Destroy(&destroy), "PJRT_Buffer_Destroy");
    }
    PJRT_Executable_Destroy_Args drop = {sizeof drop, NULL, get.executable};
    check(api->PJRT_Executable_Destroy(&drop), "PJRT_Executable_Destroy");
    PJRT_LoadedExecutable_Destroy_Args unload = {sizeof unload, NULL, compile.executable};
    check(api->PJRT_LoadedExecutable_Destroy(&unload), "PJRT_LoadedExecutable_Destroy");
    PJRT_Client_Destroy_Args destroy = {sizeof destroy, NULL, client};
    check(api->PJRT_Client_Destroy(&destroy), "PJRT_Client_Destroy");
    free(program_code);
    free(options);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: pjrt_host PLUGIN.so PROGRAM COMPILE_OPTIONS OUT_PREFIX "
                        "INPUT:TYPE:DIMS...\n");
        return 2;
    }
    void *plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!plugin) { fprintf(stderr, "pjrt_host: dlopen: %s\n", dlerror()); return 2; }
    const PJRT_Api *(*get_api)(void) = (const PJRT_Api *(*)(void))dlsym(plugin, "GetPjrtApi");
    if (!get_api) { fprintf(stderr, "pjrt_host: no GetPjrtApi in %s\n", argv[1]); return 2; }
    api = get_api();
    if (!api) { fprintf(stderr, "pjrt_host: GetPjrtApi returned NULL\n"); return 2; }
    printf("api %d.%d\n", api->pjrt_api_version.major_version,
           api->pjrt_api_version.minor_version);
    Job job = {argc, argv};
    const char *threads = getenv("THREADS");
    if (threads && strcmp(threads, "1") == 0) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, run, &job) != 0) { perror("pthread_create"); return 2; }
        pthread_join(thread, NULL);
    } else {
        run(&job);
    }
    fflush(stdout);
    return 0;
}
