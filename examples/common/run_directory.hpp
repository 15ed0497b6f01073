// The run directory (--out) of the example trainers, made safe to share and to reuse. The rules
// (README, "What strata writes and removes") in one place:
//  - strata writes in OUT only these names: step-N/ (checkpoints), their step-N.tmp-PID/ while
//    they are assembled, latest (and latest.tmp-*), loss.svg, .lock, .write-probe-PID, and
//    strata-llama's corpus.txt. An existing file of one of these names that strata cannot tell as
//    its own (latest: "step-N"; loss.svg: strata's plot; .lock: a pid; a step-N directory: a
//    checkpoint whose trainer_state.json records every file in it) refuses the run: it is the
//    user's, and never overwritten or removed;
//  - a lock held for the run's life (flock on OUT/.lock, which holds the pid), so two runs never
//    write the same checkpoints or metrics;
//  - a probe file created (never over an existing one) and removed before step 1, so an
//    unwritable --out is found before any training is lost;
//  - temporary checkpoint directories (step-N.tmp-PID) that a killed run left, removed at start
//    (under the lock no other run can be writing them);
//  - OUT/latest (strata::run_training rewrites it atomically after each checkpoint) names the
//    latest complete checkpoint: resolve_checkpoint follows it;
//  - a fresh run refuses a directory that holds checkpoints unless --overwrite; a resumed run
//    writes into its own run's directory (the default --out of a resume), refusing one that holds
//    another run's checkpoints, or this run's past the resumed step unless --overwrite. What
//    --overwrite replaces is removed only at the new run's first save, after every check and
//    step 1, and only checkpoints strata recognises;
//  - --metrics and --trace: never an input (compared by device and inode, so a hard link is
//    caught), never one of the run's own files, never over a file that is not provably strata's
//    (a metrics file: the one the resumed checkpoint, or with --overwrite the replaced run's,
//    recorded; a trace: one strata wrote), unless --metrics-append adds to it; each is checked
//    writable before step 1.
// Example code, not library code: both strata-gpt and strata-llama include it.
#pragma once

#include <strata/core/error.hpp>            // strata::error
#include <strata/io/file_fingerprint.hpp>   // fingerprint_of
#include <strata/io/json_file.hpp>          // read_json_file
#include <strata/train/checkpoint.hpp>      // checkpoint_format, checkpoint_dir_name

#include <nlohmann/json.hpp>  // nlohmann::json

#include <fcntl.h>     // open, O_*
#include <signal.h>    // kill
#include <sys/file.h>  // flock
#include <sys/stat.h>  // stat
#include <unistd.h>    // getpid, close, write, ftruncate, unlink

#include <algorithm>     // std::sort
#include <chrono>        // std::chrono::steady_clock (a run id's entropy)
#include <cerrno>        // errno
#include <cstring>       // std::strerror
#include <filesystem>    // std::filesystem
#include <fstream>       // std::ifstream
#include <iostream>      // std::cout
#include <optional>      // std::optional
#include <random>        // std::random_device
#include <regex>         // std::regex
#include <set>           // std::set
#include <string>        // std::string
#include <system_error>  // std::error_code
#include <utility>       // std::pair, std::exchange
#include <vector>        // std::vector

namespace strata::examples {

namespace fs = std::filesystem;

// Whether a new file can be written in `dir`: one is created (never over an existing file of that
// name), written and removed. 0, or the errno of the failure.
inline int probe_directory(const fs::path& dir) {
    for (int attempt = 0; attempt < 100; ++attempt) {
        const fs::path probe =
            dir / (".write-probe-" + std::to_string(::getpid()) + (attempt ? "-" + std::to_string(attempt) : std::string()));
        const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EEXIST) continue;
        if (fd < 0) return errno;
        const int err = ::write(fd, "x", 1) == 1 ? 0 : errno;
        ::close(fd);
        ::unlink(probe.c_str());
        return err;
    }
    return EEXIST;
}

// Creates --out and checks that a file can be created in it.
inline void probe_writable(const fs::path& out) {
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec || !fs::is_directory(out))
        throw error("--out '" + out.string() + "' cannot be created as a directory" + (ec ? ": " + ec.message() : std::string()),
                    "pick a directory you can write to (checked before step 1, so no training is lost)");
    if (const int err = probe_directory(out); err != 0)
        throw error("--out '" + out.string() + "' is not writable: " + std::strerror(err),
                    "pick a directory you can write to (checked before step 1, so no training is lost)");
}

// An exclusive lock on a run directory for the life of this object (of the run): flock on
// OUT/.lock, a file that holds the holder's pid. The kernel drops the lock when the process dies,
// however it dies, so a killed run never leaves the directory locked.
class run_lock {
public:
    explicit run_lock(const fs::path& out) {
        const fs::path file = out / ".lock";
        m_fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (m_fd < 0)
            throw error("cannot create the lock file '" + file.string() + "': " + std::strerror(errno),
                        "pick a directory you can write to; OUT/.lock is strata's (a link there is refused)");
        if (::flock(m_fd, LOCK_EX | LOCK_NB) != 0) {
            std::string holder;
            std::ifstream(file) >> holder;
            ::close(m_fd);
            throw error("--out '" + out.string() + "' is in use by another run (pid " +
                            (holder.empty() ? std::string("unknown") : holder) + ")",
                        "wait for that run to finish or stop it, or pick another --out");
        }
        if (!holds_a_pid(file)) {
            ::close(m_fd);
            throw error("'" + file.string() + "' is not a lock file strata wrote (it holds more than a pid): refusing to "
                            "overwrite it",
                        "move that file away, or pick another --out");
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

    // What run_lock writes: a pid and a newline (or nothing yet).
    static bool holds_a_pid(const fs::path& file) {
        static const std::regex pid("[0-9]*\n?");
        std::ifstream in(file, std::ios::binary);
        std::string head(32, '\0');
        in.read(head.data(), static_cast<std::streamsize>(head.size()));
        head.resize(static_cast<std::size_t>(in.gcount()));
        return head.size() < 32 && std::regex_match(head, pid);
    }

private:
    int m_fd = -1;
};

// ---- the names strata writes in OUT, and telling its files from the user's ----

// Whether `name` (a file name in OUT) is one strata writes there.
inline bool is_run_file_name(const std::string& name) {
    static const std::regex names("\\.lock|latest|loss\\.svg|corpus\\.txt|step-[0-9]+(\\.tmp-.*)?|latest\\.tmp-.*|"
                                  "\\.write-probe-.*");
    return std::regex_match(name, names);
}

// The first `n` bytes of a file (fewer when it is shorter; none when it cannot be read).
inline std::string head_of(const fs::path& file, std::size_t n) {
    std::ifstream in(file, std::ios::binary);
    std::string head(n, '\0');
    in.read(head.data(), static_cast<std::streamsize>(n));
    head.resize(static_cast<std::size_t>(std::max<std::streamsize>(in.gcount(), 0)));
    return head;
}

// OUT/latest as run_training writes it: the name of a checkpoint and a newline.
inline bool is_strata_latest(const fs::path& file) {
    static const std::regex latest("step-[0-9]+\n?");
    const std::string head = head_of(file, 64);
    return fs::is_regular_file(file) && head.size() < 64 && std::regex_match(head, latest);
}

// OUT/loss.svg as write_loss_svg writes it (its first two lines).
inline bool is_strata_loss_plot(const fs::path& file) {
    const std::string head = head_of(file, 512);
    return fs::is_regular_file(file) && head.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"800\"") &&
           head.find("\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n") != std::string::npos;
}

// A trace as trace_recorder::write writes it (nlohmann sorts the keys).
inline bool is_strata_trace(const fs::path& file) {
    return head_of(file, 80).starts_with(R"({"displayTimeUnit":"ms","otherData":{"generator":"strata"})");
}

// The device and inode of a path (following links), or nothing when it does not exist.
inline std::optional<std::pair<dev_t, ino_t>> identity_of(const fs::path& p) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) return std::nullopt;
    return std::pair{st.st_dev, st.st_ino};
}

// Whether two paths are one file (or directory): the same device and inode, so a hard link, a
// symbolic link or another spelling of the path is caught.
inline bool same_file(const fs::path& a, const fs::path& b) {
    const auto ia = identity_of(a), ib = identity_of(b);
    return ia && ib && *ia == *ib;
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

// ---- checkpoints ----

// The checkpoint directories in OUT (step-NNNNNN), sorted by name (= by step).
inline std::vector<fs::path> checkpoints_in(const fs::path& out) {
    static const std::regex name("step-[0-9]+");
    std::vector<fs::path> found;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(out, ec))
        if (e.is_directory() && std::regex_match(e.path().filename().string(), name)) found.push_back(e.path());
    std::sort(found.begin(), found.end());
    return found;
}

// The step a checkpoint directory's name says (step-N), or -1.
inline long step_of_name(const fs::path& dir) {
    static const std::regex name("step-([0-9]{1,15})");
    std::smatch m;
    const std::string file = dir.filename().string();
    return std::regex_match(file, m, name) ? std::stol(m[1].str()) : -1;
}

// The trainer_state.json of `dir` if it is a checkpoint strata wrote: the format save_checkpoint
// writes, and every entry a regular file its "files" records (checkpoints saved before "files"
// was recorded: every entry one of the names strata writes there). Nothing otherwise: a directory
// of the user's, never to be removed.
inline std::optional<nlohmann::json> strata_checkpoint_state(const fs::path& dir) {
    nlohmann::json state;
    try {
        state = read_json_file(dir / "trainer_state.json");
    } catch (const std::exception&) {
        return std::nullopt;
    }
    if (!state.is_object() || state.value("format", std::string()) != checkpoint_format) return std::nullopt;
    static const std::set<std::string> known{"model.safetensors",     "config.json",         "optimizer.safetensors",
                                             "adapters.safetensors",  "adapter_config.json", "vocab.json",
                                             "merges.txt",            "tokenizer.json",      "tokenizer_config.json",
                                             "chat_template.jinja",   "generation_config.json", "special_tokens_map.json",
                                             "tokenizer.model"};
    const bool listed = state.contains("files") && state["files"].is_object();
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name == "trainer_state.json") continue;
        if (!e.is_regular_file() || e.is_symlink()) return std::nullopt;
        if (listed ? !state["files"].contains(name) : !known.contains(name)) return std::nullopt;
    }
    return ec ? std::nullopt : std::optional(state);
}

// What is not strata's among the files OUT's names are: refused before anything is written.
inline void refuse_foreign_run_files(const fs::path& out) {
    const auto refuse = [&](const fs::path& file, const std::string& what) {
        throw error("'" + file.string() + "' is not " + what + " strata wrote, and a run writes that name in --out: "
                        "refusing to touch it",
                    "move it away, or pick another --out (strata never overwrites or removes a file it cannot tell "
                    "as its own)");
    };
    if (fs::exists(fs::symlink_status(out / "latest")) && !is_strata_latest(out / "latest"))
        refuse(out / "latest", "the 'latest' file");
    if (fs::exists(fs::symlink_status(out / "loss.svg")) && !is_strata_loss_plot(out / "loss.svg"))
        refuse(out / "loss.svg", "a loss plot");
    if (fs::exists(fs::symlink_status(out / ".lock")) &&
        (!fs::is_regular_file(fs::symlink_status(out / ".lock")) || !run_lock::holds_a_pid(out / ".lock")))
        refuse(out / ".lock", "a lock file");
    for (const auto& dir : checkpoints_in(out))
        if (!strata_checkpoint_state(dir)) refuse(dir, "a checkpoint (its trainer_state.json records every file in it)");
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

// The checkpoint a path names: itself when it holds a model (or a trainer state); a run directory
// (OUT) means the checkpoint its `latest` names. Anything else is an error that says what is there.
inline fs::path resolve_checkpoint(const fs::path& path, const std::string& flag = "--checkpoint") {
    for (const char* file : {"trainer_state.json", "config.json", "model.safetensors", "adapters.safetensors"})
        if (fs::exists(path / file)) return path;
    const auto found = checkpoints_in(path);
    std::string listed;
    for (const auto& c : found) listed += (listed.empty() ? "" : ", ") + c.filename().string();
    const std::string pick = found.empty() ? std::string("pass a checkpoint directory a run saved (OUT/step-N), or its run directory")
                                           : "pass one of its checkpoints (" + listed + ") as " + path.string() + "/step-N";
    if (!fs::exists(path / "latest"))
        throw error(flag + " " + path.string() + ": no checkpoint here (no trainer_state.json, config.json or model file) " +
                        (found.empty() ? "and no run's 'latest' file" : "and no 'latest' naming the run's last complete one"),
                    pick);
    std::string name;
    std::ifstream(path / "latest") >> name;
    if (name.empty())
        throw error(flag + " " + path.string() + ": its 'latest' file is empty, so it names no complete checkpoint", pick);
    if (name.find('/') != std::string::npos || !fs::is_directory(path / name))
        throw error(flag + " " + path.string() + ": its 'latest' names '" + name + "', which is not a checkpoint there", pick);
    return path / name;
}

// The run directory of a checkpoint: the directory that holds it, when it is named step-N.
inline std::optional<fs::path> run_directory_of(const fs::path& checkpoint) {
    if (step_of_name(checkpoint) < 0) return std::nullopt;
    const fs::path parent = checkpoint.parent_path();
    return parent.empty() ? fs::path(".") : parent;
}

// --resume CKPT: the checkpoint (OUT/step-N, or OUT: its latest) and its trainer_state.json,
// refused when it has none (it is no checkpoint a run saved).
inline std::pair<fs::path, nlohmann::json> checkpoint_to_resume(const std::string& resume) {
    const fs::path checkpoint = resolve_checkpoint(resume, "--resume");
    const fs::path state_file = checkpoint / "trainer_state.json";
    if (!fs::exists(state_file))
        throw error("--resume " + checkpoint.string() + ": no trainer_state.json, so it is no checkpoint a run saved",
                    "resume from a run's OUT/step-N (or OUT); to start from a model's weights, pass --init-from");
    return {checkpoint, read_json_file(state_file)};
}

// The directory a resumed run continues in when no --out is given: its own run's (the directory of
// checkpoint `resume`, OUT/step-N), or a refusal when the checkpoint is no run's OUT/step-N.
inline fs::path resumed_run_directory(const fs::path& resume) {
    const auto home = run_directory_of(resume);
    if (!home)
        throw error("--resume " + resume.string() + " is not a run's OUT/step-N, so its run's directory is unknown",
                    "pass --out DIR for the resumed run's checkpoints");
    return *home;
}

// ---- a run's identity ----

// A new run's id (16 hex digits), recorded by every checkpoint of the run and kept across resumes:
// what tells this run's checkpoints from another's in one directory.
inline std::string new_run_id() {
    std::random_device rd;
    const std::uint64_t id = (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^
                             static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                             (static_cast<std::uint64_t>(::getpid()) << 20);
    static constexpr char digits[] = "0123456789abcdef";
    std::string out(16, '0');
    for (int i = 0; i < 16; ++i) out[static_cast<std::size_t>(i)] = digits[(id >> (4 * (15 - i))) & 15];
    return out;
}

// The run id a checkpoint's trainer_state.json records ("" for checkpoints saved before it was).
inline std::string run_id_of(const nlohmann::json& state) {
    return state.is_object() && state.contains("run_id") && state["run_id"].is_string() ? state["run_id"].get<std::string>()
                                                                                         : std::string();
}

// What trainer_state.json records of an output file (the metrics) to prove later that it is this
// run's: its path, device and inode, and the fingerprint of what it held at the save.
inline nlohmann::json output_record(const fs::path& file) {
    const auto id = identity_of(file);
    if (!id || !fs::is_regular_file(file)) return nullptr;
    const file_fingerprint f = fingerprint_of(file);
    return {{"path", fs::absolute(file).string()}, {"device", static_cast<std::uint64_t>(id->first)},
            {"inode", static_cast<std::uint64_t>(id->second)}, {"bytes", f.bytes}, {"hash", f.hash}};
}

// Whether `file` is the one `record` (output_record at a save) describes: the same device and inode,
// and its first bytes still what they were then.
inline bool is_recorded_output(const fs::path& file, const nlohmann::json& record) {
    if (!record.is_object()) return false;
    const auto id = identity_of(file);
    if (!id || record.value("device", std::uint64_t{0}) != static_cast<std::uint64_t>(id->first) ||
        record.value("inode", std::uint64_t{0}) != static_cast<std::uint64_t>(id->second))
        return false;
    const auto bytes = record.value("bytes", std::uint64_t{0});
    try {
        const file_fingerprint now = fingerprint_of(file, bytes);
        return now.bytes == bytes && now.hash == record.value("hash", std::string());
    } catch (const std::exception&) {
        return false;
    }
}

// ---- the outputs of a run: never an input, never a file of the user's ----

using named_path = std::pair<std::string, fs::path>;  // {"--metrics", path}

// What a training run reads, named by their flags (both programs' train_args have these fields).
template <class Args>
std::vector<named_path> inputs_of(const Args& a) {
    std::vector<named_path> in{{"--data", a.data}, {"--init-from", a.init_from}, {"--resume", a.resume},
                               {"--config", a.config}};
    if (a.tokenizer.starts_with("gpt2:")) in.emplace_back("--tokenizer", a.tokenizer.substr(5));
    if (a.tokenizer.starts_with("hf:")) in.emplace_back("--tokenizer", a.tokenizer.substr(3));
    if constexpr (requires { a.chat_template; })
        if (!a.chat_template.empty() && a.chat_template != "auto" && a.chat_template != "none")
            in.emplace_back("--chat-template", a.chat_template);
    return in;
}

// Whether an existing `file` is the input `in` or one of the files of the input directory `in`.
inline bool is_input_file(const fs::path& file, const fs::path& in) {
    if (same_file(file, in)) return true;
    std::error_code ec;
    if (!fs::is_directory(in, ec)) return false;
    for (const auto& e : fs::recursive_directory_iterator(in, fs::directory_options::skip_permission_denied, ec))
        if (e.is_regular_file() && same_file(file, e.path())) return true;
    return false;
}

// The trainer_state.json of the latest checkpoint strata recognises in `out` (nothing if none).
inline std::optional<nlohmann::json> latest_state_in(const fs::path& out) {
    const auto found = checkpoints_in(out);
    for (auto it = found.rbegin(); it != found.rend(); ++it)
        if (auto state = strata_checkpoint_state(*it)) return state;
    return std::nullopt;
}

// How the metrics file is opened: appended to (a resumed run's own, or --metrics-append), or
// created afresh (truncating only a file strata provably wrote). Refuses any other existing file.
template <class Args>
bool metrics_append_of(const Args& a) {
    const fs::path file = a.metrics;
    if (file.empty() || !fs::exists(file) || !fs::is_regular_file(file) || fs::file_size(file) == 0)
        return !a.resume.empty() || a.metrics_append;
    if (a.metrics_append) return true;
    if (!a.resume.empty()) {
        std::optional<nlohmann::json> state;
        try {
            state = read_json_file(fs::path(a.resume) / "trainer_state.json");
        } catch (const std::exception&) {
        }
        if (state && state->contains("metrics") && is_recorded_output(file, (*state)["metrics"])) return true;
        throw error("--metrics '" + file.string() + "' exists and is not the metrics file of the resumed run (its "
                        "checkpoint records another, or none): refusing to add to it or replace it",
                    "pass the run's metrics file, another path, or --metrics-append to add this run's lines to it");
    }
    if (a.overwrite) {  // the metrics of the run that --overwrite replaces
        const auto state = latest_state_in(a.out);
        if (state && state->contains("metrics") && is_recorded_output(file, (*state)["metrics"])) return false;
    }
    throw error("--metrics '" + file.string() + "' exists and is not a metrics file of this run: refusing to replace it",
                "pick another path, remove the file, or pass --metrics-append to add this run's lines to it");
}

// An output file (--metrics, --trace): not an input (the same file by device and inode, or inside
// an input directory), not one of the run's own files in --out, not another output, a file (or for
// --metrics a device such as /dev/stdout), and writable, all before step 1.
inline void check_output_path(const std::string& flag, const fs::path& file, const fs::path& out,
                              const std::vector<named_path>& inputs) {
    for (const auto& [in_flag, in] : inputs)
        if (!in.empty() && (is_within(file, in) || (fs::exists(file) && is_input_file(file, in))))
            throw error(flag + " '" + file.string() + "' is the " + in_flag + " input" +
                            (same_file(file, in) ? "" : " '" + in.string() + "' or inside it") +
                            ": writing it would destroy the input",
                        "pick another path for " + flag);
    const bool in_out = resolved(file.parent_path().empty() ? fs::path(".") : file.parent_path()) == resolved(out);
    bool run_file = in_out && is_run_file_name(file.filename().string());
    for (const char* name : {"latest", "loss.svg", ".lock", "corpus.txt"}) run_file = run_file || same_file(file, out / name);
    for (const auto& ckpt : checkpoints_in(out)) run_file = run_file || is_within(file, ckpt);
    if (run_file)
        throw error(flag + " '" + file.string() + "' is one of the files the run writes in --out (checkpoints, latest, "
                        "loss.svg, .lock): it would be overwritten",
                    "pick another path for " + flag + ", e.g. " + (out / "metrics.jsonl").string());
    const auto status = fs::status(file);
    if (fs::is_directory(status)) throw error(flag + " '" + file.string() + "' is a directory", "pass a file path for " + flag);
    if (fs::exists(status) && !fs::is_regular_file(status) && (flag != "--metrics" || !fs::is_character_file(status)))
        throw error(flag + " '" + file.string() + "' is not a regular file", "pass a file path for " + flag);
    if (flag == "--trace" && fs::exists(status) && fs::file_size(file) > 0 && !is_strata_trace(file))
        throw error("--trace '" + file.string() + "' exists and is not a trace strata wrote: refusing to replace it",
                    "pick another path for --trace, or remove the file");
    // writable: the directory a new file (or the trace's atomic rename) goes into, or the file itself
    const fs::path dir = file.parent_path().empty() ? fs::path(".") : file.parent_path();
    if (!fs::is_directory(dir))
        throw error(flag + " '" + file.string() + "': the directory '" + dir.string() + "' does not exist",
                    "create it, or pick another path for " + flag + " (checked before step 1, so no training is lost)");
    int err = 0;
    if (flag == "--trace" || !fs::exists(status)) {
        err = probe_directory(dir);
    } else if (const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC); fd < 0) {
        err = errno;
    } else {
        ::close(fd);
    }
    if (err != 0)
        throw error(flag + " '" + file.string() + "' cannot be written: " + std::strerror(err),
                    "pick a path you can write to for " + flag + " (checked before step 1, so no training is lost)");
}

// Refuses outputs that would destroy an input, two outputs on one file, an output that is a file
// the run writes in --out, an existing file strata did not provably write, and an output that
// cannot be written; all before any data is read. (Both programs' train_args have the fields.)
template <class Args>
void check_outputs(const Args& a) {
    const fs::path out = a.out;
    if (fs::exists(out) && !fs::is_directory(out))
        throw error("--out '" + out.string() + "' exists and is not a directory", "pick a directory for --out");
    const auto inputs = inputs_of(a);
    for (const auto& [in_flag, in] : inputs) {
        if (in.empty()) continue;
        if (is_within(out, in) || (fs::is_regular_file(in) && same_file(in, out)))
            throw error("--out '" + out.string() + "' is the " + in_flag + " input '" + in.string() +
                            "' or inside it: writing there would change the input",
                        "pick another --out");
    }
    const std::vector<named_path> outputs{{"--metrics", a.metrics}, {"--trace", a.trace}};
    for (std::size_t i = 0; i < outputs.size(); ++i) {
        const auto& [flag, file] = outputs[i];
        if (file.empty()) continue;
        for (std::size_t j = 0; j < i; ++j)
            if (!outputs[j].second.empty() &&
                (resolved(outputs[j].second) == resolved(file) || same_file(outputs[j].second, file)))
                throw error(flag + " and " + outputs[j].first + " are the same file '" + file.string() + "'",
                            "give each output its own path");
        check_output_path(flag, file, out, inputs);
    }
    (void)metrics_append_of(a);  // refuses an existing metrics file that is not provably this run's
}

// ---- what a run may replace in --out ----

// The checkpoints in OUT a run replaces at its first save: a fresh run's, every one (another run's);
// a resumed run's, those of its run past the resumed step. Others' checkpoints there refuse a resume.
template <class Args>
std::vector<fs::path> checkpoints_replaced(const Args& a) {
    const auto found = checkpoints_in(a.out);
    if (a.resume.empty()) return found;
    const fs::path resumed = a.resume;
    const nlohmann::json state = read_json_file(resumed / "trainer_state.json");
    const long step = state.value("step", 0L);
    const std::string run = run_id_of(state);
    const auto home = run_directory_of(resumed);
    const bool own_directory = home && same_file(*home, a.out);
    std::vector<fs::path> later;
    for (const auto& ckpt : found) {
        if (same_file(ckpt, resumed)) continue;
        const auto other = strata_checkpoint_state(ckpt);
        const std::string other_run = other ? run_id_of(*other) : std::string();
        const bool this_run = (!run.empty() && !other_run.empty()) ? run == other_run : own_directory;
        if (!this_run)
            throw error("--out '" + a.out + "' holds checkpoints of another run (" + ckpt.filename().string() +
                            "): resuming " + a.resume + " there would mix the two runs",
                        "resume in the run's own directory (leave --out out: it is " +
                            (home ? home->string() : std::string("the checkpoint's")) + "), or pick an empty --out");
        if (other && other->value("step", 0L) > step) later.push_back(ckpt);
    }
    return later;
}

// Before step 1: a fresh run into a directory that holds checkpoints, or a resume whose run has
// checkpoints past the resumed step, is refused unless --overwrite (which replaces them at the
// first save: replace_checkpoints).
template <class Args>
void claim_run_directory(const Args& a) {
    const auto replaced = checkpoints_replaced(a);
    if (replaced.empty() || a.overwrite) return;
    const std::string names = replaced.front().filename().string() +
                              (replaced.size() > 1 ? " ... " + replaced.back().filename().string() : std::string());
    if (a.resume.empty())
        throw error("--out '" + a.out + "' holds checkpoints of another run (" + names + "): a new run would replace them",
                    "continue that run with --resume " + replaced.back().string() +
                        ", pick another --out, or pass --overwrite to replace them (removed at the new run's first save)");
    throw error("--out '" + a.out + "' holds checkpoints of this run past the resumed step (" + names +
                    "): the resumed run would replace them",
                "resume from the latest (--resume " + a.out + "), pick another --out, or pass --overwrite to replace "
                "them (removed at the resumed run's first save)");
}

// --overwrite, at the run's first save: removes the checkpoints it replaces (claim_run_directory:
// only checkpoints strata recognises, never one an input lies in) and OUT/latest when it names one.
template <class Args>
void replace_checkpoints(const Args& a) {
    std::size_t removed = 0;
    for (const auto& ckpt : checkpoints_replaced(a)) {
        bool holds_input = false;
        for (const auto& [flag, in] : inputs_of(a)) holds_input = holds_input || (!in.empty() && is_within(in, ckpt));
        if (holds_input || !strata_checkpoint_state(ckpt)) continue;
        fs::remove_all(ckpt);
        ++removed;
    }
    if (removed == 0) return;
    const fs::path latest = fs::path(a.out) / "latest";
    std::string name;
    std::ifstream(latest) >> name;
    std::error_code ec;
    if (is_strata_latest(latest) && !fs::exists(fs::path(a.out) / name)) fs::remove(latest, ec);
    std::cout << "--overwrite: removed " << removed << " checkpoint(s) of " << (a.resume.empty() ? "an earlier run" : "this run past the resumed step")
              << " from " << a.out << std::endl;
}

// Everything about --out before step 1: writable (a probe file), no file of the user's where the
// run writes, locked for the run's life, rid of what interrupted runs left, and no checkpoint the
// run would replace unless --overwrite.
template <class Args>
[[nodiscard]] run_lock prepare_run_directory(const Args& a) {
    probe_writable(a.out);
    refuse_foreign_run_files(a.out);
    run_lock lock(a.out);
    remove_stale_temporaries(a.out);
    claim_run_directory(a);
    return lock;
}

}  // namespace strata::examples
