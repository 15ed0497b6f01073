// From records to training sequences of seq_len T (each T+1 tokens: inputs [0,T), targets [1,T+1)).
//
//   base      documents are tokenized, each followed by end-of-text, concatenated and cut into
//             packed windows (see token_dataset::packed); the incomplete tail is dropped.
//   instruct  each record becomes one row: prompt (from a prompt_template) + output + end-of-text.
//             Only response tokens are trained: prompt targets are ignore_index. Rows longer than
//             T+1 are cut at the end (the prompt start is kept); a row whose prompt alone fills
//             T+1 tokens has nothing to train and is dropped. Short rows are padded with
//             end-of-text whose targets are ignore_index.
#pragma once

#include <strata/core/error.hpp>      // strata::error
#include <strata/data/dataset.hpp>    // token_dataset, ignore_index, split_dataset
#include <strata/data/prompt.hpp>     // prompt_template, alpaca_prompt
#include <strata/data/records.hpp>    // record_set, record_kind, read_records
#include <strata/text/tokenizer.hpp>  // Tokenizer, token_id

#include <cstddef>      // std::size_t
#include <filesystem>   // std::filesystem::path
#include <span>         // std::span
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <utility>      // std::move
#include <vector>       // std::vector

namespace strata::data {

struct data_options {
    std::size_t seq_len = 0;     // T
    double val_fraction = 0.0;   // see validation_count
    prompt_template prompt = alpaca_prompt();
};

// What happened to the records, for the trainer to print.
struct data_stats {
    record_kind kind = record_kind::base;
    std::size_t records = 0;            // documents or instruction records read
    std::size_t tokens = 0;             // tokens produced by tokenizing (eot included, padding not)
    std::size_t sequences = 0;          // sequences of T+1 tokens, before the split
    std::size_t tail_tokens = 0;        // base: tokens after the last full window, unused
    std::size_t truncated = 0;          // instruct: kept rows whose response was cut at T+1 tokens
    std::size_t dropped = 0;            // instruct: rows dropped because the prompt fills T+1 tokens
    std::size_t trainable_targets = 0;  // targets that are not ignore_index, before the split
    std::size_t train_sequences = 0;
    std::size_t validation_sequences = 0;

    std::string summary() const {
        std::string s = std::string(to_string(kind)) + " data: " + std::to_string(records) + " records, " +
                        std::to_string(tokens) + " tokens, " + std::to_string(sequences) + " sequences (" +
                        std::to_string(train_sequences) + " train, " + std::to_string(validation_sequences) +
                        " validation), " + std::to_string(trainable_targets) + " trainable targets";
        if (kind == record_kind::base) return s + ", " + std::to_string(tail_tokens) + " tail tokens unused";
        return s + ", " + std::to_string(truncated) + " truncated, " + std::to_string(dropped) + " dropped";
    }
};

struct prepared_data {
    token_dataset train;
    token_dataset validation;
    data_stats stats;
};

namespace detail {

// An id outside the vocabulary would index past the embedding table; catch it here, by name.
template <Tokenizer Tok>
void check_ids(const Tok& tok, std::span<const token_id> ids, const std::string& where) {
    for (token_id id : ids)
        if (id < 0 || id >= tok.vocab_size())
            throw error(where + ": tokenizer '" + std::string(std::string_view(tok.name())) + "' produced id " +
                            std::to_string(id) + ", outside its vocabulary [0, " + std::to_string(tok.vocab_size()) +
                            ")",
                        "the tokenizer is inconsistent; check its vocabulary files");
}

}  // namespace detail

// All documents, each followed by end-of-text, as one stream.
template <Tokenizer Tok>
std::vector<token_id> tokenize_documents(const record_set& records, const Tok& tok) {
    std::vector<token_id> stream;
    for (std::size_t i = 0; i < records.documents.size(); ++i) {
        std::vector<token_id> ids = tok.encode(records.documents[i]);
        detail::check_ids(tok, ids, records.source + " document " + std::to_string(i + 1));
        stream.insert(stream.end(), ids.begin(), ids.end());
        stream.push_back(tok.eot_id());
    }
    return stream;
}

template <Tokenizer Tok>
token_dataset pack_documents(const record_set& records, const Tok& tok, std::size_t seq_len, data_stats& stats) {
    if (seq_len == 0) throw error("seq_len is 0", "pass --seq-len of at least 1");
    std::vector<token_id> stream = tokenize_documents(records, tok);
    stats.tokens = stream.size();
    if (stream.size() < seq_len + 1)
        throw error(records.source + " has " + std::to_string(stream.size()) + " tokens (with '" +
                        std::string(std::string_view(tok.name())) + "' tokenizer), but seq_len " +
                        std::to_string(seq_len) + " needs at least " + std::to_string(seq_len + 1) +
                        " for one training sequence",
                    "lower --seq-len or add data");
    token_dataset all = token_dataset::packed(std::move(stream), seq_len);
    stats.sequences = all.size();
    stats.tail_tokens = stats.tokens - (all.size() * seq_len + 1);
    stats.trainable_targets = all.size() * seq_len;
    return all;
}

template <Tokenizer Tok>
token_dataset build_instruct_rows(const record_set& records, const Tok& tok, std::size_t seq_len,
                                  const prompt_template& prompt, data_stats& stats) {
    if (seq_len == 0) throw error("seq_len is 0", "pass --seq-len of at least 1");
    prompt.validate();
    const std::size_t window = seq_len + 1;
    const token_id eot = tok.eot_id();
    std::vector<token_id> inputs, targets;
    std::vector<token_id> full;
    for (std::size_t k = 0; k < records.examples.size(); ++k) {
        const instruct_record& r = records.examples[k];
        full = tok.encode(prompt.render(r.instruction, r.input));
        const std::size_t prompt_len = full.size();
        std::vector<token_id> response = tok.encode(r.output);
        full.insert(full.end(), response.begin(), response.end());
        full.push_back(eot);
        detail::check_ids(tok, full, records.source + " record " + std::to_string(k + 1));
        stats.tokens += full.size();

        // Target t is token t+1, so a target is trainable when token t+1 is in the response,
        // which needs prompt_len <= T.
        if (prompt_len >= window) {
            ++stats.dropped;
            continue;
        }
        if (full.size() > window) {
            ++stats.truncated;
            full.resize(window);
        }
        const std::size_t len = full.size();
        for (std::size_t t = 0; t < seq_len; ++t) {
            inputs.push_back(t < len ? full[t] : eot);
            bool trainable = t + 1 < len && t + 1 >= prompt_len;
            targets.push_back(trainable ? full[t + 1] : ignore_index);
            stats.trainable_targets += trainable;
        }
    }
    stats.sequences = inputs.size() / seq_len;
    if (stats.sequences == 0)
        throw error(records.source + ": all " + std::to_string(records.examples.size()) +
                        " instruction records were dropped: each prompt alone fills seq_len + 1 = " +
                        std::to_string(window) + " tokens, leaving no response token to train on",
                    "raise --seq-len or shorten the prompt template");
    return token_dataset::rows(std::move(inputs), std::move(targets), seq_len);
}

// Records to train and validation sequences, with the counts of what happened on the way.
template <Tokenizer Tok>
prepared_data prepare_data(const record_set& records, const Tok& tok, const data_options& options) {
    validation_count(0, options.val_fraction);  // a bad fraction fails before minutes of tokenizing
    prepared_data out;
    out.stats.kind = records.kind;
    out.stats.records = records.size();
    token_dataset all = records.kind == record_kind::base
                            ? pack_documents(records, tok, options.seq_len, out.stats)
                            : build_instruct_rows(records, tok, options.seq_len, options.prompt, out.stats);
    dataset_split split = split_dataset(all, options.val_fraction);
    out.train = std::move(split.train);
    out.validation = std::move(split.validation);
    out.stats.train_sequences = out.train.size();
    out.stats.validation_sequences = out.validation.size();
    return out;
}

template <Tokenizer Tok>
prepared_data load_data(const std::filesystem::path& path, record_format format, const Tok& tok,
                        const data_options& options) {
    return prepare_data(read_records(path, format), tok, options);
}

}  // namespace strata::data
