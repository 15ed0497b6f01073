// ops<cuda_backend> (nn/cuda_ops.hpp), the elementwise family: zero, copies, in-place adds and
// scales, the residual, GELU and the sum of squares of the gradient norm. (The optimizers' device
// updates are src/cuda/optim.cu's.)
//
// Adding a CUDA kernel (to any family, or a new one; the optimizers' kernels included, wherever
// their headers live). The device code is compiled in these units only, once each:
//  1. Its header defines the launcher template and a macro listing its instances,
//       #define STRATA_CUDA_<NAME>_INSTANCES(prefix) prefix void <launcher><float>(<parameters>);
//     and ends with STRATA_CUDA_<NAME>_INSTANCES(extern template), so that no other unit (a
//     test, an example, a consumer's .cu) compiles the kernel again.
//  2. The unit of its family below includes the header and expands
//     STRATA_CUDA_<NAME>_INSTANCES(template) once, in namespace strata::kernels::cuda, next to the
//     function the backend calls it through (an ops<cuda_backend> member, or the optimizer's
//     device trait). A new family is a new file here: the top CMakeLists.txt takes every
//     src/cuda/*.cu into strata_cuda_ops and strata::cuda, and installs it.
//     Keep a unit near or under ~25 s of CPU (scripts/compile-timer.sh): the longest unit bounds a
//     parallel build.
//  3. A kernel left out of every unit fails to link ("undefined reference to
//     strata::kernels::cuda::<launcher><float>"): add its instances here, never drop the extern.
#include <strata/backend/cuda/check.hpp>        // cuda::check
#include <strata/kernels/cuda/elementwise.cuh>  // add_inplace, scale_inplace, residual_forward, sum_of_squares
#include <strata/kernels/cuda/gelu.cuh>         // gelu_forward, gelu_backward, gelu_backward_bias
#include <strata/nn/cuda_ops.hpp>               // ops<cuda_backend>

namespace strata {

namespace kernels::cuda {
// The one copy of each kernel launcher this file calls (the headers declare them extern).
STRATA_CUDA_ELEMENTWISE_INSTANCES(template)
STRATA_CUDA_GELU_INSTANCES(template)
}  // namespace kernels::cuda

void ops<cuda_backend>::zero(stream& s, float* x, size n) {
    cuda::trace_span span(s, "zero");
    if (n) cuda::check(cudaMemsetAsync(x, 0, n * sizeof(float), s.native()), "cudaMemsetAsync (zero)");
}
void ops<cuda_backend>::copy(stream& s, float* dst, const float* src, size n) {
    cuda::trace_span span(s, "copy");
    if (n)
        cuda::check(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, s.native()),
                    "cudaMemcpyAsync (copy)");
}
void ops<cuda_backend>::copy_rows(stream& s, float* dst, size dst_stride, const float* src, size src_stride,
                                  size rows, size cols) {
    cuda::trace_span span(s, "copy_rows");
    if (rows && cols)
        cuda::check(cudaMemcpy2DAsync(dst, dst_stride * sizeof(float), src, src_stride * sizeof(float),
                                      cols * sizeof(float), rows, cudaMemcpyDeviceToDevice, s.native()),
                    "cudaMemcpy2DAsync (copy_rows)");
}
void ops<cuda_backend>::add_inplace(stream& s, float* dst, const float* src, size n) {
    cuda::trace_span span(s, "add_inplace");
    kernels::cuda::add_inplace(dst, src, n, s.native());
}
void ops<cuda_backend>::scale_inplace(stream& s, float* x, double factor, size n) {
    cuda::trace_span span(s, "scale_inplace");
    kernels::cuda::scale_inplace(x, static_cast<float>(factor), n, s.native());
}
ops<cuda_backend>::size ops<cuda_backend>::sum_of_squares_workspace(size n) {
    return kernels::cuda::sum_of_squares_workspace(n);
}
void ops<cuda_backend>::sum_of_squares(stream& s, double* out, double* workspace, const float* x, size n) {
    cuda::trace_span span(s, "sum_of_squares");
    kernels::cuda::sum_of_squares(out, workspace, x, n, s.native());
}
void ops<cuda_backend>::residual_forward(stream& s, float* out, const float* a, const float* b, size N) {
    cuda::trace_span span(s, "residual_forward");
    kernels::cuda::residual_forward(out, a, b, N, s.native());
}

void ops<cuda_backend>::gelu_forward(stream& s, float* out, const float* inp, size N) {
    cuda::trace_span span(s, "gelu_forward");
    kernels::cuda::gelu_forward(out, inp, N, s.native());
}
void ops<cuda_backend>::gelu_backward(stream& s, float* dinp, const float* dout, const float* inp, size N) {
    cuda::trace_span span(s, "gelu_backward");
    kernels::cuda::gelu_backward(dinp, dout, inp, N, s.native());
}
void ops<cuda_backend>::gelu_backward_bias(stream& s, float* dinp, float* dbias, const float* dout, const float* inp,
                                           size rows, size OC) {
    cuda::trace_span span(s, "gelu_backward_bias");
    kernels::cuda::gelu_backward_bias(dinp, dbias, dout, inp, rows, OC, s.native());
}


}  // namespace strata
