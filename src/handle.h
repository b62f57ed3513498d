/* Generational handles: how every object the API gives out (tensor, module, optimizer, data set,
 * loader, graph, scope, safetensors file, distributed context) is named to the caller, and how a
 * call tells a live handle from a freed one.
 *
 * An object lives in a slot of a pool of its kind. Pools never give memory back to the system, so
 * the slot of a freed object can always be read. The slot's header holds the kind and a 16-bit
 * generation that is bumped when the object is freed. The pointer the caller holds is the object's
 * address with that generation in its top 16 bits (user-space addresses fit in 48). A public call
 * checks one against the other: a pointer from before a free never matches again, even once the
 * slot holds another object, and a slot whose generation would wrap is retired instead of reused,
 * so no (slot, generation) pair is handed out twice.
 *
 * Internal code reads an object through its handle with cg__handle_object (one AND), after the
 * public entry point has checked it; each kind wraps it in a typed accessor (cg__t for tensors).
 * Included by the CUDA sources too (through internal.h): C and C++. */
#ifndef CGRAD_HANDLE_H
#define CGRAD_HANDLE_H

#include <stddef.h>
#include <stdint.h>

#include "cgrad.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a slot holds; the values are unlikely bit patterns, so memory that is not a slot of the
 * right kind is reported as "not a cgrad <noun>" rather than trusted. */
typedef enum cg_handle_kind {
    CG_HANDLE_TENSOR = 0x7e45011e,
    CG_HANDLE_MODULE = 0x30d01e5a,
    CG_HANDLE_OPTIMIZER = 0x0b7e1d5b,
    CG_HANDLE_DATASET = 0x5e7da7a5,
    CG_HANDLE_LOADER = 0x10ade75c,
    CG_HANDLE_GRAPH = 0x96a9412d,
    CG_HANDLE_SCOPE = 0x5c09e5e1,
    CG_HANDLE_SAFETENSORS = 0x5afe7e45,
    CG_HANDLE_DIST = 0xd157c0de,
} cg_handle_kind;

/* A pool of slots for objects of one kind and size, defined where the kind is implemented:
 *     static cg_handle_pool module_pool = CG_HANDLE_POOL(CG_HANDLE_MODULE, cg_module_impl); */
typedef struct cg_handle_pool {
    cg_handle_kind kind;
    size_t object_size;
    int lock;        /* a spin lock (src/handle.c) */
    void *chunks;    /* every chunk ever made, linked: nothing is returned to the system */
    void *free_list; /* slots ready for reuse, most recently freed first */
} cg_handle_pool;
#define CG_HANDLE_POOL(kind, type) {(kind), sizeof(type), 0, NULL, NULL}

/* A new object (zeroed) in a slot of pool; returns its handle, or NULL with CG_ERR_OOM recorded. */
void *cg__handle_new(cg_handle_pool *pool);
/* Ends the object's life: its handle (and any copy of it) is dead from now on. handle must be live. */
void cg__handle_free(cg_handle_pool *pool, const void *handle);
/* CG_OK when handle is a live object of this kind; otherwise records "<fn>: <what> is NULL", "...
 * is a freed <noun>" or "... is not a cgrad <noun>" (what: e.g. "argument 'x'", "module") and
 * returns CG_ERR_INVALID_ARG. */
cg_status cg__handle_check(cg_handle_kind kind, const void *handle, const char *fn, const char *what);
#define CG_HANDLE_ADDRESS_BITS 48
/* The object a handle names. No check: callers have checked the handle (or own it). */
static inline void *cg__handle_object(const void *handle) {
    return (void *)((uintptr_t)handle & (((uintptr_t)1 << CG_HANDLE_ADDRESS_BITS) - 1));
}

/* The header in front of every object (16 bytes, so objects stay 16-byte aligned); here so that the
 * check below, which every public call makes, compiles inline. */
typedef struct cg_handle_header {
    cg_handle_kind kind;
    uint16_t generation; /* of the live object, or of the next one; never 0, so a bare address never matches */
    bool live;
    struct cg_handle_header *next_free;
} cg_handle_header;
#define CG_HANDLE_HEADER_BYTES 16

/* Whether handle is a live object of this kind (no error recorded); false for NULL and for values
 * that cannot be handles (no generation, or an address no object can have). */
static inline bool cg__handle_live(cg_handle_kind kind, const void *handle) {
    uintptr_t address = (uintptr_t)cg__handle_object(handle);
    uint16_t generation = (uint16_t)((uintptr_t)handle >> CG_HANDLE_ADDRESS_BITS);
    if (generation == 0 || address < CG_HANDLE_HEADER_BYTES || address % 16 != 0) return false;
    const cg_handle_header *h = (const cg_handle_header *)(address - CG_HANDLE_HEADER_BYTES);
    return h->kind == kind && h->live && h->generation == generation;
}

#ifdef __cplusplus
}
#endif
#endif
