// SGD's element loop for one instruction set's `lanes` (included per instruction set by
// for_each_isa.inl; see optim/simd_lanes.hpp): sgd_apply's body (optim/sgd.hpp), lane-wise, with
// the reference's IEEE operations in its order (see sgd_simd.hpp).

// The step's scalars, broadcast.
struct sgd_vectors {
    lanes::vec weight_decay, momentum, neg_lr, grad_scale;
};

// One vector of elements at i; `which` is full_vector or a lanes::mask. for_each_vector's step.
template <bool Decay, bool Momentum, bool Nesterov, bool Scaled>
struct sgd_lanes {
    float* p;
    const float* g;
    float* b;
    sgd_vectors k;

    template <class Which>
    STRATA_SIMD_TARGET __attribute__((always_inline)) void operator()(std::size_t i, Which which) const {
        const lanes::vec param = lanes::load(p + i, which);
        lanes::vec grad = lanes::load(g + i, which);
        if constexpr (Scaled) {
            grad = lanes::mul(grad, k.grad_scale);
            asm("" : "+v"(grad));  // keeps this product out of an FMA with the decay
        }
        if constexpr (Decay) grad = lanes::fma(param, k.weight_decay, grad);
        if constexpr (Momentum) {
            lanes::vec buf = lanes::mul(lanes::load(b + i, which), k.momentum);
            asm("" : "+v"(buf));  // b * mu is rounded before g is added, as the reference does
            buf = lanes::add(buf, grad);
            lanes::store(b + i, which, buf);
            grad = Nesterov ? lanes::fma(buf, k.momentum, grad) : buf;
        }
        lanes::store(p + i, which, lanes::fma(grad, k.neg_lr, param));
    }

    void each_line(std::size_t) const {}  // no prefetch: SGD's stream has no divisions to wait on
};

template <bool Decay, bool Momentum, bool Nesterov, bool Scaled>
STRATA_SIMD_TARGET inline void sgd_loop(float* p, const float* g, float* b, std::size_t n, const sgd_constants<float>& s,
                                        float grad_scale) {
    // Copied into vectors before the first store: p and b are floats and could alias `s`.
    const sgd_vectors k{lanes::broadcast(s.weight_decay), lanes::broadcast(s.momentum), lanes::broadcast(s.neg_lr),
                        lanes::broadcast(grad_scale)};
    for_each_vector(p, n, sgd_lanes<Decay, Momentum, Nesterov, Scaled>{p, g, b, k});
}

// One step over n elements, each flag of the step compiled in (grad_scale 1 skips the scale).
inline void sgd_kernel(const sgd_constants<float>& s, float* p, const float* g, float* b, std::size_t n,
                       float grad_scale) {
    with_sgd_flags(s, grad_scale != 1.0f, [&](auto decay, auto momentum, auto nesterov, auto scale) {
        sgd_loop<decltype(decay)::value, decltype(momentum)::value, decltype(nesterov)::value, decltype(scale)::value>(
            p, g, b, n, s, grad_scale);
    });
}
