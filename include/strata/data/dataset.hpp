// token_dataset: training sequences of seq_len T, each an input row of T tokens and a target row
// of T tokens, stored once and shared by cheap slices (the train/validation split is two slices).
//
// Two layouts behind one interface:
//   packed  - one token stream; sequence i is the window stream[i*T, i*T+T+1): inputs are its
//             first T tokens, targets its last T. Consecutive windows share one token, and the
//             targets cost no memory.
//   rows    - independent rows with explicit targets (instruction data: prompt and padding
//             targets are ignore_index).
#pragma once

#include <strata/core/error.hpp>      // strata::error
#include <strata/text/tokenizer.hpp>  // token_id

#include <cmath>    // std::isfinite, std::llround
#include <cstddef>  // std::size_t
#include <memory>   // std::shared_ptr, std::make_shared
#include <span>     // std::span
#include <string>   // std::to_string
#include <utility>  // std::move
#include <vector>   // std::vector

namespace strata::data {

// The target value that the loss skips (PyTorch's CrossEntropyLoss default).
inline constexpr token_id ignore_index = -100;

class token_dataset {
public:
    token_dataset() = default;

    // Windows of seq_len+1 tokens over `stream`; tokens after the last full window are unused.
    static token_dataset packed(std::vector<token_id> stream, std::size_t seq_len) {
        require_seq_len(seq_len);
        if (stream.size() < seq_len + 1)
            throw error("token_dataset: a stream of " + std::to_string(stream.size()) +
                            " tokens holds no window of seq_len + 1 = " + std::to_string(seq_len + 1) + " tokens",
                        "lower seq_len or add data", {"seq_len"});
        std::size_t count = (stream.size() - 1) / seq_len;
        stream.resize(count * seq_len + 1);
        stream.shrink_to_fit();
        return token_dataset(std::make_shared<const storage>(storage{std::move(stream), {}, seq_len}), 0, count);
    }

    // Row-major rows: inputs and targets are each (count, seq_len).
    static token_dataset rows(std::vector<token_id> inputs, std::vector<token_id> targets, std::size_t seq_len) {
        require_seq_len(seq_len);
        if (inputs.size() != targets.size() || inputs.size() % seq_len != 0)
            throw error("token_dataset: inputs (" + std::to_string(inputs.size()) + " tokens) and targets (" +
                            std::to_string(targets.size()) + ") must both be a whole number of rows of seq_len " +
                            std::to_string(seq_len),
                        "build the rows with the same seq_len");
        std::size_t count = inputs.size() / seq_len;
        return token_dataset(std::make_shared<const storage>(storage{std::move(inputs), std::move(targets), seq_len}),
                             0, count);
    }

    std::size_t size() const { return m_count; }
    bool empty() const { return m_count == 0; }
    std::size_t seq_len() const { return m_storage ? m_storage->seq_len : 0; }

    std::span<const token_id> inputs(std::size_t i) const {  // (T,)
        check_index(i);
        std::size_t t = m_storage->seq_len;
        return std::span<const token_id>(m_storage->tokens).subspan((m_first + i) * t, t);
    }

    std::span<const token_id> targets(std::size_t i) const {  // (T,)
        check_index(i);
        std::size_t t = m_storage->seq_len;
        if (m_storage->targets.empty())  // packed: the window shifted by one
            return std::span<const token_id>(m_storage->tokens).subspan((m_first + i) * t + 1, t);
        return std::span<const token_id>(m_storage->targets).subspan((m_first + i) * t, t);
    }

    // Sequences [first, first + count) of this dataset, sharing its storage.
    token_dataset slice(std::size_t first, std::size_t count) const {
        if (first > m_count || count > m_count - first)
            throw error("token_dataset: slice [" + std::to_string(first) + ", " + std::to_string(first + count) +
                            ") is outside a dataset of " + std::to_string(m_count) + " sequences",
                        "this is a bug in the caller");
        return token_dataset(m_storage, m_first + first, count);
    }

private:
    struct storage {
        std::vector<token_id> tokens;   // packed: the stream; rows: inputs (count, T)
        std::vector<token_id> targets;  // packed: empty; rows: (count, T)
        std::size_t seq_len;
    };

    token_dataset(std::shared_ptr<const storage> s, std::size_t first, std::size_t count)
        : m_storage(std::move(s)), m_first(first), m_count(count) {}

    static void require_seq_len(std::size_t seq_len) {
        if (seq_len == 0) throw error("token_dataset: seq_len is 0", "a seq_len of at least 1", {"seq_len"});
    }

    void check_index(std::size_t i) const {
        if (i >= m_count)
            throw error("token_dataset: sequence " + std::to_string(i) + " is out of range for " +
                            std::to_string(m_count) + " sequences",
                        "this is a bug in the caller");
    }

    std::shared_ptr<const storage> m_storage;
    std::size_t m_first = 0;
    std::size_t m_count = 0;
};

// How many of `count` sequences go to validation: round(count * fraction), at least 1 when
// fraction > 0 and count >= 2, and at most count - 1 so training keeps one. The validation set is
// the LAST sequences in corpus order (for packed text: the end of the corpus, held-out text;
// windows on both sides of the boundary share that one boundary token).
inline std::size_t validation_count(std::size_t count, double fraction) {
    if (!std::isfinite(fraction) || fraction < 0.0 || fraction >= 1.0)
        throw error("validation fraction " + std::to_string(fraction) + " is outside [0, 1)",
                    "use e.g. 0.05, or 0 for no validation set", {"val_fraction"});
    if (fraction == 0.0 || count < 2) return 0;
    auto wanted = static_cast<std::size_t>(std::llround(static_cast<double>(count) * fraction));
    if (wanted < 1) return 1;
    return wanted > count - 1 ? count - 1 : wanted;
}

struct dataset_split {
    token_dataset train;
    token_dataset validation;
};

inline dataset_split split_dataset(const token_dataset& all, double val_fraction) {
    std::size_t val = validation_count(all.size(), val_fraction);
    return {all.slice(0, all.size() - val), all.slice(all.size() - val, val)};
}

}  // namespace strata::data
