// From records to training sequences of seq_len T (each T+1 tokens: inputs [0,T), targets [1,T+1)).
//
//   base      documents are tokenized as the tokenizer's post-processor frames a text (Llama's BOS
//             first), each followed by end-of-text, concatenated and cut into packed windows (see
//             token_dataset::packed); the incomplete tail is dropped.
//   instruct  each record becomes one row: prompt (from a prompt_template) + output + end-of-text.
//             Only response tokens are trained: prompt targets are ignore_index. Rows longer than
//             T+1 are cut at the end (the prompt start is kept); a row whose prompt alone fills
//             T+1 tokens has nothing to train and is dropped. Short rows are padded with
//             end-of-text whose targets are ignore_index.
//   chat      each conversation (or instruction record, when data_options::chat holds a template)
//             is rendered with the model's chat template and becomes one row, of which only the
//             assistant turns are trained (data/chat.hpp); cut, dropped and padded as instruct rows.
#pragma once

#include <strata/core/error.hpp>      // strata::error
#include <strata/data/chat.hpp>       // render_for_training, tokenize_conversation, conversation_of
#include <strata/data/dataset.hpp>    // token_dataset, ignore_index, split_dataset
#include <strata/data/prompt.hpp>     // prompt_template, alpaca_prompt
#include <strata/data/records.hpp>    // record_set, record_kind, read_records
#include <strata/text/tokenizer.hpp>  // Tokenizer, token_id

#include <algorithm>    // std::fill, std::min
#include <concepts>     // std::same_as
#include <cstddef>      // std::size_t
#include <filesystem>   // std::filesystem::path
#include <optional>     // std::optional
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
    std::optional<chat_template> chat;  // renders chat records, and instruction records instead of `prompt`
};

// What happened to the records, for the trainer to print.
struct data_stats {
    record_kind kind = record_kind::base;
    std::size_t records = 0;            // documents or instruction records read
    std::size_t tokens = 0;             // tokens produced by tokenizing (eot included, padding not)
    std::size_t sequences = 0;          // sequences of T+1 tokens, before the split
    std::size_t tail_tokens = 0;        // base: tokens after the last full window, unused
    std::size_t truncated = 0;          // instruct, chat: kept rows whose response was cut at T+1 tokens
    std::size_t dropped = 0;            // instruct, chat: rows with nothing to train in T+1 tokens
    bool chat_template = false;         // the rows were rendered with a chat template
    std::size_t trainable_targets = 0;  // targets that are not ignore_index, before the split
    std::size_t train_sequences = 0;
    std::size_t validation_sequences = 0;

    std::string summary() const {
        std::string s = std::string(to_string(kind)) + (chat_template ? " data (chat template): " : " data: ") + std::to_string(records) + " records, " +
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

// A document as the tokenizer's post-processor frames it (hf_tokenizer: Llama's BOS first, as
// Hugging Face's tokenizer(text) gives it), else its plain encoding.
template <Tokenizer Tok>
std::vector<token_id> encode_document(const Tok& tok, std::string_view text) {
    if constexpr (requires { { tok.encode_with_special_tokens(text) } -> std::same_as<std::vector<token_id>>; })
        return tok.encode_with_special_tokens(text);
    else
        return tok.encode(text);
}

// All documents, each followed by end-of-text (unless the post-processor already ended it so),
// as one stream.
template <Tokenizer Tok>
std::vector<token_id> tokenize_documents(const record_set& records, const Tok& tok) {
    std::vector<token_id> stream;
    for (std::size_t i = 0; i < records.documents.size(); ++i) {
        std::vector<token_id> ids = encode_document(tok, records.documents[i]);
        detail::check_ids(tok, ids, records.source + " document " + std::to_string(i + 1));
        stream.insert(stream.end(), ids.begin(), ids.end());
        if (ids.empty() || ids.back() != tok.eot_id()) stream.push_back(tok.eot_id());
    }
    return stream;
}

template <Tokenizer Tok>
token_dataset pack_documents(const record_set& records, const Tok& tok, std::size_t seq_len, data_stats& stats) {
    if (seq_len == 0) throw error("seq_len is 0", "a seq_len of at least 1", {"seq_len"});
    std::vector<token_id> stream = tokenize_documents(records, tok);
    stats.tokens = stream.size();
    if (stream.size() < seq_len + 1)
        throw error(records.source + " has " + std::to_string(stream.size()) + " tokens (with '" +
                        std::string(std::string_view(tok.name())) + "' tokenizer), but seq_len " +
                        std::to_string(seq_len) + " needs at least " + std::to_string(seq_len + 1) +
                        " for one training sequence",
                    "lower seq_len or add data", {"seq_len"});
    token_dataset all = token_dataset::packed(std::move(stream), seq_len);
    stats.sequences = all.size();
    stats.tail_tokens = stats.tokens - (all.size() * seq_len + 1);
    stats.trainable_targets = all.size() * seq_len;
    return all;
}

namespace detail {

// Rows of T+1 tokens with their targets: target t is token t+1 when that token is trained.
struct row_builder {
    std::size_t seq_len;
    token_id pad;  // end-of-text, whose targets are ignore_index
    std::vector<token_id> inputs, targets;

    // Adds `full` (cut to T+1 tokens) unless no target in it would be trained.
    void add(std::vector<token_id>& full, const std::vector<char>& trained, data_stats& stats) {
        const std::size_t window = seq_len + 1;
        const std::size_t len = std::min(full.size(), window);
        bool any = false;
        for (std::size_t k = 1; k < len; ++k) any = any || trained[k];
        if (!any) {
            ++stats.dropped;
            return;
        }
        if (full.size() > window) ++stats.truncated;
        for (std::size_t t = 0; t < seq_len; ++t) {
            inputs.push_back(t < len ? full[t] : pad);
            const bool trainable = t + 1 < len && trained[t + 1];
            targets.push_back(trainable ? full[t + 1] : ignore_index);
            stats.trainable_targets += trainable;
        }
    }

    token_dataset finish(const record_set& records, data_stats& stats, const std::string& hint) {
        stats.sequences = inputs.size() / seq_len;
        if (stats.sequences == 0)
            throw error(records.source + ": all " + std::to_string(records.size()) + " " +
                            (records.kind == record_kind::instruct ? "instruction" : "chat") +
                            " records were dropped: none has a token to train on within seq_len + 1 = " +
                            std::to_string(seq_len + 1) + " tokens",
                        hint);
        return token_dataset::rows(std::move(inputs), std::move(targets), seq_len);
    }
};

}  // namespace detail

template <Tokenizer Tok>
token_dataset build_instruct_rows(const record_set& records, const Tok& tok, std::size_t seq_len,
                                  const prompt_template& prompt, data_stats& stats) {
    if (seq_len == 0) throw error("seq_len is 0", "a seq_len of at least 1", {"seq_len"});
    prompt.validate();
    detail::row_builder rows{seq_len, tok.eot_id(), {}, {}};
    std::vector<token_id> full;
    std::vector<char> trained;
    for (std::size_t k = 0; k < records.examples.size(); ++k) {
        const instruct_record& r = records.examples[k];
        full = tok.encode(prompt.render(r.instruction, r.input));
        const std::size_t prompt_len = full.size();
        std::vector<token_id> response = tok.encode(r.output);
        full.insert(full.end(), response.begin(), response.end());
        full.push_back(tok.eot_id());
        detail::check_ids(tok, full, records.source + " record " + std::to_string(k + 1));
        stats.tokens += full.size();
        trained.assign(full.size(), 1);
        std::fill(trained.begin(), trained.begin() + static_cast<std::ptrdiff_t>(prompt_len), 0);
        rows.add(full, trained, stats);
    }
    return rows.finish(records, stats, "each prompt alone fills the window: raise seq_len or shorten the prompt template");
}

// Conversations (or instruction records, as conversations) rendered with a chat template.
template <Tokenizer Tok>
token_dataset build_chat_rows(const record_set& records, const Tok& tok, std::size_t seq_len,
                              const chat_template& chat, data_stats& stats) {
    if (seq_len == 0) throw error("seq_len is 0", "a seq_len of at least 1", {"seq_len"});
    stats.chat_template = true;
    detail::row_builder rows{seq_len, tok.eot_id(), {}, {}};
    const bool instruct = records.kind == record_kind::instruct;
    for (std::size_t k = 0; k < records.size(); ++k) {
        const std::string where = records.source + " record " + std::to_string(k + 1);
        const rendered_conversation rendered = render_for_training(
            chat, instruct ? conversation_of(records.examples[k]) : records.conversations[k], where);
        conversation_tokens c = tokenize_conversation(rendered, tok);
        detail::check_ids(tok, c.ids, where);
        stats.tokens += c.ids.size();
        rows.add(c.ids, c.trained, stats);
    }
    return rows.finish(records, stats,
                       "each conversation's assistant turns start past seq_len + 1 tokens, or it has none: raise "
                       "seq_len, or check that the records have assistant messages");
}

// Records to train and validation sequences, with the counts of what happened on the way.
template <Tokenizer Tok>
prepared_data prepare_data(const record_set& records, const Tok& tok, const data_options& options) {
    validation_count(0, options.val_fraction);  // a bad fraction fails before minutes of tokenizing
    prepared_data out;
    out.stats.kind = records.kind;
    out.stats.records = records.size();
    if (records.kind == record_kind::chat && !options.chat)
        throw error(records.source + " holds chat records ({\"messages\": [...]}) but no chat template was given",
                    "chat records are rendered with the model's chat template: give one (the tokenizer_config.json "
                    "next to the tokenizer, or a .jinja file)", {"chat_template"});
    token_dataset all = records.kind == record_kind::base ? pack_documents(records, tok, options.seq_len, out.stats)
                        : options.chat ? build_chat_rows(records, tok, options.seq_len, *options.chat, out.stats)
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
