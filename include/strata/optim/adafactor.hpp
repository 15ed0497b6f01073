// Adafactor (Shazeer & Stern, 2018) as torch.optim.Adafactor runs it (PyTorch 2.5+,
// `_single_tensor_adafactor`, maximize=False): the reference host update, its per-step constants,
// and adafactor_optimizer, the Optimizer (optim/optimizer.hpp) the trainers run.
//
// For a parameter tensor p with gradient g at 1-based step t, a matrix (R, C) (a tensor of rank
// > 2 is a batch of such matrices over its leading extents) or a vector of n elements:
//
//   w     = t^beta2_decay                            one_minus_beta2_t (double; T(w) as lerp weight)
//   rho   = min(lr, 1 / t^0.5)
//   alpha = max(eps2, T(||p||) / sqrt(numel)) * rho  p before the weight decay
//   p     = p * T(1 - lr * wd)                       [wd != 0 and the tensor decays]
//   matrix: row_var = lerp(row_var, T(||g_r||)^2 / C, w)     per row r   (state (.., R, 1))
//           col_var = lerp(col_var, T(||g_c||)^2 / R, w)     per column c (state (.., 1, C))
//           v = row_var[r] * col_var[c] / max(mean_r(row_var), eps1)
//   vector: variance = lerp(variance, g * g, w);  v = variance              (state: p's shape)
//   u     = g * 1 / sqrt(max(v, T(eps1^2)))
//   denom = max(1, T(||u||) / (sqrt(numel) * d))
//   p     = fma(u, T(-alpha / denom), p)             param.add_(update, alpha=-alpha / denom)
//
// eps1 unset (torch's None) is the tensor type's machine epsilon. The lerp is torch's CPU lerp
// (the FMA formula below or above weight 0.5, as in adamw.hpp); the final add is the FMA of its
// vectorized add(alpha).
//
// Reductions, strata's canonical order (torch's own differ, so a trajectory matches torch's to a
// tolerance, not to the bit): every sum of squares is taken in double, each "row" from its first
// element to its last, then the rows' sums from the first row to the last; a matrix's rows are
// its rows (a batch's, one matrix after the other), a vector's rows are adafactor_chunk elements
// each (the last one shorter); a column's sum runs from row 0 down; a norm is then rounded to T,
// as torch's `.norm().item()` is a T. The CUDA kernel (kernels/cuda/adafactor.cuh) gives one
// thread each row (or column) and adds the rows' sums on one thread, in this order, with IEEE
// double operations: the host and the device give the same bits.
//
// State: three tensors named as torch names them, "row_var", "col_var" and "variance"; a matrix
// keeps the first two (R + C elements per matrix: about 2 / C of AdamW's two tensors), a vector
// the third; the others are empty for that tensor.
#pragma once

#include <strata/core/error.hpp>              // strata::error
#include <strata/core/shape.hpp>              // shape
#include <strata/optim/host_thread_pool.hpp>  // host_thread_pool
#include <strata/optim/optimizer.hpp>         // optimizer_step, optimizer_state

#include <nlohmann/json.hpp>  // nlohmann::json

#include <algorithm>    // std::max, std::min
#include <array>        // std::array
#include <cmath>        // std::fma, std::isfinite, std::pow, std::sqrt
#include <concepts>     // std::floating_point
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uintptr_t
#include <limits>       // std::numeric_limits
#include <optional>     // std::optional
#include <span>         // std::span
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <type_traits>  // std::type_identity_t
#include <utility>      // std::forward
#include <vector>       // std::vector

namespace strata {

namespace cuda {
class stream;  // backend/cuda/stream.hpp: declared here so that this header needs no CUDA
}

// Hyperparameters in double, as torch holds them; the learning rate is not here: it changes every
// step (Adafactor's lr caps the relative step rho and scales the weight decay).
struct adafactor_hparams {
    double beta2_decay = -0.8;   // w_t = t^beta2_decay, the weight of this step's squared gradient
    std::optional<double> eps1;  // the variance's floor (squared) and the row mean's; none: the type's epsilon
    double eps2 = 1e-3;          // the smallest parameter RMS the relative step scales by
    double d = 1.0;              // the update's RMS is clipped to d
    double weight_decay = 0.0;   // decoupled: p *= 1 - lr * weight_decay
};

inline void validate(const adafactor_hparams& h) {
    const auto bad = [](const std::string& what, const std::string& hint) { throw error("adafactor: " + what, hint); };
    if (!(std::isfinite(h.beta2_decay) && h.beta2_decay <= 0))
        bad("beta2_decay must be a finite number <= 0, got " + std::to_string(h.beta2_decay),
            "torch's default is -0.8 (the squared gradient's weight decays as t^-0.8)");
    if (h.eps1 && !(std::isfinite(*h.eps1) && *h.eps1 >= 0))
        bad("eps1 must be a finite number >= 0, got " + std::to_string(*h.eps1),
            "leave it unset for the tensor type's machine epsilon (torch's None)");
    if (!(std::isfinite(h.eps2) && h.eps2 >= 0))
        bad("eps2 must be a finite number >= 0, got " + std::to_string(h.eps2), "torch's default is 1e-3");
    if (!(std::isfinite(h.d) && h.d >= 1))
        bad("the clipping threshold d must be a finite number >= 1, got " + std::to_string(h.d),
            "torch's default is 1 (an update's RMS is at most 1)");
    if (!(std::isfinite(h.weight_decay) && h.weight_decay >= 0))
        bad("weight_decay must be a finite number >= 0, got " + std::to_string(h.weight_decay),
            "Adafactor's decay is decoupled (p *= 1 - lr * weight_decay); 0 disables it");
}

// A vector's "rows" for the canonical order of its sums of squares.
inline constexpr std::size_t adafactor_chunk = 4096;

// How a parameter tensor is factored: `batch` matrices of rows x cols (rank >= 2), or a vector of
// n elements cut into rows of adafactor_chunk for its sums.
struct adafactor_view {
    bool factored = false;
    std::size_t batch = 1, rows = 0, cols = 0;
    std::size_t n = 0;  // elements

    // Rows of the canonical sums: every matrix's rows, or the vector's chunks.
    std::size_t sum_rows() const { return factored ? batch * rows : (n + adafactor_chunk - 1) / adafactor_chunk; }
    // Elements of sum row r.
    std::size_t row_begin(std::size_t r) const { return r * (factored ? cols : adafactor_chunk); }
    std::size_t row_end(std::size_t r) const { return std::min(n, row_begin(r) + (factored ? cols : adafactor_chunk)); }
};

// The view of a tensor of shape `s` and n elements (a scalar shape: a vector of n).
inline adafactor_view adafactor_view_of(const shape& s, std::size_t n) {
    adafactor_view v;
    v.n = n;
    if (s.rank() >= 2) {
        if (s.numel() != n)
            throw error("adafactor: a parameter of shape " + s.to_string() + " given " + std::to_string(n) + " elements",
                        "pass the tensor's shape with its span (optimizer_step::shape)");
        v.factored = true;
        v.rows = s[s.rank() - 2];
        v.cols = s[s.rank() - 1];
        v.batch = v.rows * v.cols == 0 ? 0 : n / (v.rows * v.cols);
    }
    return v;
}

// The per-step constants of one Adafactor step of one tensor in type T (torch's Python scalars
// rounded to T where torch rounds them; the rest in double), shared by the reference and the CUDA
// kernel.
template <std::floating_point T>
struct adafactor_constants {
    T weight{};                  // T(t^beta2_decay): the lerp's weight
    bool weight_small = false;   // weight < 0.5: torch's lerp takes its first formula
    T eps1{};                    // the row mean's floor
    T eps1_squared{};            // the variance estimate's floor, T(eps1 * eps1)
    T decay_factor{};            // T(1 - lr * weight_decay)
    bool apply_decay = false;    // decay && weight_decay != 0
    double rho = 0;              // min(lr, 1 / t^0.5)
    double eps2 = 0;
    double sqrt_numel = 0;       // numel^0.5
    double d = 1;
};

template <std::floating_point T>
adafactor_constants<T> adafactor_constants_for(const adafactor_hparams& h, double lr, long step, bool decay,
                                               std::size_t numel, std::string_view who = "adafactor") {
    validate(h);
    if (step < 1)
        throw error(std::string(who) + ": step must be >= 1 (1-based), got " + std::to_string(step),
                    "count updates from 1, as torch's state['step'] after its increment");
    if (!(std::isfinite(lr) && lr >= 0))
        throw error(std::string(who) + ": lr must be a finite number >= 0, got " + std::to_string(lr),
                    "check the learning-rate schedule");
    const double t = static_cast<double>(step);
    const double eps1 = h.eps1 ? *h.eps1 : static_cast<double>(std::numeric_limits<T>::epsilon());
    adafactor_constants<T> k;
    k.weight = static_cast<T>(std::pow(t, h.beta2_decay));
    k.weight_small = k.weight < T(0.5);
    k.eps1 = static_cast<T>(eps1);
    k.eps1_squared = static_cast<T>(eps1 * eps1);
    k.decay_factor = static_cast<T>(1 - lr * h.weight_decay);
    k.apply_decay = decay && h.weight_decay != 0;
    k.rho = std::min(lr, 1 / std::pow(t, 0.5));
    k.eps2 = h.eps2;
    k.sqrt_numel = std::pow(static_cast<double>(numel), 0.5);
    k.d = h.d;
    return k;
}

namespace detail {
// torch's CPU lerp of `self` towards `end` (as in adamw_apply).
template <class T>
T adafactor_lerp(T self, T end, const adafactor_constants<T>& k) {
    return k.weight_small ? std::fma(k.weight, end - self, self) : std::fma(-(end - self), T(1) - k.weight, end);
}
// T(sqrt(sum)) squared over `count`: torch's vector_norm(...).square_().div_(count).
template <class T>
T adafactor_mean_square(double sum, std::size_t count) {
    const T norm = static_cast<T>(std::sqrt(sum));
    return norm * norm / static_cast<T>(count);
}
}  // namespace detail

// Loops shorter than this many elements run on the calling thread alone: waking the workers costs more.
inline constexpr std::size_t adafactor_parallel_min_work = std::size_t{1} << 15;

namespace detail {
// body(begin, end) over [0, count) items of `per_item` elements each, in contiguous ranges on the
// pool's threads (the caller's among them), each range at least adafactor_parallel_min_work
// elements. `multiple`, `phase`: as chunking's (range boundaries on cache lines of the written array).
template <class F>
void adafactor_for(host_thread_pool& pool, std::size_t count, std::size_t per_item, F&& body, std::size_t multiple = 1,
                   std::size_t phase = 0) {
    const std::size_t min_chunk = std::max<std::size_t>(1, adafactor_parallel_min_work / std::max<std::size_t>(1, per_item));
    pool.parallel_for(count, std::forward<F>(body), {.multiple = multiple, .phase = phase, .min_chunk = min_chunk});
}
}  // namespace detail

// The element loop of one Adafactor step on raw pointers in the canonical order: the operations
// the CUDA kernel reproduces. row (batch x rows), col (batch x cols) for a factored view, var (n)
// for a vector; the others unused. grad_scale as in adamw_apply (g * grad_scale, its own rounding,
// g not written; 1 skips it).
//
// On the pool's threads: each sum row's (and each column's) sum is one thread's, in its order, and
// the rows' sums are added on the calling thread from the first row to the last, so every thread
// count gives the bits of one thread (and of the CUDA kernel). Rows go to the threads in
// contiguous ranges, columns in contiguous ranges that each run down the rows together (a column's
// sum from row 0 down), the last pass element by element.
template <std::floating_point T>
void adafactor_apply(host_thread_pool& pool,
                     T* p,        // (n)
                     const T* g,  // (n)
                     T* row,      // (batch, rows) factored
                     T* col,      // (batch, cols) factored
                     T* var,      // (n) vector
                     const adafactor_view& v, const adafactor_constants<T>& k, const T grad_scale = T(1)) {
    if (v.n == 0) return;
    const bool scaled = grad_scale != T(1);
    const auto grad = [=](std::size_t i) { return scaled ? g[i] * grad_scale : g[i]; };
    const std::size_t sum_rows = v.sum_rows();
    const std::size_t row_length = v.factored ? v.cols : adafactor_chunk;
    std::vector<double> row_sums(sum_rows);  // each sum row's ||p||^2 (pass 1), then its ||u||^2 (pass 2)
    const auto in_order = [&] {              // the rows' sums, first to last
        double sum = 0;
        for (const double r : row_sums) sum += r;
        return sum;
    };
    // Pass 1: ||p||^2 per row; the row and column means of g^2 into row_var / col_var, or variance.
    if (v.factored) {
        detail::adafactor_for(pool, sum_rows, row_length, [&](std::size_t begin, std::size_t end) {
            for (std::size_t r = begin; r < end; ++r) {  // r: batch * rows + row
                const std::size_t base = r * v.cols;
                double p_row = 0, g_row = 0;
                for (std::size_t c = 0; c < v.cols; ++c) {
                    const double pd = static_cast<double>(p[base + c]), gd = static_cast<double>(grad(base + c));
                    p_row += pd * pd;
                    g_row += gd * gd;
                }
                row_sums[r] = p_row;
                row[r] = detail::adafactor_lerp(row[r], detail::adafactor_mean_square<T>(g_row, v.cols), k);
            }
        });
        detail::adafactor_for(pool, v.batch * v.cols, v.rows, [&](std::size_t begin, std::size_t end) {
            std::vector<double> col_sum;
            for (std::size_t b = begin / v.cols; b * v.cols < end; ++b) {  // the range's part of matrix b
                const std::size_t c0 = std::max(begin, b * v.cols) - b * v.cols;
                const std::size_t c1 = std::min(end, (b + 1) * v.cols) - b * v.cols;
                col_sum.assign(c1 - c0, 0.0);
                for (std::size_t r = 0; r < v.rows; ++r) {
                    const std::size_t base = (b * v.rows + r) * v.cols;
                    for (std::size_t c = c0; c < c1; ++c) {
                        const double gd = static_cast<double>(grad(base + c));
                        col_sum[c - c0] += gd * gd;
                    }
                }
                for (std::size_t c = c0; c < c1; ++c)
                    col[b * v.cols + c] = detail::adafactor_lerp(
                        col[b * v.cols + c], detail::adafactor_mean_square<T>(col_sum[c - c0], v.rows), k);
            }
        });
    } else {
        detail::adafactor_for(pool, sum_rows, row_length, [&](std::size_t begin, std::size_t end) {
            for (std::size_t r = begin; r < end; ++r) {
                double p_row = 0;
                for (std::size_t i = v.row_begin(r); i < v.row_end(r); ++i) {
                    const T gi = grad(i);
                    p_row += static_cast<double>(p[i]) * static_cast<double>(p[i]);
                    var[i] = detail::adafactor_lerp(var[i], gi * gi, k);
                }
                row_sums[r] = p_row;
            }
        });
    }
    const double p_sum = in_order();
    // Each matrix's mean of row_var, floored at eps1.
    std::vector<T> row_mean(v.factored ? v.batch : 0);
    for (std::size_t b = 0; b < row_mean.size(); ++b) {
        double sum = 0;
        for (std::size_t r = 0; r < v.rows; ++r) sum += static_cast<double>(row[b * v.rows + r]);
        row_mean[b] = std::max(static_cast<T>(sum / static_cast<double>(v.rows)), k.eps1);
    }
    const auto update = [&](std::size_t i) {  // u_i = g_i / sqrt(max(v_i, eps1^2))
        T estimate;
        if (v.factored) {
            const std::size_t b = i / (v.rows * v.cols), r = i / v.cols % v.rows, c = i % v.cols;
            estimate = row[b * v.rows + r] * col[b * v.cols + c] / row_mean[b];
        } else {
            estimate = var[i];
        }
        return T(1) / std::sqrt(std::max(estimate, k.eps1_squared)) * grad(i);
    };
    // Pass 2: ||u||^2 per row.
    detail::adafactor_for(pool, sum_rows, row_length, [&](std::size_t begin, std::size_t end) {
        for (std::size_t r = begin; r < end; ++r) {
            double u_row = 0;
            for (std::size_t i = v.row_begin(r); i < v.row_end(r); ++i) {
                const double u = static_cast<double>(update(i));
                u_row += u * u;
            }
            row_sums[r] = u_row;
        }
    });
    const double u_sum = in_order();
    const double alpha = std::max(k.eps2, static_cast<double>(static_cast<T>(std::sqrt(p_sum))) / k.sqrt_numel) * k.rho;
    const double denom = std::max(1.0, static_cast<double>(static_cast<T>(std::sqrt(u_sum))) / (k.sqrt_numel * k.d));
    const T step = static_cast<T>(-alpha / denom);
    // Pass 3: the decay, then the step (ranges on p's cache lines: no two threads write one).
    detail::adafactor_for(
        pool, v.n, 1,
        [&](std::size_t begin, std::size_t end) {
            for (std::size_t i = begin; i < end; ++i) {
                T param = p[i];
                if (k.apply_decay) param = param * k.decay_factor;
                p[i] = std::fma(update(i), step, param);
            }
        },
        64 / sizeof(T), reinterpret_cast<std::uintptr_t>(p) % 64 / sizeof(T));
}

// The same on the calling thread alone.
template <std::floating_point T>
void adafactor_apply(T* p, const T* g, T* row, T* col, T* var, const adafactor_view& v, const adafactor_constants<T>& k,
                     const T grad_scale = T(1)) {
    host_thread_pool one_thread(1);
    adafactor_apply(one_thread, p, g, row, col, var, v, k, grad_scale);
}

// One Adafactor step of one parameter tensor of shape `s` (p, g: its elements; row, col, var: its
// state, as long as adafactor_optimizer::state_shape says: a matrix's row_var and col_var, a
// vector's variance, the others empty) on the pool's threads, the same bits for every thread
// count. `step` is 1-based; `decay` false skips the weight decay.
template <std::floating_point T>
void adafactor_update(host_thread_pool& pool, std::span<T> p, std::span<const std::type_identity_t<T>> g, std::span<std::type_identity_t<T>> row,
                      std::span<std::type_identity_t<T>> col, std::span<std::type_identity_t<T>> var,
                      const shape& s, const adafactor_hparams& h, double lr, long step, bool decay,
                      std::type_identity_t<T> grad_scale = T(1)) {
    const adafactor_view v = adafactor_view_of(s, p.size());
    const auto sizes = [&] {
        return "params " + std::to_string(p.size()) + ", grads " + std::to_string(g.size()) + ", row_var " +
               std::to_string(row.size()) + ", col_var " + std::to_string(col.size()) + ", variance " +
               std::to_string(var.size());
    };
    const bool fits = g.size() == p.size() &&
                      (v.factored ? row.size() == v.batch * v.rows && col.size() == v.batch * v.cols && var.empty()
                                  : row.empty() && col.empty() && var.size() == p.size());
    if (!fits)
        throw error("adafactor: span sizes do not fit a parameter of shape " + s.to_string() + ": " + sizes(),
                    "size the state with adafactor_optimizer::state_shape (a matrix: row_var and col_var; a vector: "
                    "variance)");
    if (!(std::isfinite(grad_scale) && grad_scale >= 0))
        throw error("adafactor: grad_scale must be a finite number >= 0, got " + std::to_string(grad_scale),
                    "pass the clip coefficient, or 1 for no scaling");
    adafactor_apply(pool, p.data(), g.data(), row.data(), col.data(), var.data(), v,
                    adafactor_constants_for<T>(h, lr, step, decay, p.size()), grad_scale);
}

// The same on the calling thread alone.
template <std::floating_point T>
void adafactor_update(std::span<T> p, std::span<const std::type_identity_t<T>> g, std::span<std::type_identity_t<T>> row,
                      std::span<std::type_identity_t<T>> col, std::span<std::type_identity_t<T>> var,
                      const shape& s, const adafactor_hparams& h, double lr, long step, bool decay,
                      std::type_identity_t<T> grad_scale = T(1)) {
    host_thread_pool one_thread(1);
    adafactor_update<T>(one_thread, p, g, row, col, var, s, h, lr, step, decay, grad_scale);
}

class adafactor_optimizer;
// One step of one parameter tensor in CUDA device memory on stream s, bitwise adafactor_apply<float>
// (optim/cuda_update.hpp calls it): defined with the kernel in kernels/cuda/adafactor.cuh, compiled
// once, in src/cuda/optim.cu.
void cuda_update(const adafactor_optimizer& o, cuda::stream& s, float* p, const float* g,
                 std::span<float* const> state, const optimizer_step& k);

class adafactor_optimizer {
public:
    using hparams_type = adafactor_hparams;
    static constexpr std::array<std::string_view, 3> states{"row_var", "col_var", "variance"};

    explicit adafactor_optimizer(const adafactor_hparams& h = {}) : m_hparams(checked(h)) {}

    static constexpr std::string_view name() { return "adafactor"; }
    static constexpr std::string_view display_name() { return "Adafactor"; }
    static constexpr std::span<const std::string_view> state_names() { return states; }
    // A matrix (.., R, C): row_var (.., R, 1), col_var (.., 1, C), no variance; a vector: its variance.
    static shape state_shape(std::size_t i, const shape& s) {
        if (s.rank() < 2) return i == 2 ? s : shape{0};
        if (i == 2) return shape{0};
        std::vector<std::size_t> e = s.extents();
        e[s.rank() - (i == 0 ? 1 : 2)] = 1;
        return shape(std::move(e));
    }
    const adafactor_hparams& hparams() const noexcept { return m_hparams; }
    // From hyperparameters by name: beta2_decay, eps1 (null: the type's epsilon), eps2, d, weight_decay.
    static adafactor_optimizer from_json(const nlohmann::json& h) {
        detail::check_hparam_keys(name(), h, {"beta2_decay", "eps1", "eps2", "d", "weight_decay"});
        const adafactor_hparams d;
        adafactor_hparams a{.beta2_decay = detail::hparam_or(h, "beta2_decay", d.beta2_decay),
                            .eps1 = d.eps1,
                            .eps2 = detail::hparam_or(h, "eps2", d.eps2),
                            .d = detail::hparam_or(h, "d", d.d),
                            .weight_decay = detail::hparam_or(h, "weight_decay", d.weight_decay)};
        if (!h.is_null() && h.contains("eps1") && !h.at("eps1").is_null()) a.eps1 = h.at("eps1").get<double>();
        return adafactor_optimizer(a);
    }
    nlohmann::json hparams_json() const {
        return {{"beta2_decay", m_hparams.beta2_decay},
                {"eps1", m_hparams.eps1 ? nlohmann::json(*m_hparams.eps1) : nlohmann::json(nullptr)},
                {"eps2", m_hparams.eps2},
                {"d", m_hparams.d},
                {"weight_decay", m_hparams.weight_decay}};
    }

    // On the pool's threads; the sums in the canonical order, so the bits do not depend on the count.
    template <class R>
    void update(host_thread_pool& pool, std::span<R> p, std::span<const R> g, optimizer_state<R> state,
                const optimizer_step& k, R grad_scale = R(1)) const {
        if (state.size() != states.size())
            throw error("adafactor: " + std::to_string(state.size()) + " state tensor(s) given, it keeps 3",
                        "pass one span per name of state_names(), in that order");
        adafactor_update<R>(pool, p, g, state[0], state[1], state[2], k.shape, m_hparams, k.lr, k.step, k.decay, grad_scale);
    }

private:
    static const adafactor_hparams& checked(const adafactor_hparams& h) {
        validate(h);
        return h;
    }

    adafactor_hparams m_hparams;
};

}  // namespace strata
