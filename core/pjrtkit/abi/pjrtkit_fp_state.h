/* The floating-point state every PJRT call runs in (compiled into pjrtkit.abi._pjrt_cffi; see
 * pjrtkit/fp_state.py for why): the guard of every entry point and the execute path enter C's
 * default state (round to nearest, subnormals kept, exceptions masked) and give the caller's
 * thread its own state back before they return. The caller may flush subnormals (a library
 * built with -ffast-math sets that on load); what pjrtkit computes and generates must not
 * depend on it.
 *
 * On x86 only MXCSR's control bits are changed, and only when they differ from the default
 * (one register read otherwise); the status flags are left as they are. Elsewhere the whole
 * environment is saved and restored with <fenv.h>.
 */
#include <fenv.h>
#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#define PJRTKIT_MXCSR_CONTROL 0xFFC0u  /* masks, rounding, FTZ, DAZ; bits 0-5 are status */
#define PJRTKIT_MXCSR_DEFAULT 0x1F80u  /* every exception masked, nearest, no FTZ/DAZ */
typedef struct { unsigned int control; int changed; } pjrtkit_fp_scope;
static inline void pjrtkit_fp_enter(pjrtkit_fp_scope* s) {
    unsigned int csr = _mm_getcsr();
    s->control = csr & PJRTKIT_MXCSR_CONTROL;
    s->changed = s->control != PJRTKIT_MXCSR_DEFAULT;
    if (s->changed) _mm_setcsr((csr & ~PJRTKIT_MXCSR_CONTROL) | PJRTKIT_MXCSR_DEFAULT);
}
static inline void pjrtkit_fp_leave(const pjrtkit_fp_scope* s) {
    if (s->changed) _mm_setcsr((_mm_getcsr() & ~PJRTKIT_MXCSR_CONTROL) | s->control);
}
#else
typedef struct { fenv_t saved; int changed; } pjrtkit_fp_scope;
static inline void pjrtkit_fp_enter(pjrtkit_fp_scope* s) {
    s->changed = fegetenv(&s->saved) == 0 && fesetenv(FE_DFL_ENV) == 0;
}
static inline void pjrtkit_fp_leave(const pjrtkit_fp_scope* s) {
    if (s->changed) fesetenv(&s->saved);
}
#endif
