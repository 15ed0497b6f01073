// rmsnorm_layer<R, Backend>: RMSNorm over the channels as a strata Layer (nn/layer.hpp), the final
// norm of the Llama model (Hugging Face's model.norm):
//
//   out = inp / sqrt(mean(inp^2) + eps) * weight          per token, over C channels
//
// One parameter, "weight" (C), without weight decay, initialized to ones (decoder_model's default
// for a gain). Frozen when config.trainable is false: backward then only computes the input
// gradient. The math is llama_ops<B>::rmsnorm_forward/backward, the kernels of the block's own two
// norms, so the final norm runs on every backend the block runs on.
//
// Glossary: B batch, T time, C channels.
#pragma once

#include "llama_ops.hpp"  // llama_ops

#include <strata/backend/backend.hpp>      // strata::Backend
#include <strata/core/error.hpp>           // strata::error
#include <strata/nn/ops.hpp>               // strata::ops (zero)
#include <strata/tensor/param_layout.hpp>  // strata::param_spec, strata::param_layout

#include <cstddef>  // std::size_t
#include <string>   // std::to_string
#include <vector>   // std::vector

namespace llama {

struct rmsnorm_config {
    std::size_t channels = 0;  // C
    double eps = 1e-5;
    bool trainable = true;
};

template <class R, strata::Backend B>
class rmsnorm_layer {
public:
    using config_type = rmsnorm_config;
    using value_type = R;
    using backend_type = B;
    using stream = typename B::stream;
    using size = std::size_t;

    explicit rmsnorm_layer(const config_type& c) : m_config(c) {
        if (c.channels == 0 || !(c.eps > 0))
            throw strata::error("rmsnorm layer: channels=" + std::to_string(c.channels) + ", eps=" +
                                    std::to_string(c.eps) + " is not a valid norm",
                                "channels must be positive and eps > 0 (Llama: 1e-5 or 1e-6)");
        m_weight = strata::param_layout::of<R>(params(c)).entries()[0].offset;
    }

    static std::vector<strata::param_spec> params(const config_type& c) {
        return {{"weight", {c.channels}, false, c.trainable}};
    }
    static size in_features(const config_type& c) { return c.channels; }
    static size out_features(const config_type& c) { return c.channels; }
    // 1 / rms per token.
    static size activation_floats(const config_type&, size Bn, size T) { return Bn * T; }
    // A frozen layer's gain gradient goes to scratch, thrown away. A null dinp needs none: the
    // kernel skips the input gradient.
    static size workspace_floats(const config_type& c, size, size) { return c.trainable ? 0 : c.channels; }
    static double flops(const config_type& c, size Bn, size T) { return 4.0 * static_cast<double>(Bn * T * c.channels); }

    void forward(stream& s, const R* p, R* out, R* acts, const R* inp, R*, size Bn, size T) const {
        lop::rmsnorm_forward(s, out, acts, inp, p + m_weight, Bn, T, m_config.channels, m_config.eps);
    }

    void backward(stream& s, const R* p, R* dparams, R* dinp, const R* dout, const R* acts, const R* inp,
                  R* workspace, size Bn, size T) const {
        R* dweight = m_config.trainable ? dparams + m_weight : workspace;
        if (!m_config.trainable) strata::ops<B>::zero(s, dweight, m_config.channels);
        lop::rmsnorm_backward(s, dinp, dweight, dout, inp, p + m_weight, acts, Bn, T, m_config.channels);
    }

private:
    using lop = llama_ops<B>;

    config_type m_config;
    size m_weight = 0;  // offset of "weight" in the parameter block
};

}  // namespace llama
