/*
 * ferry_kernel.h: the ferry custom kernel-library ABI, for kernel libraries written in C (C11)
 * or C++ (C++11 and later).
 *
 * The records, constants and function types of the `ferry-kernel-abi` crate
 * (src/kernel_lib.rs, src/services.rs, src/dtype.rs), field for field. A library built from
 * this header is a shared object ferry loads with `ferry run --kernels LIB.so` exactly as it
 * loads one built from the crate: it exports `ferry_kernel_library`, which returns a pointer
 * to a static FerryKernelLibraryDesc. The crate's test `c_header` compiles this header with
 * the system C compiler and checks every size, offset, alignment and constant below against
 * the Rust definitions, so the two cannot drift apart.
 *
 * Versioning: FERRY_KERNEL_LIB_ABI_VERSION changes whenever a record's layout or meaning
 * changes; a library records the version it was built with and ferry refuses another.
 *
 * Contract of a device entry (FerryDeviceKernelFn): it runs once per SPMD block on an AICore
 * worker thread, reaches device memory only through services->translate (which returns NULL
 * for a range outside live device memory), returns a FERRY_STATUS_* (0: ok) and, when it
 * refuses its block, fills *error (which may be NULL) with a FERRY_KERNEL_ERR_* so that ferry
 * reports a typed fault naming the kernel and its task. It must not longjmp or throw out.
 * A host reference (FerryHostKernelFn) computes the whole task over distinct host f32
 * buffers; ferry verifies the device against it.
 */
#ifndef FERRY_KERNEL_H
#define FERRY_KERNEL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Versions and limits (kernel_lib.rs) ---- */

/** The ABI version a library records; ferry refuses a library of another version. */
#define FERRY_KERNEL_LIB_ABI_VERSION 3u
/** FerryKernelLibraryDesc.magic: the bytes "FRYKERNL", little-endian. */
#define FERRY_KERNEL_LIB_MAGIC 0x4C4E52454B595246ull
/** The one symbol a library exports. */
#define FERRY_EXPORT_KERNEL_LIBRARY "ferry_kernel_library"
/** Most kernels one library may export. */
#define FERRY_MAX_LIBRARY_KERNELS 64u
/** Most loaded kernels per runner, over all libraries. */
#define FERRY_MAX_CUSTOM_KERNELS 256u
/** Id of the first loaded kernel. */
#define FERRY_CUSTOM_KERNEL_BASE 0x100u
/** Bytes of a name field (NUL-terminated: at most 31 bytes of UTF-8). */
#define FERRY_NAME_BYTES 32
/** Most tensor arguments of one call. */
#define FERRY_MAX_CALL_TENSORS 6
/** Most scalar arguments of one call. */
#define FERRY_MAX_CALL_SCALARS 4
/** FerryKernelEntry.core: a cube core (AIC). */
#define FERRY_CORE_AIC 0u
/** FerryKernelEntry.core: a vector core (AIV). */
#define FERRY_CORE_AIV 1u
/** FerryKernelEntry.scalar_dtypes code of a view kernel's scalar 0: the views' shape word. */
#define FERRY_SCALAR_VIEW_SHAPE 0x80u
/** FerryKernelEntry.scalar_dtypes code of a view kernel's scalars 1..=n: operand words. */
#define FERRY_SCALAR_VIEW_OPERAND 0x81u

/* ---- Scalar and element types (dtype.rs): FerryKernelEntry.scalar_dtypes codes ---- */

#define FERRY_DTYPE_FLOAT32 0u
#define FERRY_DTYPE_FLOAT16 1u
#define FERRY_DTYPE_BFLOAT16 2u
#define FERRY_DTYPE_INT8 3u
#define FERRY_DTYPE_INT16 4u
#define FERRY_DTYPE_INT32 5u
#define FERRY_DTYPE_INT64 6u
#define FERRY_DTYPE_UINT8 7u
#define FERRY_DTYPE_UINT32 8u
#define FERRY_DTYPE_UINT64 9u

/* ---- Why a device entry refused its block: FerryKernelErrorRecord.kind ---- */

/** Nothing recorded (the status alone says what happened). */
#define FERRY_KERNEL_ERR_NONE 0u
/** Tensor argument `index` is not there. */
#define FERRY_KERNEL_ERR_MISSING_TENSOR 1u
/** Scalar argument `index` is not there. */
#define FERRY_KERNEL_ERR_MISSING_SCALAR 2u
/** Tensor `index`'s range is not inside live device memory. */
#define FERRY_KERNEL_ERR_BAD_ADDRESS 3u
/** A tensor has `got` elements where the kernel needs `expected`. */
#define FERRY_KERNEL_ERR_SHAPE 4u
/** The kernel panicked (a Rust kernel; a C kernel has no use for it). */
#define FERRY_KERNEL_ERR_PANIC 5u
/** Tensor `index`'s view does not fit its range. */
#define FERRY_KERNEL_ERR_VIEW 6u

/* ---- Status codes (services.rs): what every entry returns ---- */

#define FERRY_STATUS_OK 0
#define FERRY_STATUS_INVALID_ARGUMENT 1
#define FERRY_STATUS_UNSUPPORTED 2
#define FERRY_STATUS_ABI_SIZE_MISMATCH 3
#define FERRY_STATUS_ABI_VERSION_MISMATCH 4
#define FERRY_STATUS_NO_SERVICES 5
#define FERRY_STATUS_BAD_ADDRESS 6
#define FERRY_STATUS_IO 7
#define FERRY_STATUS_BAD_NAME 8
#define FERRY_STATUS_MISSING_SYMBOL 9
#define FERRY_STATUS_NOT_INITIALISED 10
#define FERRY_STATUS_PANIC 11
#define FERRY_STATUS_BAD_CALLABLE 12
#define FERRY_STATUS_UNKNOWN_KERNEL 13
/** First code the task runtime uses for its own failures. */
#define FERRY_STATUS_RUNTIME_BASE 1000

/* ---- The AICPU OS services table (services.rs) ---- */

/** FerryDeviceServices.abi_version of this header. */
#define FERRY_SERVICES_ABI_VERSION 3u

/** core_wait's timeout meaning "no bound". */
#define FERRY_WAIT_FOREVER 0xFFFFFFFFFFFFFFFFull
/** Flag in core_wait's result: the predicate held (the low 32 bits hold the value). */
#define FERRY_WAIT_SATISFIED 0x100000000ull
/** mem_load kinds. */
#define FERRY_MEM_LOAD_PLAIN 0u
#define FERRY_MEM_LOAD_VOLATILE 1u
#define FERRY_MEM_LOAD_ACQUIRE 2u
/** mem_store kinds. */
#define FERRY_MEM_STORE_PLAIN 0u
#define FERRY_MEM_STORE_RELEASE 1u
/** cache_op instructions. */
#define FERRY_CACHE_OP_CIVAC 1u
#define FERRY_CACHE_OP_IVAC 2u
/** The data-cache line the cache operations act on. */
#define FERRY_CACHE_LINE_BYTES 64u

/** An optional export, `int32_t ferry_set_services(const FerryDeviceServices *)`, called by the
 * OS right after loading; a kernel library needs none (its entries get the table with every
 * call). */
#define FERRY_EXPORT_SET_SERVICES "ferry_set_services"

typedef uint8_t (*FerryRegPredFn)(void *user, uint32_t value);
typedef uint8_t (*FerryCondFn)(void *user);

/**
 * The services every device program receives; a kernel's device entry gets the table with
 * every call. Every function takes `ctx` first. A kernel needs `translate` (device range to
 * a host pointer, NULL when the range is not inside one live allocation) and perhaps `log`.
 */
typedef struct FerryDeviceServices {
    uint32_t abi_version;
    uint32_t size;
    const void *ctx;
    uint8_t *(*translate)(const void *ctx, uint64_t addr, uint64_t len);
    uint32_t (*reg_read)(const void *ctx, uint64_t addr);
    int32_t (*reg_write_aicpu)(const void *ctx, uint64_t addr, uint32_t value);
    int32_t (*reg_write_core)(const void *ctx, uint64_t addr, uint32_t value);
    uint64_t (*core_wait)(const void *ctx, uint64_t addr, FerryRegPredFn pred, void *user,
                          uint64_t timeout_ns);
    uint8_t (*aicpu_wait)(const void *ctx, FerryCondFn cond, void *user, uint64_t timeout_ns);
    void (*notify_aicpu)(const void *ctx);
    uint64_t (*now_cycles)(const void *ctx);
    uint64_t (*clock_hz)(const void *ctx);
    void (*log)(const void *ctx, uint32_t level, const uint8_t *msg, uint64_t len);
    uint64_t (*thread_info)(const void *ctx);
    int32_t (*save_so_file)(const void *ctx, const uint8_t *name, uint64_t name_len,
                            const uint8_t *bytes, uint64_t len);
    uint64_t (*load_object)(const void *ctx, const uint8_t *bytes, uint64_t len,
                            const uint8_t *tag, uint64_t tag_len);
    const void *(*object_symbol)(const void *ctx, uint64_t handle, const uint8_t *name,
                                 uint64_t name_len);
    int32_t (*close_object)(const void *ctx, uint64_t handle);
    void (*notify_host)(const void *ctx, uint64_t key, uint32_t queue);
    int32_t (*mem_load)(const void *ctx, uint64_t addr, uint32_t size, uint32_t kind,
                        uint64_t *out);
    int32_t (*mem_store)(const void *ctx, uint64_t addr, uint32_t size, uint64_t value,
                         uint32_t kind);
    int32_t (*cache_op)(const void *ctx, uint64_t addr, uint32_t op);
} FerryDeviceServices;

/* ---- The kernel-library records (kernel_lib.rs) ---- */

/** Why a device entry refused its block (24 bytes). ferry passes a zeroed record. */
typedef struct FerryKernelErrorRecord {
    uint32_t kind;     /* a FERRY_KERNEL_ERR_* */
    uint32_t index;    /* the argument index */
    uint64_t expected; /* elements the kernel needs (SHAPE) */
    uint64_t got;      /* elements there (SHAPE) */
} FerryKernelErrorRecord;

/** One tensor argument of a device call: a device range. */
typedef struct FerryTensorArg {
    uint64_t addr;
    uint64_t bytes;
} FerryTensorArg;

/** The arguments of one device call: one SPMD block of one task (144 bytes). */
typedef struct FerryDeviceCall {
    FerryTensorArg tensors[FERRY_MAX_CALL_TENSORS];
    uint64_t scalars[FERRY_MAX_CALL_SCALARS]; /* raw 64 bits each; an f32 in the low 32 */
    uint32_t n_tensors;
    uint32_t n_scalars;
    uint32_t block_idx; /* in 0..block_dim */
    uint32_t block_dim; /* at least 1 */
} FerryDeviceCall;

/** One tensor argument of a host-reference call: a host f32 buffer. */
typedef struct FerryHostTensor {
    float *ptr;
    uint64_t len; /* elements */
} FerryHostTensor;

/** The arguments of one host-reference call: a whole task (136 bytes). */
typedef struct FerryHostCall {
    FerryHostTensor tensors[FERRY_MAX_CALL_TENSORS];
    uint64_t scalars[FERRY_MAX_CALL_SCALARS];
    uint32_t n_tensors;
    uint32_t n_scalars;
} FerryHostCall;

/** A kernel's device entry: one SPMD block. Returns a FERRY_STATUS_*. */
typedef int32_t (*FerryDeviceKernelFn)(const FerryDeviceServices *services,
                                       const FerryDeviceCall *call,
                                       FerryKernelErrorRecord *error);
/** A kernel's host reference: the whole task. Returns a FERRY_STATUS_*. */
typedef int32_t (*FerryHostKernelFn)(const FerryHostCall *call);

/** One kernel of a library (72 bytes). */
typedef struct FerryKernelEntry {
    char name[FERRY_NAME_BYTES]; /* unique among every kernel of a run, NUL-terminated */
    uint32_t core;               /* FERRY_CORE_AIC or FERRY_CORE_AIV */
    uint32_t min_tensors;
    uint32_t max_tensors;        /* at most FERRY_MAX_CALL_TENSORS */
    uint32_t scalar_count;       /* at most FERRY_MAX_CALL_SCALARS */
    uint8_t scalar_dtypes[FERRY_MAX_CALL_SCALARS]; /* a FERRY_DTYPE_* per scalar */
    uint32_t max_blocks;         /* at least 1 */
    FerryDeviceKernelFn device;  /* required */
    FerryHostKernelFn host;      /* required */
} FerryKernelEntry;

/** What ferry_kernel_library returns a pointer to (64 bytes). */
typedef struct FerryKernelLibraryDesc {
    uint64_t magic;        /* FERRY_KERNEL_LIB_MAGIC */
    uint32_t abi_version;  /* FERRY_KERNEL_LIB_ABI_VERSION */
    uint32_t desc_bytes;   /* sizeof(FerryKernelLibraryDesc) */
    uint32_t entry_bytes;  /* sizeof(FerryKernelEntry) */
    uint32_t kernel_count; /* entries behind `kernels`, at most FERRY_MAX_LIBRARY_KERNELS */
    const FerryKernelEntry *kernels;
    char name[FERRY_NAME_BYTES]; /* the library's name, NUL-terminated */
} FerryKernelLibraryDesc;

/** The library's one required export. */
typedef const FerryKernelLibraryDesc *(*FerryKernelLibraryFn)(void);

/* The layout the Rust crate asserts, asserted again by the compiler (LP64 targets). */
#if !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(FerryKernelErrorRecord) == 24, "FerryKernelErrorRecord is 24 bytes");
_Static_assert(sizeof(FerryDeviceCall) == 144, "FerryDeviceCall is 144 bytes");
_Static_assert(sizeof(FerryHostCall) == 136, "FerryHostCall is 136 bytes");
_Static_assert(sizeof(FerryKernelEntry) == 72, "FerryKernelEntry is 72 bytes");
_Static_assert(sizeof(FerryKernelLibraryDesc) == 64, "FerryKernelLibraryDesc is 64 bytes");
#elif defined(__cplusplus)
static_assert(sizeof(FerryKernelErrorRecord) == 24, "FerryKernelErrorRecord is 24 bytes");
static_assert(sizeof(FerryDeviceCall) == 144, "FerryDeviceCall is 144 bytes");
static_assert(sizeof(FerryHostCall) == 136, "FerryHostCall is 136 bytes");
static_assert(sizeof(FerryKernelEntry) == 72, "FerryKernelEntry is 72 bytes");
static_assert(sizeof(FerryKernelLibraryDesc) == 64, "FerryKernelLibraryDesc is 64 bytes");
#endif

/** The f32 in a scalar's low 32 bits. */
static inline float ferry_scalar_f32(uint64_t raw) {
    uint32_t bits = (uint32_t)raw;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/** A scalar's f32 as the 64 raw bits a call carries. */
static inline uint64_t ferry_f32_scalar(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return (uint64_t)bits;
}

/**
 * Tensor argument `index` of a device call as `*len` f32s of device memory at `*ptr`,
 * translated (and so bounds-checked) through the services table. Returns FERRY_STATUS_OK, or
 * FERRY_STATUS_INVALID_ARGUMENT (the argument is missing) or FERRY_STATUS_BAD_ADDRESS (its
 * range is not inside live device memory) with *error filled: return that status from the
 * device entry. An empty tensor gives a NULL pointer and *len 0.
 */
static inline int32_t ferry_device_tensor(const FerryDeviceServices *services,
                                          const FerryDeviceCall *call, uint32_t index,
                                          float **ptr, uint64_t *len,
                                          FerryKernelErrorRecord *error) {
    *ptr = NULL;
    *len = 0;
    if (index >= call->n_tensors || index >= FERRY_MAX_CALL_TENSORS) {
        if (error) {
            error->kind = FERRY_KERNEL_ERR_MISSING_TENSOR;
            error->index = index;
        }
        return FERRY_STATUS_INVALID_ARGUMENT;
    }
    FerryTensorArg t = call->tensors[index];
    if (t.bytes / 4 == 0) {
        return FERRY_STATUS_OK;
    }
    uint8_t *p = services->translate(services->ctx, t.addr, t.bytes);
    if (!p) {
        if (error) {
            error->kind = FERRY_KERNEL_ERR_BAD_ADDRESS;
            error->index = index;
        }
        return FERRY_STATUS_BAD_ADDRESS;
    }
    *ptr = (float *)(void *)p;
    *len = t.bytes / 4;
    return FERRY_STATUS_OK;
}

/**
 * Refuses a block because a tensor has `got` elements where the kernel needs `expected`:
 * fills *error and returns the status the device entry returns.
 */
static inline int32_t ferry_refuse_shape(FerryKernelErrorRecord *error, uint64_t expected,
                                         uint64_t got) {
    if (error) {
        error->kind = FERRY_KERNEL_ERR_SHAPE;
        error->expected = expected;
        error->got = got;
    }
    return FERRY_STATUS_INVALID_ARGUMENT;
}

/** Refuses a block because scalar `index` is missing (as ferry_refuse_shape). */
static inline int32_t ferry_refuse_scalar(FerryKernelErrorRecord *error, uint32_t index) {
    if (error) {
        error->kind = FERRY_KERNEL_ERR_MISSING_SCALAR;
        error->index = index;
    }
    return FERRY_STATUS_INVALID_ARGUMENT;
}

/** This block's contiguous share [*start, *end) of `n` elements (the blocks tile 0..n). */
static inline void ferry_block_range(const FerryDeviceCall *call, uint64_t n, uint64_t *start,
                                     uint64_t *end) {
    uint64_t bd = call->block_dim ? call->block_dim : 1;
    uint64_t chunk = (n + bd - 1) / bd;
    uint64_t s = (uint64_t)call->block_idx * chunk;
    *start = s < n ? s : n;
    *end = *start + chunk < n ? *start + chunk : n;
}

#ifdef __cplusplus
}
#endif

#endif /* FERRY_KERNEL_H */
