// The layer harness checks itself: a correct layer passes every check, and each way of breaking
// the contract (a wrong gradient, overwriting instead of accumulating, backward reading scratch
// that forward left behind, touching dinp when it is null, writing a frozen tensor's gradient, a
// decode that forgets its cache or reads a cache row nobody stored) fails the check meant to catch it.
#include "support/backends.hpp"  // STRATA_TEST_BACKENDS, STRATA_TESTS_WITH_CUDA

#include <strata/nn/cpu_ops.hpp>             // ops<cpu_backend>
#include <strata/nn/gpt2_block.hpp>          // gpt2_block (the decoding controls)
#include <strata/nn/layer.hpp>               // Layer, check_layer, sizes_of
#include <strata/testing/layer_harness.hpp>  // check_gradients, check_checkpointing, check_backend_parity, check_decoding

#include <doctest/doctest.h>  // TEST_CASE, CHECK, CHECK_MESSAGE, MESSAGE

#include <cstddef>  // std::size_t
#include <vector>   // std::vector

namespace harness_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

// A linear layer with a bias, out = inp @ w + b, and the ways it can go wrong.
enum class flaw { none, wrong_gradient, overwrites, stale_workspace, writes_null_dinp_path };

struct linear_config {
    std::size_t in = 0, out = 0;
};

template <flaw F>
struct linear {
    template <class R, Backend B>
    class layer {
    public:
        using config_type = linear_config;
        using value_type = R;
        using backend_type = B;
        using size = std::size_t;

        static std::vector<param_spec> params(const config_type& c) {
            return {{"weight", {c.in, c.out}, true}, {"bias", {c.out}, false}};
        }
        static size in_features(const config_type& c) { return c.in; }
        static size out_features(const config_type& c) { return c.out; }
        static size activation_floats(const config_type&, size, size) { return 0; }
        static size workspace_floats(const config_type& c, size Bn, size T) { return Bn * T * c.in; }
        static double flops(const config_type& c, size Bn, size T) { return 2.0 * Bn * T * c.in * c.out; }

        explicit layer(const config_type& c) : m_c(c), m_layout(param_layout::of<R>(params(c))) {}

        void forward(typename B::stream& s, const R* p, R* out, R*, const R* inp, R* workspace, size Bn, size T) const {
            op::matmul_forward(s, out, inp, p + m_layout.entries()[0].offset, p + m_layout.entries()[1].offset, Bn, T, m_c.in,
                               m_c.out);
            if constexpr (F == flaw::stale_workspace) op::copy(s, workspace, inp, Bn * T * m_c.in);
        }
        void backward(typename B::stream& s, const R* p, R* g, R* dinp, const R* dout, const R*, const R* inp,
                      R* workspace, size Bn, size T) const {
            R* dw = g + m_layout.entries()[0].offset;
            R* db = g + m_layout.entries()[1].offset;
            const R* w = p + m_layout.entries()[0].offset;
            if constexpr (F == flaw::overwrites) op::zero(s, g, m_layout.numel());
            if constexpr (F == flaw::stale_workspace) {
                // reads the copy of inp that forward parked in the workspace: scratch is not kept
                // between calls (a trainer lends it to other layers), so this is garbage
                op::matmul_backward(s, dinp, dw, db, dout, static_cast<const R*>(workspace), w, Bn, T, m_c.in, m_c.out);
                return;
            }
            if constexpr (F == flaw::writes_null_dinp_path) {
                // forgets the bias gradient when the input gradient is not wanted
                op::matmul_backward(s, dinp, dw, dinp ? db : static_cast<R*>(nullptr), dout, inp, w, Bn, T, m_c.in,
                                    m_c.out);
                return;
            }
            op::matmul_backward(s, dinp, dw, db, dout, inp, w, Bn, T, m_c.in, m_c.out);
            if constexpr (F == flaw::wrong_gradient) op::scale_inplace(s, db, 1.5, m_c.out);
        }

    private:
        using op = ops<B>;
        linear_config m_c;
        param_layout m_layout;
    };
};

template <class R, class B>
using good_linear = linear<flaw::none>::layer<R, B>;
template <class R, class B>
using wrong_linear = linear<flaw::wrong_gradient>::layer<R, B>;
template <class R, class B>
using overwriting_linear = linear<flaw::overwrites>::layer<R, B>;
template <class R, class B>
using null_dinp_linear = linear<flaw::writes_null_dinp_path>::layer<R, B>;

static_assert(check_layer<good_linear<float, cpu_backend>>());
static_assert(!Layer<int>);

// Missing members are named by check_layer's static_asserts; here the concept alone says no.
struct no_backward {
    using config_type = linear_config;
    using value_type = float;
    using backend_type = cpu_backend;
    explicit no_backward(const linear_config&) {}
    static std::vector<param_spec> params(const linear_config&) { return {}; }
    static std::size_t in_features(const linear_config&) { return 1; }
    static std::size_t out_features(const linear_config&) { return 1; }
    static std::size_t activation_floats(const linear_config&, std::size_t, std::size_t) { return 0; }
    static std::size_t workspace_floats(const linear_config&, std::size_t, std::size_t) { return 0; }
    static double flops(const linear_config&, std::size_t, std::size_t) { return 0; }
    void forward(cpu_backend::stream&, const float*, float*, float*, const float*, float*, std::size_t,
                 std::size_t) const {}
};
static_assert(!Layer<no_backward>);

const linear_config config{.in = 5, .out = 3};

TEST_CASE("layer harness: a correct layer passes every check") {
    const auto g = testing::check_gradients<good_linear>(config, 2, 3);
    CHECK_MESSAGE(g.ok(), g.describe());
    CHECK(g.tensors.size() == 3);  // weight, bias, input
    CHECK(g.worst_error() < 1e-8);
    const auto c = testing::check_checkpointing<good_linear>(config, 2, 3);
    CHECK_MESSAGE(c.ok(), c.describe());
    // cpu against cpu: the same code, so exactly zero error
    const auto p = testing::check_backend_parity<good_linear, cpu_backend>(config, 2, 3);
    CHECK_MESSAGE(p.ok(), p.describe());
    CHECK(p.worst_error() == 0.0);
}

TEST_CASE("layer harness: a wrong gradient fails check_gradients, naming the tensor") {
    const auto g = testing::check_gradients<wrong_linear>(config, 2, 3);
    CHECK_FALSE(g.ok());
    CHECK(g.describe().find("!! dbias") != std::string::npos);
    CHECK(g.describe().find("!! dweight") == std::string::npos);
}

TEST_CASE("layer harness: a backward that overwrites instead of accumulating fails check_gradients") {
    const auto g = testing::check_gradients<overwriting_linear>(config, 2, 3);
    CHECK_FALSE(g.ok());
}

TEST_CASE("layer harness: backward reading memory forward did not leave for it fails check_checkpointing") {
    // The harness hands backward a workspace full of NaN, as a trainer that lends scratch to
    // other layers would: the stale read shows as non-finite gradients.
    const auto stale = testing::check_checkpointing<linear<flaw::stale_workspace>::layer>(config, 2, 3);
    CHECK_FALSE(stale.ok());
    CHECK(stale.describe().find("not finite") != std::string::npos);
    // The same layer's gradients are right when the workspace survives (finite differences do not see it).
    const auto g = testing::check_gradients<linear<flaw::stale_workspace>::layer>(config, 2, 3);
    CHECK_MESSAGE(g.ok(), g.describe());
}

TEST_CASE("layer harness: dropping a gradient when dinp is null fails check_checkpointing") {
    const auto c = testing::check_checkpointing<null_dinp_linear>(config, 2, 3);
    CHECK_FALSE(c.ok());
    CHECK(c.describe().find("!! dbias (dinp = null vs plain)") != std::string::npos);
}

// A linear layer with a frozen weight (and a trainable bias unless the whole layer is frozen): the
// gradient block is the bias alone, or nothing. The flawed one writes the frozen weight's gradient.
struct frozen_linear_config {
    std::size_t in = 0, out = 0;
    bool bias_trainable = true;
};

template <bool WritesFrozen>
struct frozen_linear {
    template <class R, Backend B>
    class layer {
    public:
        using config_type = frozen_linear_config;
        using value_type = R;
        using backend_type = B;
        using size = std::size_t;

        static std::vector<param_spec> params(const config_type& c) {
            return {{"weight", {c.in, c.out}, true, false}, {"bias", {c.out}, false, c.bias_trainable}};
        }
        static size in_features(const config_type& c) { return c.in; }
        static size out_features(const config_type& c) { return c.out; }
        static size activation_floats(const config_type&, size, size) { return 0; }
        static size workspace_floats(const config_type&, size, size) { return 0; }
        static double flops(const config_type& c, size Bn, size T) { return 2.0 * Bn * T * c.in * c.out; }

        explicit layer(const config_type& c) : m_c(c), m_layout(param_layout::of<R>(params(c))) {}

        void forward(typename B::stream& s, const R* p, R* out, R*, const R* inp, R*, size Bn, size T) const {
            op::matmul_forward(s, out, inp, p + m_layout.find("weight").offset, p + m_layout.find("bias").offset, Bn,
                               T, m_c.in, m_c.out);
        }
        void backward(typename B::stream& s, const R* p, R* g, R* dinp, const R* dout, const R*, const R* inp, R*,
                      size Bn, size T) const {
            R* dw = WritesFrozen ? g + m_layout.find("weight").offset : nullptr;
            R* db = m_c.bias_trainable ? g + m_layout.find("bias").offset : nullptr;
            if (dinp == nullptr && dw == nullptr && db == nullptr) return;
            op::matmul_backward(s, dinp, dw, db, dout, inp, p + m_layout.find("weight").offset, Bn, T, m_c.in,
                                m_c.out);
        }

    private:
        using op = ops<B>;
        frozen_linear_config m_c;
        param_layout m_layout;
    };
};

template <class R, class B>
using frozen_weight_linear = frozen_linear<false>::layer<R, B>;
template <class R, class B>
using frozen_writing_linear = frozen_linear<true>::layer<R, B>;

TEST_CASE("layer harness: frozen tensors are skipped by finite differences and must stay unwritten") {
    const frozen_linear_config c{.in = 5, .out = 3};
    const auto g = testing::check_gradients<frozen_weight_linear>(c, 2, 3);
    CHECK_MESSAGE(g.ok(), g.describe());
    CHECK(g.tensors.size() == 3);  // weight (skipped), bias, input
    CHECK(g.tensors[0].skipped);
    CHECK(g.describe().find("dweight: skipped (frozen") != std::string::npos);
    CHECK(g.invariants.size() == 1);
    const auto k = testing::check_checkpointing<frozen_weight_linear>(c, 2, 3);
    CHECK_MESSAGE(k.ok(), k.describe());
    const auto p = testing::check_backend_parity<frozen_weight_linear, cpu_backend>(c, 2, 3);
    CHECK_MESSAGE(p.ok(), p.describe());

    // Writing the frozen weight's gradient is caught by every check, naming the tensor.
    const auto bad_g = testing::check_gradients<frozen_writing_linear>(c, 2, 3);
    CHECK_FALSE(bad_g.ok());
    CHECK(bad_g.describe().find("frozen tensor 'weight'") != std::string::npos);
    CHECK_FALSE(testing::check_checkpointing<frozen_writing_linear>(c, 2, 3).ok());
    CHECK_FALSE(testing::check_backend_parity<frozen_writing_linear, cpu_backend>(c, 2, 3).ok());
}

TEST_CASE("layer harness: a wholly frozen layer passes, also with dparams = null") {
    const frozen_linear_config c{.in = 5, .out = 3, .bias_trainable = false};
    const auto g = testing::check_gradients<frozen_weight_linear>(c, 2, 3);
    CHECK_MESSAGE(g.ok(), g.describe());
    const auto k = testing::check_checkpointing<frozen_weight_linear>(c, 2, 3);
    CHECK_MESSAGE(k.ok(), k.describe());
    CHECK(k.describe().find("dinp with dparams = null") != std::string::npos);
}

// Decoding that breaks the contract: GPT-2's block with its decode wrapped (C = 8, the test's).
// forgets_cache: every call decodes as if it were the first (pos 0), so a row sees only its own
// piece; reads_ahead: also adds the cache row after its own rows, which nobody stored yet.
enum class decode_flaw { forgets_cache, reads_ahead };
template <decode_flaw F>
struct flawed_decoder {
    template <class R, class B>
    struct layer : gpt2_block<R, B> {
        static constexpr std::size_t C = 8;
        using gpt2_block<R, B>::gpt2_block;
        static std::size_t cache_floats(const gpt_config&, std::size_t max_seq) { return (max_seq + 1) * 2 * C; }
        void decode(typename B::stream& s, const R* p, R* out, const R* inp, R* cache, R* w, std::size_t pos,
                    std::size_t n) const {
            gpt2_block<R, B>::decode(s, p, out, inp, cache, w, F == decode_flaw::forgets_cache ? 0 : pos, n);
            if constexpr (F == decode_flaw::reads_ahead)
                ops<B>::add_inplace(s, out, static_cast<const R*>(cache + (pos + n) * 2 * C), C);
        }
    };
};

TEST_CASE("layer harness: a decode that forgets its cache, or reads a row nobody stored, fails check_decoding") {
    const gpt_config c{.vocab_size = 5, .max_seq = 6, .n_layer = 1, .n_head = 2, .n_embd = 8};
    const auto good = testing::check_decoding<gpt2_block>(c, 6);
    CHECK_MESSAGE(good.ok(), good.describe());
    const auto forgets = testing::check_decoding<flawed_decoder<decode_flaw::forgets_cache>::layer>(c, 6);
    CHECK_FALSE(forgets.ok());
    CHECK(forgets.tensors.front().ok);  // the prompt at position 0 is still right
    MESSAGE(forgets.describe());
    const auto ahead = testing::check_decoding<flawed_decoder<decode_flaw::reads_ahead>::layer>(c, 6);
    CHECK_FALSE(ahead.ok());
    CHECK(ahead.describe().find("nan") != std::string::npos);  // the unstored row is NaN
}

TEST_CASE("layer harness: reports say SKIPPED where the other backend has no hardware") {
#ifdef STRATA_TESTS_WITH_CUDA
    const auto p = testing::check_backend_parity<good_linear, cuda_backend>(config, 2, 3);
    if (p.skipped) {
        CHECK(p.ok());
        CHECK(p.describe().find("SKIPPED") != std::string::npos);
        MESSAGE(p.describe());
    } else {
        CHECK_MESSAGE(p.ok(), p.describe());
    }
#else
    test::skip("this build has no CUDA backend");
#endif
}

}  // namespace

}  // namespace harness_test
