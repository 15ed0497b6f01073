// Tools to check a backward kernel against finite differences of its forward, and to compare a
// kernel's result with a reference (another precision, another backend).
#pragma once

#include <algorithm>              // std::max
#include <cmath>                  // std::abs
#include <concepts>               // std::convertible_to
#include <cstddef>                // std::size_t
#include <cstdint>                // std::uint32_t
#include <iomanip>                // std::setprecision
#include <random>                 // std::mt19937, std::uniform_real_distribution
#include <ranges>                 // std::ranges::size, std::ranges::random_access_range
#include <span>                   // std::span
#include <sstream>                // std::ostringstream
#include <string>                 // std::string, std::to_string
#include <string_view>            // std::string_view
#include <utility>                // std::pair
#include <vector>                 // std::vector
#include <strata/core/error.hpp>  // strata::error

namespace strata::kernels::cpu {

// Central differences, d loss / d x_i ~ (loss(x + h e_i) - loss(x - h e_i)) / 2h, for every i.
// loss() reads x (through whatever it captured); each x_i is restored after its two evaluations.
// The error is O(h^2) from truncation plus ~eps * sum|loss terms| / h from rounding; h = 1e-5
// keeps both near 1e-10 (absolute) for double losses of tens of units. That noise is why
// comparisons against it use numeric_gradient_floor: gradient elements below 1e-3 are held to an
// absolute error (1e-3 * threshold), not to a relative one that noise alone could break (a GELU
// input near the minimum of gelu has a gradient near 0).
inline constexpr double numeric_gradient_floor = 1e-3;

template <class Loss>
std::vector<double> numeric_gradient(Loss&& loss, std::span<double> x, double h = 1e-5) {
    std::vector<double> gradient(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double saved = x[i];
        x[i] = saved + h;
        const double plus = loss();
        x[i] = saved - h;
        const double minus = loss();
        x[i] = saved;
        gradient[i] = (plus - minus) / (2.0 * h);
    }
    return gradient;
}

// The worst element of a comparison, with what is needed to read a failure.
struct comparison {
    double error = 0.0;  // the largest per-element error
    std::size_t index = 0;
    double actual = 0.0;
    double expected = 0.0;

    // what: the tensor compared, to tell failures apart ("dinp", "dwte").
    std::string describe(std::string_view what = "values") const {
        std::ostringstream text;
        text << std::setprecision(9) << what << ": worst error " << error << " at [" << index
             << "]: " << actual << " vs expected " << expected;
        return text.str();
    }
};

// Per element |a - e| / max(floor, |a| + |e|), the largest one. The floor stops elements that are
// zero in both (an unused embedding row, an ignored target) from dividing by zero, and sets how
// small an element may be before its absolute error counts instead of its relative one.
template <std::ranges::random_access_range Actual, std::ranges::random_access_range Expected>
comparison compare(const Actual& actual, const Expected& expected, double floor = 1e-8) {
    if (std::ranges::size(actual) != std::ranges::size(expected)) {
        throw error("compare: " + std::to_string(std::ranges::size(actual)) + " values against " +
                        std::to_string(std::ranges::size(expected)) + " expected",
                    "compare buffers of the same tensor");
    }
    comparison worst;
    worst.error = -1.0;
    for (std::size_t i = 0; i < std::ranges::size(actual); ++i) {
        const double a = static_cast<double>(actual[i]);
        const double e = static_cast<double>(expected[i]);
        const double err = std::abs(a - e) / std::max(floor, std::abs(a) + std::abs(e));
        if (err > worst.error) worst = {err, i, a, e};
    }
    worst.error = std::max(worst.error, 0.0);
    return worst;
}

// n values uniform in [lo, hi). The same seed gives the same values (rounded to Real) for float
// and double, so a float run can be compared with a double run of the same inputs.
template <class Real = double>
std::vector<Real> random_vector(std::size_t n, std::uint32_t seed, double lo = -1.0,
                                double hi = 1.0) {
    std::mt19937 engine(seed);
    std::uniform_real_distribution<double> uniform(lo, hi);
    std::vector<Real> values(n);
    for (auto& value : values) value = static_cast<Real>(uniform(engine));
    return values;
}

// A kernel test problem: a struct owning the inputs, outputs and gradients of one op, where
// forward() runs the forward kernel and returns a scalar loss, and backward() runs the backward
// kernel for that loss (e.g. loss = sum(out * dout), so every output counts), accumulating into
// the gradient members. Templated on the element type, it serves both precisions.
template <class Problem>
concept DifferentiableProblem = requires(Problem problem) {
    { problem.forward() } -> std::convertible_to<double>;
    problem.backward();
};

// The gradient that backward() adds to problem.*gradient, against central differences of
// forward() in problem.*input. Only what backward() adds is compared, so when the gradient
// starts at random values, a kernel that overwrites instead of accumulating fails.
template <DifferentiableProblem Problem>
comparison gradient_error(Problem problem, std::vector<double> Problem::*input,
                          std::vector<double> Problem::*gradient) {
    const std::vector<double> before = problem.*gradient;
    problem.forward();
    problem.backward();
    std::vector<double> added = problem.*gradient;
    for (std::size_t i = 0; i < added.size(); ++i) added[i] -= before[i];
    const auto numeric =
        numeric_gradient([&] { return static_cast<double>(problem.forward()); }, problem.*input);
    return compare(added, numeric, numeric_gradient_floor);
}

// The same problem run forward then backward in float and in double, to compare the two.
template <template <class> class Problem>
std::pair<Problem<float>, Problem<double>> solve_in_float_and_double()
    requires DifferentiableProblem<Problem<float>> && DifferentiableProblem<Problem<double>>
{
    std::pair<Problem<float>, Problem<double>> both;
    both.first.forward();
    both.first.backward();
    both.second.forward();
    both.second.backward();
    return both;
}

}  // namespace strata::kernels::cpu
