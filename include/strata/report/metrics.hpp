// metrics_writer: training metrics as JSON Lines, one object per line, flushed line by line.
//
// JSONL because a crashed or killed run still leaves every finished line readable, `tail -f` and
// `jq` work on it while the run goes on, and any plotting tool reads it. Fields are free-form: the
// trainer writes step, loss, lr, grad_norm, tokens_per_s, val_loss, ... as it has them.
//
// JSON has no NaN or infinity: nlohmann writes them as null, so a diverged loss reads back as null.
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <nlohmann/json.hpp>  // nlohmann::json

#include <cerrno>        // errno
#include <cstring>       // std::strerror
#include <filesystem>    // std::filesystem::path, exists, is_directory
#include <fstream>       // std::ofstream, std::ifstream
#include <ios>           // std::ios
#include <string>        // std::string, std::getline, std::to_string
#include <system_error>  // std::error_code
#include <utility>       // std::move
#include <vector>        // std::vector

namespace strata {

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
        errno = 0;
        m_out.open(path, append ? std::ios::app : std::ios::trunc);
        if (!m_out) {
            const std::string reason = errno != 0 ? std::strerror(errno) : "unknown reason";
            throw error("metrics: cannot create '" + path.string() + "': " + reason,
                        "check that the path is writable and is not a directory");
        }
    }

    // Writes `record` (a JSON object) as one line and flushes it, so readers never see half a line.
    void write(const nlohmann::json& record) {
        if (!record.is_object())
            throw error("metrics: a record must be a JSON object, got " + std::string(record.type_name()),
                        "write {\"step\": ..., \"loss\": ...}");
        m_out << record.dump() << '\n';
        m_out.flush();
        if (!m_out)
            throw error("metrics: writing to '" + m_path.string() + "' failed after " + std::to_string(m_lines) +
                            " lines",
                        "the disk may be full");
        ++m_lines;
    }

    const std::filesystem::path& path() const { return m_path; }
    long lines_written() const { return m_lines; }

private:
    std::filesystem::path m_path;
    std::ofstream m_out;
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
