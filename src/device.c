/* Devices and global settings: device discovery, names, parsing, threads, seed, TF32. */
#include "cgrad/core.h"

#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "rng.h"

/* Process-wide settings, atomic so that any thread may change them while others run (see Threads in
 * cgrad.h); relaxed, as no other memory is published through them. */
static atomic_uint_fast64_t global_seed = 0x2545F4914F6CDD1DULL;
static atomic_uint_fast64_t seed_generation = 1;
static atomic_uint_fast64_t cpu_rng_counter = 0;
static atomic_uint_fast64_t cuda_rng_offset[CG_MAX_CUDA];
static atomic_bool allow_tf32 = false;
static atomic_bool deterministic = true;

#ifndef CGRAD_HAVE_CUDA
int cg__cuda_probe(void) { return 0; }
const char *cg__cuda_reason(void) { return "cgrad was built without CUDA"; }
cg_status cg__cuda_device_name(int index, char *buf, size_t len) {
    return cg__fail(CG_ERR_DEVICE, "cuda:%d: cgrad was built without CUDA", index);
}
const cg_backend *cg__cuda_backend(void) { return NULL; }
bool cg_cuda_can_access_peer(int device, int peer) { return false; }
cg_status cg__cuda_copy_peer(int dst_index, void *dst, int src_index, const void *src, size_t bytes) {
    return cg__fail(CG_ERR_DEVICE, "cuda:%d -> cuda:%d: cgrad was built without CUDA", src_index, dst_index);
}
#endif

int cg_cuda_device_count(void) { return cg__cuda_probe(); }
bool cg_cuda_is_available(void) { return cg__cuda_probe() > 0; }
const char *cg_cuda_unavailable_reason(void) { return cg__cuda_probe() > 0 ? "" : cg__cuda_reason(); }
cg_device cg_default_device(void) { return cg_cuda_is_available() ? cg_cuda(0) : cg_cpu(); }

const cg_backend *cg__backend_lookup(cg_device d) {
    char name[16];
    if (d.type == CG_CPU) return &cg__cpu_backend;
    if (d.type != CG_CUDA)
        return CG_FAIL_NULL(CG_ERR_DEVICE, "unknown device type %d", (int)d.type);
    int count = cg__cuda_probe();
    if (d.index < 0 || d.index >= count) {
        if (count == 0)
            return CG_FAIL_NULL(CG_ERR_DEVICE, "device %s requested but no GPU is usable: %s",
                                cg_device_str(d, name, sizeof name), cg__cuda_reason());
        return CG_FAIL_NULL(CG_ERR_DEVICE, "device %s does not exist: %d CUDA device(s), cuda:0..cuda:%d",
                            cg_device_str(d, name, sizeof name), count, count - 1);
    }
    return cg__cuda_backend();
}

static const char *const kernel_names[CG_KERNEL_COUNT] = {
#define NAME(ID, NAME, ARGS) #NAME,
    CG_KERNELS(NAME)
#undef NAME
};

cg_status cg__run_failed(cg_device d, cg_kernel_id k) {
    const cg_backend *be = cg__backend_for(d);
    if (!be) return cg_last_status();
    char name[16];
    return cg__fail(CG_ERR_DEVICE, "%s is not supported on %s (the %s backend has no such kernel)", kernel_names[k],
                    cg_device_str(d, name, sizeof name), be->name);
}

cg_status cg__copy_bytes(cg_device dst_dev, void *dst, cg_device src_dev, const void *src, size_t bytes) {
    if (bytes == 0) return CG_OK;
    if (dst_dev.type == CG_CPU && src_dev.type == CG_CPU) {
        memcpy(dst, src, bytes);
        return CG_OK;
    }
    if (src_dev.type == CG_CPU) return cg__backend_for(dst_dev)->memcpy_from_host(dst_dev, dst, src, bytes);
    if (dst_dev.type == CG_CPU) return cg__backend_for(src_dev)->memcpy_to_host(src_dev, dst, src, bytes);
    return cg__cuda_copy_peer(dst_dev.index, dst, src_dev.index, src, bytes);
}

cg_status cg_device_parse(const char *text, cg_device *out) {
    if (!text || !out) return cg__fail(CG_ERR_INVALID_ARG, "cg_device_parse: NULL argument");
    cg_device d;
    if (strcmp(text, "cpu") == 0) {
        d = cg_cpu();
    } else if (strcmp(text, "cuda") == 0) {
        d = cg_cuda(0);
    } else if (strncmp(text, "cuda:", 5) == 0 && text[5] >= '0' && text[5] <= '9') {
        char *end;
        long index = strtol(text + 5, &end, 10);
        if (*end != '\0' || index > 1 << 20)
            return cg__fail(CG_ERR_DEVICE, "cg_device_parse: bad device '%s' (expected cpu, cuda or cuda:N)", text);
        d = cg_cuda((int)index);
    } else {
        return cg__fail(CG_ERR_DEVICE, "cg_device_parse: bad device '%s' (expected cpu, cuda or cuda:N)", text);
    }
    if (!cg__backend_for(d)) return cg__fail_context("cg_device_parse");
    *out = d;
    return CG_OK;
}

const char *cg_device_str(cg_device d, char *buf, size_t len) {
    if (d.type == CG_CPU) snprintf(buf, len, "cpu");
    else snprintf(buf, len, "cuda:%d", d.index);
    return buf;
}

/* The CPU model from /proc/cpuinfo, or "cpu". */
static void cpu_model_name(char *buf, size_t len) {
    snprintf(buf, len, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            colon += 1 + (colon[1] == ' ');
            colon[strcspn(colon, "\n")] = '\0';
            snprintf(buf, len, "%s", colon);
            break;
        }
    }
    fclose(f);
}

const char *cg_device_name(cg_device d, char *buf, size_t len) {
    if (d.type == CG_CPU) cpu_model_name(buf, len);
    else if (cg__cuda_device_name(d.index, buf, len) != CG_OK) snprintf(buf, len, "unavailable");
    return buf;
}

cg_status cg_synchronize(cg_device d) {
    const cg_backend *be = cg__backend_for(d);
    if (!be) return cg__fail_context("cg_synchronize");
    CG_TRY(be->synchronize(d.index));
    return cg__check_device_errors(d);
}

cg_status cg_set_num_threads(int n) {
    if (n < 1 || n > CG_MAX_THREADS)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_set_num_threads: %d threads; expected 1 to %d (CG_MAX_THREADS)", n,
                        CG_MAX_THREADS);
    int previous = omp_get_max_threads();
    omp_set_num_threads(n); /* every CPU kernel's threads, BLAS calls included (src/cpu/cpu_matmul.c) */
    if (cg__cpu_start() == CG_OK) return CG_OK; /* the new team and its BLAS buffers, set up now */
    omp_set_num_threads(previous);
    return cg__fail_context("cg_set_num_threads(%d)", n);
}

int cg_get_num_threads(void) {
    int n = omp_get_max_threads();
    return n < CG_MAX_THREADS ? n : CG_MAX_THREADS; /* a larger default is cut there at the first op */
}

void cg_manual_seed(uint64_t seed) {
    atomic_store_explicit(&global_seed, seed, memory_order_relaxed);
    atomic_store(&cpu_rng_counter, 0);
    for (int i = 0; i < CG_MAX_CUDA; i++) atomic_store(&cuda_rng_offset[i], 0);
    atomic_fetch_add(&seed_generation, 1);
}
uint64_t cg__seed(void) { return atomic_load_explicit(&global_seed, memory_order_relaxed); }
uint64_t cg__seed_generation(void) { return atomic_load(&seed_generation); }
uint64_t cg__cpu_rng_reserve(uint64_t count) { return atomic_fetch_add(&cpu_rng_counter, count); }
uint64_t cg__cuda_rng_reserve(int index, uint64_t count) { return atomic_fetch_add(&cuda_rng_offset[index], count); }

void cg__rng_get_state(cg_rng_state *out) {
    out->seed = cg__seed();
    out->cpu = atomic_load(&cpu_rng_counter);
    for (int i = 0; i < CG_MAX_CUDA; i++) out->cuda[i] = atomic_load(&cuda_rng_offset[i]);
}

void cg__rng_set_state(const cg_rng_state *s) {
    cg_manual_seed(s->seed);
    atomic_store(&cpu_rng_counter, s->cpu);
    for (int i = 0; i < CG_MAX_CUDA; i++) atomic_store(&cuda_rng_offset[i], s->cuda[i]);
}

void cg_set_allow_tf32(bool allow) { atomic_store_explicit(&allow_tf32, allow, memory_order_relaxed); }
bool cg_get_allow_tf32(void) { return atomic_load_explicit(&allow_tf32, memory_order_relaxed); }
void cg_set_deterministic(bool on) { atomic_store_explicit(&deterministic, on, memory_order_relaxed); }
bool cg_get_deterministic(void) { return atomic_load_explicit(&deterministic, memory_order_relaxed); }
