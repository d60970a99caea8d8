/* pjrtkit's elementwise VM (compiled into pjrtkit.elementwise_vm._vm_cffi; see program.py).
 *
 * pjrtkit_vm_run(arguments, outputs, context) runs the program at `context`, an int64 array:
 *   header      [VERSION, elements, inputs, outputs, registers, instructions, 0, 0]
 *   per input   [source, value, dtype, scalar]: source 0 = arguments[value], 1 = the address
 *               value, 2 = the value word's own bytes (a constant); scalar 1 = one element
 *               read for every index, 0 = one per index
 *   per instr.  [case, dst, a, b, c, 0, 0, 0]: case = (opcode, typed dtype, result dtype) as
 *               spellings.case_key numbers it
 *   per output  [register, output index, dtype]
 * Registers 0..inputs-1 are the inputs; the rest are temporaries. The elements are processed
 * VM_CHUNK at a time: each instruction is one loop over a chunk (generated per case in
 * vm_apply), so an element costs what a compiled loop costs, plus one dispatch per chunk.
 * Returns 0, or nonzero for a program this build cannot run (the caller's other path then
 * runs it and reports).
 */
#define VM_CHUNK 256
#define VM_STACK_REGISTERS 16

int pjrtkit_vm_run(void* const* arguments, void* const* outputs, void* context) {
    const int64_t* code = (const int64_t*)context;
    if (code == NULL || code[0] != VM_VERSION) return 1;
    const int64_t n = code[1], n_in = code[2], n_out = code[3], n_regs = code[4],
                  n_ins = code[5];
    if (n_regs > VM_MAX_REGISTERS || n_in > n_regs || n_in < 0 || n_out < 0 || n_ins < 0)
        return 2;
    const int64_t* inputs = code + 8;
    const int64_t* program = inputs + 4 * n_in;
    const int64_t* results = program + 8 * n_ins;
    for (int64_t s = 0; s < n_ins; s++) {  /* a malformed program is refused, not run */
        const int64_t* ins = program + 8 * s;
        if (ins[1] < n_in || ins[1] >= n_regs) return 2;
        for (int k = 2; k < 5; k++) if (ins[k] < 0 || ins[k] >= n_regs) return 2;
    }
    for (int64_t j = 0; j < n_out; j++) {
        const int64_t* out = results + 3 * j;
        if (out[0] < 0 || out[0] >= n_regs || out[2] < 0 || out[2] >= VM_DTYPES) return 2;
    }
    if (n <= 0) return 0;
    char* registers[VM_MAX_REGISTERS];
    const char* base[VM_MAX_REGISTERS];
    int64_t width[VM_MAX_REGISTERS];
    _Alignas(64) char on_stack[VM_STACK_REGISTERS * VM_CHUNK * 8];
    char* storage = on_stack;
    if (n_regs > VM_STACK_REGISTERS) {
        storage = (char*)aligned_alloc(64, (size_t)n_regs * VM_CHUNK * 8);
        if (storage == NULL) return 3;
    }
    for (int64_t r = 0; r < n_regs; r++) registers[r] = storage + r * VM_CHUNK * 8;
    for (int64_t i = 0; i < n_in; i++) {
        const int64_t* in = inputs + 4 * i;
        const int64_t dtype = in[2];
        if (dtype < 0 || dtype >= VM_DTYPES) { if (storage != on_stack) free(storage); return 4; }
        const int64_t size = vm_dtype_size[dtype];
        const char* p = in[0] == 0 ? (const char*)arguments[in[1]]
                      : in[0] == 1 ? (const char*)(intptr_t)in[1]
                      : (const char*)&in[1];
        width[i] = size;
        if (in[3]) {  /* one element for every index: fill the register once */
            base[i] = NULL;
            const int64_t used = n < VM_CHUNK ? n : VM_CHUNK;  /* the chunk never grows */
            for (int64_t k = 0; k < used; k++) memcpy(registers[i] + k * size, p, size);
        } else {
            base[i] = p;
        }
    }
    int status = 0;
    for (int64_t start = 0; start < n && status == 0; start += VM_CHUNK) {
        const int64_t m = n - start < VM_CHUNK ? n - start : VM_CHUNK;
        for (int64_t i = 0; i < n_in; i++)
            if (base[i] != NULL) registers[i] = (char*)base[i] + start * width[i];
        for (int64_t s = 0; s < n_ins && status == 0; s++) {
            const int64_t* ins = program + 8 * s;
            status = vm_apply(ins[0], registers[ins[1]], registers[ins[2]], registers[ins[3]],
                              registers[ins[4]], m);
        }
        for (int64_t j = 0; j < n_out && status == 0; j++) {
            const int64_t* out = results + 3 * j;
            const int64_t size = vm_dtype_size[out[2]];
            memcpy((char*)outputs[out[1]] + start * size, registers[out[0]], m * size);
        }
    }
    if (storage != on_stack) free(storage);
    return status;
}

/* A kernel whose code can change while C calls it (KernelCell in __init__.py): `context` is
 * a cell holding the address of an immutable pair {kernel, its context}; the owner publishes
 * a new pair with pjrtkit_vm_cell_store, and each call runs the pair it loaded. */
typedef int (*pjrtkit_vm_kernel)(void* const*, void* const*, void*);

int pjrtkit_vm_forward(void* const* arguments, void* const* outputs, void* context) {
    const uint64_t* pair = (const uint64_t*)(uintptr_t)__atomic_load_n((uint64_t*)context,
                                                                       __ATOMIC_ACQUIRE);
    return ((pjrtkit_vm_kernel)(uintptr_t)pair[0])(arguments, outputs,
                                                   (void*)(uintptr_t)pair[1]);
}

void pjrtkit_vm_cell_store(uint64_t* cell, uint64_t pair) {
    __atomic_store_n(cell, pair, __ATOMIC_RELEASE);
}
