// Storage-tier write and read GB/s of storage_file (many chunk requests in flight on an io_engine)
// next to a plain single-threaded pread/pwrite loop over the same file, in one run.
//
//   strata_bench_storage [--bytes=N] [--storage-dir=DIR] [--workers=W] [google benchmark flags]
//
// N bytes per transfer (default 512 MiB; or STRATA_BENCH_STORAGE_BYTES), in DIR (default: a new
// directory in the temp dir; or STRATA_BENCH_STORAGE_DIR), W thread-pool workers (default:
// thread_pool_io_engine::default_workers()). Rows: one storage_file::write / read of the whole
// file per iteration, with the thread pool engine and (where this build has liburing and the
// kernel allows it) the io_uring engine; the baseline is the loop storage_file ran before the
// engine: pwrite / pread of 4 MiB pieces one after the other on the same file, opened the same
// way. With O_DIRECT (printed at the start) neither side goes through this machine's page cache;
// a virtual machine's host may still cache the disk image, so re-read figures can exceed the
// device's. The summary prints each row's median and best GB/s and its median over the loop's.
// The `mixed` row reads one file while another thread writes a second one through the same
// engine, as a trainer does when one group's optimizer state goes back to storage while the next
// group's is read: its GB/s counts both directions' bytes.
#include <strata/storage/io_engine.hpp>     // make_io_engine, io_engine_kind, thread_pool_io_engine
#include <strata/storage/storage_file.hpp>  // storage_file

#include <benchmark/benchmark.h>  // benchmark::State, RegisterBenchmark

#include <fcntl.h>   // open, O_DIRECT
#include <unistd.h>  // pread, pwrite, close, getpid

#include <algorithm>   // std::max_element, std::min, std::sort
#include <cerrno>      // errno
#include <chrono>      // std::chrono::steady_clock
#include <cstddef>     // std::size_t, std::byte
#include <cstdint>     // std::int64_t
#include <cstdio>      // std::printf, std::fprintf
#include <cstdlib>     // std::getenv, std::strtoull
#include <cstring>     // std::strncmp, std::strerror
#include <filesystem>  // std::filesystem
#include <map>         // std::map
#include <memory>      // std::unique_ptr
#include <string>      // std::string
#include <thread>      // std::thread
#include <vector>      // std::vector

namespace {

std::size_t g_bytes = std::size_t{512} << 20;
std::size_t g_workers = strata::thread_pool_io_engine::default_workers();
constexpr std::size_t loop_piece = std::size_t{4} << 20;  // what storage_file's loop moved per call

strata::storage_file* g_file = nullptr;
strata::storage_file* g_mixed_file = nullptr;  // the mixed row's second file
std::byte* g_buffer = nullptr;
std::byte* g_mixed_buffer = nullptr;
int g_loop_fd = -1;

// Bytes/s of every run of each row (Google Benchmark's calibration runs and repetitions), for
// the summary's median and best.
std::map<std::string, std::vector<double>> g_bytes_per_second;

template <class Body>
void timed(benchmark::State& state, const std::string& row, Body&& body, std::size_t bytes_per_run = g_bytes) {
    const auto start = std::chrono::steady_clock::now();
    for (auto _ : state) body();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double bytes = static_cast<double>(state.iterations()) * static_cast<double>(bytes_per_run);
    state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
    if (seconds > 0 && state.iterations() > 0) g_bytes_per_second[row].push_back(bytes / seconds);
}

void plain_loop(bool writing) {
    for (std::size_t done = 0; done < g_bytes;) {
        const std::size_t n = std::min(loop_piece, g_bytes - done);
        const ssize_t moved = writing ? ::pwrite(g_loop_fd, g_buffer + done, n, static_cast<off_t>(done))
                                      : ::pread(g_loop_fd, g_buffer + done, n, static_cast<off_t>(done));
        if (moved < 0 && errno == EINTR) continue;
        if (moved <= 0) {
            std::fprintf(stderr, "strata_bench_storage: %s failed: %s\n", writing ? "pwrite" : "pread",
                         moved < 0 ? std::strerror(errno) : "end of file");
            std::exit(1);
        }
        done += static_cast<std::size_t>(moved);
    }
}

std::size_t size_from(const char* text, const char* what) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(text, &end, 10);
    if (end == text || *end != '\0' || n == 0) {
        std::fprintf(stderr, "strata_bench_storage: %s must be a positive number, got '%s'\n", what, text);
        std::exit(2);
    }
    return static_cast<std::size_t>(n);
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n == 0 ? 0.0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void print_summary(bool direct) {
    const auto median_of = [](const std::string& key) {
        const auto it = g_bytes_per_second.find(key);
        return it == g_bytes_per_second.end() ? 0.0 : median(it->second);
    };
    std::printf("\nsummary: %zu MiB per transfer, O_DIRECT %s (GB = 1e9 bytes; median and best of each row's runs)\n",
                g_bytes >> 20, direct ? "on" : "off (buffered)");
    std::printf("%-52s %5s %13s %11s %21s\n", "row", "runs", "median GB/s", "best GB/s", "median x plain loop");
    for (const char* op : {"write", "read", "mixed"}) {
        const double loop = median_of(std::string(op) + "/plain_pwrite_pread_loop_1_thread");
        for (const auto& [row, rates] : g_bytes_per_second)
            if (row.rfind(std::string(op) + "/", 0) == 0) {
                char ratio[32] = "-";  // the mixed row has no plain loop to compare with
                if (loop > 0) std::snprintf(ratio, sizeof ratio, "%.2f", median(rates) / loop);
                std::printf("%-52s %5zu %13.2f %11.2f %21s\n", row.c_str(), rates.size(), median(rates) / 1e9,
                            *std::max_element(rates.begin(), rates.end()) / 1e9, ratio);
            }
    }
}

}  // namespace

int main(int argc, char** argv) {
    namespace fs = std::filesystem;
    fs::path dir;
    if (const char* env = std::getenv("STRATA_BENCH_STORAGE_DIR"); env && *env) dir = env;
    if (const char* env = std::getenv("STRATA_BENCH_STORAGE_BYTES"); env && *env)
        g_bytes = size_from(env, "STRATA_BENCH_STORAGE_BYTES");
    std::vector<char*> rest;
    for (int i = 0; i < argc; ++i) {
        if (std::strncmp(argv[i], "--bytes=", 8) == 0)
            g_bytes = size_from(argv[i] + 8, "--bytes");
        else if (std::strncmp(argv[i], "--storage-dir=", 14) == 0)
            dir = argv[i] + 14;
        else if (std::strncmp(argv[i], "--workers=", 10) == 0)
            g_workers = size_from(argv[i] + 10, "--workers");
        else
            rest.push_back(argv[i]);
    }
    int rest_argc = static_cast<int>(rest.size());
    benchmark::Initialize(&rest_argc, rest.data());
    const bool own_dir = dir.empty();
    if (own_dir) dir = fs::temp_directory_path() / ("strata-bench-storage-" + std::to_string(::getpid()));
    fs::create_directories(dir);

    auto pool = strata::make_io_engine({.kind = strata::io_engine_kind::thread_pool, .workers = g_workers});
    std::unique_ptr<strata::io_engine> uring;
    try {
        if (strata::io_uring_compiled()) uring = strata::make_io_engine({.kind = strata::io_engine_kind::io_uring});
    } catch (const strata::error& e) {
        std::printf("io_uring engine: not measured (%s)\n", e.what());
    }
    if (!strata::io_uring_compiled()) std::printf("io_uring engine: not measured (this build has no liburing)\n");

    strata::storage_file file(dir / "bench.strata", g_bytes, *pool);
    const auto buffer = strata::detail::make_aligned_buffer(g_bytes);
    for (std::size_t i = 0; i < g_bytes; i += 64) buffer[i] = static_cast<std::byte>(i >> 12);  // touch every page
    g_file = &file;
    g_buffer = buffer.get();
    g_loop_fd = ::open(file.path().c_str(), O_RDWR | O_CLOEXEC | (file.direct_io() ? O_DIRECT : 0));
    if (g_loop_fd < 0) {
        std::fprintf(stderr, "strata_bench_storage: cannot open %s: %s\n", file.path().c_str(), std::strerror(errno));
        return 1;
    }
    std::printf("storage file: %s, %zu MiB, O_DIRECT %s; engine requests of %zu KiB; plain loop pieces of %zu KiB\n",
                file.path().c_str(), g_bytes >> 20, file.direct_io() ? "on (page cache bypassed)" : "off (buffered: page cache)",
                strata::storage_file::chunk_bytes >> 10, loop_piece >> 10);

    const auto add = [](const std::string& row, auto body, std::size_t bytes_per_run = g_bytes) {
        benchmark::RegisterBenchmark(row.c_str(),
                                     [row, body, bytes_per_run](benchmark::State& s) { timed(s, row, body, bytes_per_run); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond)
            ->MinTime(1.0);
    };
    const std::string pool_row = "engine_thread_pool_" + std::to_string(pool->in_flight_limit()) + "_workers";
    const std::string uring_row = uring ? "engine_io_uring_depth_" + std::to_string(uring->in_flight_limit()) : "";
    // A storage_file keeps the engine it was made with: io_uring gets its own file of the same
    // size in the same directory.
    std::unique_ptr<strata::storage_file> uring_file;
    if (uring) uring_file = std::make_unique<strata::storage_file>(dir / "bench-uring.strata", g_bytes, *uring);

    // Write each file once first: the first write into preallocated (unwritten) extents also
    // converts them on disk, which no row should pay alone.
    file.write(0, g_buffer, g_bytes);
    if (uring_file) uring_file->write(0, g_buffer, g_bytes);
    strata::storage_file mixed_file(dir / "bench-mixed.strata", g_bytes, *pool);
    const auto mixed_buffer = strata::detail::make_aligned_buffer(g_bytes);
    std::memcpy(mixed_buffer.get(), g_buffer, g_bytes);
    mixed_file.write(0, mixed_buffer.get(), g_bytes);
    g_mixed_file = &mixed_file;
    g_mixed_buffer = mixed_buffer.get();

    add("write/plain_pwrite_pread_loop_1_thread", [] { plain_loop(true); });
    add("write/" + pool_row, [] { g_file->write(0, g_buffer, g_bytes); });
    if (uring_file) add("write/" + uring_row, [f = uring_file.get()] { f->write(0, g_buffer, g_bytes); });
    add("read/plain_pwrite_pread_loop_1_thread", [] { plain_loop(false); });
    add("read/" + pool_row, [] { g_file->read(0, g_buffer, g_bytes); });
    if (uring_file) add("read/" + uring_row, [f = uring_file.get()] { f->read(0, g_buffer, g_bytes); });
    add(
        "mixed/read_and_write_" + pool_row,
        [] {
            std::thread writer([] { g_mixed_file->write(0, g_mixed_buffer, g_bytes); });
            g_file->read(0, g_buffer, g_bytes);
            writer.join();
        },
        2 * g_bytes);

    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    print_summary(file.direct_io());
    ::close(g_loop_fd);
    uring_file.reset();
    g_file = nullptr;
    g_mixed_file = nullptr;
    if (own_dir) fs::remove_all(dir);
    return 0;
}
