// metrics_writer: training metrics as JSON Lines, one object per line, flushed line by line.
//
// JSONL because a crashed or killed run still leaves every finished line readable, `tail -f` and
// `jq` work on it while the run goes on, and any plotting tool reads it. Fields are free-form: the
// trainer writes step, loss, lr, grad_norm, tokens_per_s, val_loss, ... as it has them.
//
// JSON has no NaN or infinity: nlohmann writes them as null, so a diverged loss reads back as null.
#pragma once

#include <strata/core/error.hpp>         // strata::error
#include <strata/io/atomic_write.hpp>    // detail::unique_fd, write_all, io_hint

#include <nlohmann/json.hpp>  // nlohmann::json

#include <fcntl.h>     // open, O_*
#include <sys/file.h>  // flock
#include <sys/stat.h>  // fstat, S_ISREG
#include <unistd.h>    // ftruncate

#include <cerrno>        // errno
#include <cstring>       // std::strerror
#include <filesystem>    // std::filesystem::path, exists, is_directory
#include <fstream>       // std::ifstream
#include <ios>           // std::ios
#include <span>          // std::as_bytes
#include <string>        // std::string, std::getline, std::to_string
#include <system_error>  // std::error_code
#include <utility>       // std::move
#include <vector>        // std::vector

namespace strata {

// A regular metrics file is locked (flock, exclusive) for the writer's life: a second writer of the
// same file, in this process or another, is refused before it truncates or interleaves anything.
class metrics_writer {
public:
    // Creates (or truncates) `path`; with append, adds to an existing file instead, as a resumed run
    // does. The parent directory must exist: a typo in a run directory should not silently make one.
    explicit metrics_writer(const std::filesystem::path& path, bool append = false) : m_path(path) {
        const std::filesystem::path parent = path.parent_path();
        std::error_code ec;
        if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
            throw error("metrics: cannot create '" + path.string() + "': directory '" + parent.string() +
                            "' does not exist",
                        "create the run directory first, or pick another metrics path", {"metrics"});
        // Not O_TRUNC: the file is truncated only once this writer holds its lock.
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) {
            const int err = errno;
            throw error("metrics: cannot create '" + path.string() + "': " + std::strerror(err),
                        "check that the path is writable and is not a directory");
        }
        m_fd = detail::unique_fd(fd);
        struct stat st {};
        if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
            if (::flock(fd, LOCK_EX | LOCK_NB) != 0)
                throw error("metrics: '" + path.string() + "' is being written by another run",
                            "give each run its own metrics file", {"metrics"});
            if (!append && ::ftruncate(fd, 0) != 0) {
                const int err = errno;
                throw error("metrics: cannot truncate '" + path.string() + "': " + std::strerror(err),
                            detail::io_hint(err, path));
            }
        }
    }

    // Writes `record` (a JSON object) as one line, in one write(2), so readers never see half a line.
    void write(const nlohmann::json& record) {
        if (!record.is_object())
            throw error("metrics: a record must be a JSON object, got " + std::string(record.type_name()),
                        "write {\"step\": ..., \"loss\": ...}");
        const std::string line = record.dump() + '\n';
        if (const int err = detail::write_all(m_fd.get(), std::as_bytes(std::span(line.data(), line.size()))); err != 0)
            throw error("metrics: writing to '" + m_path.string() + "' failed after " + std::to_string(m_lines) +
                            " lines: " + std::strerror(err),
                        detail::io_hint(err, m_path));
        ++m_lines;
    }

    const std::filesystem::path& path() const { return m_path; }
    long lines_written() const { return m_lines; }

private:
    std::filesystem::path m_path;
    detail::unique_fd m_fd;
    long m_lines = 0;
};

// Reads a JSONL metrics file back, one object per non-empty line. A last line without its newline
// is a record cut short by a crash: skipped, since every earlier line is complete. Any other line
// that does not parse is an error naming its line number.
inline std::vector<nlohmann::json> read_metrics(const std::filesystem::path& path) {
    std::ifstream in(path);
    if (!in)
        throw error("metrics: cannot open '" + path.string() + "' for reading",
                    "check the path; the writer creates it at the start of training");
    std::vector<nlohmann::json> records;
    std::string line;
    long number = 0;
    while (std::getline(in, line)) {
        ++number;
        if (line.empty()) continue;
        const bool complete = !in.eof();  // getline hit a newline, not the end of the file
        nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (record.is_discarded() || !record.is_object()) {
            if (!complete) break;
            throw error("metrics: line " + std::to_string(number) + " of '" + path.string() +
                            "' is not a JSON object",
                        "the file was edited or written by another program");
        }
        records.push_back(std::move(record));
    }
    return records;
}

}  // namespace strata
