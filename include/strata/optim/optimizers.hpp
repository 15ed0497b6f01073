// The optimizers a run chooses by name (each an Optimizer, optim/optimizer.hpp), their registry and
// the run-time choice between them:
//   adamw_optimizer      AdamW, torch's bit for bit (optim/adamw.hpp): states m, v; the default
//   sgd_optimizer        SGD with momentum, torch.optim.SGD's update (optim/sgd.hpp): state momentum
//   adafactor_optimizer  torch.optim.Adafactor (optim/adafactor.hpp): states row_var, col_var
//                        (a matrix's factored second moment), variance (a vector's)
//   registered_optimizers  the list of them: ONE line per optimizer
//   any_optimizer        one of them, chosen at run time (train_options::optimizer), itself an
//                        Optimizer: the trainers hold this one by default, so a run picks its
//                        optimizer without another trainer type.
// Adding an optimizer: its math and a type that models Optimizer with a static from_json (its
// hyperparameters by name) and, for CUDA, a cuda_update (optim/cuda_update.hpp), then its line in
// registered_optimizers. Neither the trainers, nor the planner, nor checkpoints change: they ask the
// optimizer for its state tensors' names and shapes. A trainer also runs an optimizer that is not
// registered (tiered_trainer's Optimizer parameter; tests/train/toy_optimizer_test.cpp).
#pragma once

#include <strata/core/error.hpp>         // strata::error
#include <strata/optim/adafactor.hpp>    // adafactor_optimizer
#include <strata/optim/adamw.hpp>        // adamw_hparams, adamw_update, validate
#include <strata/optim/adamw_simd.hpp>   // adamw_update_parallel, adamw_path, resolve
#include <strata/optim/device_update.hpp>  // optimizer_kernels, device_update (the CPU backend's)
#include <strata/optim/optimizer.hpp>    // Optimizer, optimizer_step, optimizer_state, state_label
#include <strata/optim/sgd.hpp>          // sgd_hparams, sgd_update, validate
#include <strata/optim/sgd_simd.hpp>     // sgd_update_parallel

#include <nlohmann/json.hpp>  // nlohmann::json

#include <array>        // std::array
#include <cstddef>      // std::size_t
#include <span>         // std::span
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <optional>     // std::optional
#include <type_traits>  // std::is_same_v
#include <utility>      // std::forward, std::move
#include <variant>      // std::variant, std::visit
#include <vector>       // std::vector

namespace strata {

namespace cuda {
class stream;  // backend/cuda/stream.hpp: declared so that this header needs no CUDA
}

namespace detail {
// A host update handed the wrong number of state tensors.
inline void check_state_count(std::string_view optimizer, std::size_t got, std::size_t wanted) {
    if (got != wanted)
        throw error(std::string(optimizer) + ": " + std::to_string(got) + " state tensor(s) given, it keeps " +
                        std::to_string(wanted),
                    "pass one span per name of state_names(), in that order");
}
}  // namespace detail

class adamw_optimizer {
public:
    using hparams_type = adamw_hparams;
    static constexpr std::array<std::string_view, 2> states{"m", "v"};

    // Throws for invalid hyperparameters, or a forced `path` this CPU lacks.
    explicit adamw_optimizer(const adamw_hparams& h = {}, adamw_path path = adamw_path::automatic)
        : m_hparams(checked(h)), m_path(resolve(path)) {}

    static constexpr std::string_view name() { return "adamw"; }
    static constexpr std::string_view display_name() { return "AdamW"; }
    static constexpr std::span<const std::string_view> state_names() { return states; }
    static shape state_shape(std::size_t, const shape& parameter) { return parameter; }  // m, v: like p
    const adamw_hparams& hparams() const noexcept { return m_hparams; }
    adamw_path path() const noexcept { return m_path; }  // the concrete path, never automatic
    // From hyperparameters by name (beta1, beta2, eps, weight_decay; the others keep their defaults).
    static adamw_optimizer from_json(const nlohmann::json& h) {
        detail::check_hparam_keys(name(), h, {"beta1", "beta2", "eps", "weight_decay"});
        const adamw_hparams d;
        return adamw_optimizer({.beta1 = detail::hparam_or(h, "beta1", d.beta1),
                                .beta2 = detail::hparam_or(h, "beta2", d.beta2),
                                .eps = detail::hparam_or(h, "eps", d.eps),
                                .weight_decay = detail::hparam_or(h, "weight_decay", d.weight_decay)});
    }
    nlohmann::json hparams_json() const {
        return {{"beta1", m_hparams.beta1}, {"beta2", m_hparams.beta2}, {"eps", m_hparams.eps},
                {"weight_decay", m_hparams.weight_decay}};
    }

    // float: vectorized, split over the pool's threads; double: the reference. Both are
    // adamw_update's bits.
    template <class R>
    void update(host_thread_pool& pool, std::span<R> p, std::span<const R> g, optimizer_state<R> state,
                const optimizer_step& k, R grad_scale = R(1)) const {
        detail::check_state_count(name(), state.size(), states.size());
        if constexpr (std::is_same_v<R, float>)
            adamw_update_parallel(pool, p, g, state[0], state[1], m_hparams, k.lr, k.step, k.decay, m_path, grad_scale);
        else
            adamw_update<R>(p, g, state[0], state[1], m_hparams, k.lr, k.step, k.decay, grad_scale);
    }

private:
    static const adamw_hparams& checked(const adamw_hparams& h) {
        validate(h);
        return h;
    }

    adamw_hparams m_hparams;
    adamw_path m_path;
};

class sgd_optimizer {
public:
    using hparams_type = sgd_hparams;
    static constexpr std::array<std::string_view, 1> states{"momentum"};

    explicit sgd_optimizer(const sgd_hparams& h = {}, adamw_path path = adamw_path::automatic)
        : m_hparams(checked(h)), m_path(resolve(path)) {}

    static constexpr std::string_view name() { return "sgd"; }
    static constexpr std::string_view display_name() { return "SGD"; }
    static constexpr std::span<const std::string_view> state_names() { return states; }
    static shape state_shape(std::size_t, const shape& parameter) { return parameter; }  // momentum: like p
    const sgd_hparams& hparams() const noexcept { return m_hparams; }
    adamw_path path() const noexcept { return m_path; }
    // From hyperparameters by name (momentum, weight_decay, nesterov).
    static sgd_optimizer from_json(const nlohmann::json& h) {
        detail::check_hparam_keys(name(), h, {"momentum", "weight_decay", "nesterov"});
        const sgd_hparams d;
        return sgd_optimizer({.momentum = detail::hparam_or(h, "momentum", d.momentum),
                              .weight_decay = detail::hparam_or(h, "weight_decay", d.weight_decay),
                              .nesterov = detail::hparam_or(h, "nesterov", d.nesterov)});
    }
    nlohmann::json hparams_json() const {
        return {{"momentum", m_hparams.momentum}, {"weight_decay", m_hparams.weight_decay},
                {"nesterov", m_hparams.nesterov}};
    }

    // k.step is not read: SGD has no bias correction.
    template <class R>
    void update(host_thread_pool& pool, std::span<R> p, std::span<const R> g, optimizer_state<R> state,
                const optimizer_step& k, R grad_scale = R(1)) const {
        detail::check_state_count(name(), state.size(), states.size());
        if constexpr (std::is_same_v<R, float>)
            sgd_update_parallel(pool, p, g, state[0], m_hparams, k.lr, k.decay, m_path, grad_scale);
        else
            sgd_update<R>(p, g, state[0], m_hparams, k.lr, k.decay, grad_scale);
    }

private:
    static const sgd_hparams& checked(const sgd_hparams& h) {
        validate(h);
        return h;
    }

    sgd_hparams m_hparams;
    adamw_path m_path;
};

// The CUDA updates (optim/cuda_update.hpp calls them), bitwise the host updates: defined with their
// kernels (kernels/cuda/adamw.cuh, sgd.cuh), compiled once, in src/cuda/optim.cu.
void cuda_update(const adamw_optimizer& o, cuda::stream& s, float* p, const float* g, std::span<float* const> state,
                 const optimizer_step& k);
void cuda_update(const sgd_optimizer& o, cuda::stream& s, float* p, const float* g, std::span<float* const> state,
                 const optimizer_step& k);

// A list of optimizer types: their names, and one of them made by name.
template <class... Os>
struct optimizer_list {
    using variant = std::variant<Os...>;
    static constexpr std::size_t size = sizeof...(Os);

    // "adamw, sgd or adafactor": the names, for messages.
    static std::string names(std::string_view last_joiner = " or ") {
        const std::array<std::string_view, size> all{Os::name()...};
        std::string out;
        for (std::size_t i = 0; i < size; ++i)
            out += (i == 0 ? "" : i + 1 == size ? std::string(last_joiner) : std::string(", ")) + std::string(all[i]);
        return out;
    }
    static std::vector<std::string_view> name_list() { return {Os::name()...}; }
    static bool has(std::string_view name) { return ((name == Os::name()) || ...); }
};

// The optimizers a run chooses by name. Adding one: ONE line here (and its type, above or in its
// own header).
using registered_optimizers = optimizer_list<adamw_optimizer,      //
                                             sgd_optimizer,        //
                                             adafactor_optimizer>;

class any_optimizer;
// The registered optimizer called `name`, with hyperparameters by name (a JSON object; missing
// keys keep the optimizer's defaults, unknown ones are refused). Throws for an unknown name.
any_optimizer make_optimizer(std::string_view name, const nlohmann::json& hparams = {});

// One of the registered optimizers, chosen at run time; itself an Optimizer.
class any_optimizer {
public:
    template <class O>
        requires(!std::is_same_v<O, any_optimizer> && std::is_constructible_v<registered_optimizers::variant, O>)
    any_optimizer(O o) : m_impl(std::move(o)) {}  // NOLINT: implicit, as a variant's alternatives
    any_optimizer() : m_impl(adamw_optimizer{}) {}

    std::string_view name() const { return std::visit([](const auto& o) { return std::string_view(o.name()); }, m_impl); }
    std::string_view display_name() const {
        return std::visit([](const auto& o) { return std::string_view(o.display_name()); }, m_impl);
    }
    std::span<const std::string_view> state_names() const {
        return std::visit([](const auto& o) { return std::span<const std::string_view>(o.state_names()); }, m_impl);
    }
    shape state_shape(std::size_t i, const shape& parameter) const {
        return std::visit([&](const auto& o) { return o.state_shape(i, parameter); }, m_impl);
    }
    nlohmann::json hparams_json() const {
        return std::visit([](const auto& o) { return o.hparams_json(); }, m_impl);
    }

    template <class R>
    void update(host_thread_pool& pool, std::span<R> p, std::span<const R> g, optimizer_state<R> state,
                const optimizer_step& k, R grad_scale = R(1)) const {
        std::visit([&](const auto& o) { o.update(pool, p, g, state, k, grad_scale); }, m_impl);
    }

    // The optimizer itself (f(const adamw_optimizer&), f(const sgd_optimizer&), ...).
    template <class F>
    decltype(auto) visit(F&& f) const {
        return std::visit(std::forward<F>(f), m_impl);
    }
    // The optimizer of type O, or null when it holds another.
    template <class O>
    const O* get_if() const noexcept {
        return std::get_if<O>(&m_impl);
    }

private:
    registered_optimizers::variant m_impl;
};

// On CUDA: the held optimizer's own update (optim/cuda_update.hpp finds this one for any_optimizer).
inline void cuda_update(const any_optimizer& o, cuda::stream& s, float* p, const float* g,
                        std::span<float* const> state, const optimizer_step& k) {
    o.visit([&](const auto& held) { cuda_update(held, s, p, g, state, k); });
}

namespace detail {
template <class... Os>
any_optimizer make_of(optimizer_list<Os...>, std::string_view name, const nlohmann::json& h) {
    std::optional<any_optimizer> made;
    ((name == Os::name() ? (void)made.emplace(Os::from_json(h)) : (void)0), ...);
    if (!made)
        throw error("unknown optimizer '" + std::string(name) + "'", "use " + registered_optimizers::names(),
                    {"optimizer"});
    return *made;
}
}  // namespace detail

inline any_optimizer make_optimizer(std::string_view name, const nlohmann::json& hparams) {
    return detail::make_of(registered_optimizers{}, name, hparams);
}

static_assert(Optimizer<adamw_optimizer> && Optimizer<sgd_optimizer> && Optimizer<adafactor_optimizer> &&
              Optimizer<any_optimizer>);

}  // namespace strata
