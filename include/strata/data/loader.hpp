// batch_loader: micro-batches of B sequences, inputs (B, T) and targets (B, T), int32, row-major.
//
// Training: each epoch visits every sequence once in an order shuffled from (seed, epoch);
// batches run on across epoch boundaries, so every batch is full and epochs advance by themselves.
// Validation: sequences in order; a pass ends with a partial batch whose missing rows are padding
// with ignore_index targets, so each sequence counts exactly once per pass.
//
// The cursor {seed, epoch, position} is the loader's whole state: saved with a checkpoint and
// restored, the loader yields exactly the batches the original run would have.
#pragma once

#include <strata/core/error.hpp>      // strata::error
#include <strata/data/dataset.hpp>    // token_dataset, ignore_index
#include <strata/data/shuffle.hpp>    // epoch_order
#include <strata/text/tokenizer.hpp>  // token_id

#include <nlohmann/json.hpp>  // nlohmann::json

#include <algorithm>  // std::copy, std::fill
#include <cstddef>    // std::size_t
#include <cstdint>    // std::uint64_t
#include <span>       // std::span
#include <string>     // std::string, std::to_string
#include <utility>    // std::move
#include <vector>     // std::vector

namespace strata::data {

struct loader_options {
    std::size_t batch_size = 0;  // B
    bool shuffle = true;
    std::uint64_t seed = 0;
    // false: batches run on across epochs and are always full (training).
    // true: an epoch's last batch stops at the epoch's end, its missing rows padded (evaluation).
    bool partial_last_batch = false;
    token_id pad_id = 0;  // input id of padding rows; their targets are ignore_index
};

struct loader_cursor {
    std::uint64_t seed = 0;
    std::uint64_t epoch = 0;
    std::uint64_t position = 0;  // sequences of `epoch` already delivered, in that epoch's order
    std::uint64_t sequences = 0; // dataset size it was saved for, checked on restore

    bool operator==(const loader_cursor&) const = default;
};

inline void to_json(nlohmann::json& j, const loader_cursor& c) {
    j = nlohmann::json{{"seed", c.seed}, {"epoch", c.epoch}, {"position", c.position}, {"sequences", c.sequences}};
}

inline void from_json(const nlohmann::json& j, loader_cursor& c) {
    auto field = [&j](const char* key) -> std::uint64_t {
        if (!j.is_object())
            throw error("loader cursor: expected a JSON object, got " + std::string(j.type_name()),
                        "the checkpoint's data cursor is damaged");
        auto it = j.find(key);
        if (it == j.end())
            throw error(std::string("loader cursor: field \"") + key + "\" is missing",
                        "the checkpoint's data cursor is damaged or from another version");
        if (!it->is_number_unsigned())
            throw error(std::string("loader cursor: field \"") + key + "\" is a " + it->type_name() +
                            ", expected an unsigned integer",
                        "the checkpoint's data cursor is damaged");
        return it->get<std::uint64_t>();
    };
    c = loader_cursor{field("seed"), field("epoch"), field("position"), field("sequences")};
}

// What one call to next() delivered.
struct batch_info {
    std::size_t rows = 0;          // real sequences; rows past it are padding (validation only)
    std::uint64_t epoch = 0;       // epoch of the first row
    bool epoch_ended = false;      // this batch delivered the last sequence of an epoch
};

struct batch {
    std::vector<token_id> inputs;   // (B, T)
    std::vector<token_id> targets;  // (B, T)
    batch_info info;
};

class batch_loader {
public:
    // The loader shares the dataset's storage, so it does not dangle when `data` goes away.
    batch_loader(token_dataset data, const loader_options& options)
        : m_data(std::move(data)), m_options(options) {
        if (m_options.batch_size == 0) throw error("batch_loader: batch size is 0", "a batch size of at least 1", {"batch_size"});
        if (m_data.empty())
            throw error("batch_loader: the dataset holds no sequences",
                        "add data, lower seq_len, or lower the validation fraction if this is the validation set", {"seq_len", "val_fraction"});
        m_cursor = {m_options.seed, 0, 0, m_data.size()};
        load_epoch_order();
    }

    std::size_t batch_size() const { return m_options.batch_size; }
    std::size_t seq_len() const { return m_data.seq_len(); }
    std::size_t sequences() const { return m_data.size(); }
    // Calls to next() that cover one epoch: exact for validation; for training an epoch ends
    // inside the last of them unless B divides the dataset.
    std::size_t batches_per_epoch() const { return (m_data.size() + batch_size() - 1) / batch_size(); }

    const loader_cursor& cursor() const { return m_cursor; }

    // Continue exactly where `c` was saved; the cursor's seed replaces the options' seed.
    void restore(const loader_cursor& c) {
        if (c.sequences != m_data.size())
            throw error("batch_loader: the cursor was saved for a dataset of " + std::to_string(c.sequences) +
                            " sequences, this one has " + std::to_string(m_data.size()),
                        "resume with the same data file, tokenizer, seq_len and validation fraction", {"tokenizer", "seq_len", "val_fraction"});
        if (c.position >= c.sequences)
            throw error("batch_loader: cursor position " + std::to_string(c.position) + " is past the " +
                            std::to_string(c.sequences) + " sequences of an epoch",
                        "the checkpoint's data cursor is damaged");
        m_cursor = c;
        load_epoch_order();
    }

    // Back to the first batch of epoch 0 (e.g. before each evaluation pass).
    void reset() { restore({m_cursor.seed, 0, 0, m_data.size()}); }

    // Fills inputs and targets, each (B, T) row-major.
    batch_info next(std::span<token_id> inputs, std::span<token_id> targets) {
        const std::size_t b = batch_size(), t = seq_len();
        if (inputs.size() != b * t || targets.size() != b * t)
            throw error("batch_loader::next: buffers hold " + std::to_string(inputs.size()) + " inputs and " +
                            std::to_string(targets.size()) + " targets, expected B*T = " + std::to_string(b) + "*" +
                            std::to_string(t) + " = " + std::to_string(b * t) + " each",
                        "size both buffers as batch_size() * seq_len()");
        batch_info info;
        info.epoch = m_cursor.epoch;
        while (info.rows < b) {
            std::size_t index = m_options.shuffle ? m_order[m_cursor.position] : m_cursor.position;
            std::span<const token_id> in = m_data.inputs(index), tg = m_data.targets(index);
            std::copy(in.begin(), in.end(), inputs.begin() + info.rows * t);
            std::copy(tg.begin(), tg.end(), targets.begin() + info.rows * t);
            ++info.rows;
            if (++m_cursor.position == m_data.size()) {
                ++m_cursor.epoch;
                m_cursor.position = 0;
                load_epoch_order();
                info.epoch_ended = true;
                if (m_options.partial_last_batch) break;
            }
        }
        std::fill(inputs.begin() + info.rows * t, inputs.end(), m_options.pad_id);
        std::fill(targets.begin() + info.rows * t, targets.end(), ignore_index);
        return info;
    }

    batch next() {
        batch out;
        out.inputs.resize(batch_size() * seq_len());
        out.targets.resize(batch_size() * seq_len());
        out.info = next(out.inputs, out.targets);
        return out;
    }

private:
    void load_epoch_order() {
        if (m_options.shuffle) m_order = epoch_order(m_data.size(), m_cursor.seed, m_cursor.epoch);
    }

    token_dataset m_data;
    loader_options m_options;
    loader_cursor m_cursor;
    std::vector<std::size_t> m_order;  // this epoch's permutation (shuffled loaders only)
};

inline batch_loader make_train_loader(token_dataset data, std::size_t batch_size, std::uint64_t seed) {
    return batch_loader(std::move(data), {batch_size, true, seed, false, 0});
}

// In order, one pass per epoch ending in a padded partial batch; pad_id is best the eot id.
inline batch_loader make_validation_loader(token_dataset data, std::size_t batch_size, token_id pad_id) {
    return batch_loader(std::move(data), {batch_size, false, 0, true, pad_id});
}

}  // namespace strata::data
