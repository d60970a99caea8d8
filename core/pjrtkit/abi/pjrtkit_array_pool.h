/* The array pool: NumPy's data allocator on the threads where pjrtkit runs kernels (compiled
 * into pjrtkit.abi._pjrt_cffi; the Python side and the reasons: pjrtkit/abi/array_pool.py).
 *
 * A large block a kernel's array frees is kept, up to a byte limit, and handed to the next
 * array of its size class, so a program run again and again reuses its arrays' memory instead
 * of asking the kernel for fresh pages every call (glibc maps each large block anew and unmaps
 * it on free: every page of every output is faulted in and zeroed again on every call).
 * When a freed block would pass the limit, the blocks kept longest are given back to make room
 * for it: they were left by a program that no longer runs, and the one running now would
 * otherwise find the pool full of them and fault in fresh pages on every call.
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

/* A kept block's first bytes (its data are free; every pooled block has 64 KiB): its place in
 * its class's list (most recently freed first) and in the pool's list of all kept blocks by the
 * time they were freed, which says what to give back first when the limit is reached. */
typedef struct pjrtkit_pool_free {
    struct pjrtkit_pool_free* class_next;
    struct pjrtkit_pool_free* class_prev;
    struct pjrtkit_pool_free* newer;
    struct pjrtkit_pool_free* older;
    int64_t size_class;
    int64_t capacity;
} pjrtkit_pool_free;

typedef struct {
    size_t capacity;  /* data bytes */
    int64_t size_class;  /* -1: not pooled */
} pjrtkit_pool_header;

static struct {
    pthread_mutex_t lock;
    pjrtkit_pool_free* free[PJRTKIT_POOL_CLASSES];
    pjrtkit_pool_free* newest;  /* the list of all kept blocks, by when they were freed */
    pjrtkit_pool_free* oldest;
    int64_t limit_bytes;  /* most bytes kept free; 0: nothing kept */
    int64_t cached_bytes;
    int64_t cached_blocks;
    int64_t reused;  /* allocations served from the pool */
    int64_t fresh;   /* pooled-size allocations that asked malloc */
    int64_t evicted;  /* kept blocks given back to make room for a more recently freed one */
} pjrtkit_pool = {PTHREAD_MUTEX_INITIALIZER, {0}, NULL, NULL, 0, 0, 0, 0, 0, 0};

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

/* Takes ``block`` out of both lists (lock held). */
static void pjrtkit_pool_unlink_locked(pjrtkit_pool_free* block) {
    if (block->class_prev != NULL) block->class_prev->class_next = block->class_next;
    else pjrtkit_pool.free[block->size_class] = block->class_next;
    if (block->class_next != NULL) block->class_next->class_prev = block->class_prev;
    if (block->newer != NULL) block->newer->older = block->older;
    else pjrtkit_pool.newest = block->older;
    if (block->older != NULL) block->older->newer = block->newer;
    else pjrtkit_pool.oldest = block->newer;
    pjrtkit_pool.cached_bytes -= block->capacity;
    pjrtkit_pool.cached_blocks -= 1;
}

/* Keeps ``block`` as the most recently freed of its class and of the pool (lock held). */
static void pjrtkit_pool_keep_locked(pjrtkit_pool_free* block, int64_t size_class,
                                     int64_t capacity) {
    block->size_class = size_class;
    block->capacity = capacity;
    block->class_prev = NULL;
    block->class_next = pjrtkit_pool.free[size_class];
    if (block->class_next != NULL) block->class_next->class_prev = block;
    pjrtkit_pool.free[size_class] = block;
    block->newer = NULL;
    block->older = pjrtkit_pool.newest;
    if (block->older != NULL) block->older->newer = block;
    else pjrtkit_pool.oldest = block;
    pjrtkit_pool.newest = block;
    pjrtkit_pool.cached_bytes += capacity;
    pjrtkit_pool.cached_blocks += 1;
}

/* Takes the least recently freed blocks out until ``room`` more bytes fit under the limit,
 * adding their number to ``*count``; returns them chained by ``class_next``, for the caller to
 * free after the lock. */
static pjrtkit_pool_free* pjrtkit_pool_evict_locked(int64_t room, int64_t* count) {
    pjrtkit_pool_free* evicted = NULL;
    while (pjrtkit_pool.oldest != NULL
           && pjrtkit_pool.cached_bytes + room > pjrtkit_pool.limit_bytes) {
        pjrtkit_pool_free* block = pjrtkit_pool.oldest;
        pjrtkit_pool_unlink_locked(block);
        block->class_next = evicted;
        evicted = block;
        *count += 1;
    }
    return evicted;
}

static void pjrtkit_pool_free_chain(pjrtkit_pool_free* block) {
    while (block != NULL) {
        pjrtkit_pool_free* next = block->class_next;
        free(pjrtkit_pool_raw(block));
        block = next;
    }
}

/* Takes every kept block out (lock held); returns them as pjrtkit_pool_evict_locked does. */
static pjrtkit_pool_free* pjrtkit_pool_drain_locked(void) {
    int64_t limit = pjrtkit_pool.limit_bytes;
    pjrtkit_pool.limit_bytes = 0;
    int64_t count = 0;
    pjrtkit_pool_free* all = pjrtkit_pool_evict_locked(0, &count);
    pjrtkit_pool.limit_bytes = limit;
    return all;
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
        pjrtkit_pool_unlink_locked(block);
        pjrtkit_pool.reused += 1;
    } else {
        pjrtkit_pool.fresh += 1;
    }
    pthread_mutex_unlock(&pjrtkit_pool.lock);
    if (block != NULL) return block;
    void* fresh = pjrtkit_pool_block(capacity, size_class);
    if (fresh == NULL) {  /* out of memory: give the kept blocks back and try once more */
        pthread_mutex_lock(&pjrtkit_pool.lock);
        pjrtkit_pool_free* all = pjrtkit_pool_drain_locked();
        pthread_mutex_unlock(&pjrtkit_pool.lock);
        pjrtkit_pool_free_chain(all);
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
        pjrtkit_pool_free* evicted = NULL;
        pthread_mutex_lock(&pjrtkit_pool.lock);
        /* The block just freed is the likeliest to be asked for again (a program run again
         * and again frees and asks for the same sizes): room is made for it by giving back
         * the blocks kept longest, left by programs that no longer run. */
        int keep = capacity <= pjrtkit_pool.limit_bytes;
        if (keep) {
            evicted = pjrtkit_pool_evict_locked(capacity, &pjrtkit_pool.evicted);
            pjrtkit_pool_keep_locked((pjrtkit_pool_free*)ptr, size_class, capacity);
        }
        pthread_mutex_unlock(&pjrtkit_pool.lock);
        pjrtkit_pool_free_chain(evicted);
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
    int64_t count = 0;
    pjrtkit_pool_free* evicted = pjrtkit_pool_evict_locked(0, &count);
    pthread_mutex_unlock(&pjrtkit_pool.lock);
    pjrtkit_pool_free_chain(evicted);
}

void pjrtkit_array_pool_release(void) {
    pthread_mutex_lock(&pjrtkit_pool.lock);
    pjrtkit_pool_free* all = pjrtkit_pool_drain_locked();
    pthread_mutex_unlock(&pjrtkit_pool.lock);
    pjrtkit_pool_free_chain(all);
}

/* counts[0..5]: limit, bytes kept, blocks kept, allocations served from the pool, pooled-size
 * allocations that went to malloc, kept blocks given back to make room. */
void pjrtkit_array_pool_read(int64_t* counts) {
    pthread_mutex_lock(&pjrtkit_pool.lock);
    counts[0] = pjrtkit_pool.limit_bytes;
    counts[1] = pjrtkit_pool.cached_bytes;
    counts[2] = pjrtkit_pool.cached_blocks;
    counts[3] = pjrtkit_pool.reused;
    counts[4] = pjrtkit_pool.fresh;
    counts[5] = pjrtkit_pool.evicted;
    pthread_mutex_unlock(&pjrtkit_pool.lock);
}
