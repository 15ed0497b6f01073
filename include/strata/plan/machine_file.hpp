// Machine files: a machine_rates (plan/machine.hpp) as JSON, to plan for a machine that is not
// here (`--machine FILE`) and to cache this machine's calibration (plan/calibrate.hpp).
//
//   {
//     "name": "h200",
//     "notes": "free text: where the numbers come from",           (optional)
//     "device_budget": "132G", "host_budget": "100G", "storage_budget": "50G",
//     "host_cores": 16,
//     "h2d_GBps": 55.4, "d2h_GBps": 55.3, "duplex_GBps": 99,
//     "storage_read_GBps": 2.0, "storage_write_GBps": 1.4,
//     "gemm_TFLOPS": 47.3, "attention_TFLOPS": 20, "device_memory_GBps": 4000,
//     "attention_TFLOPS_by_head_size": {"64": 50, "128": 26},                 (optional)
//     "host_optimizer_Gparams_per_s": {"adamw": 4.86, "sgd": 6.8},
//     "device_optimizer_Gparams_per_s": {"adafactor": 6.0}                   (optional)
//   }
//
// Units are in the key names: GB = 1e9 bytes, TFLOPS = 1e12 FLOP per second, Gparams = 1e9
// parameters. Budgets are byte counts written as the command line's budgets are ("132G", binary
// units) or as plain numbers of bytes. Every field but "notes", "attention_TFLOPS_by_head_size"
// (a plan takes the rate of the model's head size, or the nearest listed, over attention_TFLOPS:
// machine.hpp's attention_rate) and "device_optimizer_Gparams_per_s" is required; a rate must be positive, a budget non-negative (the device's and the host's
// positive); the optimizer objects name optimizers the library has, the host's at least adamw and
// sgd; the device's may name none (an optimizer without a device rate is modelled as memory-bound:
// plan/machine.hpp); any other key is refused. Each refusal names the field.
#pragma once

#include <strata/core/bytes.hpp>        // parse_bytes
#include <strata/core/error.hpp>        // strata::error
#include <strata/core/format.hpp>       // fmt::format (host only)
#include <strata/io/json_file.hpp>      // read_json_file, write_json_file
#include <strata/optim/optimizers.hpp>  // registered_optimizers
#include <strata/plan/machine.hpp>      // machine_rates

#include <nlohmann/json.hpp>  // nlohmann::json, nlohmann::ordered_json

#include <array>        // std::array
#include <cmath>        // std::isfinite
#include <filesystem>   // std::filesystem::path
#include <map>          // std::map
#include <string>       // std::string
#include <string_view>  // std::string_view

namespace strata {

namespace detail {

// A rate field: its key in the file, its scale to base units, and where it lives in machine_rates.
struct machine_rate_field {
    std::string_view key;
    double unit;
    double machine_rates::*member;
};

inline constexpr std::array<machine_rate_field, 8> machine_rate_fields{{
    {"h2d_GBps", 1e9, &machine_rates::h2d},
    {"d2h_GBps", 1e9, &machine_rates::d2h},
    {"duplex_GBps", 1e9, &machine_rates::duplex},
    {"storage_read_GBps", 1e9, &machine_rates::storage_read},
    {"storage_write_GBps", 1e9, &machine_rates::storage_write},
    {"gemm_TFLOPS", 1e12, &machine_rates::gemm_flops},
    {"attention_TFLOPS", 1e12, &machine_rates::attention_flops},
    {"device_memory_GBps", 1e9, &machine_rates::device_memory},
}};

inline constexpr std::array<std::string_view, 3> machine_budget_keys{"device_budget", "host_budget", "storage_budget"};
inline constexpr std::string_view host_optimizer_key = "host_optimizer_Gparams_per_s";
inline constexpr std::string_view device_optimizer_key = "device_optimizer_Gparams_per_s";
inline constexpr std::string_view attention_by_head_size_key = "attention_TFLOPS_by_head_size";
// The optimizers whose rates every machine file gives (the calibration has measured them since
// machine files exist); any other registered optimizer's rate is optional: without it, a plan for
// that optimizer comes from the fixed rules.
inline constexpr std::array<std::string_view, 2> machine_file_optimizers{"adamw", "sgd"};

inline bool is_machine_file_key(std::string_view key) {
    if (key == "name" || key == "notes" || key == "host_cores" || key == host_optimizer_key ||
        key == device_optimizer_key || key == attention_by_head_size_key)
        return true;
    for (std::string_view k : machine_budget_keys)
        if (key == k) return true;
    for (const auto& f : machine_rate_fields)
        if (key == f.key) return true;
    return false;
}

inline std::string machine_file_keys() {
    std::string keys = "name, notes, device_budget, host_budget, storage_budget, host_cores";
    for (const auto& f : machine_rate_fields) keys += ", " + std::string(f.key);
    return keys + ", " + std::string(attention_by_head_size_key) + ", " + std::string(host_optimizer_key) + ", " +
           std::string(device_optimizer_key);
}

// Reads the fields of one machine file (`source` names it in errors).
class machine_file_reader {
public:
    machine_file_reader(const nlohmann::json& j, std::string source) : m_json(j), m_source(std::move(source)) {}

    [[noreturn]] void refuse(std::string_view key, const std::string& problem, const std::string& hint) const {
        throw error("machine file " + m_source + ": field '" + std::string(key) + "' " + problem, hint);
    }

    const nlohmann::json& field(std::string_view key) const {
        const auto it = m_json.find(key);
        if (it == m_json.end())
            refuse(key, "is missing", "every field but \"notes\" is required: " + machine_file_keys());
        return *it;
    }

    // A positive (or, with allow_zero, non-negative) finite number.
    double number(const nlohmann::json& v, std::string_view key, bool allow_zero) const {
        if (!v.is_number())
            refuse(key, "is a " + std::string(v.type_name()) + " (" + v.dump() + "), not a number",
                   "write a number, e.g. \"" + std::string(key) + "\": 12.5");
        const double x = v.get<double>();
        if (!std::isfinite(x) || x < 0) refuse(key, "is negative (" + v.dump() + ")", "write a positive number");
        if (x == 0 && !allow_zero) refuse(key, "is 0", "a machine file describes a machine: write its measured rate");
        return x;
    }

    std::size_t bytes(std::string_view key, bool allow_zero) const {
        const nlohmann::json& v = field(key);
        std::size_t n = 0;
        if (v.is_string()) {
            n = parse_bytes(v.get<std::string>(), "machine file " + m_source + ": field '" + std::string(key) + "'");
        } else if (v.is_number_integer() || v.is_number_unsigned()) {
            if (v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0)
                refuse(key, "is negative (" + v.dump() + ")", "write a byte count like 132G or 141733920768");
            n = v.get<std::size_t>();
        } else {
            refuse(key, "is a " + std::string(v.type_name()) + " (" + v.dump() + "), not a byte count",
                   "write a byte count like \"132G\" (binary units) or a whole number of bytes");
        }
        if (n == 0 && !allow_zero) refuse(key, "is 0 bytes", "write the tier's budget, e.g. \"132G\"");
        return n;
    }

    // An object of rates per optimizer, G parameters per second, as parameters per second.
    std::map<std::string, double> optimizer_rates(const nlohmann::json& v, std::string_view key) const {
        if (!v.is_object())
            refuse(key, "must be an object of rates per optimizer (it is " + v.dump() + ")",
                   "write e.g. {\"adamw\": 4.86, \"sgd\": 6.8}");
        std::map<std::string, double> rates;
        for (const auto& [name, value] : v.items()) {
            const std::string field = std::string(key) + "." + name;
            if (!registered_optimizers::has(name))
                refuse(field, "names no optimizer strata has", "the optimizers are " + registered_optimizers::names(" and "));
            rates[name] = number(value, field, false) * 1e9;
        }
        return rates;
    }

    // An object of attention rates per head size ({"64": 50}), TFLOP/s, as FLOP/s per head size.
    std::map<std::size_t, double> head_size_rates(const nlohmann::json& v, std::string_view key) const {
        if (!v.is_object() || v.empty())
            refuse(key, "must be an object of rates per head size (it is " + v.dump() + ")",
                   "write e.g. {\"64\": 50, \"128\": 26}: causal attention's TFLOP/s at each head size");
        std::map<std::size_t, double> rates;
        for (const auto& [size, value] : v.items()) {
            const std::string field = std::string(key) + "." + size;
            std::size_t head_size = 0;
            const bool whole = !size.empty() && size.size() <= 4 &&
                               size.find_first_not_of("0123456789") == std::string::npos;
            if (whole) head_size = std::stoul(size);
            if (!whole || head_size == 0)
                refuse(field, "names no head size", "the keys are head sizes, whole numbers like \"64\" or \"128\"");
            rates[head_size] = number(value, field, false) * 1e12;
        }
        return rates;
    }

private:
    const nlohmann::json& m_json;
    std::string m_source;
};

}  // namespace detail

// The machine described by `j` (a machine file's JSON); `source` (its path) names it in errors.
inline machine_rates machine_from_json(const nlohmann::json& j, const std::string& source) {
    if (!j.is_object())
        throw error("machine file " + source + " holds a " + std::string(j.type_name()) + ", not a JSON object",
                    "a machine file is an object of fields: " + detail::machine_file_keys());
    for (const auto& [key, value] : j.items())
        if (!detail::is_machine_file_key(key))
            throw error("machine file " + source + ": unknown field '" + key + "'",
                        "the fields are: " + detail::machine_file_keys());
    const detail::machine_file_reader in(j, source);
    machine_rates m;
    const nlohmann::json& name = in.field("name");
    if (!name.is_string() || name.get<std::string>().empty())
        in.refuse("name", "must be a non-empty string (it is " + name.dump() + ")", "name the machine, e.g. \"h200\"");
    m.name = name.get<std::string>();
    if (const auto notes = j.find("notes"); notes != j.end() && !notes->is_string())
        in.refuse("notes", "must be a string (it is a " + std::string(notes->type_name()) + ")",
                  "write the assumptions as one string");
    m.budgets.device = in.bytes("device_budget", false);
    m.budgets.host = in.bytes("host_budget", false);
    m.budgets.storage = in.bytes("storage_budget", true);
    const nlohmann::json& cores = in.field("host_cores");
    if (!cores.is_number_integer() || cores.get<std::int64_t>() <= 0)
        in.refuse("host_cores", "must be a positive whole number (it is " + cores.dump() + ")", "write e.g. 16");
    m.host_cores = cores.get<std::size_t>();
    for (const auto& f : detail::machine_rate_fields) m.*f.member = in.number(in.field(f.key), f.key, false) * f.unit;
    if (const auto by_size = j.find(detail::attention_by_head_size_key); by_size != j.end())
        m.attention_flops_by_head_size = in.head_size_rates(*by_size, detail::attention_by_head_size_key);
    const nlohmann::json& optimizers = in.field(detail::host_optimizer_key);
    m.host_optimizer = in.optimizer_rates(optimizers, detail::host_optimizer_key);
    if (const auto device = j.find(detail::device_optimizer_key); device != j.end())
        m.device_optimizer = in.optimizer_rates(*device, detail::device_optimizer_key);
    for (std::string_view name : detail::machine_file_optimizers) {
        const std::string key = std::string(detail::host_optimizer_key) + "." + std::string(name);
        if (optimizers.find(name) == optimizers.end())
            in.refuse(key, "is missing", "give the host optimizer's rate of adamw and sgd at least");
    }
    return m;
}

// `m` as a machine file's JSON (budgets as bytes; "notes" only when given).
inline nlohmann::ordered_json machine_to_json(const machine_rates& m, const std::string& notes = {}) {
    nlohmann::ordered_json j;
    j["name"] = m.name;
    if (!notes.empty()) j["notes"] = notes;
    j["device_budget"] = m.budgets.device;
    j["host_budget"] = m.budgets.host;
    j["storage_budget"] = m.budgets.storage;
    j["host_cores"] = m.host_cores;
    for (const auto& f : detail::machine_rate_fields) j[std::string(f.key)] = m.*f.member / f.unit;
    if (!m.attention_flops_by_head_size.empty()) {
        nlohmann::ordered_json by_size = nlohmann::ordered_json::object();
        for (const auto& [size, rate] : m.attention_flops_by_head_size) by_size[std::to_string(size)] = rate / 1e12;
        j[std::string(detail::attention_by_head_size_key)] = by_size;
    }
    nlohmann::ordered_json optimizers = nlohmann::ordered_json::object();
    for (const auto& [name, rate] : m.host_optimizer) optimizers[name] = rate / 1e9;
    j[std::string(detail::host_optimizer_key)] = optimizers;
    if (!m.device_optimizer.empty()) {
        nlohmann::ordered_json device = nlohmann::ordered_json::object();
        for (const auto& [name, rate] : m.device_optimizer) device[name] = rate / 1e9;
        j[std::string(detail::device_optimizer_key)] = device;
    }
    return j;
}

// "GEMM 47.3 TFLOP/s, attention 47.8 TFLOP/s, H2D 55.4 / D2H 55.3 / both 99.0 GB/s, storage read
// 2.00 / write 1.40 GB/s, AdamW 4.86 G params/s on 16 cores": the rates in one line (0: unknown).
inline std::string machine_summary(const machine_rates& m) {
    auto rate = [](double x, double unit, const char* format) {
        return x > 0 ? fmt::format(fmt::runtime(format), x / unit) : std::string("?");
    };
    std::string out = "GEMM " + rate(m.gemm_flops, 1e12, "{:.3g}") + " TFLOP/s, attention " +
                      rate(m.attention_flops, 1e12, "{:.3g}") + " TFLOP/s, H2D " + rate(m.h2d, 1e9, "{:.1f}") +
                      " / D2H " + rate(m.d2h, 1e9, "{:.1f}") + " / both " + rate(m.duplex, 1e9, "{:.1f}") +
                      " GB/s, storage read " + rate(m.storage_read, 1e9, "{:.2f}") + " / write " +
                      rate(m.storage_write, 1e9, "{:.2f}") + " GB/s";
    for (const auto& [name, params] : m.host_optimizer)
        if (name == "adamw") out += ", AdamW " + rate(params, 1e9, "{:.3g}") + " G params/s";
    return out + " on " + std::to_string(m.host_cores) + " cores";
}

// A machine file read and checked: a strata::error naming the file and the field otherwise.
inline machine_rates read_machine_file(const std::filesystem::path& path) {
    return machine_from_json(read_json_file(path), path.string());
}

// Written atomically (a crash leaves the old file or the new one).
inline void write_machine_file(const std::filesystem::path& path, const machine_rates& m, const std::string& notes = {}) {
    write_json_file(path, machine_to_json(m, notes));
}

}  // namespace strata
