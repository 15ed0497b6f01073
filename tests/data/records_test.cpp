// Reading records: each format from a real file, auto detection, and every error message.
#include <strata/data/records.hpp>         // read_records, parse_records, record_format
#include <strata/data/tokenize.hpp>        // load_data
#include <strata/text/byte_tokenizer.hpp>  // byte_tokenizer

#include <doctest/doctest.h>  // TEST_CASE, CHECK, REQUIRE

#include <filesystem>  // std::filesystem::temp_directory_path, remove_all
#include <fstream>     // std::ofstream
#include <random>      // std::random_device
#include <string>      // std::string

#include <sys/stat.h>  // mkfifo

namespace records_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata::data;

namespace {

// A file under a fresh temporary directory, removed with it.
class temp_file {
public:
    temp_file(const std::string& name, const std::string& content) {
        static int counter = 0;
        m_dir = std::filesystem::temp_directory_path() /
                ("strata_data_test_" + std::to_string(std::random_device{}()) + "_" + std::to_string(counter++));
        std::filesystem::create_directories(m_dir);
        m_path = m_dir / name;
        std::ofstream(m_path, std::ios::binary) << content;
    }
    ~temp_file() {
        std::error_code ec;
        std::filesystem::remove_all(m_dir, ec);
    }
    const std::filesystem::path& path() const { return m_path; }
    const std::filesystem::path& dir() const { return m_dir; }

private:
    std::filesystem::path m_dir, m_path;
};

// The message of the strata::error that `read` throws; fails the test when nothing is thrown.
template <class F>
std::string error_of(F&& read) {
    try {
        read();
    } catch (const strata::error& e) {
        return e.what();
    }
    FAIL("expected a strata::error");
    return {};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a plain text file is one document, kept byte for byte") {
    const std::string text = "First line.\n\nSecond paragraph, caf\xC3\xA9.\n";
    temp_file f("corpus.txt", text);
    for (record_format format : {record_format::text, record_format::automatic}) {
        record_set r = read_records(f.path(), format);
        CHECK(r.kind == record_kind::base);
        REQUIRE(r.documents.size() == 1);
        CHECK(r.documents[0] == text);
        CHECK(r.examples.empty());
        CHECK(r.source == f.path().string());
    }
}

TEST_CASE("text format reads JSON-looking content as text when asked to") {
    temp_file f("odd.txt", "{\"text\": \"a\"}\n");
    record_set r = read_records(f.path(), record_format::text);
    REQUIRE(r.documents.size() == 1);
    CHECK(r.documents[0] == "{\"text\": \"a\"}\n");
}

TEST_CASE("a leading UTF-8 byte order mark is skipped") {
    temp_file f("bom.jsonl", "\xEF\xBB\xBF{\"text\": \"x\"}\n");
    record_set r = read_records(f.path());
    REQUIRE(r.documents.size() == 1);
    CHECK(r.documents[0] == "x");
}

TEST_CASE("base records from JSONL, blank lines and CRLF ignored") {
    temp_file f("base.jsonl", "{\"text\": \"one\"}\r\n\n   \n{\"text\": \"two\\nlines\", \"meta\": 3}\n{\"text\": \"\"}");
    for (record_format format : {record_format::jsonl, record_format::automatic}) {
        record_set r = read_records(f.path(), format);
        CHECK(r.kind == record_kind::base);
        REQUIRE(r.documents.size() == 3);
        CHECK(r.documents[0] == "one");
        CHECK(r.documents[1] == "two\nlines");
        CHECK(r.documents[2] == "");
        CHECK(r.size() == 3);
    }
}

TEST_CASE("base records from a JSON array") {
    temp_file f("base.json", "  [\n  {\"text\": \"alpha\"},\n  {\"text\": \"beta\"}\n]\n");
    for (record_format format : {record_format::jsonl, record_format::automatic}) {
        record_set r = read_records(f.path(), format);
        CHECK(r.kind == record_kind::base);
        REQUIRE(r.documents.size() == 2);
        CHECK(r.documents[0] == "alpha");
        CHECK(r.documents[1] == "beta");
    }
}

TEST_CASE("instruction records from JSONL and from a JSON array; input optional") {
    const std::string jsonl =
        "{\"instruction\": \"Add.\", \"input\": \"2 3\", \"output\": \"5\"}\n"
        "{\"instruction\": \"Greet.\", \"output\": \"Hi\"}\n"
        "{\"instruction\": \"Nil.\", \"input\": null, \"output\": \"\"}\n";
    const std::string array = "[" +
                              std::string("{\"instruction\": \"Add.\", \"input\": \"2 3\", \"output\": \"5\"},") +
                              "{\"instruction\": \"Greet.\", \"output\": \"Hi\"}," +
                              "{\"instruction\": \"Nil.\", \"input\": null, \"output\": \"\"}]";
    for (const std::string& content : {jsonl, array}) {
        temp_file f("inst.json", content);
        for (record_format format : {record_format::instruct, record_format::automatic}) {
            record_set r = read_records(f.path(), format);
            CHECK(r.kind == record_kind::instruct);
            CHECK(r.documents.empty());
            REQUIRE(r.examples.size() == 3);
            CHECK(r.examples[0].instruction == "Add.");
            CHECK(r.examples[0].input == "2 3");
            CHECK(r.examples[0].output == "5");
            CHECK(r.examples[1].instruction == "Greet.");
            CHECK(r.examples[1].input == "");
            CHECK(r.examples[1].output == "Hi");
            CHECK(r.examples[2].input == "");
            CHECK(r.examples[2].output == "");
        }
    }
}

TEST_CASE("auto detection: first non-space character, then the first record's keys") {
    CHECK(parse_records("  \n hello {", record_format::automatic, "s").kind == record_kind::base);
    CHECK(parse_records("  \n hello {", record_format::automatic, "s").documents.at(0) == "  \n hello {");
    CHECK(parse_records("\n\n{\"text\": \"t\"}", record_format::automatic, "s").documents.at(0) == "t");
    CHECK(parse_records("[{\"instruction\": \"i\", \"output\": \"o\"}]", record_format::automatic, "s").kind ==
          record_kind::instruct);
    // A record carrying both keys is an instruction record.
    CHECK(parse_records("{\"instruction\": \"i\", \"output\": \"o\", \"text\": \"t\"}", record_format::automatic, "s")
              .kind == record_kind::instruct);
}

TEST_CASE("format names") {
    CHECK(parse_record_format("text") == record_format::text);
    CHECK(parse_record_format("jsonl") == record_format::jsonl);
    CHECK(parse_record_format("instruct") == record_format::instruct);
    CHECK(parse_record_format("auto") == record_format::automatic);
    for (record_format f : {record_format::text, record_format::jsonl, record_format::instruct, record_format::automatic})
        CHECK(parse_record_format(to_string(f)) == f);
    std::string e = error_of([] { parse_record_format("csv"); });
    CHECK(contains(e, "unknown data format 'csv'"));
    CHECK(contains(e, "text, jsonl, instruct, chat, auto"));
}

// A device or a pipe has no end known before reading it: read whole, /dev/zero grew memory
// without bound and /dev/urandom never finished. Refused before reading, naming the file.
TEST_CASE("file errors: a device or a pipe is refused before it is read") {
    // /dev/null first: read, it is merely empty (the others never end)
    REQUIRE(contains(error_of([] { read_records("/dev/null"); }), "data file /dev/null is not a regular file"));
    for (const char* device : {"/dev/zero", "/dev/urandom"}) {
        if (!std::filesystem::exists(device)) continue;
        const std::string e = error_of([&] { read_records(device); });
        CHECK(contains(e, std::string("data file ") + device + " is not a regular file"));
        CHECK(contains(e, "hint: copy what it gives into a file"));
    }
    temp_file f("fifo-dir.txt", "");
    const std::filesystem::path fifo = f.dir() / "pipe";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK(contains(error_of([&] { read_records(fifo); }), "is not a regular file"));  // opening it would block
    // a link to a regular file is read
    std::filesystem::create_symlink(f.dir() / "real.txt", f.dir() / "link.txt");
    std::ofstream(f.dir() / "real.txt") << "some text\n";
    CHECK(read_records(f.dir() / "link.txt").documents.size() == 1);
}

TEST_CASE("file errors: missing, directory, empty, whitespace only") {
    temp_file f("empty.txt", "");
    std::string e = error_of([&] { read_records(f.dir() / "nope.jsonl"); });
    CHECK(contains(e, "cannot open data file"));
    CHECK(contains(e, "nope.jsonl"));
    CHECK(contains(e, "check the path"));

    e = error_of([&] { read_records(f.dir()); });
    CHECK(contains(e, "is a directory"));
    CHECK(contains(e, "pass one data file"));

    e = error_of([&] { read_records(f.path()); });
    CHECK(contains(e, "empty.txt is empty"));
    CHECK(contains(e, "hint:"));

    temp_file w("blank.jsonl", " \n\t\n");
    for (record_format format : {record_format::text, record_format::jsonl, record_format::automatic}) {
        e = error_of([&] { read_records(w.path(), format); });
        CHECK(contains(e, "blank.jsonl holds only whitespace"));
    }
}

TEST_CASE("malformed JSONL names the file line and column") {
    temp_file f("bad.jsonl", "{\"text\": \"ok\"}\n\n{\"text\": \"broken\",}\n");
    std::string e = error_of([&] { read_records(f.path()); });
    CHECK(contains(e, "bad.jsonl line 3, column "));
    CHECK(contains(e, "malformed JSON"));
    CHECK(contains(e, "JSONL holds one complete JSON object per line"));
    CHECK_FALSE(contains(e, "[json.exception"));

    // Pretty-printed objects are not JSONL; the hint points at the array form.
    temp_file p("pretty.jsonl", "{\n  \"text\": \"x\"\n}\n");
    e = error_of([&] { read_records(p.path()); });
    CHECK(contains(e, "pretty.jsonl line 1"));
    CHECK(contains(e, "use an array"));
}

TEST_CASE("malformed JSON array names the line") {
    temp_file f("bad.json", "[\n{\"text\": \"a\"},\n{\"text\" \"b\"}\n]");
    std::string e = error_of([&] { read_records(f.path()); });
    CHECK(contains(e, "bad.json line 3: malformed JSON"));
    CHECK(contains(e, "expected ':'"));

    temp_file n("none.json", "[]");
    e = error_of([&] { read_records(n.path()); });
    CHECK(contains(e, "none.json: the JSON array holds no records"));
}

TEST_CASE("missing fields name the record and suggest the other format") {
    std::string e = error_of([] { parse_records("{\"text\": \"a\"}\n{\"body\": \"b\"}\n", record_format::jsonl, "d.jsonl"); });
    CHECK(contains(e, "d.jsonl line 2: record has no \"text\" field (its keys: \"body\")"));

    e = error_of([] { parse_records("{\"instruction\": \"i\", \"output\": \"o\"}", record_format::jsonl, "d.jsonl"); });
    CHECK(contains(e, "d.jsonl line 1: record has no \"text\" field"));
    CHECK(contains(e, "the instruct format"));

    e = error_of([] { parse_records("[{\"instruction\": \"i\", \"output\": \"o\"}, {\"instruction\": \"j\"}]",
                                    record_format::instruct, "d.json"); });
    CHECK(contains(e, "d.json record 2: record has no \"output\" field (its keys: \"instruction\")"));

    e = error_of([] { parse_records("[{\"output\": \"o\"}]", record_format::instruct, "d.json"); });
    CHECK(contains(e, "d.json record 1: record has no \"instruction\" field"));

    e = error_of([] { parse_records("{\"text\": \"t\"}", record_format::instruct, "d.jsonl"); });
    CHECK(contains(e, "record has no \"instruction\" field"));
    CHECK(contains(e, "the jsonl format"));

    // Auto decides from the first record; a later record of the other kind is an error.
    e = error_of([] {
        parse_records("{\"text\": \"t\"}\n{\"instruction\": \"i\", \"output\": \"o\"}", record_format::automatic, "m");
    });
    CHECK(contains(e, "m line 2: record has no \"text\" field"));
    CHECK(contains(e, "decides from the first record"));

    e = error_of([] { parse_records("{\"prompt\": \"p\", \"completion\": \"c\"}", record_format::automatic, "u"); });
    CHECK(contains(e, "u line 1: cannot tell base from instruction or chat records"));
    CHECK(contains(e, "keys \"completion\", \"prompt\""));  // nlohmann keeps keys sorted
}

TEST_CASE("non-string fields and non-object records are errors") {
    std::string e = error_of([] { parse_records("{\"text\": 42}", record_format::automatic, "d"); });
    CHECK(contains(e, "d line 1: field \"text\" is a number, expected a string"));

    e = error_of([] {
        parse_records("[{\"instruction\": \"i\", \"input\": [1], \"output\": \"o\"}]", record_format::automatic, "d");
    });
    CHECK(contains(e, "d record 1: field \"input\" is a array, expected a string"));

    e = error_of([] { parse_records("[{\"instruction\": \"i\", \"output\": null}]", record_format::instruct, "d"); });
    CHECK(contains(e, "field \"output\" is a null"));

    e = error_of([] { parse_records("[{\"text\": \"a\"}, \"b\"]", record_format::automatic, "d"); });
    CHECK(contains(e, "d record 2: record is a JSON string, expected an object"));
}

TEST_CASE("explicit JSON formats refuse plain text; text refuses invalid UTF-8") {
    std::string e = error_of([] { parse_records("\n\nHello", record_format::jsonl, "p.txt"); });
    CHECK(contains(e, "p.txt line 3: expected JSON for the format jsonl but the file starts with 'H'"));
    CHECK(contains(e, "the text format"));

    e = error_of([] { parse_records("fine\nbad \xFF byte\n", record_format::automatic, "l1.txt"); });
    CHECK(contains(e, "l1.txt line 2 (byte 9): invalid UTF-8"));
    // Overlong encodings and surrogates are not UTF-8 either.
    CHECK(contains(error_of([] { parse_records("\xC0\xAF", record_format::text, "o"); }), "invalid UTF-8"));
    CHECK(contains(error_of([] { parse_records("\xED\xA0\x80", record_format::text, "s"); }), "invalid UTF-8"));
    CHECK(contains(error_of([] { parse_records("ok\xE2\x82", record_format::text, "t"); }), "invalid UTF-8"));
    CHECK_NOTHROW(parse_records("\xF0\x9F\x98\x80 \xE2\x82\xAC", record_format::text, "emoji"));
}

TEST_CASE("load_data: from a file on disk to train and validation sequences") {
    strata::byte_tokenizer tok;
    temp_file base("corpus.txt", "0123456789");  // 10 bytes + eot: T = 2 gives 5 windows
    prepared_data p = load_data(base.path(), record_format::automatic, tok, {2, 0.2, alpaca_prompt()});
    CHECK(p.stats.kind == record_kind::base);
    CHECK(p.train.size() == 4);
    REQUIRE(p.validation.size() == 1);
    CHECK(p.validation.inputs(0)[0] == '8');
    CHECK(p.validation.targets(0)[1] == strata::byte_tokenizer::eot);

    temp_file inst("alpaca.json", R"([{"instruction": "Hi", "input": "", "output": "Yo"}])");
    prepared_data q = load_data(inst.path(), record_format::automatic, tok, {256, 0.0, alpaca_prompt()});
    CHECK(q.stats.kind == record_kind::instruct);
    REQUIRE(q.train.size() == 1);
    std::string prompt = alpaca_prompt().render("Hi", "");
    CHECK(q.train.targets(0)[prompt.size() - 2] == ignore_index);
    CHECK(q.train.targets(0)[prompt.size() - 1] == 'Y');
    CHECK(q.train.targets(0)[prompt.size()] == 'o');
    CHECK(q.train.targets(0)[prompt.size() + 1] == strata::byte_tokenizer::eot);
    CHECK(q.train.targets(0)[prompt.size() + 2] == ignore_index);
    CHECK(q.stats.trainable_targets == 3);
}

// Found by fuzz/records.cpp: nlohmann throws out_of_range, not parse_error, for a number past a
// double's range, and it escaped the reader as a foreign exception type.
TEST_CASE("a number too large for a double is a malformed-JSON error with the place") {
    CHECK(error_of([] { parse_records("[{\"text\": \"a\", \"n\": 1e400}]", record_format::automatic, "d.json"); })
              .find("d.json: malformed JSON: [json.exception.out_of_range.406] number overflow") != std::string::npos);
    CHECK(error_of([] { parse_records("{\"text\": \"a\"}\n{\"text\": \"b\", \"n\": -1e999}\n", record_format::jsonl, "d.jsonl"); })
              .find("d.jsonl line 2: malformed JSON") != std::string::npos);
}

}  // namespace records_test
