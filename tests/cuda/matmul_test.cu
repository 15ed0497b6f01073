// ops<cuda_backend>'s cuBLAS GEMMs against the CPU kernels (Eigen): the Conv1D linear layer and the
// tied LM head, forward and backward, strict FP32 by default and TF32 only when asked for.
//
// Tolerance: both sides are FP32 GEMMs with K-long dot products summed in different orders
// (blocked FMAs vs Eigen's kernels); the error of such a sum is ~ sqrt(K) * 2^-24 relative to the
// sum of |terms|, so for K <= 8192 a normalized max error (max |gpu - cpu| / max |cpu|) below 1e-5
// holds, while a wrong transpose or a missing accumulation gives O(1). TF32 keeps 10 mantissa
// bits: its error is ~1e-3, which is how the test tells that strict FP32 really is the default.
#include <strata/cuda.hpp>
#include <strata/kernels/cpu/matmul.hpp>

#include <doctest/doctest.h>

#include "support/skip.hpp"  // strata::test::skip

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace strata;

namespace {

struct device_buffer {
    float* p = nullptr;
    std::size_t n = 0;
    explicit device_buffer(const std::vector<float>& host) : n(host.size()) {
        cuda::check(cudaMalloc(&p, n * sizeof(float)), "cudaMalloc");
        cuda::check(cudaMemcpy(p, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
    }
    device_buffer(const device_buffer&) = delete;
    ~device_buffer() { cudaFree(p); }
    std::vector<float> get() const {
        std::vector<float> host(n);
        cuda::check(cudaMemcpy(host.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
        return host;
    }
};

std::vector<float> random(std::size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(gen);
    return v;
}

double normalized_error(const std::vector<float>& got, const std::vector<float>& want) {
    double diff = 0, scale = 1e-30;
    for (std::size_t i = 0; i < want.size(); ++i) {
        diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
        scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    }
    return diff / scale;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// STRATA_TEST_QUICK=1 (under compute-sanitizer, which slows every GEMM down by orders of
// magnitude): only the small shapes, which still cover every transpose and accumulation path.
bool quick() {
    const char* v = std::getenv("STRATA_TEST_QUICK");
    return v && *v && std::string(v) != "0";
}

bool have_gpu() {
    if (cuda_backend::available()) return true;
    strata::test::skip("cuda: no GPU on this machine");
    return false;
}

constexpr double strict_tolerance = 1e-5;

}  // namespace

TEST_CASE("cuda matmul (Conv1D layout) forward and backward match the CPU kernels") {
    if (!have_gpu()) return;
    cuda_backend backend;
    auto s = backend.make_stream("test");
    using op = ops<cuda_backend>;
    struct dims {
        std::size_t B, T, C, OC;
    };
    for (dims d : {dims{1, 1, 3, 5}, dims{2, 7, 36, 108}, dims{3, 33, 40, 160}, dims{2, 300, 768, 2304},
                   dims{1, 129, 1600, 1600}}) {
        if (quick() && d.C > 40) continue;
        CAPTURE(d.B);
        CAPTURE(d.T);
        CAPTURE(d.C);
        CAPTURE(d.OC);
        const std::size_t BT = d.B * d.T;
        const auto inp = random(BT * d.C, 1), w = random(d.C * d.OC, 2), bias = random(d.OC, 3),
                   dout = random(BT * d.OC, 4);
        const auto dinp0 = random(BT * d.C, 5), dw0 = random(d.C * d.OC, 6), db0 = random(d.OC, 7);  // += into these

        std::vector<float> out(BT * d.OC), dinp = dinp0, dw = dw0, db = db0;
        kernels::cpu::matmul_forward(out.data(), inp.data(), w.data(), bias.data(), d.B, d.T, d.C, d.OC);
        kernels::cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), d.B, d.T,
                                      d.C, d.OC);

        device_buffer g_inp(inp), g_w(w), g_bias(bias), g_dout(dout), g_out(std::vector<float>(BT * d.OC, 7.0f)),
            g_dinp(dinp0), g_dw(dw0), g_db(db0);
        op::matmul_forward(s, g_out.p, g_inp.p, g_w.p, g_bias.p, d.B, d.T, d.C, d.OC);
        op::matmul_backward(s, g_dinp.p, g_dw.p, g_db.p, g_dout.p, g_inp.p, g_w.p, d.B, d.T, d.C, d.OC);
        s.synchronize();
        CHECK(normalized_error(g_out.get(), out) < strict_tolerance);
        CHECK(normalized_error(g_dinp.get(), dinp) < strict_tolerance);
        CHECK(normalized_error(g_dw.get(), dw) < strict_tolerance);
        CHECK(normalized_error(g_db.get(), db) < strict_tolerance);

        // no bias, no input gradient (the first layer of a stack)
        std::vector<float> out_nb(BT * d.OC), dw_nb = dw0;
        kernels::cpu::matmul_forward(out_nb.data(), inp.data(), w.data(), nullptr, d.B, d.T, d.C, d.OC);
        kernels::cpu::matmul_backward<float>(nullptr, dw_nb.data(), nullptr, dout.data(), inp.data(), w.data(), d.B,
                                             d.T, d.C, d.OC);
        device_buffer g_dw_nb(dw0);
        op::matmul_forward(s, g_out.p, g_inp.p, g_w.p, nullptr, d.B, d.T, d.C, d.OC);
        op::matmul_backward(s, nullptr, g_dw_nb.p, nullptr, g_dout.p, g_inp.p, g_w.p, d.B, d.T, d.C, d.OC);
        s.synchronize();
        CHECK(normalized_error(g_out.get(), out_nb) < strict_tolerance);
        CHECK(normalized_error(g_dw_nb.get(), dw_nb) < strict_tolerance);

        // a frozen weight (dw = null): the GEMM for it is skipped, dinp and dbias are the same bits
        device_buffer g_dinp_frozen(dinp0), g_db_frozen(db0);
        op::matmul_backward(s, g_dinp_frozen.p, nullptr, g_db_frozen.p, g_dout.p, g_inp.p, g_w.p, d.B, d.T, d.C, d.OC);
        s.synchronize();
        CHECK(same_bits(g_dinp_frozen.get(), g_dinp.get()));
        CHECK(same_bits(g_db_frozen.get(), g_db.get()));
    }
}

TEST_CASE("cuda LM head (tied to wte) forward and backward match the CPU kernels") {
    if (!have_gpu()) return;
    cuda_backend backend;
    auto s = backend.make_stream("test");
    using op = ops<cuda_backend>;
    struct dims {
        std::size_t B, T, C, V;
    };
    for (dims d : {dims{1, 5, 40, 67}, dims{2, 24, 36, 101}, dims{4, 64, 768, 50257}}) {
        if (quick() && d.V > 101) continue;
        CAPTURE(d.V);
        const std::size_t BT = d.B * d.T;
        const auto inp = random(BT * d.C, 11), wte = random(d.V * d.C, 12), dlogits = random(BT * d.V, 13);
        const auto dinp0 = random(BT * d.C, 14), dwte0 = random(d.V * d.C, 15);
        std::vector<float> logits(BT * d.V), dinp = dinp0, dwte = dwte0;
        kernels::cpu::lm_head_forward(logits.data(), inp.data(), wte.data(), d.B, d.T, d.C, d.V);
        kernels::cpu::lm_head_backward(dinp.data(), dwte.data(), dlogits.data(), inp.data(), wte.data(), d.B, d.T, d.C,
                                       d.V);
        device_buffer g_inp(inp), g_wte(wte), g_dlogits(dlogits), g_logits(std::vector<float>(BT * d.V)), g_dinp(dinp0),
            g_dwte(dwte0);
        op::lm_head_forward(s, g_logits.p, g_inp.p, g_wte.p, d.B, d.T, d.C, d.V);
        op::lm_head_backward(s, g_dinp.p, g_dwte.p, g_dlogits.p, g_inp.p, g_wte.p, d.B, d.T, d.C, d.V);
        s.synchronize();
        CHECK(normalized_error(g_logits.get(), logits) < strict_tolerance);
        CHECK(normalized_error(g_dinp.get(), dinp) < strict_tolerance);
        CHECK(normalized_error(g_dwte.get(), dwte) < strict_tolerance);
    }
}

TEST_CASE("cuda GEMMs are strict FP32 unless TF32 is switched on") {
    if (!have_gpu()) return;
    cuda_backend backend;
    auto s = backend.make_stream("test");
    using op = ops<cuda_backend>;
    const std::size_t B = quick() ? 1 : 4, T = quick() ? 64 : 256, C = 768, OC = 768;
    const auto inp = random(B * T * C, 21), w = random(C * OC, 22);
    std::vector<float> want(B * T * OC);
    kernels::cpu::matmul_forward<float>(want.data(), inp.data(), w.data(), nullptr, B, T, C, OC);
    device_buffer g_inp(inp), g_w(w), g_out(std::vector<float>(B * T * OC));
    REQUIRE_FALSE(op::tf32());
    op::matmul_forward(s, g_out.p, g_inp.p, g_w.p, nullptr, B, T, C, OC);
    s.synchronize();
    const double strict = normalized_error(g_out.get(), want);
    op::set_tf32(true);
    op::matmul_forward(s, g_out.p, g_inp.p, g_w.p, nullptr, B, T, C, OC);
    s.synchronize();
    op::set_tf32(false);
    const double tf32 = normalized_error(g_out.get(), want);
    MESSAGE("normalized GEMM error vs the CPU: strict FP32 " << strict << ", TF32 " << tf32);
    CHECK(strict < strict_tolerance);
    CHECK(tf32 > 10 * strict);  // TF32 really is different, so the default really is strict
}

TEST_CASE("cuda backward GEMMs give the same bits beside each other (side lane) as one after the other") {
    if (!have_gpu()) return;
    cuda_backend backend;
    auto s = backend.make_stream("test");
    using op = ops<cuda_backend>;
    REQUIRE(op::gradient_side_lane());  // the default
    const std::size_t B = 2, T = quick() ? 16 : 300, C = quick() ? 40 : 768, OC = 3 * C, V = quick() ? 101 : 50257;
    const auto inp = random(B * T * C, 31), w = random(C * OC, 32), dout = random(B * T * OC, 33);
    const auto dinp0 = random(B * T * C, 34), dw0 = random(C * OC, 35), db0 = random(OC, 36);
    const auto wte = random(V * C, 37), dlogits = random(B * T * V, 38), dwte0 = random(V * C, 39);
    for (bool tf32 : {false, true}) {
        CAPTURE(tf32);
        op::set_tf32(tf32);
        std::vector<std::vector<float>> got[2];  // [side lane off, on]: dinp, dw, db, lm dinp, dwte
        for (int on = 0; on < 2; ++on) {
            op::set_gradient_side_lane(on == 1);
            device_buffer g_inp(inp), g_w(w), g_dout(dout), g_dinp(dinp0), g_dw(dw0), g_db(db0), g_wte(wte),
                g_dlogits(dlogits), g_lm_dinp(dinp0), g_dwte(dwte0);
            // twice in a row: the second call's fork waits for the first call's join
            for (int round = 0; round < 2; ++round) {
                op::matmul_backward(s, g_dinp.p, g_dw.p, g_db.p, g_dout.p, g_inp.p, g_w.p, B, T, C, OC);
                op::lm_head_backward(s, g_lm_dinp.p, g_dwte.p, g_dlogits.p, g_inp.p, g_wte.p, B, T, C, V);
            }
            s.synchronize();
            got[on] = {g_dinp.get(), g_dw.get(), g_db.get(), g_lm_dinp.get(), g_dwte.get()};
        }
        op::set_gradient_side_lane(true);
        op::set_tf32(false);
        for (std::size_t i = 0; i < got[0].size(); ++i) {
            CAPTURE(i);
            CHECK(same_bits(got[1][i], got[0][i]));
        }
        // and they are the gradients: two rounds of += on the CPU
        std::vector<float> dinp = dinp0, dw = dw0, db = db0;
        for (int round = 0; round < 2; ++round)
            kernels::cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), B, T,
                                          C, OC);
        const double tolerance = tf32 ? 1e-2 : strict_tolerance;
        CHECK(normalized_error(got[1][0], dinp) < tolerance);
        CHECK(normalized_error(got[1][1], dw) < tolerance);
        CHECK(normalized_error(got[1][2], db) < strict_tolerance);
    }
}
