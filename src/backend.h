/* Backends, one per device type: memory, queues, graph capture and the compute kernels by id
 * (kernels/kernel_args.h), and the dispatch that runs a kernel on a device (src/device.c; the
 * backends themselves are src/cpu and src/cuda). Layer: devices, above error.h and thread.h; it
 * knows raw pointers and the kernels' argument structs, never tensors. Everything above (tensors,
 * ops, optimizers) reaches a device through it. */
#ifndef CGRAD_BACKEND_H
#define CGRAD_BACKEND_H

#include <stddef.h>

#include "cgrad/core.h"
#include "kernels/kernel_args.h"
#include "thread.h"

/* What a backend supports is the kernels it lists; cg__run runs one or says it is missing. */
typedef cg_status (*cg_kernel)(const void *args, int index);
typedef struct cg_backend {
    const char *name;
    /* memory */
    void *(*raw_alloc)(int index, size_t bytes); /* NULL on out-of-memory, no error recorded */
    void (*raw_free)(int index, void *ptr);
    cg_status (*memcpy_from_host)(cg_device d, void *dst, const void *src, size_t bytes);
    cg_status (*memcpy_to_host)(cg_device d, void *dst, const void *src, size_t bytes); /* then check_errors */
    cg_status (*synchronize)(int index);
    /* reports a bad index a kernel met (kernels/index_error.h) and clears it, without waiting for
     * the device: an error of work still queued is reported by a later check; NULL on the CPU,
     * whose kernels fail their own call */
    cg_status (*check_errors)(int index);
    /* graph capture of the device's stream (NULL on the CPU); capture_end always ends the
     * capture and instantiates it only when keep is true */
    cg_status (*capture_begin)(int index);
    /* device waiter's queue waits for the work queued so far on device signaller's (NULL on the
     * CPU): how a capture begun on one GPU takes in others, and gives them back */
    cg_status (*stream_wait)(int waiter, int signaller);
    cg_status (*capture_end)(int index, bool keep, void **exec);
    cg_status (*graph_launch)(int index, void *exec);
    void (*graph_destroy)(void *exec);
    /* compute: outputs are allocated by the caller; NULL where the backend lacks the kernel */
    cg_kernel kernels[CG_KERNEL_COUNT];
    unsigned conv_dtypes; /* bit dt: its CONV2D_* kernels take dtype dt (cg_conv2d_geom.dtype) */
} cg_backend;

extern const cg_backend cg__cpu_backend;
/* NULL when the library was built without CUDA. */
const cg_backend *cg__cuda_backend(void);
/* cg__backend_for's GPU path (src/device.c). */
const cg_backend *cg__backend_lookup(cg_device d);
/* Backend of a device; NULL + CG_ERR_DEVICE recorded when the device does not exist. Inline, the
 * CPU's found without a call: every op dispatches through it. */
static inline const cg_backend *cg__backend_for(cg_device d) {
    return d.type == CG_CPU ? &cg__cpu_backend : cg__backend_lookup(d);
}
/* d's check_errors, where it has one: at the host's points of contact with a device (cg_synchronize,
 * the end of a backward pass, an optimizer step) beyond the read backs, which check anyway. */
static inline cg_status cg__check_device_errors(cg_device d) {
    const cg_backend *be = d.type == CG_CPU ? NULL : cg__backend_for(d);
    return be && be->check_errors ? be->check_errors(d.index) : CG_OK;
}
/* cg__run's failure: d has no backend, or its backend lacks kernel k (CG_ERR_DEVICE naming both). */
cg_status cg__run_failed(cg_device d, cg_kernel_id k);

/* Runs kernel k on device d (args: k's struct), or fails as cg__run_failed. */
static inline cg_status cg__run(cg_device d, cg_kernel_id k, const void *args) {
    const cg_backend *be = cg__backend_for(d);
    return be && be->kernels[k] ? be->kernels[k](args, d.index) : cg__run_failed(d, k);
}
/* Whether d's backend has kernel k. */
static inline bool cg__supports(cg_device d, cg_kernel_id k) {
    const cg_backend *be = cg__backend_for(d);
    return be && be->kernels[k];
}
/* Whether d's convolution kernels take tensors of dtype dt (else a 16-bit convolution runs in float32). */
static inline bool cg__conv_takes(cg_device d, cg_dtype dt) {
    const cg_backend *be = cg__backend_for(d);
    return be && (be->conv_dtypes >> dt & 1u);
}
/* cg__run with the kernel's own argument type: cg__run_fill(d, &(cg_fill_args){...}). */
#define CG_RUN_TYPED(ID, NAME, ARGS) \
    static inline cg_status cg__run_##NAME(cg_device d, const ARGS *args) { return cg__run(d, CG_KERNEL_##ID, args); }
CG_KERNELS(CG_RUN_TYPED)
#undef CG_RUN_TYPED

/* Every CPU parallel region of cgrad comes after CG_TRY(cg__cpu_enter()): the calling thread's OpenMP
 * team and OpenBLAS's buffers, set up before its first one (src/cpu/cpu_start.c); CG_ERR_OOM when
 * they cannot be had. cg__cpu_start sets them up again for a new thread count (cg_set_num_threads). */
cg_status cg__cpu_start(void);
/* The thread count the calling thread's team was set up for; 0: not yet. */
extern CG_THREAD_FAST int cg__cpu_team_ready;
/* Inline: every CPU kernel calls it, and after the thread's first op it is one compare. */
static inline cg_status cg__cpu_enter(void) { return cg__cpu_team_ready ? CG_OK : cg__cpu_start(); }

/* GPU-to-GPU copy, peer-to-peer where the GPUs allow it (src/cuda; fails in CPU-only builds). */
cg_status cg__cuda_copy_peer(int dst_index, void *dst, int src_index, const void *src, size_t bytes);
/* Byte copies between any two devices. */
cg_status cg__copy_bytes(cg_device dst_dev, void *dst, cg_device src_dev, const void *src,
                         size_t bytes);

/* CUDA runtime facts (src/cuda/cuda_device.c; stubs in a CPU-only build). */
int cg__cuda_probe(void);                 /* device count, 0 when no GPU/driver; cached */
const char *cg__cuda_reason(void);        /* why there is no GPU, or "" */
cg_status cg__cuda_device_name(int index, char *buf, size_t len);

#endif
