/*
 * ferry_orchestration.h: the ferry orchestration-library ABI, for orchestration libraries
 * written in C (C11) or C++ (C++11 and later).
 *
 * The records, constants and function types of the `ferry-kernel-abi` crate's src/orch_lib.rs,
 * field for field. A library built from this header is a shared object ferry loads with
 * `ferry run --orchestration LIB.so` exactly as it loads one built from the crate: it exports
 * `ferry_orch_library`, which returns a pointer to a static FerryOrchLibraryDesc, and one entry
 * per function, `int32_t ferry_orch_fn_<name>(const FerryOrchContext *)`. The crate's test
 * `orch_header` compiles this header with the system C and C++ compilers and checks every size,
 * offset, alignment and constant below against the Rust definitions.
 *
 * Versioning: FERRY_ORCH_LIB_ABI_VERSION changes whenever a record's layout or meaning changes;
 * a library records the version it was built with in its descriptor and ferry refuses another.
 * The table ferry serves (FerryOrchLibApi) carries its own version and size: an entry checks
 * both (ferry_orch_api does) and returns FERRY_ORCH_STATUS_BAD_TABLE for another.
 *
 * Contract of an entry: it runs once per run of its callable (on the AICPU's orchestrator
 * thread device-orchestrated, on the host host-built), reaches ferry only through the table
 * behind ctx->lib_api, and returns FERRY_STATUS_OK, the status a table function returned, or a
 * failure code of its own (1..999), which fails the run naming the library, the function and
 * the task it was about to submit. It must not longjmp or throw out: a C++ entry catches
 * everything.
 */
#ifndef FERRY_ORCHESTRATION_H
#define FERRY_ORCHESTRATION_H

#include "ferry_kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Versions, exports and limits ---- */

/** The ABI version a library records; ferry refuses a library of another version. */
#define FERRY_ORCH_LIB_ABI_VERSION 1u
/** FerryOrchLibraryDesc.magic: the bytes "FRYORCHL", little-endian. */
#define FERRY_ORCH_LIB_MAGIC 0x4C4843524F595246ull
/** The export returning the library's descriptor. */
#define FERRY_EXPORT_ORCH_LIBRARY "ferry_orch_library"
/** A function `f`'s entry is exported as `ferry_orch_fn_f`. */
#define FERRY_ORCH_FN_PREFIX "ferry_orch_fn_"
/** Most functions one library declares. */
#define FERRY_MAX_LIBRARY_FUNCTIONS 64u
/** Longest function name (ASCII letters, digits and `_`, so the export is a C name). */
#define FERRY_MAX_FUNCTION_NAME 31
/** Tensor arguments a task carries at most. */
#define FERRY_MAX_TASK_ARGS 6
/** Scalars a task carries at most (after the view words with FERRY_TASK_VIEW_SCALARS). */
#define FERRY_MAX_TASK_SCALARS 4
/** Explicit dependencies a task carries at most. */
#define FERRY_MAX_TASK_AFTER 4
/** Most dimensions of a view. */
#define FERRY_MAX_ARG_DIMS 4

/** FerryOrchArg.dir: the task reads the view. */
#define FERRY_DIR_IN 1u
/** FerryOrchArg.dir: the task writes the view (its previous contents are not read). */
#define FERRY_DIR_OUT 2u
/** FerryOrchArg.dir: the task reads and writes the view. */
#define FERRY_DIR_INOUT 3u

/** FerryOrchTask.flags: ferry puts the view words a view kernel reads (the shape word, then one
 * operand word per argument) before the task's own scalars; every argument then needs
 * ndims >= 1 and the same shape. */
#define FERRY_TASK_VIEW_SCALARS 1u

/** FerryOrchTask.kernel of a dependency-only task: it runs no kernel and completes once every
 * task it depends on completed. */
#define FERRY_KERNEL_NONE 0xFFFFFFFFu

/** What an entry returns when it was handed no table or a table of another version. */
#define FERRY_ORCH_STATUS_BAD_TABLE FERRY_STATUS_ABI_VERSION_MISMATCH

/* ---- The ids of ferry's built-in kernels (loaded kernels are 0x100 + n, in load order) ---- */

/** `add`: flat f32 out = a + b. */
#define FERRY_BUILTIN_ADD 0u
/** `mul`: flat f32 out = a * b. */
#define FERRY_BUILTIN_MUL 1u
/** `copy`: flat out = a. */
#define FERRY_BUILTIN_COPY 3u
/** `add_nd`: views, out = a + b in any dtype. */
#define FERRY_BUILTIN_ADD_ND 7u
/** `mul_nd`: views, out = a * b. */
#define FERRY_BUILTIN_MUL_ND 8u
/** `cast_nd`: views, out = a converted. */
#define FERRY_BUILTIN_CAST_ND 9u
/** `rmsnorm_nd`: views, rows of x normalised and scaled by g. */
#define FERRY_BUILTIN_RMSNORM_ND 10u
/** `softmax_nd`: views, a softmax per row. */
#define FERRY_BUILTIN_SOFTMAX_ND 11u
/** `rope_nd`: views, the rotary embedding. */
#define FERRY_BUILTIN_ROPE_ND 12u
/** `matmul_nd`: views [M, K, N], on AIC, f32 accumulation. */
#define FERRY_BUILTIN_MATMUL_ND 13u

/* ---- The records ---- */

struct FerryOrchLibApi;

/** What an entry receives (48 bytes); its pointers are valid for the call. */
typedef struct FerryOrchContext {
    const FerryDeviceServices *services; /* the OS services (NULL on the host) */
    uint64_t runtime_args;               /* 0 on the host */
    uint32_t callable_id;                /* the callable being run */
    uint32_t api_version;                /* ferry's own table's version (0 when api is NULL) */
    const void *api;                     /* ferry's built-in submission table, or NULL */
    uint32_t lib_api_version;            /* FERRY_ORCH_LIB_ABI_VERSION (0 when lib_api is NULL) */
    uint32_t reserved;                   /* zero */
    const struct FerryOrchLibApi *lib_api; /* the table below, or NULL */
} FerryOrchContext;

/** An orchestration entry: returns a FERRY_STATUS_* (0: ok) or its own failure code. */
typedef int32_t (*FerryOrchEntryFn)(const FerryOrchContext *ctx);

/** One orchestration function of a library (48 bytes). */
typedef struct FerryOrchFunctionEntry {
    char name[FERRY_NAME_BYTES]; /* 1..=31 ASCII letters, digits, `_`; NUL-terminated */
    uint32_t tensors;            /* run tensors the function needs at least */
    uint32_t scalars;            /* run scalars the function needs at least */
    FerryOrchEntryFn entry;      /* the same function as the export ferry_orch_fn_<name> */
} FerryOrchFunctionEntry;

/** What ferry_orch_library returns a pointer to (64 bytes). */
typedef struct FerryOrchLibraryDesc {
    uint64_t magic;          /* FERRY_ORCH_LIB_MAGIC */
    uint32_t abi_version;    /* FERRY_ORCH_LIB_ABI_VERSION */
    uint32_t desc_bytes;     /* sizeof(FerryOrchLibraryDesc) */
    uint32_t entry_bytes;    /* sizeof(FerryOrchFunctionEntry) */
    uint32_t function_count; /* 1..=FERRY_MAX_LIBRARY_FUNCTIONS */
    const FerryOrchFunctionEntry *functions;
    char name[FERRY_NAME_BYTES]; /* the library's name, NUL-terminated */
} FerryOrchLibraryDesc;

/** The library's descriptor export. */
typedef const FerryOrchLibraryDesc *(*FerryOrchLibraryFn)(void);

/**
 * One tensor argument of a task (88 bytes). With ndims == 0 it is the whole tensor, read as
 * 32-bit words. Otherwise it is the N-d view of `dtype` elements from element `offset` (whose
 * byte offset is a multiple of 4), shape[0..ndims] outermost first, strides[0..ndims] in
 * elements (0 repeats an element).
 */
typedef struct FerryOrchArg {
    uint32_t tensor; /* a run tensor (0..count) or an allocated one */
    uint32_t dir;    /* FERRY_DIR_* */
    uint32_t dtype;  /* FERRY_DTYPE_* (ignored when ndims == 0) */
    uint32_t ndims;  /* 0..=FERRY_MAX_ARG_DIMS */
    uint64_t offset; /* first element */
    uint64_t shape[FERRY_MAX_ARG_DIMS];
    uint64_t strides[FERRY_MAX_ARG_DIMS];
} FerryOrchArg;

/** A typed scalar (16 bytes): its FERRY_DTYPE_* and its bits (an f32 is its bit pattern). */
typedef struct FerryOrchScalar {
    uint32_t dtype;
    uint32_t reserved; /* zero */
    uint64_t bits;
} FerryOrchScalar;

/** A task crossing the table (648 bytes). */
typedef struct FerryOrchTask {
    uint32_t kernel;    /* built-in 0.., loaded 0x100.., or FERRY_KERNEL_NONE */
    uint32_t block_dim; /* SPMD blocks, at least 1 (1 for a dependency-only task) */
    uint32_t n_args;
    uint32_t n_scalars;
    uint32_t n_after;
    uint32_t flags; /* FERRY_TASK_VIEW_SCALARS or 0 */
    FerryOrchArg args[FERRY_MAX_TASK_ARGS];
    FerryOrchScalar scalars[FERRY_MAX_TASK_SCALARS];
    uint64_t after[FERRY_MAX_TASK_AFTER]; /* task ids (from submit) this one runs after */
} FerryOrchTask;

/**
 * The table ferry serves a function (88 bytes). Every function takes `user` first and returns a
 * FERRY_STATUS_* (0: ok) unless it says otherwise; after a non-zero status the run fails with
 * the cause ferry recorded, so the entry should return that status.
 */
typedef struct FerryOrchLibApi {
    uint32_t version; /* FERRY_ORCH_LIB_ABI_VERSION */
    uint32_t size;    /* sizeof(FerryOrchLibApi) */
    void *user;
    /** Tensors the function can name: run tensors, then allocated ones. */
    uint32_t (*tensor_count)(void *user);
    /** Tensor `id`'s length in bytes into *out. */
    int32_t (*tensor_bytes)(void *user, uint32_t id, uint64_t *out);
    /** Run scalars. */
    uint32_t (*scalar_count)(void *user);
    /** Run scalar `index`'s bits into *out. */
    int32_t (*scalar)(void *user, uint32_t index, uint64_t *out);
    /** Submits *task; its id (0, 1, 2, ... in submission order) into *out. */
    int32_t (*submit)(void *user, const FerryOrchTask *task, uint64_t *out);
    /** Opens a scope at `file` (file_len bytes of UTF-8, 31 kept) and `line`. */
    int32_t (*scope_begin)(void *user, const uint8_t *file, size_t file_len, uint32_t line);
    /** Closes the innermost scope, releasing the tensors allocated inside. */
    int32_t (*scope_end)(void *user);
    /** Allocates a tensor of `bytes` bytes for the rest of the innermost scope; its id into *out. */
    int32_t (*alloc)(void *user, uint64_t bytes, uint32_t *out);
    /** Copies `len` bytes of tensor `tensor` from byte `offset` into `out`, once every task
     * submitted so far that writes them completed (host-built: refused for such bytes). */
    int32_t (*read)(void *user, uint32_t tensor, uint64_t offset, uint8_t *out, uint64_t len);
} FerryOrchLibApi;

/* The layout the Rust crate asserts, asserted again by the compiler (LP64 targets). */
#if !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(FerryOrchContext) == 48, "FerryOrchContext is 48 bytes");
_Static_assert(sizeof(FerryOrchFunctionEntry) == 48, "FerryOrchFunctionEntry is 48 bytes");
_Static_assert(sizeof(FerryOrchLibraryDesc) == 64, "FerryOrchLibraryDesc is 64 bytes");
_Static_assert(sizeof(FerryOrchArg) == 88, "FerryOrchArg is 88 bytes");
_Static_assert(sizeof(FerryOrchScalar) == 16, "FerryOrchScalar is 16 bytes");
_Static_assert(sizeof(FerryOrchTask) == 648, "FerryOrchTask is 648 bytes");
_Static_assert(sizeof(FerryOrchLibApi) == 88, "FerryOrchLibApi is 88 bytes");
#elif defined(__cplusplus)
static_assert(sizeof(FerryOrchContext) == 48, "FerryOrchContext is 48 bytes");
static_assert(sizeof(FerryOrchFunctionEntry) == 48, "FerryOrchFunctionEntry is 48 bytes");
static_assert(sizeof(FerryOrchLibraryDesc) == 64, "FerryOrchLibraryDesc is 64 bytes");
static_assert(sizeof(FerryOrchArg) == 88, "FerryOrchArg is 88 bytes");
static_assert(sizeof(FerryOrchScalar) == 16, "FerryOrchScalar is 16 bytes");
static_assert(sizeof(FerryOrchTask) == 648, "FerryOrchTask is 648 bytes");
static_assert(sizeof(FerryOrchLibApi) == 88, "FerryOrchLibApi is 88 bytes");
#endif

/**
 * The table behind ctx->lib_api when it is there and of this header's version and size, else
 * NULL (the entry then returns FERRY_ORCH_STATUS_BAD_TABLE).
 */
static inline const FerryOrchLibApi *ferry_orch_api(const FerryOrchContext *ctx) {
    if (!ctx || !ctx->lib_api || ctx->lib_api_version != FERRY_ORCH_LIB_ABI_VERSION) {
        return NULL;
    }
    const FerryOrchLibApi *api = ctx->lib_api;
    if (api->version != FERRY_ORCH_LIB_ABI_VERSION || api->size != sizeof(FerryOrchLibApi)) {
        return NULL;
    }
    return api;
}

#ifdef __cplusplus
}
#endif

#endif /* FERRY_ORCHESTRATION_H */
