// The layer test harness: checks any Layer (strata/nn/layer.hpp) against its contract, from a
// user's own test (doctest or anything else). Each check returns a layer_report; nothing here
// depends on a test framework:
//
//   auto r = strata::testing::check_gradients<my_layer>(config, /*B*/ 2, /*T*/ 5);
//   CHECK_MESSAGE(r.ok(), r.describe());
//
// - check_gradients: FP64 central finite differences of loss = sum(out * w) (w random, so every
//   output counts) against backward, for every trainable parameter tensor and the input, on
//   cpu_backend with R = double. Gradient buffers start random, so a backward that overwrites
//   instead of accumulating fails (dinp of a layer that declares overwrites_dinp excepted: it
//   must hold the gradient itself, whatever it held before). Frozen tensors (param_spec::trainable = false) have no gradient:
//   they are listed as skipped.
// - check_checkpointing: recomputing forward from the saved input (activations and workspace
//   overwritten with NaN in between) and then running backward gives bitwise the gradients of the
//   plain forward + backward; backward with dinp = null gives bitwise the same parameter
//   gradients and leaves dinp alone. Output, activations and workspace start as NaN and the
//   workspace is NaN again before backward, so reading what the layer did not write in the same
//   call shows as a non-finite result. Any backend, any R.
// - check_backend_parity: the same float problem on cpu_backend and on another backend, every
//   tensor compared by normalized mean squared error (ggml's NMSE). Skips, saying so, when the
//   other backend has no hardware here.
// - check_decoding: for a layer that Decodes (nn/layer.hpp): decode over one sequence, fed in
//   pieces (a prompt of several rows, then one row at a time, then a rewind that decodes all but
//   the first row again over the cache as it stands), against forward's rows; cache and workspace
//   start as NaN, so reading what decode did not store shows. Any backend, any R.
// - forward_output: one forward from given parameters and input, for comparisons with a reference.
//
// Frozen parameters: the layer gets a gradient block whose trainable prefix (trainable_numel()
// elements) is what the contract gives it; the harness allocates the whole parameter block's size
// behind the same pointer and fills everything outside the trainable tensors (frozen tensors'
// places, alignment gaps, padding, everything past the prefix) with a sentinel. Every check then
// verifies, bitwise, that backward left all of it alone (layer_report::invariants). When the whole
// layer is frozen, check_checkpointing also runs backward with dparams = null.
//
// The config type of a layer must not depend on R or Backend: the harness builds the layer for
// several of them from one config.
#pragma once

#include <strata/backend/cpu_backend.hpp>         // cpu_backend
#include <strata/core/error.hpp>                  // strata::error
#include <strata/kernels/cpu/gradient_check.hpp>  // numeric_gradient, compare, random_vector
#include <strata/nn/cpu_ops.hpp>                  // ops<cpu_backend>
#include <strata/nn/layer.hpp>                    // Layer, check_layer, sizes_of
#include <strata/tensor/param_layout.hpp>         // param_layout
#include <strata/tensor/tiered_tensor.hpp>        // tiered_tensor
#include <strata/tier/resources.hpp>              // tier_options
#include <strata/tier/tier.hpp>                   // device_tier, host_tier

#include <algorithm>    // std::copy, std::max, std::all_of
#include <cmath>        // std::isfinite, std::sqrt
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint32_t
#include <cstring>      // std::memcmp
#include <limits>       // std::numeric_limits
#include <numeric>      // std::inner_product
#include <optional>     // std::optional
#include <span>         // std::span
#include <sstream>      // std::ostringstream
#include <string>       // std::string
#include <tuple>        // std::tuple
#include <type_traits>  // std::is_same_v
#include <vector>       // std::vector

namespace strata::testing {

// One tensor of a check: its error against the reference and whether it is within tolerance.
struct tensor_result {
    std::string name;  // "dinp", "d<param name>", "out"
    double error = 0.0;
    bool ok = false;
    std::string detail;    // the worst element, or the first differing bit pattern; why it was skipped
    bool skipped = false;  // not compared (a frozen tensor has no gradient); ok stays true
};

struct layer_report {
    std::string check;   // which check ran
    double tolerance = 0.0;
    bool skipped = false;
    std::string skip_reason;
    std::vector<tensor_result> tensors;     // one per tensor compared (frozen ones marked skipped)
    std::vector<tensor_result> invariants;  // whole-block rules: gradients outside the trainable tensors untouched

    // Within tolerance on every tensor and every invariant kept (a skipped check is ok: print
    // describe() to show it).
    bool ok() const {
        const auto good = [](const tensor_result& t) { return t.ok; };
        return skipped || (std::all_of(tensors.begin(), tensors.end(), good) &&
                           std::all_of(invariants.begin(), invariants.end(), good));
    }
    double worst_error() const {
        double w = 0.0;
        for (const auto& t : tensors) w = std::max(w, t.error);
        for (const auto& t : invariants) w = std::max(w, t.error);
        return w;
    }
    // One line per tensor, failures marked; readable as a test failure message.
    std::string describe() const {
        std::ostringstream text;
        text << check;
        if (skipped) {
            text << ": SKIPPED (" << skip_reason << ")";
            return text.str();
        }
        text << " (tolerance " << tolerance << "): " << (ok() ? "ok" : "FAILED");
        for (const auto* list : {&tensors, &invariants})
            for (const auto& t : *list) {
                text << "\n  " << (t.ok ? "   " : "!! ") << t.name << ": ";
                if (t.skipped)
                    text << "skipped (" << t.detail << ")";
                else
                    text << "error " << t.error << (t.detail.empty() ? "" : "; ") << t.detail;
            }
        return text.str();
    }
};

struct layer_check_options {
    std::uint32_t seed = 1;
    double param_range = 0.5;  // parameters uniform in [-param_range, param_range)
    double input_range = 1.0;  // inputs uniform in [-input_range, input_range)
    // Finite differences: 0 checks every element; otherwise a spread sample of about this many
    // elements per tensor (large layers, slow forwards).
    std::size_t max_elements_per_tensor = 0;
    double fd_step = 1e-5;
};

namespace detail {

// A device-tier buffer of the layer with a host-tier staging copy for uploads and downloads.
template <class T, class Bk>
class device_buffer {
public:
    device_buffer(Bk& backend, std::size_t n, const std::string& name)
        : m_n(n),
          m_device(backend, {std::max<std::size_t>(n, 1)}, "harness." + name),
          m_host(backend, {std::max<std::size_t>(n, 1)}, "harness." + name + ".staging") {}

    T* get() { return m_device.device_data().get(); }
    std::size_t size() const { return m_n; }

    void upload(std::span<const T> values, typename Bk::stream& s) {
        if (values.size() != m_n)
            throw error("layer harness: uploading " + std::to_string(values.size()) + " values into '" +
                        m_device.name() + "' of " + std::to_string(m_n));
        std::copy(values.begin(), values.end(), m_host.span().begin());
        m_device.copy_from(m_host, s).wait();
    }
    void fill(T value, typename Bk::stream& s) { upload(std::vector<T>(m_n, value), s); }
    std::vector<T> download(typename Bk::stream& s) {
        m_host.copy_from(m_device, s).wait();
        return std::vector<T>(m_host.span().begin(), m_host.span().begin() + static_cast<std::ptrdiff_t>(m_n));
    }

private:
    std::size_t m_n;
    tiered_tensor<T, device_tier, Bk> m_device;
    tiered_tensor<T, host_tier, Bk> m_host;
};

// Enough device and host budget for one layer's buffers and their staging copies.
template <class L>
tier_options harness_tiers(const typename L::config_type& c, std::size_t B, std::size_t T) {
    const layer_sizes n = sizes_of<L>(c, B, T);
    const std::size_t elements = 2 * n.params + 2 * n.input + 2 * n.output + n.activations + n.workspace;
    const std::size_t bytes = elements * sizeof(typename L::value_type) + (64u << 20);
    return {.device_bytes = bytes, .host_bytes = bytes};
}

// Everything one run of a layer needs, on backend Bk in precision R.
template <class L>
struct layer_rig {
    using R = typename L::value_type;
    using Bk = typename L::backend_type;
    using stream = typename Bk::stream;

    const typename L::config_type& config;
    std::size_t B, T;
    Bk& backend;
    L layer;
    param_layout layout;
    layer_sizes n;
    stream s;
    device_buffer<R, Bk> params, grads, inp, out, acts, workspace, dinp, dout;

    layer_rig(Bk& bk, const typename L::config_type& c, std::size_t batch, std::size_t seq)
        : config(c), B(batch), T(seq), backend(bk), layer(c), layout(param_layout::of<R>(L::params(c))),
          n(sizes_of<L>(c, batch, seq)), s(bk.make_stream("layer harness")),
          params(bk, n.params, "params"), grads(bk, n.params, "grads"), inp(bk, n.input, "inp"),
          out(bk, n.output, "out"), acts(bk, n.activations, "acts"), workspace(bk, n.workspace, "workspace"),
          dinp(bk, n.input, "dinp"), dout(bk, n.output, "dout") {}

    void forward() { layer.forward(s, params.get(), out.get(), acts.get(), inp.get(), workspace.get(), B, T); }
    // grads holds the whole parameter block's size (see gradient_sentinel); the layer is told
    // nothing of that and owns only the trainable prefix. null_dparams: the caller of a wholly
    // frozen layer may pass no gradient block at all.
    void backward(bool want_dinp = true, bool null_dparams = false) {
        layer.backward(s, params.get(), null_dparams ? nullptr : grads.get(), want_dinp ? dinp.get() : nullptr,
                       dout.get(), acts.get(), inp.get(), workspace.get(), B, T);
    }
    // Garbage in what the layer must write before it reads: activations, workspace, output.
    void poison() {
        const R nan = std::numeric_limits<R>::quiet_NaN();
        acts.fill(nan, s);
        workspace.fill(nan, s);
        out.fill(nan, s);
    }
};

// Random parameters: uniform values in every tensor, zeros in the alignment gaps and padding.
template <class R>
std::vector<R> random_params(const param_layout& layout, std::uint32_t seed, double range) {
    std::vector<R> block(layout.numel(), R(0));
    std::uint32_t k = 0;
    for (const auto& entry : layout.entries()) {
        const auto values = kernels::cpu::random_vector<R>(entry.spec.shape.numel(), seed + 101 * ++k, -range, range);
        std::copy(values.begin(), values.end(), block.begin() + static_cast<std::ptrdiff_t>(entry.offset));
    }
    return block;
}

// What the gradient block holds wherever the layer must not write: frozen tensors' places,
// alignment gaps, page padding, and everything past trainable_numel() (the harness allocates the
// parameter block's size so that a write past the prefix lands where it can be seen). -0.0:
// accumulating anything but -0 into it (-0 + x == x bitwise) or zero-filling it (+0) changes its
// bits, which a NaN would not show (NaN + x is the same NaN).
template <class R>
inline constexpr R gradient_sentinel = -R(0);

// A gradient block of the parameter block's size: trainable tensors random in [-1, 1) (seeded) or
// zero (no seed), the sentinel everywhere else.
template <class R>
std::vector<R> initial_grads(const param_layout& layout, std::optional<std::uint32_t> seed) {
    std::vector<R> block(layout.numel(), gradient_sentinel<R>);
    std::uint32_t k = 0;
    for (const auto& entry : layout.entries()) {
        ++k;  // counted over every entry: an all-trainable layer sees the values random_params gives
        if (!entry.spec.trainable) continue;
        const std::size_t n = entry.spec.shape.numel();
        const auto first = block.begin() + static_cast<std::ptrdiff_t>(entry.offset);
        if (seed) {
            const auto values = kernels::cpu::random_vector<R>(n, *seed + 101 * k, -1.0, 1.0);
            std::copy(values.begin(), values.end(), first);
        } else {
            std::fill(first, first + static_cast<std::ptrdiff_t>(n), R(0));
        }
    }
    return block;
}

// Invariant: backward wrote nothing of the gradient block outside the trainable tensors (bitwise
// against what the block held before), naming where the first write landed.
template <class R>
tensor_result untouched_outside_trainable(const std::string& when, const param_layout& layout,
                                          const std::vector<R>& grads, const std::vector<R>& before) {
    std::vector<bool> trainable(grads.size(), false);
    std::string frozen_names;
    std::size_t frozen = 0;
    for (const auto& entry : layout.entries()) {
        if (!entry.spec.trainable) {
            frozen_names += (frozen++ ? ", " : "") + entry.spec.name;
            continue;
        }
        std::fill_n(trainable.begin() + static_cast<std::ptrdiff_t>(entry.offset), entry.spec.shape.numel(), true);
    }
    const std::string name = "gradients outside the trainable tensors untouched (" + when + "; frozen: " +
                             (frozen == 0 ? std::string("none")
                              : frozen <= 3 ? frozen_names
                                            : std::to_string(frozen) + " tensors") +
                             ")";
    for (std::size_t i = 0; i < grads.size(); ++i) {
        if (trainable[i] || std::memcmp(&grads[i], &before[i], sizeof(R)) == 0) continue;
        std::string where = i < layout.trainable_numel() ? "alignment gap or padding of the gradient block"
                                                         : "past the gradient block (trainable_numel() = " +
                                                               std::to_string(layout.trainable_numel()) + ")";
        for (const auto& entry : layout.entries())
            if (!entry.spec.trainable && i >= entry.offset && i < entry.offset + entry.spec.shape.numel())
                where = "the gradient of frozen tensor '" + entry.spec.name + "' (element " +
                        std::to_string(i - entry.offset) + ")";
        std::ostringstream text;
        text.precision(17);
        text << "written at [" << i << "], " << where << ": " << grads[i] << " (was " << before[i]
             << "); a layer never writes gradients of frozen tensors, nor outside its trainable prefix";
        return {name, 1.0, false, text.str()};
    }
    return {name, 0.0, true, {}};
}

// The report line of a frozen tensor: no gradient, nothing to compare.
inline tensor_result frozen_tensor(const param_entry& entry) {
    return {"d" + entry.spec.name, 0.0, true, "frozen: trainable = false, no gradient", true};
}

// The inputs every check draws from the same seeds, so precisions and backends see the same
// problem (rounded to R).
template <class R>
struct layer_problem {
    std::vector<R> params, grads0, inp, dinp0, dout;
    layer_problem(const param_layout& layout, const layer_sizes& n, const layer_check_options& o)
        : params(random_params<R>(layout, o.seed, o.param_range)),
          grads0(initial_grads<R>(layout, o.seed + 7)),
          inp(kernels::cpu::random_vector<R>(n.input, o.seed + 1, -o.input_range, o.input_range)),
          dinp0(kernels::cpu::random_vector<R>(n.input, o.seed + 2)),
          dout(kernels::cpu::random_vector<R>(n.output, o.seed + 3)) {}
};

template <class R>
tensor_result bitwise(const std::string& name, const std::vector<R>& actual, const std::vector<R>& expected) {
    tensor_result r{name, 0.0, true, {}};
    for (std::size_t i = 0; i < actual.size(); ++i) {
        const bool finite = std::isfinite(static_cast<double>(actual[i]));
        if (!finite || std::memcmp(&actual[i], &expected[i], sizeof(R)) != 0) {
            std::ostringstream text;
            text.precision(17);
            text << "first difference at [" << i << "]: " << actual[i] << " vs " << expected[i]
                 << (finite ? "" : " (not finite: something read memory the layer had not written)");
            return {name, 1.0, false, text.str()};
        }
    }
    return r;
}

// Per-tensor slices of a parameter block.
template <class R>
std::vector<R> slice(const std::vector<R>& block, const param_entry& entry) {
    const auto first = block.begin() + static_cast<std::ptrdiff_t>(entry.offset);
    return std::vector<R>(first, first + static_cast<std::ptrdiff_t>(entry.spec.shape.numel()));
}

}  // namespace detail

// FP64 finite differences against backward, for every trainable parameter tensor and the input
// (frozen tensors are listed as skipped), and the gradient block outside the trainable tensors
// untouched.
// Tolerance: per element |analytic - numeric| / max(1e-3, |analytic| + |numeric|); central
// differences in double agree to ~1e-9 on small layers, a wrong term is off by O(1).
template <template <class, class> class LayerT>
layer_report check_gradients(const typename LayerT<double, cpu_backend>::config_type& config, std::size_t B,
                             std::size_t T, double tolerance = 1e-6, const layer_check_options& o = {}) {
    using L = LayerT<double, cpu_backend>;
    static_assert(check_layer<L>());
    cpu_backend backend(detail::harness_tiers<L>(config, B, T));
    detail::layer_rig<L> rig(backend, config, B, T);
    detail::layer_problem<double> p(rig.layout, rig.n, o);
    layer_report report{"check_gradients (FP64 central differences, cpu_backend)", tolerance, false, {}, {}, {}};

    // Analytic: what backward adds to gradients that start random.
    rig.params.upload(p.params, rig.s);
    rig.inp.upload(p.inp, rig.s);
    rig.dout.upload(p.dout, rig.s);
    rig.grads.upload(p.grads0, rig.s);
    rig.dinp.upload(p.dinp0, rig.s);
    rig.forward();
    rig.backward();
    std::vector<double> dparams = rig.grads.download(rig.s), dinp = rig.dinp.download(rig.s);
    report.invariants.push_back(detail::untouched_outside_trainable("backward", rig.layout, dparams, p.grads0));
    for (std::size_t i = 0; i < dparams.size(); ++i) dparams[i] -= p.grads0[i];
    if constexpr (!overwrites_dinp_v<L>)  // a layer that writes dinp owes it the gradient itself
        for (std::size_t i = 0; i < dinp.size(); ++i) dinp[i] -= p.dinp0[i];

    // Numeric: loss = sum(out * dout) as a function of one tensor's sampled elements.
    std::vector<double> params = p.params, inp = p.inp;
    auto loss = [&] {
        rig.params.upload(params, rig.s);
        rig.inp.upload(inp, rig.s);
        rig.forward();
        const auto out = rig.out.download(rig.s);
        return std::inner_product(out.begin(), out.end(), p.dout.begin(), 0.0);
    };
    auto check_tensor = [&](const std::string& name, std::vector<double>& values, std::size_t offset, std::size_t count,
                            const std::vector<double>& analytic) {
        const std::size_t stride =
            o.max_elements_per_tensor == 0 ? 1 : std::max<std::size_t>(1, count / o.max_elements_per_tensor);
        std::vector<double> numeric, expected;
        for (std::size_t i = 0; i < count; i += stride) {
            double& x = values[offset + i];
            const double saved = x;
            x = saved + o.fd_step;
            const double plus = loss();
            x = saved - o.fd_step;
            const double minus = loss();
            x = saved;
            numeric.push_back((plus - minus) / (2.0 * o.fd_step));
            expected.push_back(analytic[offset + i]);
        }
        const auto worst = kernels::cpu::compare(expected, numeric, kernels::cpu::numeric_gradient_floor);
        report.tensors.push_back({name, worst.error, worst.error <= tolerance,
                                  worst.describe("analytic vs numeric (index in the checked sample)")});
    };
    for (const auto& entry : rig.layout.entries()) {
        if (entry.spec.trainable)
            check_tensor("d" + entry.spec.name, params, entry.offset, entry.spec.shape.numel(), dparams);
        else
            report.tensors.push_back(detail::frozen_tensor(entry));
    }
    check_tensor("dinp", inp, 0, inp.size(), dinp);
    return report;
}

// The output of one forward of LayerT<R, Bk> from a given parameter block (sizes_of(...).params
// elements, laid out by param_layout::of<R>(params(config))) and input: to compare a layer against
// a reference, e.g. a variant of a block against the block it extends. Activations, workspace and
// output start as NaN, as in the checks.
template <template <class, class> class LayerT, class R = float, class Bk = cpu_backend>
std::vector<R> forward_output(const typename LayerT<R, Bk>::config_type& config, std::span<const R> params,
                              std::span<const R> inp, std::size_t B, std::size_t T) {
    using L = LayerT<R, Bk>;
    static_assert(check_layer<L>());
    if constexpr (requires { Bk::available(); }) {
        if (!Bk::available())
            throw error("forward_output: no " + std::string(Bk::name) + " device on this machine",
                        "check Backend::available() first");
    }
    Bk backend(detail::harness_tiers<L>(config, B, T));
    detail::layer_rig<L> rig(backend, config, B, T);
    rig.params.upload(params, rig.s);
    rig.inp.upload(inp, rig.s);
    rig.poison();
    rig.forward();
    return rig.out.download(rig.s);
}

// Checkpointed == plain, bitwise: forward, backward (plain) against forward, NaN over activations
// and workspace, forward again from the same input, backward (checkpointed). A layer that
// recomputes from a kept part (RecomputesPart, nn/layer.hpp) also: forward, NaN over everything of
// the activations but that part and over the workspace, recompute, backward (selective). Also backward with
// dinp = null gives bitwise the same parameter gradients; none of the runs writes the gradient
// block outside the trainable tensors; a wholly frozen layer runs with dparams = null too. R and
// Backend as the layer runs them.
template <template <class, class> class LayerT, class R = float, class Bk = cpu_backend>
layer_report check_checkpointing(const typename LayerT<R, Bk>::config_type& config, std::size_t B, std::size_t T,
                                 const layer_check_options& o = {}) {
    using L = LayerT<R, Bk>;
    static_assert(check_layer<L>());
    layer_report report{"check_checkpointing (recomputed forward + backward == plain, bitwise, on " +
                            std::string(Bk::name) + ")",
                        0.0, false, {}, {}, {}};
    if constexpr (requires { Bk::available(); }) {
        if (!Bk::available()) {
            report.skipped = true;
            report.skip_reason = "no " + std::string(Bk::name) + " device on this machine";
            return report;
        }
    }
    Bk backend(detail::harness_tiers<L>(config, B, T));
    detail::layer_rig<L> rig(backend, config, B, T);
    detail::layer_problem<R> p(rig.layout, rig.n, o);
    rig.params.upload(p.params, rig.s);
    rig.inp.upload(p.inp, rig.s);
    rig.dout.upload(p.dout, rig.s);

    auto run = [&](int forwards, bool want_dinp, bool null_dparams = false, bool selective = false) {
        rig.grads.upload(p.grads0, rig.s);
        rig.dinp.upload(p.dinp0, rig.s);
        rig.poison();
        const R nan = std::numeric_limits<R>::quiet_NaN();
        for (int f = 0; f < forwards; ++f) {
            if (f > 0) {  // what a checkpointing trainer does: other layers reuse the buffers
                rig.acts.fill(nan, rig.s);
                rig.workspace.fill(nan, rig.s);
            }
            rig.forward();
        }
        if constexpr (RecomputesPart<L>) {
            if (selective) {  // only the kept part survives; the rest comes from recompute
                const activation_part part = L::kept_part(config, B, T);
                auto acts = rig.acts.download(rig.s);
                for (std::size_t i = 0; i < acts.size(); ++i)
                    if (i < part.offset || i >= part.offset + part.floats) acts[i] = nan;
                rig.acts.upload(acts, rig.s);
                rig.workspace.fill(nan, rig.s);
                rig.layer.recompute(rig.s, rig.params.get(), rig.acts.get(), rig.inp.get(), rig.workspace.get(), B, T);
            }
        }
        const auto out = rig.out.download(rig.s);
        rig.workspace.fill(nan, rig.s);  // scratch is not kept between calls
        rig.backward(want_dinp, null_dparams);
        return std::tuple{out, rig.grads.download(rig.s), rig.dinp.download(rig.s)};
    };
    const auto [out_plain, grads_plain, dinp_plain] = run(1, true);
    const auto [out_ckpt, grads_ckpt, dinp_ckpt] = run(2, true);
    const auto [out_nodinp, grads_nodinp, dinp_untouched] = run(1, false);
    report.tensors.push_back(detail::bitwise("out (recomputed vs plain)", out_ckpt, out_plain));
    for (const auto& entry : rig.layout.entries()) {
        if (entry.spec.trainable)
            report.tensors.push_back(detail::bitwise("d" + entry.spec.name + " (checkpointed vs plain)",
                                                     detail::slice(grads_ckpt, entry), detail::slice(grads_plain, entry)));
        else
            report.tensors.push_back(detail::frozen_tensor(entry));
    }
    report.tensors.push_back(detail::bitwise("dinp (checkpointed vs plain)", dinp_ckpt, dinp_plain));
    if constexpr (RecomputesPart<L>) {
        const activation_part part = L::kept_part(config, B, T);
        const bool inside = part.floats > 0 && part.offset + part.floats <= rig.n.activations;
        report.invariants.push_back({.name = "the kept part lies within the activations",
                                     .error = inside ? 0.0 : 1.0,
                                     .ok = inside,
                                     .detail = "kept_part: " + std::to_string(part.floats) + " floats from " +
                                               std::to_string(part.offset) + " of " +
                                               std::to_string(rig.n.activations)});
        if (inside) {
            const auto [out_sel, grads_sel, dinp_sel] = run(1, true, false, true);
            for (const auto& entry : rig.layout.entries())
                if (entry.spec.trainable)
                    report.tensors.push_back(detail::bitwise("d" + entry.spec.name + " (selective recompute vs plain)",
                                                             detail::slice(grads_sel, entry),
                                                             detail::slice(grads_plain, entry)));
            report.tensors.push_back(detail::bitwise("dinp (selective recompute vs plain)", dinp_sel, dinp_plain));
            report.invariants.push_back(
                detail::untouched_outside_trainable("selective recompute", rig.layout, grads_sel, p.grads0));
        }
    }
    for (const auto& entry : rig.layout.entries())
        if (entry.spec.trainable)
            report.tensors.push_back(detail::bitwise("d" + entry.spec.name + " (dinp = null vs plain)",
                                                     detail::slice(grads_nodinp, entry),
                                                     detail::slice(grads_plain, entry)));
    report.tensors.push_back(detail::bitwise("dinp left alone when null", dinp_untouched, p.dinp0));
    report.invariants.push_back(detail::untouched_outside_trainable("plain", rig.layout, grads_plain, p.grads0));
    report.invariants.push_back(detail::untouched_outside_trainable("checkpointed", rig.layout, grads_ckpt, p.grads0));
    report.invariants.push_back(detail::untouched_outside_trainable("dinp = null", rig.layout, grads_nodinp, p.grads0));
    if (rig.layout.frozen()) {  // the caller of a wholly frozen layer may pass no gradient block
        const auto [out_nograds, grads_nograds, dinp_nograds] = run(1, true, true);
        report.tensors.push_back(detail::bitwise("dinp with dparams = null (wholly frozen) vs plain", dinp_nograds,
                                                 dinp_plain));
        report.invariants.push_back(
            detail::untouched_outside_trainable("dparams = null", rig.layout, grads_nograds, p.grads0));
    }
    return report;
}

// Incremental decoding against forward, on one sequence of T positions (B = 1): decode fills the
// cache with a prompt of max(1, T / 2) rows, then one row per call to the end, then decodes rows
// 1 .. T - 1 again in one call from pos 1 (a rewind: the cache is not cleared, rows past pos are
// overwritten). Each piece's output is compared with forward's rows: max |decode - forward| over
// max |forward|, against `tolerance` (the same ops summing in another order differ by a few ulps:
// ~1e-6 in float, ~1e-15 in double; a wrong position, mask or cache row by O(1)). The cache starts
// as NaN and the workspace is NaN before every call: a row read before it was stored shows as a
// non-finite output.
template <template <class, class> class LayerT, class R = float, class Bk = cpu_backend>
layer_report check_decoding(const typename LayerT<R, Bk>::config_type& config, std::size_t T,
                            double tolerance = std::is_same_v<R, float> ? 1e-5 : 1e-12,
                            const layer_check_options& o = {}) {
    using L = LayerT<R, Bk>;
    static_assert(check_decodes<L>());
    layer_report report{"check_decoding (decode in pieces == forward's rows, on " + std::string(Bk::name) + ")",
                        tolerance, false, {}, {}, {}};
    if constexpr (requires { Bk::available(); }) {
        if (!Bk::available()) {
            report.skipped = true;
            report.skip_reason = "no " + std::string(Bk::name) + " device on this machine";
            return report;
        }
    }
    if (T < 2) throw error("check_decoding: T = " + std::to_string(T) + " positions", "decode at least 2 positions");
    tier_options tiers = detail::harness_tiers<L>(config, 1, T);
    const std::size_t extra =
        (L::cache_floats(config, T) + L::decode_workspace_floats(config, T) + L::out_features(config) * T) *
        sizeof(R) * 2;
    tiers.device_bytes = *tiers.device_bytes + extra;
    tiers.host_bytes = *tiers.host_bytes + extra;
    Bk backend(tiers);
    detail::layer_rig<L> rig(backend, config, 1, T);
    detail::layer_problem<R> p(rig.layout, rig.n, o);
    rig.params.upload(p.params, rig.s);
    rig.inp.upload(p.inp, rig.s);
    rig.poison();
    rig.forward();
    const std::vector<R> reference = rig.out.download(rig.s);

    const std::size_t in = L::in_features(config), out = L::out_features(config);
    const R nan = std::numeric_limits<R>::quiet_NaN();
    detail::device_buffer<R, Bk> cache(backend, L::cache_floats(config, T), "cache");
    detail::device_buffer<R, Bk> workspace(backend, L::decode_workspace_floats(config, T), "decode_workspace");
    detail::device_buffer<R, Bk> decoded(backend, out * T, "decoded");
    cache.fill(nan, rig.s);
    double scale = 0.0;
    for (const R x : reference) scale = std::max(scale, std::abs(static_cast<double>(x)));
    struct piece {
        const char* name;
        std::size_t pos, n;
    };
    const std::size_t prompt = std::max<std::size_t>(1, T / 2);
    std::vector<piece> pieces{{"prompt", 0, prompt}};
    for (std::size_t pos = prompt; pos < T; ++pos) pieces.push_back({"one row", pos, 1});
    pieces.push_back({"rewound to position 1", 1, T - 1});
    for (const auto& [name, pos, n] : pieces) {
        workspace.fill(nan, rig.s);
        decoded.fill(nan, rig.s);
        rig.layer.decode(rig.s, rig.params.get(), decoded.get(), rig.inp.get() + pos * in, cache.get(), workspace.get(),
                         pos, n);
        const std::vector<R> got = decoded.download(rig.s);
        double worst = 0.0;
        std::size_t at = 0;
        for (std::size_t i = 0; i < n * out; ++i) {
            const double d = std::abs(static_cast<double>(got[i]) - static_cast<double>(reference[pos * out + i]));
            if (!(d <= worst)) worst = d, at = i;  // NaN counts as the worst
        }
        const double error = worst / std::max(scale, 1e-30);
        std::ostringstream text;
        text << "largest difference " << worst << " at row " << pos + at / out << ", channel " << at % out << ": "
             << got[at] << " vs forward's " << reference[pos * out + at];
        report.tensors.push_back({"out rows " + std::to_string(pos) + " .. " + std::to_string(pos + n - 1) + " (" +
                                      name + ")",
                                  error, error <= tolerance, text.str()});
    }
    return report;
}

// The same float problem on cpu_backend (the oracle) and on Other; every tensor's normalized mean
// squared error sum((x - ref)^2) / sum(ref^2) against `tolerance` (GEMMs summing in another order
// differ by ~1e-14 NMSE per op in FP32; a wrong kernel by ~1). Skips when Other has no hardware.
template <template <class, class> class LayerT, class Other>
layer_report check_backend_parity(const typename LayerT<float, cpu_backend>::config_type& config, std::size_t B,
                                  std::size_t T, double tolerance = 1e-8, const layer_check_options& o = {}) {
    using Lcpu = LayerT<float, cpu_backend>;
    using Lother = LayerT<float, Other>;
    static_assert(check_layer<Lcpu>() && check_layer<Lother>());
    layer_report report{"check_backend_parity (NMSE of " + std::string(Other::name) + " against cpu, float)", tolerance,
                        false, {}, {}, {}};
    if constexpr (requires { Other::available(); }) {
        if (!Other::available()) {
            report.skipped = true;
            report.skip_reason = "no " + std::string(Other::name) + " device on this machine";
            return report;
        }
    }
    auto run = [&]<class L>(typename L::backend_type& backend) {
        detail::layer_rig<L> rig(backend, config, B, T);
        detail::layer_problem<float> p(rig.layout, rig.n, o);
        rig.params.upload(p.params, rig.s);
        rig.inp.upload(p.inp, rig.s);
        rig.dout.upload(p.dout, rig.s);
        const auto grads0 = detail::initial_grads<float>(rig.layout, std::nullopt);
        rig.grads.upload(grads0, rig.s);
        rig.dinp.fill(0.0f, rig.s);
        rig.forward();
        const auto out = rig.out.download(rig.s);
        rig.backward();
        const auto grads = rig.grads.download(rig.s);
        report.invariants.push_back(detail::untouched_outside_trainable(
            "on " + std::string(L::backend_type::name), rig.layout, grads, grads0));
        return std::tuple{rig.layout, out, grads, rig.dinp.download(rig.s)};
    };
    cpu_backend cpu(detail::harness_tiers<Lcpu>(config, B, T));
    Other other(detail::harness_tiers<Lother>(config, B, T));
    const auto [layout, out_ref, grads_ref, dinp_ref] = run.template operator()<Lcpu>(cpu);
    const auto [layout2, out, grads, dinp] = run.template operator()<Lother>(other);
    auto nmse = [&](const std::string& name, const std::vector<float>& x, const std::vector<float>& ref) {
        double num = 0.0, den = 0.0, worst = 0.0;
        std::size_t at = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
            const double d = double(x[i]) - double(ref[i]);
            num += d * d;
            den += double(ref[i]) * double(ref[i]);
            if (!(std::abs(d) <= worst)) worst = std::abs(d), at = i;  // NaN counts as the worst
        }
        const double error = den > 0 ? num / den : num;
        std::ostringstream text;
        text << "largest difference " << worst;
        if (!x.empty()) text << " at [" << at << "]: " << x[at] << " vs " << ref[at];
        report.tensors.push_back({name, error, error <= tolerance, text.str()});
    };
    nmse("out", out, out_ref);
    for (const auto& entry : layout.entries()) {
        if (entry.spec.trainable)
            nmse("d" + entry.spec.name, detail::slice(grads, entry), detail::slice(grads_ref, entry));
        else
            report.tensors.push_back(detail::frozen_tensor(entry));
    }
    nmse("dinp", dinp, dinp_ref);
    return report;
}

}  // namespace strata::testing
