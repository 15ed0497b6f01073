// byte_tokenizer: one id per byte, end-of-text 256, exact round trips.
#include <strata/text/byte_tokenizer.hpp>  // strata::byte_tokenizer

#include <doctest/doctest.h>  // TEST_CASE, CHECK

#include <string>  // std::string
#include <vector>  // std::vector

namespace byte_tokenizer_test {  // this file's names: an area's files compile as one unit (unity build)

using strata::byte_tokenizer;
using strata::token_id;

static_assert(strata::Tokenizer<byte_tokenizer>);

TEST_CASE("byte_tokenizer: one id per byte, high bytes included") {
    const byte_tokenizer tok;
    CHECK(tok.encode("") == std::vector<token_id>{});
    CHECK(tok.encode("Az\n") == std::vector<token_id>{65, 122, 10});
    // char may be signed: bytes >= 0x80 must still come out as 128..255, not negative.
    CHECK(tok.encode("\x80\xff") == std::vector<token_id>{128, 255});
    CHECK(tok.encode(std::string("a\0b", 3)) == std::vector<token_id>{97, 0, 98});
}

TEST_CASE("byte_tokenizer: metadata") {
    const byte_tokenizer tok;
    CHECK(tok.eot_id() == 256);
    CHECK(tok.vocab_size() == 257);
    CHECK(tok.name() == "byte");
}

TEST_CASE("byte_tokenizer: decode inverts encode for every byte value") {
    const byte_tokenizer tok;
    std::string all;
    for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
    const std::vector<token_id> ids = tok.encode(all);
    REQUIRE(ids.size() == 256);
    for (int b = 0; b < 256; ++b) CHECK(ids[static_cast<std::size_t>(b)] == b);
    CHECK(tok.decode(ids) == all);
}

TEST_CASE("byte_tokenizer: end-of-text decodes to nothing") {
    const byte_tokenizer tok;
    const std::vector<token_id> ids{104, 256, 105};
    CHECK(tok.decode(ids) == "hi");
}

TEST_CASE("byte_tokenizer: ids out of range are an error that names them") {
    const byte_tokenizer tok;
    for (token_id bad : {-1, 257, 50256}) {
        const std::vector<token_id> ids{65, bad};
        CAPTURE(bad);
        CHECK_THROWS_AS(tok.decode(ids), strata::error);
        try {
            (void)tok.decode(ids);
        } catch (const strata::error& e) {
            CHECK(std::string(e.what()).find(std::to_string(bad)) != std::string::npos);
            CHECK(!e.hint().empty());
        }
    }
}

}  // namespace byte_tokenizer_test
