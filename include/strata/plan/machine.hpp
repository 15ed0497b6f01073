// machine_rates: what the step's cost model (plan/cost_model.hpp) needs to know of a machine, as
// data: the tiers' budgets, the links' and the disk's bandwidths, the device's compute rates and
// the host and device optimizers' rates. Measured by a short calibration on this machine (cached in a file
// keyed by the machine), or read from a machine file (`--machine FILE`) to plan for a machine
// that is not here. Every rate is in base units per second (bytes/s, FLOP/s, parameters/s);
// 0 means unknown.
#pragma once

#include <strata/plan/memory_plan.hpp>  // tier_bytes

#include <cstddef>  // std::size_t
#include <map>      // std::map
#include <string>   // std::string

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

    // The host optimizer's update rate with every core, parameters per second, per optimizer
    // (keys: a registered optimizer's name: "adamw", "sgd", ...).
    std::map<std::string, double> host_optimizer;
    // The device optimizer's update rate, parameters per second, per optimizer (keys as above).
    // An optimizer without one is modelled as memory-bound: its update reads and writes the
    // weights, gradients and state at device_memory (AdamW's and SGD's kernels are; Adafactor's
    // sums and passes are not).
    std::map<std::string, double> device_optimizer;
};

}  // namespace strata
