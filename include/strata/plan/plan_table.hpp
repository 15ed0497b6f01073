// The memory plan as text: the table the example programs print before training, and its
// summaries of homes and per-step traffic.
#pragma once

#include <strata/core/bytes.hpp>        // format_bytes_short
#include <strata/plan/memory_plan.hpp>  // memory_plan, plan_category, tier_bytes
#include <strata/tier/tier.hpp>         // tier_id, name_of

#include <strata/core/format.hpp>  // fmt::format (host only)

#include <cstddef>  // std::size_t
#include <string>   // std::string

namespace strata {

namespace detail {

// "12.00 MiB": short enough for a table column ("-" for nothing).
inline std::string short_bytes(std::size_t bytes) { return bytes == 0 ? "-" : format_bytes_short(bytes); }

inline std::string percent_of(std::size_t part, std::size_t whole) {
    if (whole == 0) return part == 0 ? "-" : "over";
    return fmt::format("{:.1f} %", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

// "124.44 M", "1.77 B" parameters.
inline std::string parameter_count(std::size_t n) {
    const double x = static_cast<double>(n);
    return x >= 1e9 ? fmt::format("{:.2f} B", x / 1e9) : fmt::format("{:.2f} M", x / 1e6);
}

}  // namespace detail

// "embeddings: device; blocks 0-23: device; blocks 24-31: host; blocks 32-39: host, AdamW m, v on
// storage; final norm: device": a streamed plan's homes as runs of groups.
inline std::string homes_summary(const memory_plan& p) {
    const auto& homes = p.homes;
    auto where_of = [&](const group_home& h) -> std::string {
        if (h.weights == tier_id::device) return "device";
        return h.moments == tier_id::storage ? "host, " + p.state_label() + " on storage" : "host";
    };
    const std::size_t G = homes.size();
    if (G < 3) return "";
    // Runs of blocks with one home: "blocks 0-23: device".
    std::string blocks;
    for (std::size_t g = 1; g + 1 < G;) {
        std::size_t e = g;
        while (e + 2 < G && homes[e + 1] == homes[g]) ++e;
        const std::size_t first = g - 1, last = e - 1;
        if (!blocks.empty()) blocks += "; ";
        blocks += first == last ? "block " + std::to_string(first) : "blocks " + std::to_string(first) + "-" + std::to_string(last);
        blocks += ": " + where_of(homes[g]);
        g = e + 1;
    }
    return "embeddings: " + where_of(homes.front()) + "; " + blocks + "; final norm: " + where_of(homes.back());
}

// "H2D 38.20 GiB (0.76 s at 50.1 GB/s), D2H ...": a streamed plan's per_step per link, with the
// seconds the bandwidths give (bytes only where a bandwidth is unknown).
inline std::string traffic_summary(const memory_plan& p) {
    const link_bytes& per_step = p.per_step;
    const link_bandwidths& links = p.links;
    std::string out;
    auto link = [&](const char* name, std::size_t bytes, double bandwidth) {
        if (!out.empty()) out += ", ";
        out += fmt::format("{} {}", name, detail::short_bytes(bytes));
        if (bytes > 0 && bandwidth > 0)
            out += fmt::format(" ({:.2f} s at {:.1f} GB/s)", static_cast<double>(bytes) / bandwidth, bandwidth / 1e9);
    };
    link("H2D", per_step.h2d, links.h2d);
    link("D2H", per_step.d2h, links.d2h);
    link("storage read", per_step.storage_read, links.storage_read);
    link("storage write", per_step.storage_write, links.storage_write);
    return out;
}

// The plan as a table: its placement, homes and activations in a few lines, then rows =
// categories, columns = tiers, then the total, the budget and the share of it used.
inline std::string plan_table(const memory_plan& p) {
    std::string out = "memory plan: " + std::string(name_of(p.where)) + " placement";
    if (p.where == placement::streamed)
        out += ", " + std::to_string(p.slots) + " device slots (prefetch depth " + std::to_string(p.slots - 1) +
               ") of the largest block " + detail::short_bytes(p.largest_block_bytes) + " each";
    out += fmt::format(", {} parameters", detail::parameter_count(p.parameters));
    if (p.trainable_parameters != p.parameters)
        out += fmt::format(" ({} trainable, the rest frozen)", detail::parameter_count(p.trainable_parameters));
    out += fmt::format(" in {} groups\n", p.group_count);
    if (p.where == placement::resident)
        out += "homes: every group on the device";
    else
        out += "homes: " + homes_summary(p);
    out += fmt::format("\nactivations {}: {} of {} blocks keep theirs ({} each), {} recompute from their input",
                       name_of(p.activations_home), p.kept_blocks, p.block_count, detail::short_bytes(p.block_activation_bytes),
                       p.block_count - p.kept_blocks);
    if (p.kept_parts > 0)
        out += fmt::format(", {} of them keeping part of theirs ({} each, e.g. attention's output) and recomputing "
                           "the rest from it",
                           p.kept_parts, detail::short_bytes(p.block_part_bytes));
    if (p.offloaded_inputs > 0)
        out += fmt::format(" (their inputs in pinned host memory: {} x {})", p.offloaded_inputs,
                           detail::short_bytes(p.block_input_bytes));
    out += "\n";
    if (p.where == placement::streamed) out += "per step: " + traffic_summary(p) + "\n";
    if (p.ranks > 1)
        out += fmt::format("data parallel: {} ranks; the device column is the fullest rank's (one rank keeps and updates "
                           "each device-homed group's optimizer state), the host holds its state once and {} of "
                           "staging per rank\n",
                           p.ranks, detail::short_bytes(p.rank_staging_bytes));

    auto row = [&](const std::string& label, auto cell) {
        out += fmt::format("{:<14}", label);
        for (tier_id t : all_tiers) out += fmt::format("{:>13}", cell(t));
        out += "\n";
    };
    row("", [](tier_id t) { return std::string(name_of(t)); });
    for (plan_category c : all_plan_categories)
        row(p.label_of(c), [&](tier_id t) { return detail::short_bytes(p.bytes_of(c, t)); });
    row("total", [&](tier_id t) { return detail::short_bytes(p.total(t)); });
    row("budget", [&](tier_id t) { return detail::short_bytes(p.budgets[t]); });
    row("used", [&](tier_id t) { return detail::percent_of(p.total(t), p.budgets[t]); });
    return out;
}

}  // namespace strata
