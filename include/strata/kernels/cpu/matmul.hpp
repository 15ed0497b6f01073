// Linear layers as GEMMs through Eigen.
//
// Glossary: B batch, T time, C input channels, OC output channels, V vocab.
//
// matmul_*: GPT-2's Conv1D layout (c_attn, c_proj, c_fc): weight is (C, OC) row-major, so
//   out = inp @ weight + bias, exactly the Hugging Face checkpoint tensors without a transpose.
// lm_head_*: the tied output head, logits = inp @ wte^T with wte (V, C) the token embedding.
//
// Outputs must not alias inputs (the GEMMs write with noalias()).
#pragma once

#include <concepts>                            // std::floating_point
#include <cstddef>                             // std::size_t
#include <type_traits>                         // std::type_identity_t
#include <strata/kernels/cpu/eigen_views.hpp>  // view

namespace strata::kernels::cpu {

// bias may be null (no bias). Nullable pointers do not take part in deducing Real, so a plain
// nullptr can be passed.
template <std::floating_point Real>
void matmul_forward(Real* out,                               // (B, T, OC)
                    const Real* inp,                         // (B, T, C)
                    const Real* weight,                      // (C, OC)
                    const std::type_identity_t<Real>* bias,  // (OC) or null
                    std::size_t B, std::size_t T, std::size_t C, std::size_t OC) {
    auto out_m = view(out, B * T, OC);
    out_m.noalias() = view(inp, B * T, C) * view(weight, C, OC);
    if (bias != nullptr) {
        out_m.rowwise() += view(bias, 1, OC).row(0);
    }
}

// dinp += dout @ weight^T, dweight += inp^T @ dout, dbias += sum over rows of dout.
// dinp may be null (its gradient is not wanted); dweight may be null (a frozen weight, e.g. LoRA's
// base: no gradient, and that GEMM is skipped); dbias must be null exactly when the layer has no
// bias or its bias is frozen.
template <std::floating_point Real>
void matmul_backward(std::type_identity_t<Real>* dinp,     // (B, T, C) or null
                     std::type_identity_t<Real>* dweight,  // (C, OC) or null
                     std::type_identity_t<Real>* dbias,    // (OC) or null
                     const Real* dout,                     // (B, T, OC)
                     const Real* inp,                      // (B, T, C)
                     const Real* weight,                   // (C, OC)
                     std::size_t B, std::size_t T, std::size_t C, std::size_t OC) {
    const auto dout_m = view(dout, B * T, OC);
    if (dinp != nullptr) {
        view(dinp, B * T, C).noalias() += dout_m * view(weight, C, OC).transpose();
    }
    if (dweight != nullptr) {
        view(dweight, C, OC).noalias() += view(inp, B * T, C).transpose() * dout_m;
    }
    if (dbias != nullptr) {
        view(dbias, 1, OC).row(0) += dout_m.colwise().sum();
    }
}

template <std::floating_point Real>
void lm_head_forward(Real* logits,     // (B, T, V)
                     const Real* inp,  // (B, T, C)
                     const Real* wte,  // (V, C)
                     std::size_t B, std::size_t T, std::size_t C, std::size_t V) {
    view(logits, B * T, V).noalias() = view(inp, B * T, C) * view(wte, V, C).transpose();
}

// dinp += dlogits @ wte, dwte += dlogits^T @ inp (dwte is shared with the embedding's gradient).
template <std::floating_point Real>
void lm_head_backward(Real* dinp,           // (B, T, C)
                      Real* dwte,           // (V, C), or null: a frozen embedding
                      const Real* dlogits,  // (B, T, V)
                      const Real* inp,      // (B, T, C)
                      const Real* wte,      // (V, C)
                      std::size_t B, std::size_t T, std::size_t C, std::size_t V) {
    const auto dlogits_m = view(dlogits, B * T, V);
    view(dinp, B * T, C).noalias() += dlogits_m * view(wte, V, C);
    if (dwte) view(dwte, V, C).noalias() += dlogits_m.transpose() * view(inp, B * T, C);
}

}  // namespace strata::kernels::cpu
