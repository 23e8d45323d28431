/*
 * A ferry custom kernel library in C: two kernels, each a device entry (one SPMD block, over
 * device memory) and a host reference (the whole task, over host buffers) that ferry verifies
 * the device against. Built with the system C compiler alone (`make`); ferry loads the shared
 * object with `ferry run --kernels` as it loads one built from Rust.
 *
 *   kernel  tensors                    scalars         computes
 *   saxpy   x, y -> out                a (f32)         out[i] = a * x[i] + y[i]
 *   clamp   x -> out, or one inout     lo, hi (f32)    out[i] = min(max(x[i], lo), hi)
 */
#include "ferry_kernel.h"

#define LIBRARY_NAME "kernel-template-c"

static float clampf(float v, float lo, float hi) {
    v = v > lo ? v : lo;
    return v < hi ? v : hi;
}

/* saxpy: out = a * x + y, this block's share of the elements. */
static int32_t saxpy(const FerryDeviceServices *s, const FerryDeviceCall *call,
                     FerryKernelErrorRecord *error) {
    float *x, *y, *out;
    uint64_t nx, ny, n, start, end;
    int32_t rc;
    if ((rc = ferry_device_tensor(s, call, 0, &x, &nx, error))) return rc;
    if ((rc = ferry_device_tensor(s, call, 1, &y, &ny, error))) return rc;
    if ((rc = ferry_device_tensor(s, call, 2, &out, &n, error))) return rc;
    if (call->n_scalars < 1) return ferry_refuse_scalar(error, 0);
    /* A shorter input is refused: ferry reports the kernel's typed fault, naming the kernel
     * and its task. */
    if (nx < n || ny < n) return ferry_refuse_shape(error, n, nx < ny ? nx : ny);
    float a = ferry_scalar_f32(call->scalars[0]);
    ferry_block_range(call, n, &start, &end);
    for (uint64_t i = start; i < end; i++) out[i] = a * x[i] + y[i];
    return FERRY_STATUS_OK;
}

/* Host reference of saxpy: a plain loop over the whole task. */
static int32_t saxpy_ref(const FerryHostCall *call) {
    if (call->n_tensors != 3 || call->n_scalars < 1) return FERRY_STATUS_INVALID_ARGUMENT;
    const FerryHostTensor *x = &call->tensors[0], *y = &call->tensors[1], *out = &call->tensors[2];
    if (x->len < out->len || y->len < out->len) return FERRY_STATUS_INVALID_ARGUMENT;
    float a = ferry_scalar_f32(call->scalars[0]);
    for (uint64_t i = 0; i < out->len; i++) out->ptr[i] = a * x->ptr[i] + y->ptr[i];
    return FERRY_STATUS_OK;
}

/* clamp: out = clamp(x, lo, hi); with one tensor, in place. */
static int32_t clamp(const FerryDeviceServices *s, const FerryDeviceCall *call,
                     FerryKernelErrorRecord *error) {
    float *x, *out;
    uint64_t nx, n, start, end;
    int32_t rc;
    if ((rc = ferry_device_tensor(s, call, 0, &x, &nx, error))) return rc;
    out = x;
    n = nx;
    if (call->n_tensors > 1 && (rc = ferry_device_tensor(s, call, 1, &out, &n, error))) return rc;
    if (call->n_scalars < 2) return ferry_refuse_scalar(error, call->n_scalars);
    if (nx < n) return ferry_refuse_shape(error, n, nx);
    float lo = ferry_scalar_f32(call->scalars[0]), hi = ferry_scalar_f32(call->scalars[1]);
    ferry_block_range(call, n, &start, &end);
    for (uint64_t i = start; i < end; i++) out[i] = clampf(x[i], lo, hi);
    return FERRY_STATUS_OK;
}

/* Host reference of clamp. */
static int32_t clamp_ref(const FerryHostCall *call) {
    if (call->n_scalars < 2 || call->n_tensors < 1 || call->n_tensors > 2)
        return FERRY_STATUS_INVALID_ARGUMENT;
    float lo = ferry_scalar_f32(call->scalars[0]), hi = ferry_scalar_f32(call->scalars[1]);
    const FerryHostTensor *x = &call->tensors[0];
    const FerryHostTensor *out = call->n_tensors == 2 ? &call->tensors[1] : x;
    uint64_t n = out->len < x->len ? out->len : x->len;
    for (uint64_t i = 0; i < n; i++) out->ptr[i] = clampf(x->ptr[i], lo, hi);
    return FERRY_STATUS_OK;
}

static const FerryKernelEntry KERNELS[] = {
    {
        .name = "saxpy",
        .core = FERRY_CORE_AIV,
        .min_tensors = 3,
        .max_tensors = 3,
        .scalar_count = 1,
        .scalar_dtypes = {FERRY_DTYPE_FLOAT32},
        .max_blocks = 65536,
        .device = saxpy,
        .host = saxpy_ref,
    },
    {
        .name = "clamp",
        .core = FERRY_CORE_AIV,
        .min_tensors = 1,
        .max_tensors = 2,
        .scalar_count = 2,
        .scalar_dtypes = {FERRY_DTYPE_FLOAT32, FERRY_DTYPE_FLOAT32},
        .max_blocks = 65536,
        .device = clamp,
        .host = clamp_ref,
    },
};

static const FerryKernelLibraryDesc LIBRARY = {
    .magic = FERRY_KERNEL_LIB_MAGIC,
    .abi_version = FERRY_KERNEL_LIB_ABI_VERSION,
    .desc_bytes = sizeof(FerryKernelLibraryDesc),
    .entry_bytes = sizeof(FerryKernelEntry),
    .kernel_count = sizeof(KERNELS) / sizeof(KERNELS[0]),
    .kernels = KERNELS,
    .name = LIBRARY_NAME,
};

/* The library's one required export. */
__attribute__((visibility("default"))) const FerryKernelLibraryDesc *ferry_kernel_library(void) {
    return &LIBRARY;
}
