// strata_bench_gpt_step: ms per optimizer step of a GPT-2-shaped model, resident or streamed, and
// where the time goes. The peer is bench/torch_gpt2_step.py, run in the same session on the same
// GPU with the same shape, batch and hyperparameters (clip 1.0, AdamW lr 3e-4, betas 0.9/0.95).
//
//   strata_bench_gpt_step --model 124M --batch 8 --seq 1024 --steps 10 [--placement streamed]
//                         [--activations recompute|recompute-parts|keep] [--kept N]
//                         [--no-checkpointing (= keep)]
//                         [--moments storage --storage-dir DIR] [--tf32] [--device cpu|cuda]
//                         [--warmup N] [--no-profile] [--trace FILE]
//
// STRATA_BENCH_ATTENTION_BACKWARD=two-kernel (read by this bench only) runs the CUDA model with the
// two-kernel attention backward at every shape (ops<cuda_backend>::use_two_kernel_attention_backward)
// instead of the library's choice, the key-tile backward where its workspace fits: the JSON line's
// "attention_backward" says which ran. STRATA_BENCH_GRADIENT_LANE=serial runs the backward's weight
// gradients after the input gradients on the one stream (ops<cuda_backend>::set_gradient_side_lane)
// instead of beside them: "gradient_lane" says which.
//
// Prints a JSON line (median ms/step, tokens/s, model TFLOP/s, peak device bytes, peak host RSS,
// transfer hidden fraction) and, from a trace of one more step, the time per op summed over the
// step, per stream. bench/compare.sh runs it next to the PyTorch peers and tabulates the lines.
//
// Model FLOPs per step, as the peers count them (bench/compare_table.py): 6 x parameters x tokens
// (forward 2, backward 4 per parameter per token; the recompute of --activations recompute is not
// counted: it is work the model does not need), and, stated separately, causal attention's
// 6 x n_layer x T x C per token (Q K^T and P V, 2 x 2 x T x C per token forward at full T x T, half
// of it under the causal mask, x3 for forward and backward).
#include <strata/nn/cpu_ops.hpp>
#include <strata/plan/planner.hpp>
#include <strata/report/trace.hpp>
#include <strata/strata.hpp>
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model
#ifdef STRATA_WITH_CUDA
#include <strata/cuda.hpp>
#endif

#include <nlohmann/json.hpp>

#include <sys/resource.h>  // getrusage: the peak resident set of this process

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

using namespace strata;

namespace {

struct args {
    std::string model = "124M", placement = "resident", moments = "host", storage_dir, device = "cuda", trace;
    std::string activations = "recompute";
    std::size_t batch = 8, seq = 1024, accum = 1;
    std::size_t kept = 0;  // with recompute or recompute-parts: the first `kept` blocks keep theirs
    int steps = 10, warmup = 2;
    bool tf32 = false, profile = true;
};

// --activations: the blocks' forward activations kept for the backward, or each block's input only
// and its forward run again in the backward (activation checkpointing), or (recompute-parts) each
// recomputing block keeping attention's output and recomputing the rest from it (selective
// recompute: model/activations.hpp, keep_parts); --kept N: the first N blocks keep theirs whole.
// The one place that maps the flags onto train_options.
void set_activations(train_options& o, const std::string& policy, std::size_t kept) {
    if (policy == "keep") o.activations = kept_activations::all();
    else if (policy == "recompute") o.activations = kept_activations{kept};
    else if (policy == "recompute-parts") o.activations = kept_activations{kept, false, true};
    else throw error("--activations must be keep, recompute or recompute-parts, got " + policy,
                     "keep: no recompute, more device memory");
}

// Peak resident set size of this process (Linux reports kilobytes). Memory the CUDA driver maps for
// pinned buffers may not count here: the JSON has the host tier's own peak next to it.
std::size_t peak_rss_bytes() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<std::size_t>(u.ru_maxrss) * 1024;
}

gpt_config shape_of(const std::string& name, std::size_t seq) {
    gpt_config c{.vocab_size = 50257, .max_seq = std::max<std::size_t>(1024, seq)};
    if (name == "124M") c.n_layer = 12, c.n_head = 12, c.n_embd = 768;
    else if (name == "350M") c.n_layer = 24, c.n_head = 16, c.n_embd = 1024;
    else if (name == "774M") c.n_layer = 36, c.n_head = 20, c.n_embd = 1280;
    else if (name == "1.5B") c.n_layer = 48, c.n_head = 25, c.n_embd = 1600;
    else if (name == "tiny") c.vocab_size = 257, c.n_layer = 2, c.n_head = 2, c.n_embd = 64;
    else throw error("unknown --model " + name, "use tiny, 124M, 350M, 774M or 1.5B");
    return c;
}

std::vector<data::batch> batches(const gpt_config& c, const args& a, int step) {
    rng gen(100 + step);
    std::vector<data::batch> out(a.accum);
    for (auto& b : out)
        for (std::size_t i = 0; i < a.batch * a.seq; ++i) {
            b.inputs.push_back(static_cast<token_id>(gen.next_u64() % c.vocab_size));
            b.targets.push_back(static_cast<token_id>(gen.next_u64() % c.vocab_size));
        }
    return out;
}

// Which attention backward the model's blocks run (nn/cuda_ops.hpp).
template <class B>
std::string attention_backward_name(const gpt_config& c, const args& a) {
    if constexpr (requires { ops<B>::two_kernel_attention_backward(); })
        if (ops<B>::attention_workspace(a.batch, a.seq, c.n_embd, c.n_head) == 0) return "two-kernel";
    if constexpr (std::is_same_v<B, cpu_backend>) return "cpu";
    return "key-tile";  // partials or ordered: kernels/cuda/attention_backward.cuh's attention_backward_pick
}

// Where the backward's weight gradients run (nn/cuda_ops.hpp: set_gradient_side_lane).
template <class B>
std::string gradient_lane_name() {
    if constexpr (requires { ops<B>::gradient_side_lane(); }) return ops<B>::gradient_side_lane() ? "side" : "serial";
    return "serial";
}

// homes: every group's (none: the resident plan); streamed plans use 3 device slots.
template <class B>
int bench(B& backend, const gpt_config& c, const args& a, std::optional<group_home> homes) {
    gpt_model<float, B> model(c);
    train_options o{.batch = a.batch, .seq = a.seq, .accum = a.accum, .clip = 1.0};
    if (homes) o.homes = every_group(model.groups().size(), *homes);
    o.slots = 3;
    o.schedule = {.kind = lr_kind::constant, .lr = 3e-4, .min_lr = 3e-4, .warmup_steps = 0, .total_steps = a.warmup + a.steps + 1};
    set_activations(o, a.activations, a.kept);
    const auto init_start = std::chrono::steady_clock::now();
    gpt_trainer<float, B> t(backend, model, o);
    t.initialize(1);
    const double init_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - init_start).count();
    trace_recorder trace;
    std::vector<double> ms;
    double loss = 0, hidden = 0;
    const int warmup = a.warmup;
    for (int s = 0; s < warmup + a.steps + (a.profile ? 1 : 0); ++s) {
        const auto micro = batches(c, a, s);
        const bool traced = a.profile && s == warmup + a.steps;  // one more step after the timed ones
        if (traced)
            t.for_each_stream([&](std::string_view track, auto& st) {
                st.set_tracer([rec = &trace, name = std::string(track)](std::string_view what, auto b, auto e) {
                    rec->add(name, what, b, e);
                });
            });
        const auto start = std::chrono::steady_clock::now();
        loss = t.step(micro).loss;
        const double elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        if (traced) {
            t.for_each_stream([](std::string_view, auto& st) {
                if constexpr (requires { st.flush_trace(); }) st.flush_trace();
                st.set_tracer({});
            });
            hidden = trace.transfer_hidden_fraction();
        } else if (s >= warmup) {
            ms.push_back(elapsed);
        }
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms.empty() ? 0 : ms[ms.size() / 2];
    const double tokens = static_cast<double>(a.batch * a.seq * a.accum);
    const double model_flops = 6.0 * static_cast<double>(c.parameter_count()) * tokens;
    const double attention_flops = 6.0 * static_cast<double>(c.n_layer * a.seq * c.n_embd) * tokens;  // causal
    const auto per_s = [&](double per_step) { return median > 0 ? per_step / median * 1e3 : 0.0; };
    nlohmann::json out{{"bench", "strata"}, {"device", B::name}, {"model", a.model}, {"params", c.parameter_count()},
                       {"n_layer", c.n_layer}, {"n_embd", c.n_embd},
                       {"batch", a.batch}, {"seq", a.seq}, {"accum", a.accum}, {"placement", a.placement},
                       {"activations", a.activations},
                       {"kept_blocks", std::min<std::size_t>(o.activations.count, c.n_layer)},
                       {"moments", a.placement == "streamed" ? a.moments : "device"}, {"tf32", a.tf32},
                       {"attention_backward", attention_backward_name<B>(c, a)},
                       {"gradient_lane", gradient_lane_name<B>()},
                       {"steps", a.steps}, {"warmup", warmup}, {"init_s", init_s},
                       {"ms_per_step", median}, {"ms_min", ms.empty() ? 0 : ms.front()},
                       {"tokens_per_s", per_s(tokens)},
                       {"model_tflops", per_s(model_flops) * 1e-12}, {"attention_tflops", per_s(attention_flops) * 1e-12},
                       {"device_peak_bytes", backend.budget(tier_id::device).peak()},
                       {"host_peak_bytes", backend.budget(tier_id::host).peak()},
                       {"host_peak_rss_bytes", peak_rss_bytes()}, {"loss", loss}};
    if (a.profile) out["transfer_hidden_fraction"] = hidden;
    std::cout << out.dump() << std::endl;
    if (a.profile) {
        // Time per op over the traced step, per stream: where the time goes.
        std::map<std::uint32_t, std::string> track_names;
        for (const auto& tr : trace.tracks()) track_names[tr.tid] = tr.name;
        std::map<std::pair<std::string, std::string>, std::pair<double, int>> per_op;
        std::map<std::string, double> per_track;
        for (const auto& e : trace.events()) {
            const std::string& track = track_names[e.tid];
            auto& slot = per_op[{track, e.name}];
            slot.first += static_cast<double>(e.duration_ns) * 1e-6;
            slot.second += 1;
            per_track[track] += static_cast<double>(e.duration_ns) * 1e-6;
        }
        std::vector<std::pair<double, std::string>> rows;
        for (const auto& [key, v] : per_op) {
            char line[200];
            std::snprintf(line, sizeof line, "  %-10s %-24s %6d calls %10.2f ms", key.first.c_str(), key.second.c_str(), v.second, v.first);
            rows.push_back({v.first, line});
        }
        std::sort(rows.rbegin(), rows.rend());
        std::cout << "time per op in one traced step (busy time, per stream):" << std::endl;
        for (const auto& [track, total] : per_track) std::printf("  stream %-12s busy %10.2f ms\n", track.c_str(), total);
        for (const auto& r : rows) std::cout << r.second << std::endl;
        if (!a.trace.empty()) trace.write(a.trace);
    }
    return 0;
}

template <class B>
int run(const args& a) {
    const gpt_config c = shape_of(a.model, a.seq);
    tier_options tiers{};
    if (a.placement == "streamed" && a.moments == "storage") {
        tiers.storage_dir = a.storage_dir.empty() ? std::filesystem::temp_directory_path() / "strata-bench" : std::filesystem::path(a.storage_dir);
        std::filesystem::create_directories(tiers.storage_dir);
    }
    B backend(tiers);
    if (a.placement == "resident") return bench(backend, c, a, std::nullopt);
    if (a.placement != "streamed") throw error("--placement must be resident or streamed");
    return bench(backend, c, a, a.moments == "storage" ? group_home::storage() : group_home::host());
}

}  // namespace

int main(int argc, char** argv) {
    args a;
    for (int i = 1; i < argc; ++i) {
        const std::string k = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw error(k + " needs a value");
            return argv[++i];
        };
        try {
            if (k == "--model") a.model = value();
            else if (k == "--batch") a.batch = std::stoul(value());
            else if (k == "--seq") a.seq = std::stoul(value());
            else if (k == "--accum") a.accum = std::stoul(value());
            else if (k == "--steps") a.steps = std::stoi(value());
            else if (k == "--warmup") a.warmup = std::stoi(value());
            else if (k == "--activations") a.activations = value();
            else if (k == "--kept") a.kept = std::stoul(value());
            else if (k == "--no-checkpointing") a.activations = "keep";
            else if (k == "--placement") a.placement = value();
            else if (k == "--moments") a.moments = value();
            else if (k == "--storage-dir") a.storage_dir = value();
            else if (k == "--device") a.device = value();
            else if (k == "--trace") a.trace = value();
            else if (k == "--tf32") a.tf32 = true;
            else if (k == "--no-profile") a.profile = false;
            else throw error("unknown option " + k, "see the comment at the top of bench/gpt_step.cpp");
        } catch (const std::exception& e) {
            std::cerr << "strata_bench_gpt_step: " << e.what() << std::endl;
            return 2;
        }
    }
    try {
        if (a.steps < 1 || a.warmup < 0) throw error("--steps must be >= 1 and --warmup >= 0", "e.g. --warmup 2 --steps 10");
        train_options probe;
        set_activations(probe, a.activations, a.kept);  // a bad value fails before the model is built
    } catch (const std::exception& e) {
        std::cerr << "strata_bench_gpt_step: " << e.what() << std::endl;
        return 2;
    }
    try {
#ifdef STRATA_WITH_CUDA
        if (a.device == "cuda") {
            ops<cuda_backend>::set_tf32(a.tf32);
            const char* attention = std::getenv("STRATA_BENCH_ATTENTION_BACKWARD");
            if (attention != nullptr && std::string(attention) == "two-kernel")
                ops<cuda_backend>::use_two_kernel_attention_backward();
            else if (attention != nullptr && *attention != '\0')
                throw error(std::string("STRATA_BENCH_ATTENTION_BACKWARD=") + attention + " is not a choice",
                            "two-kernel, or unset for the library's choice");
            const char* lane = std::getenv("STRATA_BENCH_GRADIENT_LANE");
            if (lane != nullptr && std::string(lane) == "serial")
                ops<cuda_backend>::set_gradient_side_lane(false);
            else if (lane != nullptr && *lane != '\0')
                throw error(std::string("STRATA_BENCH_GRADIENT_LANE=") + lane + " is not a choice",
                            "serial, or unset for the library's default (the side lane)");
            return run<cuda_backend>(a);
        }
#endif
        if (a.device != "cpu") throw error("--device " + a.device + " is not available in this build");
        return run<cpu_backend>(a);
    } catch (const std::exception& e) {
        std::cerr << "strata_bench_gpt_step: error: " << e.what() << std::endl;
        return 1;
    }
}
