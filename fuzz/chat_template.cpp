// Chat templates (strata/text/jinja.hpp, chat_template.hpp) as a hostile tokenizer_config.json
// could carry them: the input is a template's source. Parsing either succeeds or throws
// strata::error (naming a line:column inside the source); a template that parses renders a fixed
// conversation, with and without the generation prompt, to a string or a strata::error, the same
// string twice; no other exception, no crash, no unbounded memory or time (jinja::render_limits
// bounds the output, every value and the steps).
#include "fuzz_check.hpp"

#include <strata/text/chat_template.hpp>  // chat_template, chat_message

#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint8_t
#include <optional>     // std::optional
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace {

const std::vector<strata::chat_message> conversation = {
    {"system", "Be brief."}, {"user", "Hi {{ not a tag }}"}, {"assistant", "Hello!"}, {"user", "Bye"}};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string source(reinterpret_cast<const char*>(data), size);
    std::optional<strata::chat_template> t;
    if (!strata::fuzz::parses([&] { t = strata::chat_template::from_source(source, "<s>", "</s>", "fuzz"); })) return 0;
    for (bool generation_prompt : {false, true}) {
        std::string first, second;
        if (!strata::fuzz::parses([&] { first = t->render(conversation, generation_prompt); })) continue;
        second = t->render(conversation, generation_prompt);
        FUZZ_CHECK(first == second);
    }
    return 0;
}
