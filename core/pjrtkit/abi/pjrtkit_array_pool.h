/* The array pool: NumPy's data allocator on the threads where pjrtkit runs kernels (compiled
 * into pjrtkit.abi._pjrt_cffi; the Python side and the reasons: pjrtkit/runtime/array_pool.py).
 *
 * A large block a kernel's array frees is kept, up to a byte limit, and handed to the next
 * array of its size class, so a program run again and again reuses its arrays' memory instead
 * of asking the kernel for fresh pages every call (glibc maps each large block anew and unmaps
 * it on free: every page of every output is faulted in and zeroed again on every call).
 *
 * The 16 bytes before every block's data say its capacity and size class (-1: a small block,
 * straight from and back to malloc, whose data are aligned as malloc aligns). A pooled block's
 * data start PJRTKIT_POOL_ALIGN bytes into its allocation and are aligned to as many bytes.
 * NumPy passes the size on free and realloc; the header is what is read, so a size NumPy
 * computes differently cannot corrupt the pool.
 *
 * The struct below is NumPy's PyDataMem_Handler (NEP 49, version 1): NumPy reads it through
 * the capsule named "mem_handler" that the Python side makes.
 */

typedef struct {
    void* ctx;
    void* (*malloc)(void* ctx, size_t size);
    void* (*calloc)(void* ctx, size_t nelem, size_t elsize);
    void* (*realloc)(void* ctx, void* ptr, size_t new_size);
    void (*free)(void* ctx, void* ptr, size_t size);
} pjrtkit_numpy_allocator;

typedef struct {
    char name[127];
    uint8_t version;
    pjrtkit_numpy_allocator allocator;
} pjrtkit_numpy_handler;

#define PJRTKIT_POOL_ALIGN 64
/* Blocks from this many bytes up are pooled (smaller ones: malloc's own free lists). */
#define PJRTKIT_POOL_MIN_BYTES ((size_t)1 << 16)
/* Size classes: 8 per power of two (capacity at most 12.5% above the request). */
#define PJRTKIT_POOL_STEPS 8
#define PJRTKIT_POOL_CLASSES (48 * PJRTKIT_POOL_STEPS)

typedef struct pjrtkit_pool_free { struct pjrtkit_pool_free* next; } pjrtkit_pool_free;

typedef struct {
    size_t capacity;  /* data bytes */
    int64_t size_class;  /* -1: not pooled */
} pjrtkit_pool_header;

static struct {
    pthread_mutex_t lock;
    pjrtkit_pool_free* free[PJRTKIT_POOL_CLASSES];
    int64_t limit_bytes;  /* most bytes kept free; 0: nothing kept */
    int64_t cached_bytes;
    int64_t cached_blocks;
    int64_t reused;  /* allocations served from the pool */
    int64_t fresh;   /* pooled-size allocations that asked malloc */
} pjrtkit_pool = {PTHREAD_MUTEX_INITIALIZER, {0}, 0, 0, 0, 0, 0};

/* Size class and capacity of a pooled request of ``bytes`` (>= PJRTKIT_POOL_MIN_BYTES). */
static int64_t pjrtkit_pool_class(size_t bytes, size_t* capacity) {
    int exponent = 63 - __builtin_clzll((unsigned long long)(bytes - 1));  /* 2^e < bytes */
    size_t step = (size_t)1 << (exponent - 3);  /* 2^e / PJRTKIT_POOL_STEPS */
    size_t rounded = (bytes + step - 1) / step * step;
    int64_t index = (int64_t)(exponent - 15) * PJRTKIT_POOL_STEPS
                    + (int64_t)(rounded / step - PJRTKIT_POOL_STEPS - 1);
    *capacity = rounded;
    return index < PJRTKIT_POOL_CLASSES ? index : -1;
}

static void* pjrtkit_pool_block(size_t capacity, int64_t size_class) {
    size_t offset = size_class >= 0 ? PJRTKIT_POOL_ALIGN : sizeof(pjrtkit_pool_header);
    if (capacity > SIZE_MAX - 2 * PJRTKIT_POOL_ALIGN) return NULL;
    char* raw;
    if (size_class >= 0) {
        size_t total = (capacity + 2 * PJRTKIT_POOL_ALIGN - 1) / PJRTKIT_POOL_ALIGN
                       * PJRTKIT_POOL_ALIGN;
        raw = (char*)aligned_alloc(PJRTKIT_POOL_ALIGN, total);
    } else {
        raw = (char*)malloc(capacity + offset);
    }
    if (raw == NULL) return NULL;
    pjrtkit_pool_header* header = (pjrtkit_pool_header*)(raw + offset) - 1;
    header->capacity = capacity;
    header->size_class = size_class;
    return raw + offset;
}

static pjrtkit_pool_header* pjrtkit_pool_header_of(void* ptr) {
    return (pjrtkit_pool_header*)ptr - 1;
}

/* What malloc returned for the block whose data start at ``ptr``. */
static void* pjrtkit_pool_raw(void* ptr) {
    size_t offset = pjrtkit_pool_header_of(ptr)->size_class >= 0 ? PJRTKIT_POOL_ALIGN
                                                                  : sizeof(pjrtkit_pool_header);
    return (char*)ptr - offset;
}

/* Frees every kept block (lock held). */
static void pjrtkit_pool_drain_locked(void) {
    for (int i = 0; i < PJRTKIT_POOL_CLASSES; ++i) {
        pjrtkit_pool_free* block = pjrtkit_pool.free[i];
        while (block != NULL) {
            pjrtkit_pool_free* next = block->next;
            free(pjrtkit_pool_raw(block));
            block = next;
        }
        pjrtkit_pool.free[i] = NULL;
    }
    pjrtkit_pool.cached_bytes = 0;
    pjrtkit_pool.cached_blocks = 0;
}

static void* pjrtkit_pool_malloc(void* ctx, size_t size) {
    (void)ctx;
    if (size == 0) size = 1;
    if (size < PJRTKIT_POOL_MIN_BYTES) return pjrtkit_pool_block(size, -1);
    size_t capacity;
    int64_t size_class = pjrtkit_pool_class(size, &capacity);
    if (size_class < 0) return pjrtkit_pool_block(size, -1);
    pthread_mutex_lock(&pjrtkit_pool.lock);
    pjrtkit_pool_free* block = pjrtkit_pool.free[size_class];
    if (block != NULL) {
        pjrtkit_pool.free[size_class] = block->next;
        pjrtkit_pool.cached_bytes -= (int64_t)capacity;
        pjrtkit_pool.cached_blocks -= 1;
        pjrtkit_pool.reused += 1;
    } else {
        pjrtkit_pool.fresh += 1;
    }
    pthread_mutex_unlock(&pjrtkit_pool.lock);
    if (block != NULL) return block;
    void* fresh = pjrtkit_pool_block(capacity, size_class);
    if (fresh == NULL) {  /* out of memory: give the kept blocks back and try once more */
        pthread_mutex_lock(&pjrtkit_pool.lock);
        pjrtkit_pool_drain_locked();
        pthread_mutex_unlock(&pjrtkit_pool.lock);
        fresh = pjrtkit_pool_block(capacity, size_class);
    }
    return fresh;
}

static void pjrtkit_pool_free_block(void* ctx, void* ptr, size_t size) {
    (void)ctx;
    (void)size;  /* the header says how large the block is */
    if (ptr == NULL) return;
    pjrtkit_pool_header* header = pjrtkit_pool_header_of(ptr);
    int64_t size_class = header->size_class;
    if (size_class >= 0) {
        int64_t capacity = (int64_t)header->capacity;
        pthread_mutex_lock(&pjrtkit_pool.lock);
        int keep = pjrtkit_pool.cached_bytes + capacity <= pjrtkit_pool.limit_bytes;
        if (keep) {
            pjrtkit_pool_free* block = (pjrtkit_pool_free*)ptr;
            block->next = pjrtkit_pool.free[size_class];
            pjrtkit_pool.free[size_class] = block;
            pjrtkit_pool.cached_bytes += capacity;
            pjrtkit_pool.cached_blocks += 1;
        }
        pthread_mutex_unlock(&pjrtkit_pool.lock);
        if (keep) return;
    }
    free(pjrtkit_pool_raw(ptr));
}

static void* pjrtkit_pool_calloc(void* ctx, size_t nelem, size_t elsize) {
    if (elsize != 0 && nelem > SIZE_MAX / elsize) return NULL;
    size_t bytes = nelem * elsize;
    void* ptr = pjrtkit_pool_malloc(ctx, bytes);
    if (ptr != NULL) memset(ptr, 0, bytes);
    return ptr;
}

static void* pjrtkit_pool_realloc(void* ctx, void* ptr, size_t new_size) {
    if (ptr == NULL) return pjrtkit_pool_malloc(ctx, new_size);
    pjrtkit_pool_header* header = pjrtkit_pool_header_of(ptr);
    size_t capacity = header->capacity;
    if (new_size <= capacity) return ptr;
    void* moved = pjrtkit_pool_malloc(ctx, new_size);
    if (moved == NULL) return NULL;  /* NumPy keeps the old block, as realloc's contract says */
    memcpy(moved, ptr, capacity < new_size ? capacity : new_size);
    pjrtkit_pool_free_block(ctx, ptr, capacity);
    return moved;
}

static pjrtkit_numpy_handler pjrtkit_pool_handler = {
    "pjrtkit_array_pool", 1,
    {NULL, pjrtkit_pool_malloc, pjrtkit_pool_calloc, pjrtkit_pool_realloc,
     pjrtkit_pool_free_block},
};

void* pjrtkit_array_pool_handler(void) { return &pjrtkit_pool_handler; }

static void pjrtkit_pool_after_fork_in_child(void);
static void pjrtkit_pool_register_fork_handler(void) {
    pthread_atfork(NULL, NULL, pjrtkit_pool_after_fork_in_child);
}

/* A child forked while another thread held the lock would wait for it for ever: the child
 * starts with the lock free (the blocks it lists stay valid: the child has a copy of them). */
static void pjrtkit_pool_after_fork_in_child(void) {
    pthread_mutex_init(&pjrtkit_pool.lock, NULL);
}

void pjrtkit_array_pool_set_limit(int64_t limit_bytes) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pjrtkit_pool_register_fork_handler);
    pthread_mutex_lock(&pjrtkit_pool.lock);
    pjrtkit_pool.limit_bytes = limit_bytes > 0 ? limit_bytes : 0;
    if (pjrtkit_pool.cached_bytes > pjrtkit_pool.limit_bytes) pjrtkit_pool_drain_locked();
    pthread_mutex_unlock(&pjrtkit_pool.lock);
}

void pjrtkit_array_pool_release(void) {
    pthread_mutex_lock(&pjrtkit_pool.lock);
    pjrtkit_pool_drain_locked();
    pthread_mutex_unlock(&pjrtkit_pool.lock);
}

/* counts[0..4]: limit, bytes kept, blocks kept, allocations served from the pool, pooled-size
 * allocations that went to malloc. */
void pjrtkit_array_pool_read(int64_t* counts) {
    pthread_mutex_lock(&pjrtkit_pool.lock);
    counts[0] = pjrtkit_pool.limit_bytes;
    counts[1] = pjrtkit_pool.cached_bytes;
    counts[2] = pjrtkit_pool.cached_blocks;
    counts[3] = pjrtkit_pool.reused;
    counts[4] = pjrtkit_pool.fresh;
    pthread_mutex_unlock(&pjrtkit_pool.lock);
}
