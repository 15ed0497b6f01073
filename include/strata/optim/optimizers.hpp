// The optimizers the trainers run (each an Optimizer, optim/optimizer.hpp) and the run-time choice
// between them:
//   adamw_optimizer  AdamW, torch's bit for bit (optim/adamw.hpp): states m, v; the default
//   sgd_optimizer    SGD with momentum, torch.optim.SGD's update (optim/sgd.hpp): state momentum
//   any_optimizer    one of them, chosen at run time (train_options::optimizer), itself an
//                    Optimizer: the trainers hold this one, so a run picks its optimizer without
//                    another trainer type.
// Adding an optimizer: its math (reference, host fast path, a kernel for each backend's ops<B>), a
// type that models Optimizer, one alternative in any_optimizer and optimizer_kind.
#pragma once

#include <strata/core/error.hpp>         // strata::error
#include <strata/optim/adamw.hpp>        // adamw_hparams, adamw_update, validate
#include <strata/optim/adamw_simd.hpp>   // adamw_update_parallel, adamw_path, resolve
#include <strata/optim/optimizer.hpp>    // Optimizer, optimizer_step, optimizer_state, state_label
#include <strata/optim/sgd.hpp>          // sgd_hparams, sgd_update, validate
#include <strata/optim/sgd_simd.hpp>     // sgd_update_parallel

#include <nlohmann/json.hpp>  // nlohmann::json

#include <array>        // std::array
#include <cstddef>      // std::size_t
#include <span>         // std::span
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <type_traits>  // std::is_same_v
#include <variant>      // std::variant, std::visit

namespace strata {

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
    const adamw_hparams& hparams() const noexcept { return m_hparams; }
    adamw_path path() const noexcept { return m_path; }  // the concrete path, never automatic
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

    // state: the device addresses of m and v, each (n).
    template <class Ops, class R>
    void update_device(typename Ops::stream& s, R* p, const R* g, std::span<R* const> state, std::size_t n,
                       const optimizer_step& k) const {
        detail::check_state_count(name(), state.size(), states.size());
        Ops::adamw(s, p, g, state[0], state[1], n, m_hparams, k.lr, k.step, k.decay);
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
    const sgd_hparams& hparams() const noexcept { return m_hparams; }
    adamw_path path() const noexcept { return m_path; }
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

    template <class Ops, class R>
    void update_device(typename Ops::stream& s, R* p, const R* g, std::span<R* const> state, std::size_t n,
                       const optimizer_step& k) const {
        detail::check_state_count(name(), state.size(), states.size());
        Ops::sgd(s, p, g, state[0], n, m_hparams, k.lr, k.decay);
    }

private:
    static const sgd_hparams& checked(const sgd_hparams& h) {
        validate(h);
        return h;
    }

    sgd_hparams m_hparams;
    adamw_path m_path;
};

// The optimizers a run can choose by name.
enum class optimizer_kind { adamw, sgd };

constexpr std::string_view name_of(optimizer_kind k) {
    switch (k) {
        case optimizer_kind::adamw: return adamw_optimizer::name();
        case optimizer_kind::sgd: return sgd_optimizer::name();
    }
    return "unknown";
}

// "adamw" | "sgd", as a command line or a checkpoint writes it.
inline optimizer_kind optimizer_kind_from_string(std::string_view text) {
    for (optimizer_kind k : {optimizer_kind::adamw, optimizer_kind::sgd})
        if (text == name_of(k)) return k;
    throw error("unknown optimizer '" + std::string(text) + "'", "use adamw or sgd", {"optimizer"});
}

// What the planner needs before any optimizer exists: the state tensors of each kind.
constexpr std::span<const std::string_view> state_names_of(optimizer_kind k) {
    return k == optimizer_kind::sgd ? sgd_optimizer::state_names() : adamw_optimizer::state_names();
}
constexpr std::string_view display_name_of(optimizer_kind k) {
    return k == optimizer_kind::sgd ? sgd_optimizer::display_name() : adamw_optimizer::display_name();
}

class any_optimizer {
public:
    any_optimizer(adamw_optimizer o) : m_impl(std::move(o)) {}  // NOLINT: implicit, as a variant's alternatives
    any_optimizer(sgd_optimizer o) : m_impl(std::move(o)) {}    // NOLINT

    optimizer_kind kind() const noexcept {
        return std::holds_alternative<sgd_optimizer>(m_impl) ? optimizer_kind::sgd : optimizer_kind::adamw;
    }
    std::string_view name() const { return name_of(kind()); }
    std::string_view display_name() const { return display_name_of(kind()); }
    std::span<const std::string_view> state_names() const { return state_names_of(kind()); }
    nlohmann::json hparams_json() const {
        return std::visit([](const auto& o) { return o.hparams_json(); }, m_impl);
    }

    template <class R>
    void update(host_thread_pool& pool, std::span<R> p, std::span<const R> g, optimizer_state<R> state,
                const optimizer_step& k, R grad_scale = R(1)) const {
        std::visit([&](const auto& o) { o.update(pool, p, g, state, k, grad_scale); }, m_impl);
    }
    template <class Ops, class R>
    void update_device(typename Ops::stream& s, R* p, const R* g, std::span<R* const> state, std::size_t n,
                       const optimizer_step& k) const {
        std::visit([&](const auto& o) { o.template update_device<Ops>(s, p, g, state, n, k); }, m_impl);
    }

    // The optimizer itself (f(const adamw_optimizer&) or f(const sgd_optimizer&)).
    template <class F>
    decltype(auto) visit(F&& f) const {
        return std::visit(std::forward<F>(f), m_impl);
    }

private:
    std::variant<adamw_optimizer, sgd_optimizer> m_impl;
};

static_assert(Optimizer<adamw_optimizer> && Optimizer<sgd_optimizer> && Optimizer<any_optimizer>);

}  // namespace strata
