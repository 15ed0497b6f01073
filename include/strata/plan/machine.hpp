// machine_rates: what the step's cost model (plan/cost_model.hpp) needs to know of a machine, as
// data: the tiers' budgets, the links' and the disk's bandwidths, the device's compute rates and
// the host and device optimizers' rates. Measured by a short calibration on this machine (cached in a file
// keyed by the machine), or read from a machine file (`--machine FILE`) to plan for a machine
// that is not here. Every rate is in base units per second (bytes/s, FLOP/s, parameters/s);
// 0 means unknown.
#pragma once

#include <strata/plan/memory_plan.hpp>  // tier_bytes

#include <algorithm>  // std::max
#include <cmath>      // std::abs, std::log
#include <cstddef>    // std::size_t
#include <map>        // std::map
#include <string>     // std::string

namespace strata {

struct machine_rates {
    std::string name;  // "h200-16c-125g", a machine file's "name"
    // What each tier may hold (device: the GPU's memory for training; host: pinned RAM; storage:
    // the free disk of the storage directory).
    tier_bytes budgets;
    std::size_t host_cores = 0;

    // Links, bytes per second. h2d and d2h alone; duplex: both directions at once (sum of both).
    double h2d = 0, d2h = 0, duplex = 0;
    // The storage tier through the I/O engine (O_DIRECT, page-aligned), bytes per second.
    double storage_read = 0, storage_write = 0;

    // Device compute: FP32 GEMM at the model's shapes (FLOP/s), causal attention forward and
    // backward (FLOP/s, counted as 4 B T^2 C per forward over the causal half), and device memory
    // bandwidth (bytes/s, read + write) for elementwise passes and the device optimizer.
    double gemm_flops = 0;
    double attention_flops = 0;
    double device_memory = 0;
    // Optional: causal attention's rate (FLOP/s, counted as attention_flops is) at given head sizes.
    // The kernels' rate differs by head size (at head size 64 about twice the 128's on the H200),
    // and a machine file plans for models of any; attention_rate() reads the model's from here.
    std::map<std::size_t, double> attention_flops_by_head_size;

    // The host optimizer's update rate with every core, parameters per second, per optimizer
    // (keys: a registered optimizer's name: "adamw", "sgd", ...).
    std::map<std::string, double> host_optimizer;
    // The device optimizer's update rate, parameters per second, per optimizer (keys as above).
    // An optimizer without one is modelled as memory-bound: its update reads and writes the
    // weights, gradients and state at device_memory (AdamW's and SGD's kernels are; Adafactor's
    // sums and passes are not).
    std::map<std::string, double> device_optimizer;
};

// The attention rate a plan for a model of head size `head_size` uses: the rate listed for that
// head size, else for the nearest one listed (by ratio: 96 takes 64's or 128's, whichever is
// nearer, the smaller on a tie), else attention_flops.
inline double attention_rate(const machine_rates& m, std::size_t head_size) {
    double best = m.attention_flops, distance = 0;
    bool found = false;
    for (const auto& [listed, rate] : m.attention_flops_by_head_size) {
        const double d = std::abs(std::log(double(listed) / double(std::max<std::size_t>(head_size, 1))));
        if (!found || d < distance) best = rate, distance = d, found = true;
    }
    return best;
}

}  // namespace strata
