// Learning-rate schedules: one options struct and a pure function of the step.
//
// Steps are 0-based (step 0 is the first optimizer step). Every kind starts with the same linear
// warmup, as in nanoGPT:
//
//   step < warmup_steps:   lr_at = lr * (step + 1) / warmup_steps
//
// so step 0 already trains (lr/warmup, never 0) and step warmup_steps-1 reaches exactly lr.
// After warmup, with d = step - warmup_steps and D = total_steps - warmup_steps:
//
//   constant:  lr
//   cosine:    min_lr + (lr - min_lr) * 0.5 * (1 + cos(pi * d / D)),  min_lr once step >= total_steps
//   linear:    min_lr + (lr - min_lr) * (1 - d / D),                  min_lr once step >= total_steps
//   step:      max(min_lr, lr * gamma^floor(d / step_size))  (d counts from the end of warmup, so
//              the first drop comes step_size steps after warmup, not step_size steps after start)
//
// Cosine and linear reach min_lr exactly at step == total_steps (nanoGPT's lr_decay_iters) and hold
// it afterwards, so a run that goes on past total_steps keeps training at min_lr.
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <strata/core/format.hpp>  // fmt::format (host only)

#include <cmath>        // std::cos, std::floor, std::isfinite, std::pow
#include <numbers>      // std::numbers::pi
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <utility>      // std::move
#include <vector>       // std::vector

namespace strata {

enum class lr_kind { constant, cosine, linear, step };

struct lr_schedule {
    lr_kind kind = lr_kind::cosine;
    double lr = 6e-4;        // peak learning rate, reached at the end of warmup
    double min_lr = 6e-5;    // floor of the decay (cosine, linear, step)
    long warmup_steps = 0;   // 0: no warmup, step 0 runs at lr
    long total_steps = 1;    // the run's length; cosine and linear reach min_lr here
    long step_size = 1000;   // step kind: steps between two drops
    double gamma = 0.1;      // step kind: factor applied at each drop
};

inline constexpr std::string_view lr_kind_names = "constant, cosine, linear, step";
// Every schedule, in the order a command line lists them (to_string gives each one's name).
inline constexpr lr_kind lr_kinds[] = {lr_kind::cosine, lr_kind::linear, lr_kind::constant, lr_kind::step};

inline std::string_view to_string(lr_kind kind) {
    switch (kind) {
        case lr_kind::constant: return "constant";
        case lr_kind::cosine: return "cosine";
        case lr_kind::linear: return "linear";
        case lr_kind::step: return "step";
    }
    return "unknown";
}

inline lr_kind parse_lr_kind(std::string_view name) {
    if (name == "constant") return lr_kind::constant;
    if (name == "cosine") return lr_kind::cosine;
    if (name == "linear") return lr_kind::linear;
    if (name == "step") return lr_kind::step;
    throw error("unknown learning-rate schedule '" + std::string(name) + "'",
                "valid schedules are: " + std::string(lr_kind_names));
}

// Throws on the first inconsistent field, naming it and its value.
inline void validate(const lr_schedule& s) {
    const auto bad = [](const std::string& what, const std::string& hint, std::vector<std::string> settings = {}) {
        throw error("lr schedule: " + what, hint, std::move(settings));
    };
    const auto rate = [](double x) { return fmt::format("{:g}", x); };  // 3e-08, not std::to_string's 0.000000
    if (!(std::isfinite(s.lr) && s.lr > 0))
        bad("lr must be a positive finite number, got " + rate(s.lr), "e.g. lr 6e-4", {"lr"});
    if (!(std::isfinite(s.min_lr) && s.min_lr >= 0))
        bad("min_lr must be a finite number >= 0, got " + rate(s.min_lr), "e.g. min_lr 6e-5", {"min_lr"});
    if (s.kind != lr_kind::constant && s.min_lr > s.lr)  // constant never reaches min_lr
        bad("min_lr (" + rate(s.min_lr) + ") is larger than lr (" + rate(s.lr) + ")",
            "the schedule decays from lr down to min_lr; lower min_lr", {"min_lr"});
    if (s.total_steps < 1)
        bad("total_steps must be >= 1, got " + std::to_string(s.total_steps), "pass the run's number of steps", {"steps"});
    if (s.warmup_steps < 0)
        bad("warmup_steps must be >= 0, got " + std::to_string(s.warmup_steps), "use 0 for no warmup", {"warmup"});
    if (s.warmup_steps > s.total_steps)
        bad("warmup_steps (" + std::to_string(s.warmup_steps) + ") exceeds total_steps (" +
                std::to_string(s.total_steps) + ")",
            "shorten the warmup or run more steps", {"warmup", "steps"});
    if (s.kind == lr_kind::step) {
        if (s.step_size < 1)
            bad("step_size must be >= 1 for the step schedule, got " + std::to_string(s.step_size),
                "pass the number of steps between two drops");
        if (!(std::isfinite(s.gamma) && s.gamma > 0 && s.gamma <= 1))
            bad("gamma must be in (0, 1] for the step schedule, got " + std::to_string(s.gamma),
                "e.g. 0.1 divides the rate by ten at each drop");
    }
}

inline double lr_at(const lr_schedule& s, long step) {
    validate(s);
    if (step < 0)
        throw error("lr schedule: step must be >= 0, got " + std::to_string(step), "steps are counted from 0");
    if (step < s.warmup_steps)
        return s.lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);

    const long since_warmup = step - s.warmup_steps;
    const long decay_steps = s.total_steps - s.warmup_steps;
    switch (s.kind) {
        case lr_kind::constant: return s.lr;
        case lr_kind::cosine: {
            // Also covers decay_steps == 0 (warmup fills the run): no division by zero.
            if (step >= s.total_steps) return s.min_lr;
            const double ratio = static_cast<double>(since_warmup) / static_cast<double>(decay_steps);
            return s.min_lr + (s.lr - s.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
        }
        case lr_kind::linear: {
            if (step >= s.total_steps) return s.min_lr;
            const double ratio = static_cast<double>(since_warmup) / static_cast<double>(decay_steps);
            return s.min_lr + (s.lr - s.min_lr) * (1.0 - ratio);
        }
        case lr_kind::step: {
            const long drops = since_warmup / s.step_size;  // floor: both are non-negative
            const double rate = s.lr * std::pow(s.gamma, static_cast<double>(drops));
            return rate < s.min_lr ? s.min_lr : rate;
        }
    }
    throw error("lr schedule: unknown kind " + std::to_string(static_cast<int>(s.kind)),
                "valid schedules are: " + std::string(lr_kind_names));
}

}  // namespace strata
