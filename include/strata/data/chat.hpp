// Conversations rendered with a model's chat template, and which of their tokens are trained.
//
// Only the assistant's turns are trained: for assistant message i, its text runs from the end of
// render(messages[0..i), add_generation_prompt) to the end of render(messages[0..i]): the content
// and what the template closes the turn with (Llama 3's <|eot_id|>, Qwen's <|im_end|>\n,
// Llama 2's </s>). Everything else (system and user turns, the template's scaffolding, the
// generation prompt) is context. A template that rewrites earlier text when turns are added (a
// rendering of the first turns that is not a prefix of the whole) is refused: its split would be
// wrong.
//
// The rendered text is tokenized whole, without the post-processor's BOS (as apply_chat_template
// with tokenize=True does): the template writes bos_token itself, and special tokens written in
// the text become their ids. The trained tokens are found by tokenizing prefixes: when a token
// straddles a boundary, it counts as trained (as return_assistant_tokens_mask counts it).
#pragma once

#include <strata/core/error.hpp>          // strata::error
#include <strata/data/records.hpp>        // chat_record, instruct_record
#include <strata/text/chat_template.hpp>  // chat_template
#include <strata/text/tokenizer.hpp>      // Tokenizer, token_id

#include <algorithm>    // std::min, std::mismatch
#include <cstddef>      // std::size_t
#include <span>         // std::span
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace strata::data {

// An instruction record as a conversation: the user asks (instruction, then the input after a
// blank line when there is one), the assistant answers.
inline chat_record conversation_of(const instruct_record& r) {
    return {{"user", r.input.empty() ? r.instruction : r.instruction + "\n\n" + r.input}, {"assistant", r.output}};
}

// A rendered conversation and the byte ranges [begin, end) of its text that are trained.
struct rendered_conversation {
    struct span {
        std::size_t begin, end;
    };
    std::string text;
    std::vector<span> trained;
};

namespace detail {

inline std::string excerpt(std::string_view text, std::size_t at) {
    std::string s(text.substr(at, 40));
    for (char& c : s)
        if (c == '\n') c = ' ';
    return "\"" + s + (text.size() > at + 40 ? "...\"" : "\"");
}

inline void require_prefix(std::string_view whole, std::string_view prefix, const std::string& where,
                           std::size_t turn, const chat_template& t) {
    if (whole.starts_with(prefix)) return;
    const std::size_t at = static_cast<std::size_t>(
        std::mismatch(prefix.begin(), prefix.end(), whole.begin(), whole.end()).first - prefix.begin());
    throw error(where + ": the chat template " + t.name() + " is not prefix-stable: the conversation up to message " +
                    std::to_string(turn + 1) + " renders as " + excerpt(prefix, at) + " at byte " + std::to_string(at) +
                    ", but the whole conversation has " + excerpt(whole, at) + " there",
                "the template rewrites earlier turns when later ones follow (Mistral's moves the system message into "
                "the last user turn), so the assistant turns cannot be told apart: drop the system message, split the "
                "conversation into single exchanges, or use another chat template", {"chat_template"});
}

}  // namespace detail

// `where` names the record in messages ("data.jsonl record 3"), also in the template's own errors
// (raise_exception: "roles must alternate").
inline rendered_conversation render_for_training(const chat_template& t, const chat_record& messages,
                                                 const std::string& where) {
    const std::span<const chat_message> all(messages);
    const auto render = [&](std::size_t count, bool generation_prompt) {
        try {
            return t.render(all.first(count), generation_prompt);
        } catch (const error& e) {
            std::string what = e.what();
            if (!e.hint().empty()) what.resize(what.size() - e.hint().size() - std::string(" (hint: )").size());
            const std::string part = count == messages.size() ? "" : " (its first " + std::to_string(count) + " messages)";
            throw error(where + part + ": " + what, e.hint());
        }
    };
    rendered_conversation out;
    out.text = render(messages.size(), false);
    for (std::size_t i = 0; i < messages.size(); ++i) {
        if (messages[i].role != "assistant") continue;
        const std::string before = render(i, true);
        const std::string through = render(i + 1, false);
        detail::require_prefix(through, before, where, i, t);
        detail::require_prefix(out.text, through, where, i, t);
        if (through.size() > before.size()) out.trained.push_back({before.size(), through.size()});
    }
    return out;
}

// The ids of a rendered conversation, and for each id whether it is trained.
struct conversation_tokens {
    std::vector<token_id> ids;
    std::vector<char> trained;
};

template <Tokenizer Tok>
conversation_tokens tokenize_conversation(const rendered_conversation& r, const Tok& tok) {
    conversation_tokens out;
    out.ids = tok.encode(r.text);
    out.trained.assign(out.ids.size(), 0);
    // The first token of the whole that differs from tokenizing text[0, at) alone: a clean
    // boundary when text[0, at) tokenizes to a prefix of the whole, else the straddling token.
    const auto boundary = [&](std::size_t at, bool is_end) {
        const std::vector<token_id> head = tok.encode(std::string_view(r.text).substr(0, at));
        const std::size_t common = static_cast<std::size_t>(
            std::mismatch(head.begin(), head.end(), out.ids.begin(), out.ids.end()).first - head.begin());
        if (common == head.size() || !is_end) return common;
        return std::min(common + 1, out.ids.size());
    };
    for (const rendered_conversation::span& s : r.trained) {
        const std::size_t end = boundary(s.end, true);
        for (std::size_t k = boundary(s.begin, false); k < end; ++k) out.trained[k] = 1;
    }
    return out;
}

}  // namespace strata::data
