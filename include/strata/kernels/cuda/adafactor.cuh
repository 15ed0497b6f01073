// Adafactor on the GPU, bitwise equal to the CPU reference strata::adafactor_apply<float>
// (strata/optim/adafactor.hpp): the same per-step constants (adafactor_constants_for, on the host),
// the same element operations written with intrinsics nvcc can neither contract nor approximate
// (__fmaf_rn where the reference has std::fma, __fmul_rn, __fdiv_rn, __fsqrt_rn ...), and the
// reference's canonical order for every sum: one thread per row of the sums (a matrix's row, a
// vector's chunk of adafactor_chunk) adding its elements first to last in double, one thread per
// column adding rows 0 .. R-1, and one thread adding the rows' sums first to last. No atomics, no
// tree reductions: the same bits run to run, and the host's.
//
// Glossary: n elements of the parameter tensor; a factored view is `batch` matrices of rows x cols.
// Passes (all on the caller's stream): rows (||p||^2 per row; row_var or the vector's variance),
// columns (col_var), scalars (alpha, each matrix's row mean), update rows (||u||^2 per row),
// scalars (the step), apply (decay, then p += step * u). A scratch of 2 doubles per row and a few
// scalars comes from the stream-ordered allocator (cudaMallocAsync) and goes back behind the passes.
//
// Throughput: a row thread reads its row alone (uncoalesced when rows are long), and the scalar
// passes run on one thread; the update is correct first, and a few passes over the tensor slower
// than AdamW's one.
#pragma once

#include <strata/backend/cuda/check.hpp>  // cuda::check
#include <strata/kernels/cuda/launch.cuh> // check_launch, ceil_div
#include <strata/optim/adafactor.hpp>     // adafactor_constants, adafactor_view, adafactor_apply (the reference)

#include <cuda_runtime.h>  // cudaStream_t, cudaMallocAsync, cudaFreeAsync

#include <cstddef>  // std::size_t

namespace strata::kernels::cuda {

namespace detail::adafactor {

__device__ inline float lerp(float self, float end, const adafactor_constants<float>& k) {
    return k.weight_small ? __fmaf_rn(k.weight, __fsub_rn(end, self), self)
                          : __fmaf_rn(-__fsub_rn(end, self), __fsub_rn(1.0f, k.weight), end);
}
// float(sqrt(sum))^2 / count, as adafactor_mean_square<float>.
__device__ inline float mean_square(double sum, std::size_t count) {
    const float norm = __double2float_rn(__dsqrt_rn(sum));
    return __fdiv_rn(__fmul_rn(norm, norm), __ull2float_rn(count));
}
__device__ inline double square_add(double sum, float x) {
    const double d = static_cast<double>(x);
    return __dadd_rn(sum, __dmul_rn(d, d));
}
// std::max(a, b) of the reference: a < b ? b : a.
__device__ inline float max_of(float a, float b) { return a < b ? b : a; }
__device__ inline double max_of(double a, double b) { return a < b ? b : a; }

// u_i = 1 / sqrt(max(v_i, eps1^2)) * g_i
__device__ inline float update_at(std::size_t i, const float* g, const float* row, const float* col, const float* var,
                                  const float* row_mean, const adafactor_view& v, const adafactor_constants<float>& k) {
    float estimate;
    if (v.factored) {
        const std::size_t b = i / (v.rows * v.cols), r = i / v.cols % v.rows, c = i % v.cols;
        estimate = __fdiv_rn(__fmul_rn(row[b * v.rows + r], col[b * v.cols + c]), row_mean[b]);
    } else {
        estimate = var[i];
    }
    return __fmul_rn(__fdiv_rn(1.0f, __fsqrt_rn(max_of(estimate, k.eps1_squared))), g[i]);
}

__device__ inline std::size_t row_begin(const adafactor_view& v, std::size_t r) {
    return r * (v.factored ? v.cols : adafactor_chunk);
}
__device__ inline std::size_t row_end(const adafactor_view& v, std::size_t r) {
    const std::size_t end = row_begin(v, r) + (v.factored ? v.cols : adafactor_chunk);
    return end < v.n ? end : v.n;
}

// One thread per sum row: its ||p||^2, and row_var's lerp (factored) or the variance's (vector).
template <class Real>  // float: a template, so that every unit including this header may define it
__global__ void rows_kernel(const float* p, const float* g, float* row, float* var, double* p_rows, std::size_t rows,
                            const adafactor_view v, const adafactor_constants<float> k) {
    const std::size_t r = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    double p_row = 0, g_row = 0;
    for (std::size_t i = row_begin(v, r); i < row_end(v, r); ++i) {
        p_row = square_add(p_row, p[i]);
        if (v.factored)
            g_row = square_add(g_row, g[i]);
        else
            var[i] = lerp(var[i], __fmul_rn(g[i], g[i]), k);
    }
    p_rows[r] = p_row;
    if (v.factored) row[r] = lerp(row[r], mean_square(g_row, v.cols), k);
}

// One thread per column of each matrix: col_var's lerp.
template <class Real>  // float: a template, so that every unit including this header may define it
__global__ void columns_kernel(const float* g, float* col, const adafactor_view v, const adafactor_constants<float> k) {
    const std::size_t j = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (j >= v.batch * v.cols) return;
    const std::size_t b = j / v.cols, c = j % v.cols;
    double sum = 0;
    for (std::size_t r = 0; r < v.rows; ++r) sum = square_add(sum, g[(b * v.rows + r) * v.cols + c]);
    col[j] = lerp(col[j], mean_square(sum, v.rows), k);
}

// One thread: alpha from ||p||, and each matrix's row mean of row_var floored at eps1.
template <class Real>  // float: a template, so that every unit including this header may define it
__global__ void first_scalars_kernel(const double* p_rows, std::size_t rows, const float* row, float* row_mean,
                                     double* alpha, const adafactor_view v, const adafactor_constants<float> k) {
    double p_sum = 0;
    for (std::size_t r = 0; r < rows; ++r) p_sum = __dadd_rn(p_sum, p_rows[r]);
    const double norm = static_cast<double>(__double2float_rn(__dsqrt_rn(p_sum)));
    *alpha = __dmul_rn(max_of(k.eps2, __ddiv_rn(norm, k.sqrt_numel)), k.rho);
    if (!v.factored) return;
    for (std::size_t b = 0; b < v.batch; ++b) {
        double sum = 0;
        for (std::size_t r = 0; r < v.rows; ++r) sum = __dadd_rn(sum, static_cast<double>(row[b * v.rows + r]));
        row_mean[b] = max_of(__double2float_rn(__ddiv_rn(sum, static_cast<double>(v.rows))), k.eps1);
    }
}

// One thread per sum row: its ||u||^2.
template <class Real>  // float: a template, so that every unit including this header may define it
__global__ void update_rows_kernel(const float* g, const float* row, const float* col, const float* var,
                                   const float* row_mean, double* u_rows, std::size_t rows, const adafactor_view v,
                                   const adafactor_constants<float> k) {
    const std::size_t r = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    double u_row = 0;
    for (std::size_t i = row_begin(v, r); i < row_end(v, r); ++i)
        u_row = square_add(u_row, update_at(i, g, row, col, var, row_mean, v, k));
    u_rows[r] = u_row;
}

// One thread: the step -alpha / max(1, ||u|| / (sqrt(n) d)), rounded to float.
template <class Real>  // float: a template, so that every unit including this header may define it
__global__ void step_kernel(const double* u_rows, std::size_t rows, const double* alpha, float* step,
                            const adafactor_constants<float> k) {
    double u_sum = 0;
    for (std::size_t r = 0; r < rows; ++r) u_sum = __dadd_rn(u_sum, u_rows[r]);
    const double norm = static_cast<double>(__double2float_rn(__dsqrt_rn(u_sum)));
    const double denom = max_of(1.0, __ddiv_rn(norm, __dmul_rn(k.sqrt_numel, k.d)));
    *step = __double2float_rn(__ddiv_rn(-*alpha, denom));
}

// Every element: the decay, then p = fma(u, step, p).
template <class Real>  // float: a template, so that every unit including this header may define it
__global__ void apply_kernel(float* p, const float* g, const float* row, const float* col, const float* var,
                             const float* row_mean, const float* step, const adafactor_view v,
                             const adafactor_constants<float> k) {
    const float s = *step;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < v.n;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
        float param = p[i];
        if (k.apply_decay) param = __fmul_rn(param, k.decay_factor);
        p[i] = __fmaf_rn(update_at(i, g, row, col, var, row_mean, v, k), s, param);
    }
}

}  // namespace detail::adafactor

// One Adafactor step of one tensor (its view v, constants k from adafactor_constants_for<float>),
// bitwise adafactor_apply<float>: p and its state (row, col for a factored view; var for a
// vector) updated in place.
inline void adafactor(float* p,        // (n)
                      const float* g,  // (n)
                      float* row,      // (batch, rows) factored
                      float* col,      // (batch, cols) factored
                      float* var,      // (n) vector
                      const adafactor_view& v, const adafactor_constants<float>& k, cudaStream_t stream) {
    namespace af = detail::adafactor;
    if (v.n == 0) return;
    const std::size_t rows = v.sum_rows();
    const std::size_t batch = v.factored ? v.batch : 0;
    // scratch: p_rows, u_rows (rows doubles each), alpha (1 double), step (1 float), row_mean (batch floats)
    const std::size_t bytes = (2 * rows + 2) * sizeof(double) + batch * sizeof(float);
    void* scratch = nullptr;
    strata::cuda::check(cudaMallocAsync(&scratch, bytes, stream), "cudaMallocAsync (adafactor's scratch)");
    double* p_rows = static_cast<double*>(scratch);
    double* u_rows = p_rows + rows;
    double* alpha = u_rows + rows;
    float* step = reinterpret_cast<float*>(alpha + 1);
    float* row_mean = reinterpret_cast<float*>(alpha + 2);
    constexpr unsigned threads = 128;
    af::rows_kernel<float><<<ceil_div(rows, threads), threads, 0, stream>>>(p, g, row, var, p_rows, rows, v, k);
    check_launch("adafactor rows");
    if (v.factored && v.batch * v.cols > 0) {
        af::columns_kernel<float><<<ceil_div(v.batch * v.cols, threads), threads, 0, stream>>>(g, col, v, k);
        check_launch("adafactor columns");
    }
    af::first_scalars_kernel<float><<<1, 1, 0, stream>>>(p_rows, rows, row, row_mean, alpha, v, k);
    check_launch("adafactor scalars");
    af::update_rows_kernel<float><<<ceil_div(rows, threads), threads, 0, stream>>>(g, row, col, var, row_mean, u_rows, rows, v, k);
    check_launch("adafactor update rows");
    af::step_kernel<float><<<1, 1, 0, stream>>>(u_rows, rows, alpha, step, k);
    check_launch("adafactor step");
    const unsigned blocks = ceil_div(v.n, 256) < 4096 ? ceil_div(v.n, 256) : 4096;
    af::apply_kernel<float><<<blocks, 256, 0, stream>>>(p, g, row, col, var, row_mean, step, v, k);
    check_launch("adafactor apply");
    strata::cuda::check(cudaFreeAsync(scratch, stream), "cudaFreeAsync (adafactor's scratch)");
}

}  // namespace strata::kernels::cuda
