// The JSON a checkpoint holds, as read back on --resume, --init-from and sample:
//   config.json         gpt_config::from_hf_json (strata-gpt), llama_config::from_hf_json (strata-llama)
//   trainer_state.json  json_field<long>(state, "step"), the data cursor (loader_cursor), an rng state
// all behind parse_json_text. Each either returns a value or throws strata::error. A value that
// was read is a valid one and survives its own writer: to_json (to_hf_json) then from_json gives
// it back. An integer field is read only from a JSON integer that fits (no silent truncation of
// 2.5 or 1e30, no true as 1).
#include "fuzz_check.hpp"

#include <strata/core/rng.hpp>        // rng
#include <strata/data/loader.hpp>     // data::loader_cursor
#include <strata/io/json_file.hpp>    // parse_json_text, json_field
#include <strata/nn/gpt2_config.hpp>  // gpt_config

#include "../examples/llama/llama_model.hpp"  // llama::llama_config

#include <nlohmann/json.hpp>  // nlohmann::json, nlohmann::ordered_json

#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint8_t, std::int64_t
#include <limits>       // std::numeric_limits
#include <string_view>  // std::string_view

namespace {

bool is_integer_in_long(const nlohmann::json& v) {
    if (v.is_number_unsigned()) return v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<long>::max());
    return v.is_number_integer();
}

void check_gpt_config(const nlohmann::json& j) {
    strata::gpt_config c;
    if (!strata::fuzz::parses([&] { c = strata::gpt_config::from_hf_json(j); })) return;
    FUZZ_CHECK(strata::fuzz::parses([&] { c.validate(); }));
    strata::gpt_config again;
    FUZZ_CHECK(strata::fuzz::parses([&] { again = strata::gpt_config::from_hf_json(c.to_hf_json()); }));
    FUZZ_CHECK(again.vocab_size == c.vocab_size && again.max_seq == c.max_seq && again.n_layer == c.n_layer &&
               again.n_head == c.n_head && again.n_embd == c.n_embd);
}

void check_llama_config(const nlohmann::json& j) {
    llama::llama_config c;
    if (!strata::fuzz::parses([&] { c = llama::llama_config::from_hf_json(j); })) return;
    FUZZ_CHECK(strata::fuzz::parses([&] { c.validate(); }));
    llama::llama_config again;
    FUZZ_CHECK(strata::fuzz::parses([&] { again = llama::llama_config::from_hf_json(c.to_hf_json()); }));
    FUZZ_CHECK(again == c);
}

void check_trainer_state(const nlohmann::json& state) {
    long step = 0;
    if (strata::fuzz::parses([&] { step = strata::json_field<long>(state, "step", "trainer_state.json"); })) {
        FUZZ_CHECK(is_integer_in_long(state["step"]));
        FUZZ_CHECK(state["step"] == step);
    }
    strata::data::loader_cursor cursor;
    if (strata::fuzz::parses([&] { cursor = strata::json_field<strata::data::loader_cursor>(state, "data_cursor", "trainer_state.json"); }))
        FUZZ_CHECK(nlohmann::json(cursor).get<strata::data::loader_cursor>() == cursor);
    strata::rng r(0);
    if (strata::fuzz::parses([&] { r = strata::json_field<strata::rng>(state, "rng", "trainer_state.json"); }))
        FUZZ_CHECK(nlohmann::json(r).get<strata::rng>() == r);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    (void)strata::fuzz::parses([&] { (void)strata::parse_json_text<nlohmann::ordered_json>(text, "fuzz.json"); });
    nlohmann::json j;
    if (!strata::fuzz::parses([&] { j = strata::parse_json_text(text, "fuzz.json"); })) return 0;
    check_gpt_config(j);
    check_llama_config(j);
    check_trainer_state(j);
    return 0;
}
