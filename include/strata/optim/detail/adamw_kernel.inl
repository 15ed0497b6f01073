// AdamW's element loop for one instruction set's `lanes` (included per instruction set by
// for_each_isa.inl; see optim/simd_lanes.hpp): adamw_apply's body (optim/adamw.hpp), lane-wise,
// with the reference's IEEE operations in its order (see adamw_simd.hpp).

// The step's scalars, broadcast.
struct adamw_vectors {
    lanes::vec decay_factor, lerp_weight, one_minus_lerp_weight, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size;
    lanes::vec grad_scale;
};

// One vector of elements at i; `which` is full_vector or a lanes::mask. for_each_vector's step.
template <bool Decay, bool SmallWeight, bool Scaled>
struct adamw_lanes {
    float* p;
    const float* g;
    float* m;
    float* v;
    adamw_vectors k;

    template <class Which>
    STRATA_SIMD_TARGET __attribute__((always_inline)) void operator()(std::size_t i, Which which) const {
        lanes::vec param = lanes::load(p + i, which);
        lanes::vec grad = lanes::load(g + i, which);
        lanes::vec exp_avg = lanes::load(m + i, which);
        lanes::vec exp_avg_sq = lanes::load(v + i, which);
        if constexpr (Scaled) {
            grad = lanes::mul(grad, k.grad_scale);
            asm("" : "+v"(grad));  // keeps this product out of an FMA with `grad - m`
        }
        if constexpr (Decay) {
            param = lanes::mul(param, k.decay_factor);
            asm("" : "+v"(param));  // keeps this product out of an FMA with the final add
        }
        const lanes::vec diff = lanes::sub(grad, exp_avg);
        if constexpr (SmallWeight)
            exp_avg = lanes::fma(k.lerp_weight, diff, exp_avg);
        else  // fma(-(grad - m), 1 - w, grad): the negation is a sign flip, as in scalar code
            exp_avg = lanes::fma(lanes::negate(diff), k.one_minus_lerp_weight, grad);
        exp_avg_sq = lanes::mul(exp_avg_sq, k.beta2);
        exp_avg_sq = lanes::fma(lanes::mul(k.one_minus_beta2, grad), grad, exp_avg_sq);
        const lanes::vec denom = lanes::add(lanes::div(lanes::sqrt(exp_avg_sq), k.bc2_sqrt), k.eps);
        param = lanes::add(param, lanes::div(lanes::mul(k.neg_step_size, exp_avg), denom));
        lanes::store(p + i, which, param);
        lanes::store(m + i, which, exp_avg);
        lanes::store(v + i, which, exp_avg_sq);
    }

    STRATA_SIMD_TARGET __attribute__((always_inline)) void each_line(std::size_t i) const {
        prefetch_ahead(p + i);  // one cache line of each array per line of p
        prefetch_ahead(g + i);
        prefetch_ahead(m + i);
        prefetch_ahead(v + i);
    }
};

template <bool Decay, bool SmallWeight, bool Scaled>
STRATA_SIMD_TARGET inline void adamw_loop(float* p, const float* g, float* m, float* v, std::size_t n,
                                          const adamw_constants<float>& s, float grad_scale) {
    // Copied into vectors before the first store: p, m, v are floats and could alias `s`.
    const adamw_vectors k{lanes::broadcast(s.decay_factor),    lanes::broadcast(s.lerp_weight),
                          lanes::broadcast(1.0f - s.lerp_weight), lanes::broadcast(s.beta2),
                          lanes::broadcast(s.one_minus_beta2), lanes::broadcast(s.bc2_sqrt),
                          lanes::broadcast(s.eps),             lanes::broadcast(s.neg_step_size),
                          lanes::broadcast(grad_scale)};
    for_each_vector(p, n, adamw_lanes<Decay, SmallWeight, Scaled>{p, g, m, v, k});
}

// One step over n elements, each flag of the step compiled in (grad_scale 1 skips the scale).
inline void adamw_kernel(const adamw_constants<float>& s, float* p, const float* g, float* m, float* v, std::size_t n,
                         float grad_scale) {
    with_adamw_flags(s, grad_scale != 1.0f, [&](auto decay, auto small_weight, auto scale) {
        adamw_loop<decltype(decay)::value, decltype(small_weight)::value, decltype(scale)::value>(p, g, m, v, n, s,
                                                                                               grad_scale);
    });
}
