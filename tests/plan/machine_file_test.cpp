// Machine files (plan/machine_file.hpp): the shipped ones read back with their units converted,
// a machine round-trips through JSON, and a malformed file is refused naming the field.
#include <strata/plan/machine_file.hpp>  // machine_from_json, machine_to_json, read_machine_file, attention_rate

#include <doctest/doctest.h>  // TEST_CASE, CHECK, REQUIRE

#include <unistd.h>  // getpid

#include <filesystem>  // std::filesystem::path
#include <string>      // std::string

namespace machine_file_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;
using json = nlohmann::json;

namespace {

const std::filesystem::path machines = std::filesystem::path(STRATA_SOURCE_DIR) / "machines";

json valid() {
    return json::parse(R"({
      "name": "box", "notes": "made up",
      "device_budget": "80G", "host_budget": 1073741824, "storage_budget": "0",
      "host_cores": 8,
      "h2d_GBps": 25, "d2h_GBps": 24, "duplex_GBps": 40,
      "storage_read_GBps": 3, "storage_write_GBps": 2,
      "gemm_TFLOPS": 19.5, "attention_TFLOPS": 15, "device_memory_GBps": 1500,
      "host_optimizer_Gparams_per_s": {"adamw": 2, "sgd": 3}
    })");
}

// The message a malformed machine file is refused with ("" when it is accepted).
std::string refusal(const json& j) {
    try {
        (void)machine_from_json(j, "test.json");
    } catch (const error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("machine file: fields in their units become base units") {
    const machine_rates m = machine_from_json(valid(), "test.json");
    CHECK(m.name == "box");
    CHECK(m.budgets.device == std::size_t(80) << 30);
    CHECK(m.budgets.host == std::size_t(1) << 30);
    CHECK(m.budgets.storage == 0);
    CHECK(m.host_cores == 8);
    CHECK(m.h2d == doctest::Approx(25e9));
    CHECK(m.duplex == doctest::Approx(40e9));
    CHECK(m.storage_write == doctest::Approx(2e9));
    CHECK(m.gemm_flops == doctest::Approx(19.5e12));
    CHECK(m.attention_flops == doctest::Approx(15e12));
    CHECK(m.device_memory == doctest::Approx(1.5e12));
    CHECK(m.host_optimizer.at("adamw") == doctest::Approx(2e9));
    CHECK(m.host_optimizer.at("sgd") == doctest::Approx(3e9));
    CHECK(m.device_optimizer.empty());  // optional: without it, every device update is memory-bound
    json j = valid();
    j["device_optimizer_Gparams_per_s"] = {{"adafactor", 6.5}};
    CHECK(machine_from_json(j, "test.json").device_optimizer.at("adafactor") == doctest::Approx(6.5e9));
}

TEST_CASE("machine file: attention rates by head size; a plan takes its model's head size's, or the nearest listed") {
    const machine_rates plain = machine_from_json(valid(), "test.json");
    CHECK(plain.attention_flops_by_head_size.empty());  // optional
    CHECK(attention_rate(plain, 64) == doctest::Approx(15e12));  // without them: attention_TFLOPS at any head size
    json j = valid();
    j["attention_TFLOPS_by_head_size"] = {{"64", 50}, {"128", 26}};
    const machine_rates m = machine_from_json(j, "test.json");
    CHECK(m.attention_flops == doctest::Approx(15e12));
    CHECK(m.attention_flops_by_head_size.at(64) == doctest::Approx(50e12));
    CHECK(attention_rate(m, 64) == doctest::Approx(50e12));
    CHECK(attention_rate(m, 128) == doctest::Approx(26e12));
    CHECK(attention_rate(m, 32) == doctest::Approx(50e12));   // below every listed size: the smallest's
    CHECK(attention_rate(m, 256) == doctest::Approx(26e12));  // above: the largest's
    CHECK(attention_rate(m, 80) == doctest::Approx(50e12));   // 80/64 = 1.25 < 128/80 = 1.6
    CHECK(attention_rate(m, 112) == doctest::Approx(26e12));  // 112/64 = 1.75 > 128/112 = 1.14
    CHECK(attention_rate(m, 90) == doctest::Approx(50e12));   // 90/64 = 1.41 < 128/90 = 1.42
    json tie = valid();
    tie["attention_TFLOPS_by_head_size"] = {{"32", 40}, {"128", 20}};
    CHECK(attention_rate(machine_from_json(tie, "test.json"), 64) == doctest::Approx(40e12));  // a tie: the smaller's
}

TEST_CASE("machine file: a machine round-trips through its JSON") {
    const machine_rates m = machine_from_json(valid(), "test.json");
    const machine_rates back = machine_from_json(json::parse(machine_to_json(m, "notes").dump()), "round trip");
    CHECK(back.name == m.name);
    CHECK(back.budgets.device == m.budgets.device);
    CHECK(back.budgets.host == m.budgets.host);
    CHECK(back.host_cores == m.host_cores);
    CHECK(back.d2h == doctest::Approx(m.d2h));
    CHECK(back.storage_read == doctest::Approx(m.storage_read));
    CHECK(back.gemm_flops == doctest::Approx(m.gemm_flops));
    CHECK(back.host_optimizer == m.host_optimizer);
    CHECK(back.device_optimizer.empty());
    machine_rates d = m;
    d.device_optimizer = {{"adafactor", 6.5e9}, {"adamw", 120e9}};
    CHECK(machine_from_json(json::parse(machine_to_json(d).dump()), "round trip").device_optimizer == d.device_optimizer);
    CHECK_FALSE(machine_to_json(m).contains("attention_TFLOPS_by_head_size"));  // written only where given
    d.attention_flops_by_head_size = {{64, 50e12}, {128, 26e12}};
    const machine_rates by_size = machine_from_json(json::parse(machine_to_json(d).dump()), "round trip");
    REQUIRE(by_size.attention_flops_by_head_size.size() == 2);
    CHECK(by_size.attention_flops_by_head_size.at(64) == doctest::Approx(50e12));
    CHECK(by_size.attention_flops_by_head_size.at(128) == doctest::Approx(26e12));
}

TEST_CASE("machine file: the shipped machines read") {
    const machine_rates h200 = read_machine_file(machines / "h200.json");
    CHECK(h200.budgets.device == std::size_t(132) << 30);
    CHECK(h200.host_cores == 16);
    CHECK(h200.h2d == doctest::Approx(55.1e9));
    CHECK(h200.gemm_flops == doctest::Approx(48.7e12));
    CHECK(h200.host_optimizer.at("adamw") == doctest::Approx(4.82e9));
    CHECK(h200.device_optimizer.at("adafactor") == doctest::Approx(6.0e9));
    CHECK_FALSE(h200.device_optimizer.contains("adamw"));  // memory-bound: costed from device_memory
    CHECK(attention_rate(h200, 64) > 1.5 * attention_rate(h200, 128));  // GPT-2's head size against Llama's
    const machine_rates big = read_machine_file(machines / "h200-1.5tb-4nvme.json");
    CHECK(big.budgets.host == std::size_t(1380) << 30);
    CHECK(big.budgets.storage == std::size_t(20) << 40);
    CHECK(big.storage_read == doctest::Approx(24e9));
    CHECK(big.host_cores == 64);
}

TEST_CASE("machine file: a malformed file is refused naming the field") {
    auto without = [](const char* key) {
        json j = valid();
        j.erase(key);
        return j;
    };
    auto with = [](const char* key, json value) {
        json j = valid();
        j[key] = std::move(value);
        return j;
    };
    // missing
    CHECK(refusal(without("h2d_GBps")).find("field 'h2d_GBps' is missing") != std::string::npos);
    CHECK(refusal(without("device_budget")).find("field 'device_budget' is missing") != std::string::npos);
    CHECK(refusal(without("name")).find("field 'name' is missing") != std::string::npos);
    CHECK(refusal(valid()).empty());
    CHECK(refusal(without("notes")).empty());  // the optional fields
    CHECK(refusal(with("device_optimizer_Gparams_per_s", json{{"adafactor", 6}})).empty());
    // wrong type
    CHECK(refusal(with("gemm_TFLOPS", "fast")).find("field 'gemm_TFLOPS' is a string") != std::string::npos);
    CHECK(refusal(with("host_budget", true)).find("field 'host_budget' is a boolean") != std::string::npos);
    CHECK(refusal(with("host_budget", "lots")).find("field 'host_budget'") != std::string::npos);
    CHECK(refusal(with("host_cores", 2.5)).find("field 'host_cores'") != std::string::npos);
    CHECK(refusal(with("notes", 3)).find("field 'notes'") != std::string::npos);
    CHECK(refusal(with("host_optimizer_Gparams_per_s", 4.86)).find("field 'host_optimizer_Gparams_per_s'") !=
          std::string::npos);
    CHECK(refusal(with("device_optimizer_Gparams_per_s", "fast")).find("field 'device_optimizer_Gparams_per_s' must be") !=
          std::string::npos);
    CHECK(refusal(with("device_optimizer_Gparams_per_s", json{{"adafactor", "6"}}))
              .find("field 'device_optimizer_Gparams_per_s.adafactor' is a string") != std::string::npos);
    CHECK(refusal(json::array()).find("not a JSON object") != std::string::npos);
    CHECK(refusal(with("attention_TFLOPS_by_head_size", 50)).find("field 'attention_TFLOPS_by_head_size' must be") !=
          std::string::npos);
    CHECK(refusal(with("attention_TFLOPS_by_head_size", json::object()))
              .find("field 'attention_TFLOPS_by_head_size' must be") != std::string::npos);
    CHECK(refusal(with("attention_TFLOPS_by_head_size", json{{"sixty-four", 50}}))
              .find("field 'attention_TFLOPS_by_head_size.sixty-four' names no head size") != std::string::npos);
    CHECK(refusal(with("attention_TFLOPS_by_head_size", json{{"0", 50}}))
              .find("field 'attention_TFLOPS_by_head_size.0' names no head size") != std::string::npos);
    CHECK(refusal(with("attention_TFLOPS_by_head_size", json{{"64", "50"}}))
              .find("field 'attention_TFLOPS_by_head_size.64' is a string") != std::string::npos);
    CHECK(refusal(with("attention_TFLOPS_by_head_size", json{{"64", 0}}))
              .find("field 'attention_TFLOPS_by_head_size.64' is 0") != std::string::npos);
    CHECK(refusal(with("attention_TFLOPS_by_head_size", json{{"64", 50}})).empty());
    // negative, zero
    CHECK(refusal(with("d2h_GBps", -1)).find("field 'd2h_GBps' is negative") != std::string::npos);
    CHECK(refusal(with("storage_budget", -5)).find("field 'storage_budget' is negative") != std::string::npos);
    CHECK(refusal(with("storage_read_GBps", 0)).find("field 'storage_read_GBps' is 0") != std::string::npos);
    CHECK(refusal(with("device_budget", 0)).find("field 'device_budget' is 0") != std::string::npos);
    CHECK(refusal(with("host_cores", 0)).find("field 'host_cores'") != std::string::npos);
    // unknown keys, at the top and among the optimizers; an optimizer missing
    CHECK(refusal(with("h2d_GBs", 5)).find("unknown field 'h2d_GBs'") != std::string::npos);
    CHECK(refusal(with("host_optimizer_Gparams_per_s", json{{"adamw", 1}, {"sgd", 1}, {"lion", 1}}))
              .find("field 'host_optimizer_Gparams_per_s.lion'") != std::string::npos);
    CHECK(refusal(with("host_optimizer_Gparams_per_s", json{{"adamw", 1}}))
              .find("field 'host_optimizer_Gparams_per_s.sgd' is missing") != std::string::npos);
    CHECK(refusal(with("host_optimizer_Gparams_per_s", json{{"adamw", -1}, {"sgd", 1}}))
              .find("field 'host_optimizer_Gparams_per_s.adamw' is negative") != std::string::npos);
    CHECK(refusal(with("device_optimizer_Gparams_per_s", json{{"lion", 1}}))
              .find("field 'device_optimizer_Gparams_per_s.lion' names no optimizer") != std::string::npos);
    CHECK(refusal(with("device_optimizer_Gparams_per_s", json{{"adafactor", 0}}))
              .find("field 'device_optimizer_Gparams_per_s.adafactor' is 0") != std::string::npos);
}

TEST_CASE("machine file: a file that does not parse names the file") {
    const auto dir = std::filesystem::temp_directory_path() / ("strata-machine-file-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    write_file_atomically(dir / "bad.json", std::string_view("{\"name\": "));
    try {
        (void)read_machine_file(dir / "bad.json");
        FAIL("a truncated machine file was read");
    } catch (const error& e) {
        CHECK(std::string(e.what()).find("bad.json") != std::string::npos);
    }
    std::filesystem::remove_all(dir);
}

}  // namespace machine_file_test
