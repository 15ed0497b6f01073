// Calibration: this machine's machine_rates (plan/machine.hpp), measured in a few seconds on a
// backend, for the step's cost model (plan/cost_model.hpp):
// - GEMM FLOP/s at the model's shapes (ops<B>::matmul_forward and matmul_backward: 6 m n k FLOPs);
// - causal attention forward + backward at one shape (4 B T^2 C + 8 B T^2 C FLOPs, machine.hpp's
//   count);
// - device memory bandwidth (a device copy: bytes read + written per second);
// - the links: pinned host -> device, device -> host, and both at once (duplex) on two streams;
// - the storage directory through the I/O engine (storage_file: O_DIRECT, many requests in
//   flight): one write, then one read of a new file, which is then removed (O_DIRECT keeps it out
//   of this machine's page cache, so the read is the disk's);
// - every optimizer's update rate on the host with every core, and on the device (a matrix of
//   optimizer_parameters: optimizer_calibration_shape).
//
// calibrated_rates() keeps the result in a JSON file keyed by the machine (host name, device
// name, core count and the storage directory's device) under $XDG_CACHE_HOME/strata or
// ~/.cache/strata, and reuses it: the machine's rates once, the compute rates once per set of
// shapes; a cache without an optimizer's rates (written before it was calibrated) gains them. A
// cache that cannot be written is a note, never an error. The backend's ops header
// (nn/cpu_ops.hpp, nn/cuda_ops.hpp) must be included before this one is instantiated.
#pragma once

#include <strata/backend/backend.hpp>       // Backend
#include <strata/core/bytes.hpp>            // format_bytes
#include <strata/core/error.hpp>            // strata::error
#include <strata/core/log.hpp>              // log_note
#include <strata/io/json_file.hpp>          // read_json_file, write_json_file
#include <strata/nn/ops.hpp>                // ops
#include <strata/optim/adamw_simd.hpp>      // adamw_update_parallel
#include <strata/optim/host_thread_pool.hpp>  // host_thread_pool
#include <strata/optim/optimizers.hpp>      // registered_optimizers, any_optimizer, make_optimizer
#include <strata/optim/sgd_simd.hpp>        // sgd_update_parallel
#include <strata/plan/machine.hpp>          // machine_rates
#include <strata/plan/machine_file.hpp>     // machine_to_json, machine_from_json
#include <strata/storage/storage_file.hpp>  // storage_file, detail::make_aligned_buffer
#include <strata/tensor/tiered_tensor.hpp>  // tiered_tensor
#include <strata/tier/resources.hpp>        // physical_memory_bytes, free_disk_bytes
#include <strata/tier/tier.hpp>             // device_tier, host_tier

#include <nlohmann/json.hpp>  // nlohmann::json

#include <sys/stat.h>       // stat
#include <sys/sysmacros.h>  // major, minor
#include <unistd.h>         // gethostname, getpid

#include <algorithm>   // std::max, std::min
#include <chrono>      // std::chrono::steady_clock
#include <cstddef>     // std::size_t, std::byte
#include <cstdlib>     // std::getenv
#include <filesystem>  // std::filesystem::path
#include <memory>      // std::unique_ptr, std::make_unique
#include <optional>    // std::optional
#include <span>        // std::span
#include <string>      // std::string, std::to_string
#include <thread>      // std::thread::hardware_concurrency
#include <tuple>       // std::tie
#include <utility>     // std::pair
#include <vector>      // std::vector

namespace strata {

// One GEMM as ops<B>::matmul_forward computes it: out (rows, out) = in (rows, in) x w (out, in)^T.
struct gemm_shape {
    std::size_t rows = 0, out = 0, in = 0;
};

// The four GEMMs of a GPT-2 block over `rows` = B x T tokens of C channels (qkv, attention
// projection, MLP up, MLP down): what strata-gpt calibrates for its model.
inline std::vector<gemm_shape> gpt_block_gemms(std::size_t rows, std::size_t C) {
    return {{rows, 3 * C, C}, {rows, C, C}, {rows, 4 * C, C}, {rows, C, 4 * C}};
}

// Causal self-attention over (B, T) tokens of C channels in NH heads.
struct attention_shape {
    std::size_t batch = 1, seq = 1024, channels = 768, heads = 12;
};

struct calibration_options {
    std::vector<gemm_shape> gemms;  // the model's GEMMs; empty: gpt_block_gemms(1024, 768)
    attention_shape attention;      // the model's attention
    std::filesystem::path storage_dir;  // where storage-tier files go (empty: the temp directory)
    std::size_t link_bytes = std::size_t(256) << 20;       // per copy over each link
    std::size_t memory_bytes = std::size_t(256) << 20;     // per device copy
    std::size_t storage_bytes = std::size_t(256) << 20;    // the file written then read
    std::size_t optimizer_parameters = std::size_t(16) << 20;  // 256 MiB of AdamW state: far beyond the caches
    double min_seconds = 0.1;  // each rate is timed over at least this long, after one untimed run
    // The most FLOPs one timed GEMM or attention call may take: larger shapes are measured with
    // fewer rows (GEMM) or sequences (attention). 0: 2^34 on the CPU backend (a fraction of a
    // second), 2^42 on others.
    double max_flops = 0;
    bool recalibrate = false;           // measure again even when the cache has this machine
    std::filesystem::path cache_dir;    // empty: calibration_cache_dir()
};

namespace detail {

// Seconds per call of `run` (which waits for its own work): one untimed call (first touch, lazy
// initialization), then calls until min_seconds have passed.
template <class Run>
double seconds_per_call(Run&& run, double min_seconds) {
    run();
    const auto start = std::chrono::steady_clock::now();
    long calls = 0;
    double elapsed = 0;
    do {
        run();
        ++calls;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } while (elapsed < min_seconds);
    return elapsed / static_cast<double>(calls);
}

template <Backend B>
double max_flops_of(const calibration_options& o) {
    if (o.max_flops > 0) return o.max_flops;
    return B::name == "cpu" ? 0x1p34 : 0x1p42;
}

template <Backend B>
using device_floats = tiered_tensor<float, device_tier, B>;

// The nearest existing directory at or above `dir` (what a storage directory to be created
// will live on).
inline std::filesystem::path existing_ancestor(std::filesystem::path dir) {
    std::error_code ec;
    if (dir.empty()) dir = std::filesystem::temp_directory_path();
    dir = std::filesystem::absolute(dir, ec);
    while (!dir.empty() && !std::filesystem::is_directory(dir, ec) && dir != dir.parent_path()) dir = dir.parent_path();
    return dir;
}

}  // namespace detail

// FP32 GEMM FLOP/s over `shapes`, forward and backward (2 m n k + 4 m n k FLOPs each): their
// FLOPs over their time, the rate of a block made of them.
template <Backend B>
double measure_gemm_flops(B& backend, const std::vector<gemm_shape>& shapes, const calibration_options& o = {}) {
    auto s = backend.make_stream("calibration.gemm");
    double flops = 0, seconds = 0;
    for (gemm_shape g : shapes) {
        if (g.rows == 0 || g.out == 0 || g.in == 0)
            throw error("calibration: a GEMM shape has a zero dimension (" + std::to_string(g.rows) + " x " +
                        std::to_string(g.out) + " x " + std::to_string(g.in) + ")");
        const double per_row = 6.0 * static_cast<double>(g.out) * static_cast<double>(g.in);
        g.rows = std::max<std::size_t>(1, std::min(g.rows, static_cast<std::size_t>(detail::max_flops_of<B>(o) / per_row)));
        detail::device_floats<B> in(backend, shape{g.rows * g.in}, "calibration.gemm.in");
        detail::device_floats<B> w(backend, shape{g.out * g.in}, "calibration.gemm.w");
        detail::device_floats<B> out(backend, shape{g.rows * g.out}, "calibration.gemm.out");
        detail::device_floats<B> din(backend, shape{g.rows * g.in}, "calibration.gemm.din");
        detail::device_floats<B> dw(backend, shape{g.out * g.in}, "calibration.gemm.dw");
        float* p[] = {in.device_data().get(), w.device_data().get(), out.device_data().get(),
                      din.device_data().get(), dw.device_data().get()};
        const std::size_t n[] = {in.numel(), w.numel(), out.numel(), din.numel(), dw.numel()};
        for (int i = 0; i < 5; ++i) ops<B>::zero(s, p[i], n[i]);  // no NaN or denormal slows a CPU GEMM
        seconds += detail::seconds_per_call(
            [&] {
                ops<B>::matmul_forward(s, p[2], p[0], p[1], nullptr, 1, g.rows, g.in, g.out);
                ops<B>::matmul_backward(s, p[3], p[4], nullptr, p[2], p[0], p[1], 1, g.rows, g.in, g.out);
                s.synchronize();  // named: the end of one timed call
            },
            o.min_seconds);
        flops += per_row * static_cast<double>(g.rows);
    }
    return seconds > 0 ? flops / seconds : 0.0;
}

// Causal attention forward + backward FLOP/s at `a`, counted as 4 B T^2 C + 8 B T^2 C.
template <Backend B>
double measure_attention_flops(B& backend, attention_shape a, const calibration_options& o = {}) {
    if (a.batch == 0 || a.seq == 0 || a.channels == 0 || a.heads == 0 || a.channels % a.heads != 0)
        throw error("calibration: attention shape B " + std::to_string(a.batch) + ", T " + std::to_string(a.seq) +
                    ", C " + std::to_string(a.channels) + ", NH " + std::to_string(a.heads) +
                    " is not one (every size positive, C a multiple of NH)");
    auto flops_of = [](const attention_shape& x) {
        return 12.0 * static_cast<double>(x.batch) * static_cast<double>(x.seq) * static_cast<double>(x.seq) *
               static_cast<double>(x.channels);
    };
    const double cap = detail::max_flops_of<B>(o);
    while (a.batch > 1 && flops_of(a) > cap) a.batch /= 2;
    while (a.seq > 64 && flops_of(a) > cap) a.seq /= 2;
    auto s = backend.make_stream("calibration.attention");
    const std::size_t BT = a.batch * a.seq;
    detail::device_floats<B> qkv(backend, shape{BT * 3 * a.channels}, "calibration.attention.qkv");
    detail::device_floats<B> dqkv(backend, shape{BT * 3 * a.channels}, "calibration.attention.dqkv");
    detail::device_floats<B> out(backend, shape{BT * a.channels}, "calibration.attention.out");
    detail::device_floats<B> dout(backend, shape{BT * a.channels}, "calibration.attention.dout");
    detail::device_floats<B> saved(backend, shape{std::max<std::size_t>(1, ops<B>::attention_saved(a.batch, a.seq, a.heads))},
                                   "calibration.attention.saved");
    detail::device_floats<B> scratch(
        backend, shape{std::max<std::size_t>(1, ops<B>::attention_workspace(a.batch, a.seq, a.channels, a.heads))},
        "calibration.attention.workspace");
    ops<B>::zero(s, qkv.device_data().get(), qkv.numel());
    ops<B>::zero(s, dqkv.device_data().get(), dqkv.numel());
    ops<B>::zero(s, dout.device_data().get(), dout.numel());
    const double seconds = detail::seconds_per_call(
        [&] {
            ops<B>::attention_forward(s, out.device_data().get(), saved.device_data().get(), qkv.device_data().get(),
                                      a.batch, a.seq, a.channels, a.heads);
            ops<B>::attention_backward(s, dqkv.device_data().get(), scratch.device_data().get(),
                                       saved.device_data().get(), dout.device_data().get(), out.device_data().get(),
                                       qkv.device_data().get(), a.batch, a.seq, a.channels, a.heads);
            s.synchronize();  // named: the end of one timed call
        },
        o.min_seconds);
    return seconds > 0 ? flops_of(a) / seconds : 0.0;
}

// Device memory bandwidth: one device copy of `bytes` reads and writes them (2 x bytes per copy).
template <Backend B>
double measure_device_memory(B& backend, std::size_t bytes, double min_seconds = 0.1) {
    const std::size_t n = std::max<std::size_t>(1, bytes / sizeof(float));
    detail::device_floats<B> src(backend, shape{n}, "calibration.memory.src");
    detail::device_floats<B> dst(backend, shape{n}, "calibration.memory.dst");
    auto s = backend.make_stream("calibration.memory");
    ops<B>::zero(s, src.device_data().get(), n);
    const double seconds = detail::seconds_per_call(
        [&] {
            ops<B>::copy(s, dst.device_data().get(), src.device_data().get(), n);
            s.synchronize();  // named: the end of one timed copy
        },
        min_seconds);
    return seconds > 0 ? 2.0 * static_cast<double>(n * sizeof(float)) / seconds : 0.0;
}

// The links between pinned host memory and the device, bytes per second: each way alone (the
// best of three copies), and both at once on two streams (their bytes together over the time both
// take).
struct link_rates {
    double h2d = 0, d2h = 0, duplex = 0;
};

template <Backend B>
link_rates measure_link_rates(B& backend, std::size_t bytes = std::size_t(256) << 20) {
    tiered_tensor<std::byte, host_tier, B> host_up(backend, shape{bytes}, "calibration.links.host_up");
    tiered_tensor<std::byte, host_tier, B> host_down(backend, shape{bytes}, "calibration.links.host_down");
    tiered_tensor<std::byte, device_tier, B> device_up(backend, shape{bytes}, "calibration.links.device_up");
    tiered_tensor<std::byte, device_tier, B> device_down(backend, shape{bytes}, "calibration.links.device_down");
    auto up = backend.make_stream("calibration.h2d");
    auto down = backend.make_stream("calibration.d2h");
    auto best = [&](double moved, auto copy) {
        double seconds = 0;
        for (int i = 0; i < 3; ++i) {
            const auto start = std::chrono::steady_clock::now();
            copy();
            const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            seconds = i == 0 ? t : std::min(seconds, t);
        }
        return seconds > 0 ? moved / seconds : 0.0;
    };
    const double b = static_cast<double>(bytes);
    link_rates r;
    r.h2d = best(b, [&] { device_up.copy_from(host_up, up).wait(); });  // named: one timed copy
    r.d2h = best(b, [&] { host_down.copy_from(device_down, down).wait(); });
    r.duplex = best(2 * b, [&] {
        auto e1 = device_up.copy_from(host_up, up);
        auto e2 = host_down.copy_from(device_down, down);
        e1.wait();  // named: both timed copies
        e2.wait();
    });
    return r;
}

// The storage directory's write and read bytes per second through storage_file (the I/O engine,
// O_DIRECT where the file system allows it): one write of `bytes` to a new file in `dir` (or its
// nearest existing parent), then one read of it; the file is removed. {0, 0} with a note when the
// disk has no room for it.
inline std::pair<double, double> measure_storage(const std::filesystem::path& dir,
                                                 std::size_t bytes = std::size_t(256) << 20) {
    const std::filesystem::path where = detail::existing_ancestor(dir);
    const std::size_t free = free_disk_bytes(where);
    if (free < 2 * bytes) bytes = round_down(free / 4, page_size);
    if (bytes < (std::size_t(16) << 20)) {
        log_note("calibration: " + where.string() + " has " + format_bytes(free) +
                 " free, too little to measure the storage tier; its rates stay unknown");
        return {0.0, 0.0};
    }
    std::filesystem::path path;
    for (int i = 0;; ++i) {  // a name of our own: an existing file is never truncated
        path = where / ("strata-calibration-" + std::to_string(::getpid()) + "-" + std::to_string(i) + ".tmp");
        std::error_code ec;
        if (!std::filesystem::exists(path, ec) && !ec) break;
    }
    const auto buffer = detail::make_aligned_buffer(bytes);
    for (std::size_t i = 0; i < bytes; i += page_size) buffer[i] = static_cast<std::byte>(i >> 12);
    storage_file file(path, bytes);  // removed when it goes out of scope
    auto timed = [](auto&& run) {
        const auto start = std::chrono::steady_clock::now();
        run();
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    const double write = timed([&] { file.write(0, buffer.get(), bytes); });
    const double read = timed([&] { file.read(0, buffer.get(), bytes); });
    const double b = static_cast<double>(bytes);
    return {write > 0 ? b / write : 0.0, read > 0 ? b / read : 0.0};
}

// The shape the optimizers' rates are measured at: a matrix of `parameters` (rounded up to whole
// rows of 4096), as most of a model's parameters are; an optimizer that factors a matrix
// (Adafactor) runs its matrix path.
inline shape optimizer_calibration_shape(std::size_t parameters) {
    constexpr std::size_t cols = 4096;
    return shape{std::max<std::size_t>(1, (parameters + cols - 1) / cols), cols};
}

namespace detail {
// A small gradient pattern of n floats, the same on every machine.
inline void fill_calibration_gradients(float* f, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) f[i] = 1e-3f * static_cast<float>(static_cast<int>(i % 977) - 488) / 488.0f;
}
}  // namespace detail

// The host optimizer's update rate with every core of `pool`, parameters per second, over
// `parameters` FP32 parameters (page-aligned, as the trainers lay them out) of a matrix
// (optimizer_calibration_shape).
inline double measure_host_optimizer(host_thread_pool& pool, const any_optimizer& optimizer, std::size_t parameters,
                                     double min_seconds = 0.1) {
    const shape matrix = optimizer_calibration_shape(std::max<std::size_t>(parameters, 1024));
    const std::size_t n = matrix.numel();
    auto buffer = [n] {
        auto b = detail::make_aligned_buffer(n * sizeof(float));
        detail::fill_calibration_gradients(reinterpret_cast<float*>(b.get()), n);
        return b;
    };
    auto p = buffer(), g = buffer();
    auto span_of = [n](detail::aligned_buffer& b) { return std::span<float>(reinterpret_cast<float*>(b.get()), n); };
    // Its state tensors as the optimizer shapes them (zero-filled).
    std::vector<std::vector<float>> state;
    for (std::size_t i = 0; i < optimizer.state_names().size(); ++i)
        state.emplace_back(optimizer.state_shape(i, matrix).numel(), 0.0f);
    std::vector<std::span<float>> parts(state.begin(), state.end());
    long step = 0;
    const double seconds = detail::seconds_per_call(
        [&] {
            ++step;
            optimizer.update(pool, span_of(p), std::span<const float>(span_of(g)), optimizer_state<float>(parts),
                             {.lr = 1e-4, .step = step, .decay = true, .shape = matrix});
        },
        min_seconds);
    return seconds > 0 ? static_cast<double>(n) / seconds : 0.0;
}

// The device optimizer's update rate on `backend`, parameters per second: its update of one
// matrix of `parameters` FP32 parameters (optimizer_calibration_shape) in device memory, on a
// stream, as the trainer runs it for a device-homed group (device_update). The optimizer's
// kernels for B (optim/cuda_update.hpp on CUDA) must be included before this is instantiated.
template <Backend B>
double measure_device_optimizer(B& backend, const any_optimizer& optimizer, std::size_t parameters,
                                double min_seconds = 0.1) {
    const shape matrix = optimizer_calibration_shape(std::max<std::size_t>(parameters, 1024));
    const std::size_t n = matrix.numel();
    tiered_tensor<float, host_tier, B> host(backend, shape{n}, "calibration.optimizer.host");
    detail::fill_calibration_gradients(host.data(), n);
    detail::device_floats<B> p(backend, shape{n}, "calibration.optimizer.params");
    detail::device_floats<B> g(backend, shape{n}, "calibration.optimizer.grads");
    std::vector<detail::device_floats<B>> state;
    for (std::size_t i = 0; i < optimizer.state_names().size(); ++i)
        state.emplace_back(backend, shape{std::max<std::size_t>(optimizer.state_shape(i, matrix).numel(), 1)},
                           "calibration.optimizer.state" + std::to_string(i));
    auto s = backend.make_stream("calibration.optimizer");
    p.copy_from(host, s);
    g.copy_from(host, s);
    for (auto& t : state) backend.zero(t.device_data().get(), tier_id::device, t.bytes(), s);
    s.synchronize();  // named: the inputs are in place
    std::vector<float*> pointers;
    for (auto& t : state) pointers.push_back(t.device_data().get());
    long step = 0;
    const double seconds = detail::seconds_per_call(
        [&] {
            ++step;
            device_update<B>(s, optimizer, p.device_data().get(), g.device_data().get(), n,
                             std::span<float* const>(pointers), {.lr = 1e-4, .step = step, .decay = true, .shape = matrix});
            s.synchronize();  // named: the end of one timed update
        },
        min_seconds);
    return seconds > 0 ? static_cast<double>(n) / seconds : 0.0;
}

// "NVIDIA H200" for a backend that names its device, else the backend's name ("cpu").
template <Backend B>
std::string device_name_of(const B& backend) {
    if constexpr (requires { backend.device_name(); })
        return backend.device_name();
    else
        return std::string(B::name);
}

// The compute rates' cache key: the shapes they were measured at (and the GEMM math).
inline std::string compute_key(const calibration_options& o, bool tf32 = false) {
    std::string key = tf32 ? "tf32 gemm" : "gemm";
    for (const gemm_shape& g : o.gemms)
        key += " " + std::to_string(g.rows) + "x" + std::to_string(g.out) + "x" + std::to_string(g.in);
    const attention_shape& a = o.attention;
    return key + "; attention B" + std::to_string(a.batch) + " T" + std::to_string(a.seq) + " C" +
           std::to_string(a.channels) + " NH" + std::to_string(a.heads);
}

// The machine this calibration is valid for: host name, device name, core count, and the device
// (major:minor) of the file system holding the storage directory.
template <Backend B>
std::string machine_key(const B& backend, const std::filesystem::path& storage_dir) {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    struct stat st {};
    std::string disk = "unknown";
    if (::stat(detail::existing_ancestor(storage_dir).c_str(), &st) == 0)
        disk = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
    return std::string(host) + ", " + device_name_of(backend) + ", " +
           std::to_string(std::thread::hardware_concurrency()) + " cores, storage on device " + disk;
}

// $XDG_CACHE_HOME/strata, else $HOME/.cache/strata; empty when neither is set.
inline std::filesystem::path calibration_cache_dir() {
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::filesystem::path(xdg) / "strata";
    if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".cache" / "strata";
    return {};
}

// The cache file of `key`: its characters outside [A-Za-z0-9.-] become '_'.
inline std::filesystem::path calibration_cache_file(const std::filesystem::path& dir, const std::string& key) {
    std::string name = "calibration-";
    for (char c : key) {
        const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
        name += plain ? c : '_';
    }
    return dir / (name + ".json");
}

namespace detail {

template <Backend B>
bool tf32_of() {
    if constexpr (requires { ops<B>::tf32(); })
        return ops<B>::tf32();
    else
        return false;
}

template <Backend B>
void measure_compute(B& backend, const calibration_options& o, machine_rates& m) {
    m.gemm_flops = measure_gemm_flops(backend, o.gemms, o);
    m.attention_flops = measure_attention_flops(backend, o.attention, o);
}

// The budgets as the tiers would default them now: the backend's device budget, 90 % of RAM,
// the free disk at the storage directory.
template <Backend B>
tier_bytes current_budgets(B& backend, const std::filesystem::path& storage_dir) {
    return {.device = backend.budget(tier_id::device).limit(),
            .host = physical_memory_bytes() / 10 * 9,
            .storage = free_disk_bytes(existing_ancestor(storage_dir))};
}

// Every registered optimizer's host and device rates that `m` lacks, measured now; true when one was.
template <Backend B>
bool measure_optimizers(B& backend, const calibration_options& o, machine_rates& m) {
    std::unique_ptr<host_thread_pool> pool;  // every core, made only when a host rate is measured
    bool measured = false;
    for (std::string_view name : registered_optimizers::name_list()) {
        const std::string key(name);
        if (!m.host_optimizer.contains(key)) {
            if (!pool) pool = std::make_unique<host_thread_pool>();
            m.host_optimizer[key] = measure_host_optimizer(*pool, make_optimizer(name), o.optimizer_parameters, o.min_seconds);
            measured = true;
        }
        if (!m.device_optimizer.contains(key)) {
            m.device_optimizer[key] = measure_device_optimizer(backend, make_optimizer(name), o.optimizer_parameters, o.min_seconds);
            measured = true;
        }
    }
    return measured;
}

inline calibration_options with_default_gemms(calibration_options o) {
    if (o.gemms.empty()) o.gemms = gpt_block_gemms(1024, 768);
    return o;
}

}  // namespace detail

// Every rate of this machine, measured now on `backend` (a few seconds; nothing cached). Its
// budgets are what the tiers would default to; its name is machine_key's.
template <Backend B>
machine_rates calibrate(B& backend, const calibration_options& options = {}) {
    const calibration_options o = detail::with_default_gemms(options);
    machine_rates m;
    m.name = machine_key(backend, o.storage_dir);
    m.budgets = detail::current_budgets(backend, o.storage_dir);
    m.host_cores = std::max(1u, std::thread::hardware_concurrency());
    detail::measure_compute(backend, o, m);
    m.device_memory = measure_device_memory(backend, o.memory_bytes, o.min_seconds);
    const link_rates links = measure_link_rates(backend, o.link_bytes);
    m.h2d = links.h2d;
    m.d2h = links.d2h;
    m.duplex = links.duplex;
    std::tie(m.storage_write, m.storage_read) = measure_storage(o.storage_dir, o.storage_bytes);
    detail::measure_optimizers(backend, o, m);
    return m;
}

// This machine's rates from the calibration cache when it has them (the compute rates at these
// shapes included), else calibrate()'d and written to the cache. options.recalibrate measures
// again. The budgets are always the current defaults (the caller's budgets override them).
template <Backend B>
machine_rates calibrated_rates(B& backend, const calibration_options& options = {}) {
    const calibration_options o = detail::with_default_gemms(options);
    const std::filesystem::path dir = o.cache_dir.empty() ? calibration_cache_dir() : o.cache_dir;
    const std::string key = machine_key(backend, o.storage_dir);
    const std::string shapes = compute_key(o, detail::tf32_of<B>());
    const std::filesystem::path file = dir.empty() ? std::filesystem::path() : calibration_cache_file(dir, key);

    nlohmann::json cache;
    std::optional<machine_rates> cached;
    std::error_code ec;
    if (!o.recalibrate && !file.empty() && std::filesystem::exists(file, ec)) {
        try {
            cache = read_json_file(file);
            if (cache.value("key", "") == key) cached = machine_from_json(cache.at("machine"), file.string());
        } catch (const std::exception& e) {
            log_note("calibration: the cache " + file.string() + " is unreadable (" + e.what() + "); measuring again");
            cached.reset();
        }
    }
    machine_rates m;
    bool changed = false;
    if (cached) {
        m = *cached;
        m.name = key;
        const nlohmann::json* compute = cache.contains("compute") && cache["compute"].is_object() &&
                                                cache["compute"].contains(shapes)
                                            ? &cache["compute"][shapes]
                                            : nullptr;
        // A cache from before an optimizer (or its device rate) was calibrated gains its rates.
        changed = detail::measure_optimizers(backend, o, m);
        if (compute && compute->value("gemm_TFLOPS", 0.0) > 0 && compute->value("attention_TFLOPS", 0.0) > 0) {
            m.gemm_flops = compute->value("gemm_TFLOPS", 0.0) * 1e12;
            m.attention_flops = compute->value("attention_TFLOPS", 0.0) * 1e12;
        } else {
            detail::measure_compute(backend, o, m);
            changed = true;
        }
    } else {
        m = calibrate(backend, o);
        cache = nlohmann::json::object();
        changed = true;
    }
    m.budgets = detail::current_budgets(backend, o.storage_dir);
    if (changed && !file.empty()) {
        cache["strata_calibration"] = 1;
        cache["key"] = key;
        cache["machine"] = machine_to_json(m, "measured by strata's calibration (plan/calibrate.hpp) on " + key);
        if (!cache.contains("compute") || !cache["compute"].is_object()) cache["compute"] = nlohmann::json::object();
        cache["compute"][shapes] = {{"gemm_TFLOPS", m.gemm_flops / 1e12}, {"attention_TFLOPS", m.attention_flops / 1e12}};
        try {
            std::filesystem::create_directories(dir);
            write_json_file(file, cache);
        } catch (const std::exception& e) {
            log_note("calibration: cannot write the cache " + file.string() + " (" + e.what() +
                     "); the rates are used, and measured again next time");
        }
    }
    return m;
}

}  // namespace strata
