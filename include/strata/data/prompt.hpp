// prompt_template: how an instruction record becomes the prompt the model is conditioned on.
// The default is the Alpaca template; callers replace it by passing their own struct.
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <cstddef>      // std::size_t
#include <string>       // std::string
#include <string_view>  // std::string_view

namespace strata::data {

// Placeholders are {instruction} and {input}. Two texts, because Alpaca words its preamble
// differently when there is no input, rather than leaving an empty section behind.
struct prompt_template {
    std::string with_input;
    std::string without_input;

    // One left-to-right pass: text substituted for a placeholder is never scanned again, so an
    // instruction that itself contains "{input}" is reproduced literally.
    std::string render(std::string_view instruction, std::string_view input) const {
        std::string_view pattern = input.empty() ? without_input : with_input;
        std::string out;
        out.reserve(pattern.size() + instruction.size() + input.size());
        for (std::size_t i = 0; i < pattern.size();) {
            if (pattern.substr(i, 13) == "{instruction}") {
                out += instruction;
                i += 13;
            } else if (pattern.substr(i, 7) == "{input}") {
                out += input;
                i += 7;
            } else {
                out += pattern[i++];
            }
        }
        return out;
    }

    // A template that silently drops the instruction or the input would train on the wrong text.
    void validate() const {
        auto has = [](std::string_view text, std::string_view key) { return text.find(key) != std::string_view::npos; };
        if (!has(with_input, "{instruction}") || !has(with_input, "{input}"))
            throw error("prompt template: with_input must contain both {instruction} and {input}",
                        "see strata::data::alpaca_prompt() for an example");
        if (!has(without_input, "{instruction}"))
            throw error("prompt template: without_input must contain {instruction}",
                        "see strata::data::alpaca_prompt() for an example");
        if (has(without_input, "{input}"))
            throw error("prompt template: without_input must not contain {input}: it is used when input is empty",
                        "remove the input section from without_input");
    }
};

inline prompt_template alpaca_prompt() {
    return {
        "Below is an instruction that describes a task, paired with an input that provides further context. "
        "Write a response that appropriately completes the request.\n\n"
        "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n",
        "Below is an instruction that describes a task. "
        "Write a response that appropriately completes the request.\n\n"
        "### Instruction:\n{instruction}\n\n### Response:\n",
    };
}

}  // namespace strata::data
