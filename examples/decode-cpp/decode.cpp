// A decode step of one attention layer in bf16, as a ferry orchestration library in C++:
// examples/decode's `decode_step`, over the orchestration ABI's C header alone.
//
// Per sequence s whose context length ctx = ctx_lens[s] (read from the device when the graph
// is built) is not 0, with pos = ctx - 1 its position, inside one scope:
//
//   1          rmsnorm_nd (AIV)  h = rmsnorm(x[s]) * g
//   1          matmul_nd  (AIC)  q = h @ wq
//   1          rope_nd    (AIV)  qr = rope(q, cs[pos])
//   2 per page cast_nd    (AIV)  page j (block block_table[s][j] of the paged caches) gathered
//                                into kc, vc: min(bs, ctx - j*bs) rows each
//   1          matmul_nd  (AIC)  sc = qr @ kc^T over the ctx gathered rows
//   1          softmax_nd (AIV)  p = softmax(sc)
//   1          matmul_nd  (AIC)  o = p @ vc
//   1          matmul_nd  (AIC)  y = o @ wo
//   1          add_nd     (AIV)  out[s] = x[s] + y, the residual
//
// so a sequence costs 8 + 2 * ceil(ctx / bs) tasks. Its temporaries are tensors the runtime
// allocates inside the sequence's scope.
//
// Tensors, in order: x [S, D], g [D], wq [D, D], wo [D, D], cs [P, D], kcache and vcache
// [NB, bs, D], block_table int32 [S, MB], ctx_lens int32 [S], out [S, D]; all bf16 but the two
// int32 tables. Scalars: D, bs, MB. The workload is examples/decode/workload.toml.
#include <ferry_orchestration.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <utility>
#include <vector>

namespace {

// The function's own failure codes (as the Rust library's).
constexpr int32_t BAD_LENGTH = 1;
constexpr int32_t BAD_BLOCK = 2;
// D or bs is 0.
constexpr int32_t BAD_SCALARS = 3;

constexpr uint32_t BF16 = FERRY_DTYPE_BFLOAT16;

// Thrown inside the library, turned into the entry's status at its boundary.
struct Stop {
    int32_t status;
};

// A view of a tensor: the whole tensor as words, or an N-d view of typed elements.
struct View {
    FerryOrchArg arg;

    static View strided(uint32_t t, uint32_t dtype, uint64_t offset,
                        std::initializer_list<uint64_t> shape,
                        std::initializer_list<uint64_t> strides) {
        View v{};
        v.arg.tensor = t;
        v.arg.dtype = dtype;
        v.arg.offset = offset;
        if (shape.size() > FERRY_MAX_ARG_DIMS || strides.size() != shape.size()) {
            throw Stop{FERRY_STATUS_INVALID_ARGUMENT};
        }
        v.arg.ndims = static_cast<uint32_t>(shape.size());
        std::size_t k = 0;
        for (uint64_t n : shape) v.arg.shape[k++] = n;
        k = 0;
        for (uint64_t s : strides) v.arg.strides[k++] = s;
        return v;
    }

    // Row-major and contiguous.
    static View nd(uint32_t t, uint32_t dtype, uint64_t offset,
                   std::initializer_list<uint64_t> shape) {
        if (shape.size() > FERRY_MAX_ARG_DIMS || shape.size() == 0) {
            throw Stop{FERRY_STATUS_INVALID_ARGUMENT};
        }
        View v = strided(t, dtype, offset, {}, {});
        v.arg.ndims = static_cast<uint32_t>(shape.size());
        std::size_t k = 0;
        for (uint64_t n : shape) v.arg.shape[k++] = n;
        uint64_t s = 1;
        for (std::size_t d = v.arg.ndims; d-- > 0;) {
            v.arg.strides[d] = s;
            s *= v.arg.shape[d];
        }
        return v;
    }
};

// A task to submit: a kernel, its views with directions, and the view-words flag.
class Task {
  public:
    explicit Task(uint32_t kernel) : t_{} {
        t_.kernel = kernel;
        t_.block_dim = 1;
    }
    Task &input(const View &v) { return arg(v, FERRY_DIR_IN); }
    Task &output(const View &v) { return arg(v, FERRY_DIR_OUT); }
    Task &views() {
        t_.flags |= FERRY_TASK_VIEW_SCALARS;
        return *this;
    }
    const FerryOrchTask &record() const { return t_; }

  private:
    Task &arg(const View &v, uint32_t dir) {
        if (t_.n_args >= FERRY_MAX_TASK_ARGS) throw Stop{FERRY_STATUS_INVALID_ARGUMENT};
        t_.args[t_.n_args] = v.arg;
        t_.args[t_.n_args].dir = dir;
        t_.n_args++;
        return *this;
    }
    FerryOrchTask t_;
};

// What the function sees: ferry's table for this run. A refused call throws its status.
class Orch {
  public:
    explicit Orch(const FerryOrchLibApi *api) : api_(api) {}

    uint64_t scalar(uint32_t i) const {
        uint64_t v = 0;
        check(api_->scalar(api_->user, i, &v));
        return v;
    }
    uint64_t tensor_bytes(uint32_t t) const {
        uint64_t b = 0;
        check(api_->tensor_bytes(api_->user, t, &b));
        return b;
    }
    uint32_t alloc(uint64_t bytes) {
        uint32_t id = 0;
        check(api_->alloc(api_->user, bytes, &id));
        return id;
    }
    uint64_t submit(const Task &task) {
        uint64_t id = 0;
        check(api_->submit(api_->user, &task.record(), &id));
        return id;
    }
    // n little-endian int32s of tensor t from element first, as the device has them.
    std::vector<int32_t> read_i32(uint32_t t, uint64_t first, std::size_t n) const {
        std::vector<uint8_t> b(n * 4);
        check(api_->read(api_->user, t, first * 4, b.data(), b.size()));
        std::vector<int32_t> v(n);
        for (std::size_t i = 0; i < n; i++) {
            uint32_t w = uint32_t(b[4 * i]) | uint32_t(b[4 * i + 1]) << 8 |
                         uint32_t(b[4 * i + 2]) << 16 | uint32_t(b[4 * i + 3]) << 24;
            std::memcpy(&v[i], &w, 4);
        }
        return v;
    }
    // Runs body inside a scope opened at file:line; tensors allocated inside are released at
    // its end.
    template <class F> void scope(const char *file, uint32_t line, F body) {
        check(api_->scope_begin(api_->user, reinterpret_cast<const uint8_t *>(file),
                                std::strlen(file), line));
        body();
        check(api_->scope_end(api_->user));
    }

  private:
    static void check(int32_t status) {
        if (status != FERRY_STATUS_OK) throw Stop{status};
    }
    const FerryOrchLibApi *api_;
};

// A [1, k, n] matmul: out[0, n] = sum_k a[k] * b[k, n], b row-major with `row` elements a row.
Task vec_mat(uint32_t a, uint32_t b, uint32_t out, uint64_t k, uint64_t n, uint64_t row) {
    Task t(FERRY_BUILTIN_MATMUL_ND);
    t.input(View::strided(a, BF16, 0, {1, k, n}, {k, 1, 0}))
        .input(View::strided(b, BF16, 0, {1, k, n}, {0, row, 1}))
        .output(View::strided(out, BF16, 0, {1, k, n}, {n, 0, 1}))
        .views();
    return t;
}

void decode_step(Orch &o) {
    const uint32_t x = 0, g = 1, wq = 2, wo = 3, cs = 4, kcache = 5, vcache = 6, table = 7,
                   lens_t = 8, out = 9;
    const uint64_t d = o.scalar(0), bs = o.scalar(1), mb = o.scalar(2);
    if (d == 0 || bs == 0) throw Stop{BAD_SCALARS};
    const uint64_t seqs = o.tensor_bytes(lens_t) / 4;
    const uint64_t blocks = o.tensor_bytes(kcache) / (2 * bs * d);
    const uint64_t positions = o.tensor_bytes(cs) / (2 * d);
    const std::vector<int32_t> lens = o.read_i32(lens_t, 0, seqs);
    for (uint64_t s = 0; s < seqs; s++) {
        if (lens[s] < 0) throw Stop{BAD_LENGTH};
        const uint64_t ctx = uint64_t(lens[s]);
        if (ctx == 0) continue;
        const uint64_t pages = (ctx + bs - 1) / bs;
        if (pages > mb || ctx > positions) throw Stop{BAD_LENGTH};
        const std::vector<int32_t> ids = o.read_i32(table, s * mb, pages);
        o.scope("decode_step", uint32_t(s), [&] {
            const View row = View::nd(x, BF16, s * d, {1, d});
            const uint32_t h = o.alloc(2 * d), q = o.alloc(2 * d), qr = o.alloc(2 * d);
            const uint32_t kc = o.alloc(2 * ctx * d), vc = o.alloc(2 * ctx * d);
            const uint32_t sc = o.alloc(2 * ctx), p = o.alloc(2 * ctx);
            const uint32_t ov = o.alloc(2 * d), y = o.alloc(2 * d);
            auto vec = [&](uint32_t t) { return View::nd(t, BF16, 0, {1, d}); };
            o.submit(Task(FERRY_BUILTIN_RMSNORM_ND)
                         .input(row)
                         .input(View::strided(g, BF16, 0, {1, d}, {0, 1}))
                         .output(vec(h))
                         .views());
            o.submit(vec_mat(h, wq, q, d, d, d));
            const uint64_t pos = ctx - 1;
            o.submit(Task(FERRY_BUILTIN_ROPE_ND)
                         .input(vec(q))
                         .input(View::nd(cs, BF16, pos * d, {1, d}))
                         .output(vec(qr))
                         .views());
            for (uint64_t j = 0; j < pages; j++) {
                if (ids[j] < 0 || uint64_t(ids[j]) >= blocks) throw Stop{BAD_BLOCK};
                const uint64_t blk = uint64_t(ids[j]);
                const uint64_t left = ctx - j * bs;
                const uint64_t rows = bs < left ? bs : left;
                for (auto pair : {std::make_pair(kcache, kc), std::make_pair(vcache, vc)}) {
                    o.submit(Task(FERRY_BUILTIN_CAST_ND)
                                 .input(View::nd(pair.first, BF16, blk * bs * d, {rows, d}))
                                 .output(View::nd(pair.second, BF16, j * bs * d, {rows, d}))
                                 .views());
                }
            }
            // sc[0, n] = sum_k qr[k] * kc[n, k]: kc read transposed.
            o.submit(Task(FERRY_BUILTIN_MATMUL_ND)
                         .input(View::strided(qr, BF16, 0, {1, d, ctx}, {d, 1, 0}))
                         .input(View::strided(kc, BF16, 0, {1, d, ctx}, {0, 1, d}))
                         .output(View::strided(sc, BF16, 0, {1, d, ctx}, {ctx, 0, 1}))
                         .views());
            o.submit(Task(FERRY_BUILTIN_SOFTMAX_ND)
                         .input(View::nd(sc, BF16, 0, {1, ctx}))
                         .output(View::nd(p, BF16, 0, {1, ctx}))
                         .views());
            o.submit(vec_mat(p, vc, ov, ctx, d, d));
            o.submit(vec_mat(ov, wo, y, d, d, d));
            o.submit(Task(FERRY_BUILTIN_ADD_ND)
                         .input(row)
                         .input(vec(y))
                         .output(View::nd(out, BF16, s * d, {1, d}))
                         .views());
        });
    }
}

} // namespace

#define FERRY_EXPORT extern "C" __attribute__((visibility("default")))

// The entry: nothing thrown crosses into ferry. A refused call returns ferry's status, a
// failure of the function its code; anything else (std::bad_alloc) is reported as a panic.
FERRY_EXPORT int32_t ferry_orch_fn_decode_step(const FerryOrchContext *ctx) {
    const FerryOrchLibApi *api = ferry_orch_api(ctx);
    if (!api) return FERRY_ORCH_STATUS_BAD_TABLE;
    try {
        Orch o(api);
        decode_step(o);
        return FERRY_STATUS_OK;
    } catch (const Stop &e) {
        return e.status;
    } catch (...) {
        return FERRY_STATUS_PANIC;
    }
}

namespace {

const FerryOrchFunctionEntry FUNCTIONS[] = {
    {"decode_step", 10, 3, ferry_orch_fn_decode_step},
};

const FerryOrchLibraryDesc DESC = {
    FERRY_ORCH_LIB_MAGIC,
    FERRY_ORCH_LIB_ABI_VERSION,
    sizeof(FerryOrchLibraryDesc),
    sizeof(FerryOrchFunctionEntry),
    sizeof(FUNCTIONS) / sizeof(FUNCTIONS[0]),
    FUNCTIONS,
    "decode-cpp",
};

} // namespace

// The library's descriptor (the orchestration ABI's required export).
FERRY_EXPORT const FerryOrchLibraryDesc *ferry_orch_library(void) { return &DESC; }
