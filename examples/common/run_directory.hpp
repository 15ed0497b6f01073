// The run directory (--out) of the example trainers, made safe to share and to reuse:
//  - a lock held for the run's life (flock on OUT/.lock, which holds the pid), so two runs never
//    write the same checkpoints or metrics;
//  - a probe file created and removed before step 1, so an unwritable --out is found before any
//    training is lost;
//  - temporary checkpoint directories (step-N.tmp-PID) that a killed run left, removed at start
//    (under the lock no other run can be writing them);
//  - OUT/latest (strata::run_training rewrites it atomically after each checkpoint) names the
//    latest complete checkpoint: resolve_checkpoint follows it;
//  - a fresh run refuses a directory that holds another run's checkpoints unless asked to replace them;
//  - output files (--metrics, --trace, --out) that would destroy an input, or a file strata did not
//    write, are refused.
// Example code, not library code: both strata-gpt and strata-llama include it.
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <fcntl.h>     // open, O_*
#include <signal.h>    // kill
#include <sys/file.h>  // flock
#include <unistd.h>    // getpid, close, write, ftruncate, unlink

#include <algorithm>     // std::sort
#include <cerrno>        // errno
#include <cstring>       // std::strerror
#include <filesystem>    // std::filesystem
#include <fstream>       // std::ifstream
#include <iostream>      // std::cout
#include <regex>         // std::regex
#include <string>        // std::string
#include <system_error>  // std::error_code
#include <utility>       // std::pair, std::exchange
#include <vector>        // std::vector

namespace strata::examples {

namespace fs = std::filesystem;

// Creates --out and checks that a file can be created in it (then removes that file).
inline void probe_writable(const fs::path& out) {
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec || !fs::is_directory(out))
        throw error("--out '" + out.string() + "' cannot be created as a directory" + (ec ? ": " + ec.message() : std::string()),
                    "pick a directory you can write to (checked before step 1, so no training is lost)");
    const fs::path probe = out / (".write-probe-" + std::to_string(::getpid()));
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int err = errno;
    if (fd < 0 || ::write(fd, "x", 1) != 1) {
        const int write_err = fd < 0 ? err : errno;
        if (fd >= 0) ::close(fd);
        ::unlink(probe.c_str());
        throw error("--out '" + out.string() + "' is not writable: " + std::strerror(write_err),
                    "pick a directory you can write to (checked before step 1, so no training is lost)");
    }
    ::close(fd);
    ::unlink(probe.c_str());
}

// An exclusive lock on a run directory for the life of this object (of the run): flock on
// OUT/.lock, a file that holds the holder's pid. The kernel drops the lock when the process dies,
// however it dies, so a killed run never leaves the directory locked.
class run_lock {
public:
    explicit run_lock(const fs::path& out) {
        const fs::path file = out / ".lock";
        m_fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (m_fd < 0)
            throw error("cannot create the lock file '" + file.string() + "': " + std::strerror(errno),
                        "pick a directory you can write to");
        if (::flock(m_fd, LOCK_EX | LOCK_NB) != 0) {
            std::string holder;
            std::ifstream(file) >> holder;
            ::close(m_fd);
            throw error("--out '" + out.string() + "' is in use by another run (pid " +
                            (holder.empty() ? std::string("unknown") : holder) + ")",
                        "wait for that run to finish or stop it, or pick another --out");
        }
        const std::string pid = std::to_string(::getpid()) + "\n";
        if (::ftruncate(m_fd, 0) != 0 || ::pwrite(m_fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
            throw error("cannot write the lock file '" + file.string() + "': " + std::strerror(errno), "is the disk full?");
    }
    ~run_lock() {  // the file stays: removing it would race with the next run's lock
        if (m_fd >= 0) ::close(m_fd);
    }
    run_lock(run_lock&& other) noexcept : m_fd(std::exchange(other.m_fd, -1)) {}
    run_lock(const run_lock&) = delete;
    run_lock& operator=(const run_lock&) = delete;

private:
    int m_fd = -1;
};

// The complete checkpoints in OUT (step-NNNNNN directories), sorted by name (= by step).
inline std::vector<fs::path> checkpoints_in(const fs::path& out) {
    static const std::regex name("step-[0-9]+");
    std::vector<fs::path> found;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(out, ec))
        if (e.is_directory() && std::regex_match(e.path().filename().string(), name)) found.push_back(e.path());
    std::sort(found.begin(), found.end());
    return found;
}

// Removes what an interrupted run left in OUT: step-N.tmp-PID directories and latest.tmp-PID-N
// files (write_file_atomically's temporaries) of other processes. Call it with the lock held: then
// no other run can be writing them.
inline void remove_stale_temporaries(const fs::path& out) {
    static const std::regex name("(step-[0-9]+|latest)\\.tmp-([0-9]+)([.-][0-9]+)?");
    std::error_code ec;
    std::vector<fs::path> stale;
    for (const auto& e : fs::directory_iterator(out, ec)) {
        std::smatch m;
        const std::string file = e.path().filename().string();
        if (std::regex_match(file, m, name) && std::stol(m[2].str()) != ::getpid()) stale.push_back(e.path());
    }
    for (const auto& p : stale) {
        std::error_code rm;
        fs::remove_all(p, rm);
        std::cout << "removed " << p.string() << " (a temporary checkpoint an interrupted run left)" << std::endl;
    }
}

// A run directory with a `latest` file (and no model of its own) means its latest checkpoint;
// any other path means itself.
inline fs::path resolve_checkpoint(const fs::path& path) {
    if (!fs::is_regular_file(path / "latest") || fs::exists(path / "config.json")) return path;
    std::string name;
    std::ifstream(path / "latest") >> name;
    return name.empty() ? path : path / name;
}

// A path as the file system resolves it (the parts that exist), for comparing two paths.
inline fs::path resolved(const fs::path& p) {
    std::error_code ec;
    const fs::path r = fs::weakly_canonical(fs::absolute(p), ec);
    return ec ? fs::absolute(p).lexically_normal() : r;
}

// Whether `p` is `dir` or lies inside it.
inline bool is_within(const fs::path& p, const fs::path& dir) {
    const auto rp = resolved(p), rd = resolved(dir);
    auto [d, q] = std::mismatch(rd.begin(), rd.end(), rp.begin(), rp.end());
    return d == rd.end() || (std::next(d) == rd.end() && d->empty());
}

using named_path = std::pair<std::string, fs::path>;  // {"--metrics", path}

// Whether an existing file is one strata wrote as `flag`'s output: a metrics file starts with a
// JSON object line, a trace is an object whose first keys are "displayTimeUnit" and "traceEvents"
// (nlohmann sorts them). An empty file is anyone's.
inline bool written_by_strata(const fs::path& file, const std::string& flag) {
    std::ifstream in(file, std::ios::binary);
    std::string head(64, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<std::size_t>(in.gcount()));
    if (head.empty()) return true;
    if (flag == "--trace") return head.starts_with("{\"") && head.find("\"traceEvents\"") != std::string::npos;
    return head.starts_with("{\"");  // metrics_writer's lines are JSON objects
}

// What a training run reads, named by their flags (both programs' train_args have these fields).
template <class Args>
std::vector<named_path> inputs_of(const Args& a) {
    std::vector<named_path> in{{"--data", a.data}, {"--init-from", a.init_from}, {"--resume", a.resume},
                               {"--config", a.config}};
    if (a.tokenizer.starts_with("gpt2:")) in.emplace_back("--tokenizer", a.tokenizer.substr(5));
    if constexpr (requires { a.chat_template; })
        if (a.chat_template != "auto" && a.chat_template != "none") in.emplace_back("--chat-template", a.chat_template);
    return in;
}

// Refuses outputs that would destroy an input (the same file, or a file inside an input
// directory), two outputs on one file, and overwriting a file strata did not write (unless
// `overwrite`). `out` is the run directory; outputs are files.
inline void check_outputs(const fs::path& out, const std::vector<named_path>& outputs,
                          const std::vector<named_path>& inputs, bool overwrite) {
    if (fs::exists(out) && !fs::is_directory(out))
        throw error("--out '" + out.string() + "' exists and is not a directory", "pick a directory for --out");
    for (const auto& [in_flag, in] : inputs) {
        if (in.empty()) continue;
        if (is_within(out, in) || (fs::is_regular_file(in) && resolved(in) == resolved(out)))
            throw error("--out '" + out.string() + "' is the " + in_flag + " input '" + in.string() +
                            "' or inside it: writing there would change the input",
                        "pick another --out");
    }
    for (std::size_t i = 0; i < outputs.size(); ++i) {
        const auto& [flag, file] = outputs[i];
        if (file.empty()) continue;
        for (const auto& [in_flag, in] : inputs)
            if (!in.empty() && is_within(file, in))
                throw error(flag + " '" + file.string() + "' is the " + in_flag + " input" +
                                (resolved(file) == resolved(in) ? "" : " '" + in.string() + "' or inside it") +
                                ": writing it would destroy the input",
                            "pick another path for " + flag);
        for (std::size_t j = 0; j < i; ++j)
            if (!outputs[j].second.empty() && resolved(outputs[j].second) == resolved(file))
                throw error(flag + " and " + outputs[j].first + " are the same file '" + file.string() + "'",
                            "give each output its own path");
        if (fs::is_directory(file))
            throw error(flag + " '" + file.string() + "' is a directory", "pass a file path for " + flag);
        if (!overwrite && fs::exists(file) && !written_by_strata(file, flag))
            throw error(flag + " '" + file.string() + "' exists and is not a " + (flag == "--trace" ? "trace" : "metrics") +
                            " file strata wrote: refusing to overwrite it",
                        "pick another path for " + flag + ", or pass --overwrite");
    }
}

// A fresh run (no --resume) into a directory that holds checkpoints of another run: refused,
// unless `overwrite`, which removes them (but never one an input lies in) and OUT/latest.
inline void claim_for_fresh_run(const fs::path& out, bool overwrite, const std::vector<named_path>& inputs) {
    const auto found = checkpoints_in(out);
    if (found.empty()) return;
    if (!overwrite)
        throw error("--out '" + out.string() + "' holds checkpoints of another run (" + found.front().filename().string() +
                        (found.size() > 1 ? " ... " + found.back().filename().string() : std::string()) +
                        "): a new run would replace them",
                    "continue that run with --resume " + found.back().string() +
                        ", pick another --out, or pass --overwrite to remove them and start afresh");
    std::size_t removed = 0;
    for (const auto& ckpt : found) {
        bool holds_input = false;
        for (const auto& [flag, in] : inputs) holds_input = holds_input || (!in.empty() && is_within(in, ckpt));
        if (holds_input) continue;
        fs::remove_all(ckpt);
        ++removed;
    }
    std::error_code ec;
    fs::remove(out / "latest", ec);
    std::cout << "--overwrite: removed " << removed << " checkpoint(s) of an earlier run from " << out.string() << std::endl;
}

// Everything about --out before step 1: writable (a probe file), locked for the run's life, rid of
// what interrupted runs left, and (a fresh run) not holding another run's checkpoints.
[[nodiscard]] inline run_lock prepare_run_directory(const fs::path& out, bool resuming, bool overwrite,
                                                    const std::vector<named_path>& inputs) {
    probe_writable(out);
    run_lock lock(out);
    remove_stale_temporaries(out);
    if (!resuming) claim_for_fresh_run(out, overwrite, inputs);
    return lock;
}

}  // namespace strata::examples
