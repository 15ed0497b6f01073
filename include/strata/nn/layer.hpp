// The layer contract: what a layer must declare and do so that strata can place, stream, check
// and (with the generic trainer) train it. docs/layers.md explains every member with a worked
// example (examples/llama/).
//
// A layer is a class template L<R, Backend> that owns no weights. It maps an input (B, T, in) to
// an output (B, T, out), both device-tier buffers, with its parameters in ONE contiguous block laid
// out by param_layout::of<R>(L::params(config)). Gradients use the same layout. Everything a layer
// touches is handed to it by the caller: parameters, gradients, saved activations and scratch
// (workspace) all come from the device tier through the backend, so a layer never allocates.
//
// Glossary: B batch, T time, R the element type (float; double for finite-difference checks).
//
//   struct my_layer_config { ... };                     // must not depend on R or Backend
//   template <class R, Backend B> class my_layer {
//   public:
//       using config_type = my_layer_config;
//       using value_type = R;
//       using backend_type = B;
//       explicit my_layer(const config_type&);         // may precompute offsets; holds no weights
//
//       static std::vector<param_spec> params(const config_type&);      // shapes, names, decay
//       static std::size_t in_features(const config_type&);             // input is (B, T, in)
//       static std::size_t out_features(const config_type&);            // output is (B, T, out)
//       static std::size_t activation_floats(const config_type&, size B, size T);  // kept for backward
//       static std::size_t workspace_floats(const config_type&, size B, size T);   // scratch
//       static double flops(const config_type&, size B, size T);        // forward FLOPs
//
//       void forward(stream&, const R* params, R* out, R* acts, const R* inp, R* workspace,
//                    size B, size T) const;
//       void backward(stream&, const R* params, R* dparams, R* dinp, const R* dout, const R* acts,
//                     const R* inp, R* workspace, size B, size T) const;
//   };
//
// Rules the concept cannot see (the testing harness, strata/testing/layer_harness.hpp, checks them):
// - Every call only enqueues work on the stream (ops<B> or the layer's own launches); the host
//   never waits inside a layer.
// - forward writes all of `out` and everything in `acts` that backward reads, from `params` and
//   `inp` alone: running forward again from the same input (activation checkpointing) gives the
//   same bits, so checkpointed and plain backward agree bitwise.
// - backward ACCUMULATES: dparams += d loss / d params, dinp += d loss / d inp. dinp may be null
//   (the first layer's input gradient is not wanted); the parameter gradients must not change.
//   Optional: a layer that declares `static constexpr bool overwrites_dinp = true;` WRITES dinp
//   (dinp = d loss / d inp, whatever it held) instead of adding to it. Its caller then skips
//   zeroing dinp, and a residual block can use dinp as its own residual-stream gradient: the
//   GPT-2 block's backward does the ops of llm.c's, with no zero-fill and no add of dinp.
// - Trainable and frozen parameters (param_spec::trainable): dparams holds only the layout's
//   trainable prefix (param_layout::trainable_numel() elements; the trainable tensors are laid
//   out first, so `dparams + slot.offset` addresses a trainable slot's gradient). A layer never
//   writes a gradient of a frozen tensor; dparams may be null when the whole layer is frozen.
// - `workspace` holds garbage on entry and may be left with garbage; `acts` is read-only in
//   backward. forward and backward of one micro-batch get the same B and T.
// - flops counts forward floating-point operations (2 per multiply-add). By convention a backward
//   costs 2x the forward (twice as many GEMMs); a checkpointed step costs 4x (forward, recompute,
//   backward). Report what the layer really computes, masked work included if it is computed.
//
// Incremental decoding (optional, the Decodes concept below): a layer that mixes positions (a
// transformer block's attention) may also run NEW positions of one sequence against a cache of
// what it keeps from the earlier ones, so that generation (model/generator.hpp) runs each new
// token through the model alone instead of the whole context again:
//
//       static std::size_t cache_floats(const config_type&, size max_seq);     // positions 0 .. max_seq - 1
//       static std::size_t decode_workspace_floats(const config_type&, size n); // scratch for n new rows
//       void decode(stream&, const R* params, R* out, const R* inp, R* cache, R* workspace,
//                   size pos, size n) const;
//
// decode maps inp (n, in), the rows at positions pos .. pos + n - 1 of ONE sequence, to out
// (n, out). It reads what earlier calls stored in `cache` for positions 0 .. pos - 1 and stores the
// entries of its own rows; the caller keeps pos + n <= the max_seq the cache was sized for.
// - out is forward's rows pos .. pos + n - 1 at B = 1 over positions 0 .. pos + n - 1, up to the
//   order of floating-point sums (testing::check_decoding measures it). Anything positional (a
//   rotary embedding) uses the absolute positions.
// - Entries of positions < pos are read only; those at pos + n and beyond are neither read nor
//   written. The cache starts as garbage and is never cleared: a caller restarts (or rewinds) by
//   decoding from an earlier pos. One prompt of n rows and n calls of one row fill the same cache.
// - As forward: decode only enqueues on the stream, its workspace holds garbage on entry, and every
//   pointer is a device-tier address.
//
// Selective recompute (optional, the RecomputesPart concept below): a layer whose activations hold
// a part that is costly to compute and small to keep (a transformer block's attention output and
// its row statistics: B T C + B NH T floats of the block's ~17 B T C) may name that part and
// recompute the rest of its activations from it, so that a block that does not keep all of its
// activations keeps that part and skips attention's forward when its backward recomputes:
//
//       static activation_part kept_part(const config_type&, size B, size T);   // a range of acts
//       static layer_flops recompute_flops(const config_type&, size B, size T);  // what recompute runs
//       void recompute(stream&, const R* params, R* acts, const R* inp, R* workspace, size B, size T) const;
//
// - recompute starts with acts[offset, offset + floats) as forward left it (from the same params and
//   inp) and everything else of acts garbage; backward after it gives the same bits as backward
//   after forward. It writes no output, and it may leave garbage where backward does not read
//   (GPT-2's block skips its MLP projection: backward reads neither it nor the output). The harness
//   checks this with NaN over the rest of acts (testing::check_checkpointing).
// - recompute_flops counts the FLOPs recompute runs (2 per multiply-add), GEMMs and T x T products
//   apart, as flops_split does for forward; the step's cost model times the recompute with them.
#pragma once

#include <strata/backend/backend.hpp>      // Backend
#include <strata/tensor/param_layout.hpp>  // param_spec, param_layout

#include <algorithm>  // std::min
#include <concepts>  // std::same_as, std::floating_point, std::constructible_from
#include <cstddef>   // std::size_t
#include <vector>    // std::vector

namespace strata {

namespace detail::layer {

template <class L>
concept has_types = requires {
    typename L::config_type;
    typename L::value_type;
    typename L::backend_type;
};

template <class L>
concept has_params = requires(const typename L::config_type& c) {
    { L::params(c) } -> std::same_as<std::vector<param_spec>>;
};

template <class L>
concept has_features = requires(const typename L::config_type& c) {
    { L::in_features(c) } -> std::same_as<std::size_t>;
    { L::out_features(c) } -> std::same_as<std::size_t>;
};

template <class L>
concept has_activation_floats = requires(const typename L::config_type& c, std::size_t n) {
    { L::activation_floats(c, n, n) } -> std::same_as<std::size_t>;
};

template <class L>
concept has_workspace_floats = requires(const typename L::config_type& c, std::size_t n) {
    { L::workspace_floats(c, n, n) } -> std::same_as<std::size_t>;
};

template <class L>
concept has_flops = requires(const typename L::config_type& c, std::size_t n) {
    { L::flops(c, n, n) } -> std::same_as<double>;
};

template <class L>
concept has_forward = requires(const L& layer, typename L::backend_type::stream& s, const typename L::value_type* in,
                               typename L::value_type* out, std::size_t n) {
    layer.forward(s, in, out, out, in, out, n, n);  // params, out, acts, inp, workspace, B, T
};

template <class L>
concept has_backward = requires(const L& layer, typename L::backend_type::stream& s,
                                const typename L::value_type* in, typename L::value_type* out, std::size_t n) {
    layer.backward(s, in, out, out, in, in, in, out, n, n);  // params, dparams, dinp, dout, acts, inp, workspace, B, T
};

}  // namespace detail::layer

// A type that keeps the layer contract (see the top of this file and docs/layers.md).
// For readable errors, write static_assert(check_layer<L>()) instead of requiring Layer<L>.
template <class L>
concept Layer = detail::layer::has_types<L> && Backend<typename L::backend_type> &&
                std::floating_point<typename L::value_type> &&
                std::constructible_from<L, const typename L::config_type&> && detail::layer::has_params<L> &&
                detail::layer::has_features<L> && detail::layer::has_activation_floats<L> &&
                detail::layer::has_workspace_floats<L> && detail::layer::has_flops<L> &&
                detail::layer::has_forward<L> && detail::layer::has_backward<L>;

// The contract checked member by member, each with a message naming what is missing. Returns
// Layer<L>, so it can guard code: `static_assert(check_layer<L>());` or `if constexpr`.
template <class L>
consteval bool check_layer() {
    using namespace detail::layer;
    static_assert(has_types<L>,
                  "a Layer declares `using config_type = <its config struct>; using value_type = R; "
                  "using backend_type = Backend;`");
    if constexpr (has_types<L>) {
        static_assert(Backend<typename L::backend_type>, "a Layer's backend_type must model strata::Backend");
        static_assert(std::floating_point<typename L::value_type>,
                      "a Layer's value_type is its element type R: float or double");
        static_assert(std::constructible_from<L, const typename L::config_type&>,
                      "a Layer is constructible from `const config_type&` (it may precompute its "
                      "param_layout there; it holds no weights)");
        static_assert(has_params<L>,
                      "a Layer declares its parameters: `static std::vector<strata::param_spec> "
                      "params(const config_type&)`");
        static_assert(has_features<L>,
                      "a Layer declares its input and output widths: `static std::size_t "
                      "in_features(const config_type&)` and `static std::size_t out_features(const config_type&)`");
        static_assert(has_activation_floats<L>,
                      "a Layer declares what its forward keeps for backward: `static std::size_t "
                      "activation_floats(const config_type&, std::size_t B, std::size_t T)`");
        static_assert(has_workspace_floats<L>,
                      "a Layer declares its scratch: `static std::size_t workspace_floats(const "
                      "config_type&, std::size_t B, std::size_t T)` (return 0 when it needs none)");
        static_assert(has_flops<L>,
                      "a Layer reports its forward FLOPs: `static double flops(const config_type&, "
                      "std::size_t B, std::size_t T)`");
        if constexpr (Backend<typename L::backend_type>) {
            static_assert(has_forward<L>,
                          "a Layer has `void forward(stream&, const R* params, R* out, R* acts, const R* inp, "
                          "R* workspace, std::size_t B, std::size_t T) const`");
            static_assert(has_backward<L>,
                          "a Layer has `void backward(stream&, const R* params, R* dparams, R* dinp, const R* "
                          "dout, const R* acts, const R* inp, R* workspace, std::size_t B, std::size_t T) const` "
                          "(accumulating into dparams and dinp; dinp may be null)");
        }
    }
    return Layer<L>;
}

// Whether L's backward writes dinp rather than adding to it (the optional `overwrites_dinp`
// above); false for a layer that does not say.
template <class L>
inline constexpr bool overwrites_dinp_v = [] {
    if constexpr (requires { L::overwrites_dinp; })
        return bool(L::overwrites_dinp);
    else
        return false;
}();

namespace detail::layer {

template <class L>
concept has_cache_floats = requires(const typename L::config_type& c, std::size_t n) {
    { L::cache_floats(c, n) } -> std::same_as<std::size_t>;
};

template <class L>
concept has_decode_workspace_floats = requires(const typename L::config_type& c, std::size_t n) {
    { L::decode_workspace_floats(c, n) } -> std::same_as<std::size_t>;
};

template <class L>
concept has_decode = requires(const L& layer, typename L::backend_type::stream& s, const typename L::value_type* in,
                              typename L::value_type* out, std::size_t n) {
    layer.decode(s, in, out, in, out, out, n, n);  // params, out, inp, cache, workspace, pos, n
};

}  // namespace detail::layer

// A Layer that also decodes incrementally with a cache (see the top of this file). Optional: a
// generator runs a Block without it through the model's full forward instead.
template <class L>
concept Decodes = Layer<L> && detail::layer::has_cache_floats<L> && detail::layer::has_decode_workspace_floats<L> &&
                  detail::layer::has_decode<L>;

// The decoding contract member by member, with messages (static_assert(check_decodes<L>())).
template <class L>
consteval bool check_decodes() {
    using namespace detail::layer;
    static_assert(check_layer<L>(), "a layer that decodes is a Layer first");
    if constexpr (Layer<L>) {
        static_assert(has_cache_floats<L>,
                      "a decoding layer declares its cache: `static std::size_t cache_floats(const config_type&, "
                      "std::size_t max_seq)` (elements of R for positions 0 .. max_seq - 1)");
        static_assert(has_decode_workspace_floats<L>,
                      "a decoding layer declares its scratch: `static std::size_t decode_workspace_floats(const "
                      "config_type&, std::size_t n)` for n new rows (return 0 when it needs none)");
        static_assert(has_decode<L>,
                      "a decoding layer has `void decode(stream&, const R* params, R* out, const R* inp, R* cache, "
                      "R* workspace, std::size_t pos, std::size_t n) const`");
    }
    return Decodes<L>;
}

// The sizes a caller allocates for one layer and a B x T micro-batch, in elements of R.
struct layer_sizes {
    std::size_t params = 0;       // the parameter block, page padding included
    std::size_t grads = 0;        // the gradient block: the trainable prefix of the parameter block
    std::size_t input = 0;        // B * T * in_features
    std::size_t output = 0;       // B * T * out_features
    std::size_t activations = 0;  // activation_floats
    std::size_t workspace = 0;    // workspace_floats
};

template <Layer L>
layer_sizes sizes_of(const typename L::config_type& c, std::size_t B, std::size_t T) {
    using R = typename L::value_type;
    const param_layout layout = param_layout::of<R>(L::params(c));
    return {.params = layout.numel(),
            .grads = layout.trainable_numel(),
            .input = B * T * L::in_features(c),
            .output = B * T * L::out_features(c),
            .activations = L::activation_floats(c, B, T),
            .workspace = L::workspace_floats(c, B, T)};
}

// A layer's forward FLOPs over a B x T micro-batch, split by the unit that computes them: GEMMs
// (the projections) and attention's T x T products, whose kernels run at different rates (the
// step's cost model, plan/cost_model.hpp). A layer may declare
//   static double attention_flops(const config_type&, size B, size T);  // of flops(), the T x T part
// else its GEMMs are 2 x B x T x its parameters (every weight used once per position) and
// attention is what flops() reports beyond them.
struct layer_flops {
    double gemm = 0;
    double attention = 0;
    double total() const { return gemm + attention; }
};

template <Layer L>
layer_flops flops_split(const typename L::config_type& c, std::size_t B, std::size_t T) {
    const double all = L::flops(c, B, T);
    if constexpr (requires { { L::attention_flops(c, B, T) } -> std::same_as<double>; }) {
        const double attention = L::attention_flops(c, B, T);
        return {.gemm = all - attention, .attention = attention};
    } else {
        double params = 0;
        for (const param_spec& p : L::params(c)) params += static_cast<double>(p.shape.numel());
        const double gemm = std::min(all, 2.0 * static_cast<double>(B * T) * params);
        return {.gemm = gemm, .attention = all - gemm};
    }
}

// The part of a layer's activations that a recomputing caller keeps (RecomputesPart): floats of
// acts from offset on.
struct activation_part {
    std::size_t offset = 0;
    std::size_t floats = 0;
};

namespace detail::layer {

template <class L>
concept has_kept_part = requires(const typename L::config_type& c, std::size_t n) {
    { L::kept_part(c, n, n) } -> std::same_as<activation_part>;
};

template <class L>
concept has_recompute_flops = requires(const typename L::config_type& c, std::size_t n) {
    { L::recompute_flops(c, n, n) } -> std::same_as<layer_flops>;
};

template <class L>
concept has_recompute = requires(const L& layer, typename L::backend_type::stream& s,
                                 const typename L::value_type* in, typename L::value_type* out, std::size_t n) {
    layer.recompute(s, in, out, in, out, n, n);  // params, acts, inp, workspace, B, T
};

}  // namespace detail::layer

// A Layer that recomputes its activations from a kept part of them (see the top of this file).
// Optional: a model recomputes a block without it by running its whole forward again.
template <class L>
concept RecomputesPart = Layer<L> && detail::layer::has_kept_part<L> && detail::layer::has_recompute_flops<L> &&
                         detail::layer::has_recompute<L>;

// The selective-recompute contract member by member, with messages (static_assert(check_recomputes_part<L>())).
template <class L>
consteval bool check_recomputes_part() {
    using namespace detail::layer;
    static_assert(check_layer<L>(), "a layer that recomputes from a kept part is a Layer first");
    if constexpr (Layer<L>) {
        static_assert(has_kept_part<L>,
                      "a selectively recomputing layer names the part of its activations a caller keeps: `static "
                      "strata::activation_part kept_part(const config_type&, std::size_t B, std::size_t T)`");
        static_assert(has_recompute_flops<L>,
                      "a selectively recomputing layer counts what its recompute runs: `static "
                      "strata::layer_flops recompute_flops(const config_type&, std::size_t B, std::size_t T)`");
        static_assert(has_recompute<L>,
                      "a selectively recomputing layer has `void recompute(stream&, const R* params, R* acts, const "
                      "R* inp, R* workspace, std::size_t B, std::size_t T) const`");
    }
    return RecomputesPart<L>;
}

}  // namespace strata
