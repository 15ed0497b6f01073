// Calibration (plan/calibrate.hpp): every rate of the CPU backend comes out positive, the storage
// measurement removes only its own file, and the cache is reused, extended per shape and never an
// error when it cannot be written.
#include <strata/nn/cpu_ops.hpp>      // ops<cpu_backend> (before calibrate is instantiated)
#include <strata/plan/calibrate.hpp>  // calibrate, calibrated_rates, calibration_options
#include <strata/strata.hpp>          // cpu_backend, tier_options

#include <doctest/doctest.h>  // TEST_CASE, CHECK, REQUIRE

#include <unistd.h>  // getpid

#include <filesystem>  // std::filesystem
#include <string>      // std::string
#include <string_view> // std::string_view
#include <vector>      // std::vector

namespace calibrate_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;
namespace fs = std::filesystem;

namespace {

// A directory of this test's own, removed at the end.
struct scratch_dir {
    fs::path path;
    explicit scratch_dir(const std::string& name)
        : path(fs::temp_directory_path() / ("strata-calibrate-test-" + name + "-" + std::to_string(::getpid()))) {
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~scratch_dir() { fs::remove_all(path); }
};

// Small sizes: the test measures in a fraction of a second.
calibration_options small(const fs::path& storage, const fs::path& cache) {
    calibration_options o;
    o.gemms = gpt_block_gemms(64, 32);
    o.attention = {.batch = 2, .seq = 32, .channels = 32, .heads = 2};
    o.storage_dir = storage;
    o.link_bytes = o.memory_bytes = std::size_t(4) << 20;
    o.storage_bytes = std::size_t(16) << 20;
    o.optimizer_parameters = std::size_t(1) << 20;
    o.min_seconds = 0.005;
    o.cache_dir = cache;
    return o;
}

void check_positive(const machine_rates& m) {
    CHECK(m.gemm_flops > 0);
    CHECK(m.attention_flops > 0);
    CHECK(m.device_memory > 0);
    CHECK(m.h2d > 0);
    CHECK(m.d2h > 0);
    CHECK(m.duplex > 0);
    CHECK(m.storage_read > 0);
    CHECK(m.storage_write > 0);
    for (std::string_view name : registered_optimizers::name_list()) {  // adamw, sgd, adafactor
        CAPTURE(name);
        REQUIRE(m.host_optimizer.contains(std::string(name)));
        REQUIRE(m.device_optimizer.contains(std::string(name)));
        CHECK(m.host_optimizer.at(std::string(name)) > 0);
        CHECK(m.device_optimizer.at(std::string(name)) > 0);
    }
    CHECK(m.host_cores > 0);
    CHECK(m.budgets.device > 0);
    CHECK(m.budgets.host > 0);
}

}  // namespace

TEST_CASE("calibration: every rate of the CPU backend is positive; the storage file is removed, nothing else") {
    scratch_dir storage("storage");
    write_file_atomically(storage.path / "users.txt", std::string_view("not ours\n"));
    cpu_backend backend(tier_options{.device_bytes = std::size_t(256) << 20, .host_bytes = std::size_t(256) << 20});
    const machine_rates m = calibrate(backend, small(storage.path, {}));
    check_positive(m);
    CHECK(m.name.find("cpu") != std::string::npos);
    std::vector<fs::path> left;
    for (const auto& e : fs::directory_iterator(storage.path)) left.push_back(e.path().filename());
    REQUIRE(left.size() == 1);
    CHECK(left[0] == "users.txt");
    CHECK(backend.budget(tier_id::device).used() == 0);  // every buffer given back
    CHECK(backend.budget(tier_id::host).used() == 0);
}

TEST_CASE("calibration: the cache is reused, gains the compute rates of new shapes, and is measured again on request") {
    scratch_dir storage("cache-storage"), cache("cache");
    cpu_backend backend(tier_options{.device_bytes = std::size_t(256) << 20, .host_bytes = std::size_t(256) << 20});
    calibration_options o = small(storage.path, cache.path);
    const machine_rates first = calibrated_rates(backend, o);
    check_positive(first);
    const fs::path file = calibration_cache_file(cache.path, machine_key(backend, storage.path));
    REQUIRE(fs::exists(file));
    CHECK(read_json_file(file).at("compute").size() == 1);

    // The same machine and shapes: every rate read back, none measured (a measurement would differ
    // by far more than 1e-12; the file holds GB/s, whose conversion back may move the last bit).
    const machine_rates again = calibrated_rates(backend, o);
    CHECK(again.h2d == doctest::Approx(first.h2d).epsilon(1e-12));
    CHECK(again.storage_read == doctest::Approx(first.storage_read).epsilon(1e-12));
    CHECK(again.gemm_flops == doctest::Approx(first.gemm_flops).epsilon(1e-12));
    CHECK(again.host_optimizer.at("adamw") == doctest::Approx(first.host_optimizer.at("adamw")).epsilon(1e-12));

    // Other shapes: the machine's rates from the cache, the compute rates measured and added.
    o.gemms = gpt_block_gemms(32, 64);
    const machine_rates shapes = calibrated_rates(backend, o);
    CHECK(shapes.h2d == doctest::Approx(first.h2d).epsilon(1e-12));
    CHECK(shapes.gemm_flops > 0);
    CHECK(read_json_file(file).at("compute").size() == 2);

    // recalibrate: measured again and written back (the machine's rates change with the timing).
    o.recalibrate = true;
    const machine_rates fresh = calibrated_rates(backend, o);
    check_positive(fresh);
    const machine_rates stored = machine_from_json(read_json_file(file).at("machine"), "cache");
    CHECK(stored.h2d == doctest::Approx(fresh.h2d).epsilon(1e-12));
}

TEST_CASE("calibration: a cache from before an optimizer's rates gains them; the others are read back") {
    scratch_dir storage("old-cache-storage"), cache("old-cache");
    cpu_backend backend(tier_options{.device_bytes = std::size_t(256) << 20, .host_bytes = std::size_t(256) << 20});
    const calibration_options o = small(storage.path, cache.path);
    const machine_rates first = calibrated_rates(backend, o);
    const fs::path file = calibration_cache_file(cache.path, machine_key(backend, storage.path));
    // As a cache written before Adafactor's host rate and any device rate were calibrated.
    nlohmann::json old = read_json_file(file);
    old["machine"].erase("device_optimizer_Gparams_per_s");
    old["machine"]["host_optimizer_Gparams_per_s"].erase("adafactor");
    write_json_file(file, old);
    const machine_rates m = calibrated_rates(backend, o);
    check_positive(m);
    // read back, not measured (a new measurement differs by far more; the file holds GB/s, so the
    // round trip through its decimal text may move the last bit)
    CHECK(m.h2d == doctest::Approx(first.h2d).epsilon(1e-12));
    CHECK(m.host_optimizer.at("adamw") == doctest::Approx(first.host_optimizer.at("adamw")).epsilon(1e-12));
    const machine_rates stored = machine_from_json(read_json_file(file).at("machine"), "cache");
    CHECK(stored.host_optimizer.at("adafactor") == doctest::Approx(m.host_optimizer.at("adafactor")).epsilon(1e-12));
    CHECK(stored.device_optimizer.size() == registered_optimizers::name_list().size());
}

TEST_CASE("calibration: a cache that cannot be written is a note, and the rates are still returned") {
    scratch_dir storage("unwritable-storage"), blocked("unwritable");
    write_file_atomically(blocked.path / "file", std::string_view("a file where the cache directory would be\n"));
    std::vector<std::string> notes;
    const log_sink previous = set_log_sink([&](std::string_view n) { notes.emplace_back(n); });
    cpu_backend backend(tier_options{.device_bytes = std::size_t(256) << 20, .host_bytes = std::size_t(256) << 20});
    machine_rates m;
    CHECK_NOTHROW(m = calibrated_rates(backend, small(storage.path, blocked.path / "file" / "strata")));
    set_log_sink(previous);
    check_positive(m);
    bool noted = false;
    for (const auto& n : notes) noted = noted || n.find("cannot write the cache") != std::string::npos;
    CHECK(noted);
}

TEST_CASE("calibration: a corrupt cache is measured again, not an error") {
    scratch_dir storage("corrupt-storage"), cache("corrupt");
    cpu_backend backend(tier_options{.device_bytes = std::size_t(256) << 20, .host_bytes = std::size_t(256) << 20});
    const calibration_options o = small(storage.path, cache.path);
    const fs::path file = calibration_cache_file(cache.path, machine_key(backend, storage.path));
    write_file_atomically(file, std::string_view("{\"key\": "));
    std::vector<std::string> notes;
    const log_sink previous = set_log_sink([&](std::string_view n) { notes.emplace_back(n); });
    const machine_rates m = calibrated_rates(backend, o);
    set_log_sink(previous);
    check_positive(m);
    CHECK(read_json_file(file).at("key") == machine_key(backend, storage.path));
}

}  // namespace calibrate_test
