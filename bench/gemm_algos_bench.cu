// The FP32 GEMMs of a training step as ops<cuda_backend> issues them (src/cuda/gemm.cu: cublasSgemm,
// default math, column-major arguments) next to cuBLASLt's heuristic algorithms for the same
// product (CUBLAS_COMPUTE_32F: strict FP32, no TF32), per shape, against the FP32 ceiling. The
// question of issue 29 item 2: is there a faster strict-FP32 algorithm for the shapes strata runs?
//
//   strata_bench_gemm_algos [model ...]      models: 124M (B=8, T=1024), 1.5B (B=4, T=1024); default both
//
// For every GEMM (a block's four linear layers forward, their input and weight gradients, the LM
// head's three), it prints cublasSgemm's TFLOP/s, then up to eight cuBLASLt algorithms in the
// heuristic's order with their TFLOP/s, the ratio to cublasSgemm and the largest difference from
// cublasSgemm's result relative to the result's largest magnitude (another algorithm sums in
// another order: the bits differ, the value within FP32 rounding). Each timing is the median of 20
// runs after 3 warm-ups, CUDA events around each. Inputs: uniform in [-1, 1), fixed seed.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>  // std::sort, std::max
#include <cmath>      // std::fabs
#include <cstdio>     // std::printf, std::fprintf
#include <cstdlib>    // std::exit
#include <random>     // std::mt19937
#include <string>     // std::string
#include <vector>     // std::vector

namespace {

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "CUDA: %s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}
void check(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS) {
        std::fprintf(stderr, "cuBLAS: %s: %s\n", what, cublasGetStatusString(s));
        std::exit(1);
    }
}

// One column-major product C (m x n) = op(A) op(B) + beta C, as gemm.cu's sgemm takes it.
struct gemm {
    std::string name;
    bool trans_a, trans_b;
    int m, n, k, lda, ldb, ldc;
    float beta;
    double flops() const { return 2.0 * m * n * k; }
};

// The step's GEMMs of a GPT-2 shape: matmul_forward / matmul_backward / lm_head_* in gemm.cu.
std::vector<gemm> step_gemms(const char* model, int BT, int C, int V) {
    std::vector<gemm> g;
    const std::string p = std::string(model) + " ";
    const struct { const char* name; int in, out; } linears[] = {
        {"attn.c_attn", C, 3 * C}, {"attn.c_proj", C, C}, {"mlp.c_fc", C, 4 * C}, {"mlp.c_proj", 4 * C, C}};
    for (const auto& l : linears) {
        const int Ci = l.in, OC = l.out;
        g.push_back({p + l.name + " forward", false, false, OC, BT, Ci, OC, Ci, OC, 0.0f});
        g.push_back({p + l.name + " dinp", true, false, Ci, BT, OC, OC, OC, Ci, 1.0f});
        g.push_back({p + l.name + " dweight", false, true, OC, Ci, BT, OC, Ci, OC, 1.0f});
    }
    g.push_back({p + "lm_head forward", true, false, V, BT, C, C, C, V, 0.0f});
    g.push_back({p + "lm_head dinp", false, false, C, BT, V, C, V, C, 1.0f});
    g.push_back({p + "lm_head dweight", false, true, C, V, BT, C, V, C, 1.0f});
    return g;
}

template <class F>
double median_ms(F&& run) {
    cudaEvent_t a, b;
    check(cudaEventCreate(&a), "event");
    check(cudaEventCreate(&b), "event");
    for (int i = 0; i < 3; ++i) run();
    std::vector<float> ms;
    for (int i = 0; i < 20; ++i) {
        check(cudaEventRecord(a), "record");
        run();
        check(cudaEventRecord(b), "record");
        check(cudaEventSynchronize(b), "sync");
        float t = 0;
        check(cudaEventElapsedTime(&t, a, b), "elapsed");
        ms.push_back(t);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

// max |x - y| / max |y| over the result: y = cublasSgemm's.
double relative_difference(const std::vector<float>& x, const std::vector<float>& y) {
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        diff = std::max(diff, static_cast<double>(std::fabs(x[i] - y[i])));
        scale = std::max(scale, static_cast<double>(std::fabs(y[i])));
    }
    return scale > 0 ? diff / scale : diff;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> models;
    for (int i = 1; i < argc; ++i) models.push_back(argv[i]);
    if (models.empty()) models = {"124M", "1.5B"};
    std::vector<gemm> gemms;
    for (const auto& m : models) {
        if (m == "124M") {
            auto g = step_gemms("124M", 8 * 1024, 768, 50257);
            gemms.insert(gemms.end(), g.begin(), g.end());
        } else if (m == "1.5B") {
            auto g = step_gemms("1.5B", 4 * 1024, 1600, 50257);
            gemms.insert(gemms.end(), g.begin(), g.end());
        } else {
            std::fprintf(stderr, "unknown model '%s' (124M or 1.5B)\n", m.c_str());
            return 2;
        }
    }
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "properties");
    std::printf("# cublasSgemm vs cuBLASLt heuristics, strict FP32, %s\n\n", prop.name);
    std::printf("| GEMM (m, n, k) | cublasSgemm TFLOP/s | best cuBLASLt TFLOP/s | ratio | its rel. diff | algorithms tried |\n");
    std::printf("| --- | --- | --- | --- | --- | --- |\n");

    cublasHandle_t blas;
    cublasLtHandle_t lt;
    check(cublasCreate(&blas), "cublasCreate");
    check(cublasLtCreate(&lt), "cublasLtCreate");
    check(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH), "math mode");
    const std::size_t workspace_bytes = std::size_t(64) << 20;
    void* workspace = nullptr;
    check(cudaMalloc(&workspace, workspace_bytes), "workspace");
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    double total_sgemm_ms = 0, total_best_ms = 0;

    for (const auto& g : gemms) {
        const std::size_t a_elems = std::size_t(g.lda) * (g.trans_a ? g.m : g.k);
        const std::size_t b_elems = std::size_t(g.ldb) * (g.trans_b ? g.k : g.n);
        const std::size_t c_elems = std::size_t(g.ldc) * g.n;
        std::vector<float> host(std::max({a_elems, b_elems, c_elems}));
        float *A, *B, *C, *C0;
        check(cudaMalloc(&A, a_elems * sizeof(float)), "A");
        check(cudaMalloc(&B, b_elems * sizeof(float)), "B");
        check(cudaMalloc(&C, c_elems * sizeof(float)), "C");
        check(cudaMalloc(&C0, c_elems * sizeof(float)), "C0");
        for (auto& x : host) x = uniform(gen);
        check(cudaMemcpy(A, host.data(), a_elems * sizeof(float), cudaMemcpyHostToDevice), "A up");
        check(cudaMemcpy(B, host.data(), b_elems * sizeof(float), cudaMemcpyHostToDevice), "B up");
        check(cudaMemcpy(C0, host.data(), c_elems * sizeof(float), cudaMemcpyHostToDevice), "C0 up");
        const float alpha = 1.0f;
        const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
        // Every timed run starts from the same C (beta = 1 accumulates): the copy is inside the
        // timing of both, as the same cost.
        auto reset = [&] { check(cudaMemcpyAsync(C, C0, c_elems * sizeof(float), cudaMemcpyDeviceToDevice), "reset"); };
        const double copy_ms = median_ms(reset);
        const double sgemm_ms = median_ms([&] {
            reset();
            check(cublasSgemm(blas, ta, tb, g.m, g.n, g.k, &alpha, A, g.lda, B, g.ldb, &g.beta, C, g.ldc), "sgemm");
        }) - copy_ms;
        reset();
        check(cublasSgemm(blas, ta, tb, g.m, g.n, g.k, &alpha, A, g.lda, B, g.ldb, &g.beta, C, g.ldc), "sgemm");
        std::vector<float> reference(c_elems), result(c_elems);
        check(cudaMemcpy(reference.data(), C, c_elems * sizeof(float), cudaMemcpyDeviceToHost), "C down");

        cublasLtMatmulDesc_t desc;
        check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
        check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transa");
        check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transb");
        cublasLtMatrixLayout_t la, lb, lc;
        check(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda), "la");
        check(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb), "lb");
        check(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, g.m, g.n, g.ldc), "lc");
        cublasLtMatmulPreference_t pref;
        check(cublasLtMatmulPreferenceCreate(&pref), "pref");
        check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                                   sizeof(workspace_bytes)),
              "pref workspace");
        cublasLtMatmulHeuristicResult_t found[8];
        int count = 0;
        check(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 8, found, &count), "heuristic");
        double best_ms = 0, best_diff = 0;
        int tried = 0;
        for (int i = 0; i < count; ++i) {
            if (found[i].state != CUBLAS_STATUS_SUCCESS) continue;
            auto run = [&] {
                reset();
                check(cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &g.beta, C, lc, C, lc, &found[i].algo, workspace,
                                     workspace_bytes, 0),
                      "cublasLtMatmul");
            };
            const double ms = median_ms(run) - copy_ms;
            run();
            check(cudaMemcpy(result.data(), C, c_elems * sizeof(float), cudaMemcpyDeviceToHost), "C down");
            ++tried;
            if (best_ms == 0 || ms < best_ms) {
                best_ms = ms;
                best_diff = relative_difference(result, reference);
            }
        }
        total_sgemm_ms += sgemm_ms;
        total_best_ms += best_ms > 0 && best_ms < sgemm_ms ? best_ms : sgemm_ms;
        std::printf("| %s (%d, %d, %d) | %.1f | %.1f | %.3f | %.1e | %d |\n", g.name.c_str(), g.m, g.n, g.k,
                    g.flops() / sgemm_ms / 1e9, best_ms > 0 ? g.flops() / best_ms / 1e9 : 0.0,
                    best_ms > 0 ? sgemm_ms / best_ms : 0.0, best_diff, tried);
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(desc);
        cudaFree(A);
        cudaFree(B);
        cudaFree(C);
        cudaFree(C0);
    }
    std::printf("\nall GEMMs above once each: cublasSgemm %.2f ms, the faster of the two per GEMM %.2f ms (%.3fx)\n",
                total_sgemm_ms, total_best_ms, total_sgemm_ms / total_best_ms);
    cudaFree(workspace);
    cublasLtDestroy(lt);
    cublasDestroy(blas);
    return 0;
}
