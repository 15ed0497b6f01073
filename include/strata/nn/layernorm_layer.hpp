// layernorm_layer<R, Backend>: LayerNorm (with gain and bias) over the channels as a strata Layer, e.g.
// the final norm of a decoder_model (GPT-2's ln_f). Parameters "weight" (C) and "bias" (C), both
// without weight decay; frozen when config.trainable is false (its backward then only computes
// the input gradient).
#pragma once

#include <strata/backend/backend.hpp>      // Backend
#include <strata/nn/ops.hpp>               // ops
#include <strata/tensor/param_layout.hpp>  // param_spec, param_layout

#include <cstddef>  // std::size_t
#include <vector>   // std::vector

namespace strata {

struct layernorm_config {
    std::size_t channels = 0;  // C
    bool trainable = true;
};

template <class R, Backend Bk>
class layernorm_layer {
public:
    using config_type = layernorm_config;
    using value_type = R;
    using backend_type = Bk;
    using stream = typename Bk::stream;
    using op = ops<Bk>;

    explicit layernorm_layer(const config_type& c) : m_config(c), m_layout(param_layout::of<R>(params(c))) {}

    static std::vector<param_spec> params(const config_type& c) {
        return {{"weight", {c.channels}, false, c.trainable}, {"bias", {c.channels}, false, c.trainable}};
    }
    static std::size_t in_features(const config_type& c) { return c.channels; }
    static std::size_t out_features(const config_type& c) { return c.channels; }
    // The row mean and 1 / std, per token.
    static std::size_t activation_floats(const config_type&, std::size_t B, std::size_t T) { return 2 * B * T; }
    // Scratch for what backward computes but nobody wants: the input gradient when dinp is null,
    // the gain and bias gradients when the layer is frozen.
    static std::size_t workspace_floats(const config_type& c, std::size_t B, std::size_t T) {
        return B * T * c.channels + 2 * c.channels;
    }
    static double flops(const config_type& c, std::size_t B, std::size_t T) {
        return 8.0 * static_cast<double>(B * T * c.channels);
    }

    void forward(stream& s, const R* params, R* out, R* acts, const R* inp, R*, std::size_t B, std::size_t T) const {
        const std::size_t BT = B * T;
        op::layernorm_forward(s, out, acts, acts + BT, inp, params + weight_offset(), params + bias_offset(), B, T,
                              m_config.channels);
    }

    void backward(stream& s, const R* params, R* dparams, R* dinp, const R* dout, const R* acts, const R* inp,
                  R* workspace, std::size_t B, std::size_t T) const {
        const std::size_t BT = B * T, C = m_config.channels;
        R* dx = dinp;
        if (!dx) {  // the gradient must go somewhere: scratch, thrown away
            dx = workspace;
            op::zero(s, dx, BT * C);
        }
        R* dw = workspace + BT * C;
        R* db = dw + C;
        if (m_config.trainable) {
            dw = dparams + weight_offset();
            db = dparams + bias_offset();
        }
        op::layernorm_backward(s, dx, dw, db, acts, acts + BT, dout, inp, params + weight_offset(), B, T, C);
    }

private:
    std::size_t weight_offset() const { return m_layout.entries()[0].offset; }
    std::size_t bias_offset() const { return m_layout.entries()[1].offset; }

    config_type m_config;
    param_layout m_layout;
};

}  // namespace strata
