// The storage tier's asynchronous I/O engines (thread pool; io_uring where built and allowed):
// many concurrent requests round-trip exactly, errors name the file, offset and reason, an engine
// destroyed with requests in flight finishes or cancels every one of them, and storage_file
// transfers of every alignment and of sizes around its chunk boundaries round-trip.
#include <strata/strata.hpp>
#include <strata/storage/io_engine.hpp>

#include <doctest/doctest.h>

#include "support/skip.hpp"  // strata::test::skip

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace io_engine_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

// Removes its directory at the end of the test case.
struct scratch {
    std::filesystem::path dir;
    explicit scratch(const std::string& name)
        : dir(std::filesystem::temp_directory_path() / ("strata-test-" + name + "-" + std::to_string(::getpid()))) {
        std::filesystem::create_directories(dir);
    }
    ~scratch() { std::filesystem::remove_all(dir); }
};

// A file descriptor closed at the end of its scope.
struct file_descriptor {
    int fd;
    explicit file_descriptor(int f) : fd(f) { REQUIRE(fd >= 0); }
    ~file_descriptor() { ::close(fd); }
};

struct engine_case {
    std::string name;
    std::function<std::unique_ptr<io_engine>()> make;
};

// Every engine this build and this kernel can run. io_uring is only a case where it is compiled
// and the kernel grants a ring; that it is missing is said, visibly.
std::vector<engine_case> engines() {
    std::vector<engine_case> out{
        {"thread pool, 1 worker", [] { return make_io_engine({.kind = io_engine_kind::thread_pool, .workers = 1}); }},
        {"thread pool, 4 workers", [] { return make_io_engine({.kind = io_engine_kind::thread_pool, .workers = 4}); }},
    };
    static bool said = false;  // say it once per run, not once per test case
    if (!io_uring_compiled()) {
        if (!std::exchange(said, true)) MESSAGE("io_uring engine not tested: this build has no liburing (STRATA_HAVE_LIBURING)");
        return out;
    }
    try {
        make_io_engine({.kind = io_engine_kind::io_uring, .queue_depth = 4});
        out.push_back({"io_uring, depth 4", [] { return make_io_engine({.kind = io_engine_kind::io_uring, .queue_depth = 4}); }});
        out.push_back({"io_uring, depth 64", [] { return make_io_engine({.kind = io_engine_kind::io_uring}); }});
    } catch (const error& e) {
        if (!std::exchange(said, true)) MESSAGE("io_uring engine not tested: " << e.what());
    }
    return out;
}

// One engine of each kind, for the storage_file tests (the request-level tests above use all).
std::vector<engine_case> one_engine_per_kind() {
    std::vector<engine_case> out;
    for (auto& c : engines())
        if (c.name == "thread pool, 4 workers" || c.name == "io_uring, depth 64") out.push_back(std::move(c));
    return out;
}

std::vector<std::byte> random_bytes(std::size_t n, std::mt19937_64& rng) {
    std::vector<std::uint64_t> words(n / 8 + 1);
    for (auto& w : words) w = rng();
    std::vector<std::byte> v(n);
    std::memcpy(v.data(), words.data(), n);
    return v;
}

// Cuts [0, size) into pieces of random length (1 byte to `longest`), in random order.
std::vector<std::pair<std::size_t, std::size_t>> random_pieces(std::size_t size, std::size_t longest,
                                                               std::mt19937_64& rng) {
    std::vector<std::pair<std::size_t, std::size_t>> pieces;
    for (std::size_t at = 0; at < size;) {
        const std::size_t n = std::min(size - at, 1 + rng() % longest);
        pieces.push_back({at, n});
        at += n;
    }
    std::shuffle(pieces.begin(), pieces.end(), rng);
    return pieces;
}

}  // namespace

TEST_CASE("many concurrent requests of random offsets and sizes round-trip exactly, on every engine") {
    scratch s("io-random");
    for (const auto& c : engines()) {
        INFO(c.name);
        auto engine = c.make();
        std::mt19937_64 rng(11);
        const std::size_t size = (3 << 20) + 777;
        const auto data = random_bytes(size, rng);
        file_descriptor f(::open((s.dir / "random.bin").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600));

        // Unaligned pieces, written by one batch each from four threads at once.
        auto pieces = random_pieces(size, 70000, rng);
        std::vector<std::thread> writers;
        for (int t = 0; t < 4; ++t)
            writers.emplace_back([&, t] {
                std::vector<io_request> batch;
                for (std::size_t i = t; i < pieces.size(); i += 4)
                    batch.push_back({f.fd, pieces[i].first, const_cast<std::byte*>(data.data()) + pieces[i].first,
                                     pieces[i].second, io_op::write, "random.bin"});
                engine->submit(batch).wait();
            });
        for (auto& w : writers) w.join();

        // Read back with another cut, all in one batch, into an odd address.
        std::vector<std::byte> back(size + 1);
        std::byte* const into = back.data() + 1;
        std::vector<io_request> batch;
        for (auto [at, n] : random_pieces(size, 50000, rng))
            batch.push_back({f.fd, at, into + at, n, io_op::read, "random.bin"});
        io_completion done = engine->submit(batch);
        done.wait();
        CHECK(done.ready());
        CHECK(std::memcmp(data.data(), into, size) == 0);
        CHECK(engine->in_flight_limit() >= 1);
    }
}

TEST_CASE("O_DIRECT requests of aligned buffers round-trip on every engine") {
    scratch s("io-direct");
    const auto path = s.dir / "direct.bin";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    if (fd < 0) {
        strata::test::skip("the file system at " + s.dir.string() + " refuses O_DIRECT");
        return;
    }
    file_descriptor f(fd);
    const std::size_t size = 64 * page_size;
    auto out = detail::make_aligned_buffer(size), in = detail::make_aligned_buffer(size);
    for (const auto& c : engines()) {
        INFO(c.name);
        auto engine = c.make();
        std::mt19937_64 rng(5);
        for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<std::byte>(rng());
        std::vector<io_request> writes, reads;
        for (std::size_t p = 0; p < size; p += 2 * page_size) {  // pairs of pages, backwards
            const std::size_t at = size - 2 * page_size - p;
            writes.push_back({fd, at, out.get() + at, 2 * page_size, io_op::write, "direct.bin"});
            reads.push_back({fd, at, in.get() + at, 2 * page_size, io_op::read, "direct.bin"});
        }
        engine->submit(writes).wait();
        std::fill(in.get(), in.get() + size, std::byte{0});
        engine->submit(reads).wait();
        CHECK(std::memcmp(out.get(), in.get(), size) == 0);
    }
}

TEST_CASE("I/O errors surface at wait() naming the file, the byte offset and the reason, with a hint") {
    scratch s("io-errors");
    for (const auto& c : engines()) {
        INFO(c.name);
        auto engine = c.make();
        std::vector<std::byte> buf(8192, std::byte{7});

        // A read-only descriptor refuses writes (EBADF); the good requests of the batch still run.
        {
            file_descriptor rw(::open((s.dir / "a.bin").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600));
            engine->submit(std::vector<io_request>{{rw.fd, 0, buf.data(), 8192, io_op::write, "a.bin"}}).wait();
            file_descriptor ro(::open((s.dir / "a.bin").c_str(), O_RDONLY));
            std::vector<std::byte> good(4096);
            std::vector<io_request> batch{{ro.fd, 0, good.data(), 4096, io_op::read, "a.bin"},
                                          {ro.fd, 4096, buf.data(), 100, io_op::write, "a.bin (read-only)"}};
            io_completion done = engine->submit(batch);
            CHECK_THROWS_WITH_AS(done.wait(),
                                 doctest::Contains("write to a.bin (read-only) failed at byte 4096: Bad file descriptor"),
                                 strata::error);
            CHECK(good == std::vector<std::byte>(4096, std::byte{7}));
        }

        // A closed descriptor, named by number when the request has no file name.
        {
            const int fd = ::open((s.dir / "b.bin").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
            REQUIRE(fd >= 0);
            ::close(fd);
            try {
                engine->submit(std::vector<io_request>{{fd, 12288, buf.data(), 10, io_op::read, {}}}).wait();
                FAIL("reading a closed descriptor did not fail");
            } catch (const strata::error& e) {
                CHECK(std::string(e.what()).find("read from file descriptor " + std::to_string(fd) +
                                                 " failed at byte 12288: Bad file descriptor") != std::string::npos);
                CHECK(e.hint() == "the file is closed or was not opened for this direction");
            }
        }

        // Reading past the end of a file is an unexpected end of file at the byte where it ended.
        {
            file_descriptor f(::open((s.dir / "short.bin").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600));
            engine->submit(std::vector<io_request>{{f.fd, 0, buf.data(), 1000, io_op::write, "short.bin"}}).wait();
            CHECK_THROWS_WITH_AS(
                engine->submit(std::vector<io_request>{{f.fd, 200, buf.data(), 2000, io_op::read, "short.bin"}}).wait(),
                doctest::Contains("read from short.bin failed at byte 1000: unexpected end of file"), strata::error);
        }

        // A full disk (/dev/full answers every write with ENOSPC) gets the storage directory hint.
        if (std::filesystem::exists("/dev/full")) {
            file_descriptor full(::open("/dev/full", O_WRONLY));
            try {
                engine->submit(std::vector<io_request>{{full.fd, 0, buf.data(), 4096, io_op::write, "/dev/full"}}).wait();
                FAIL("writing /dev/full did not fail");
            } catch (const strata::error& e) {
                CHECK(std::string(e.what()).find("write to /dev/full failed at byte 0: No space left on device") !=
                      std::string::npos);
                CHECK(e.hint() == "the disk is full: free space or choose another storage directory");
            }
        } else {
            strata::test::skip("no /dev/full to provoke ENOSPC (the other failures were checked)");
        }

        // The engine still works after all of that.
        file_descriptor f(::open((s.dir / "after.bin").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600));
        engine->submit(std::vector<io_request>{{f.fd, 0, buf.data(), 8192, io_op::write, "after.bin"}}).wait();
    }
}

TEST_CASE("an engine destroyed with requests in flight finishes or cancels every one, and joins") {
    scratch s("io-shutdown");
    for (const auto& c : engines()) {
        INFO(c.name);
        file_descriptor f(::open((s.dir / "busy.bin").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600));
        const std::size_t piece = 64 << 10, pieces = 256;
        std::mt19937_64 rng(3);
        const auto data = random_bytes(piece * pieces, rng);
        std::vector<io_completion> completions;
        {
            auto engine = c.make();
            for (std::size_t i = 0; i < pieces; ++i)
                completions.push_back(engine->submit(std::vector<io_request>{
                    {f.fd, i * piece, const_cast<std::byte*>(data.data()) + i * piece, piece, io_op::write, "busy.bin"}}));
            completions.front().wait();  // at least one has run; most are still queued
        }  // destroyed here
        std::size_t written = 0, cancelled = 0;
        std::vector<std::byte> back(piece);
        for (std::size_t i = 0; i < pieces; ++i) {
            REQUIRE(completions[i].ready());  // nothing is left hanging
            try {
                completions[i].wait();
                ++written;
                REQUIRE(::pread(f.fd, back.data(), piece, static_cast<off_t>(i * piece)) == static_cast<ssize_t>(piece));
                CHECK(std::memcmp(back.data(), data.data() + i * piece, piece) == 0);
            } catch (const strata::error& e) {
                ++cancelled;
                CHECK(std::string(e.what()).find("cancelled: the I/O engine shut down before it ran") != std::string::npos);
            }
        }
        CHECK(written + cancelled == pieces);
        MESSAGE(c.name << ": " << written << " requests finished, " << cancelled << " cancelled at shutdown");
    }
}

TEST_CASE("a completion that is not waited for still waits in its destructor") {
    scratch s("io-dtor");
    for (const auto& c : engines()) {
        INFO(c.name);
        auto engine = c.make();
        file_descriptor f(::open((s.dir / "d.bin").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600));
        {
            // The buffer dies right after the completion: AddressSanitizer would see a write
            // into freed memory if the destructor did not wait.
            std::vector<std::byte> buf(1 << 20, std::byte{1});
            io_completion pending = engine->submit(std::vector<io_request>{{f.fd, 0, buf.data(), buf.size(), io_op::write, "d.bin"}});
            io_completion moved = std::move(pending);
            CHECK(pending.ready());  // a moved-from completion is empty
        }
        std::vector<std::byte> buf(1 << 20);
        {
            io_completion pending = engine->submit(std::vector<io_request>{{f.fd, 0, buf.data(), buf.size(), io_op::read, "d.bin"}});
            pending = io_completion{};  // assignment waits for the batch it replaces
        }
        CHECK(buf == std::vector<std::byte>(1 << 20, std::byte{1}));
        CHECK(engine->submit({}).ready());  // an empty batch is complete at once
    }
}

TEST_CASE("engine choice: options, names, and io_uring asked for without liburing") {
    auto pool = make_io_engine({.kind = io_engine_kind::thread_pool, .workers = 3});
    CHECK(pool->kind() == "thread pool");
    CHECK(pool->in_flight_limit() == 3);
    CHECK_THROWS_WITH_AS(thread_pool_io_engine(0), doctest::Contains("workers must be >= 1"), strata::error);
    if (!io_uring_compiled())
        CHECK_THROWS_WITH_AS(make_io_engine({.kind = io_engine_kind::io_uring}),
                             doctest::Contains("built without liburing"), strata::error);
    CHECK(!shared_io_engine().kind().empty());
    CHECK(&shared_io_engine() == &shared_io_engine());


    // The names a program's option takes; the library reads no environment variable.
    CHECK(io_engine_kind_from_string("auto") == io_engine_kind::automatic);
    CHECK(io_engine_kind_from_string("threads") == io_engine_kind::thread_pool);
    CHECK(io_engine_kind_from_string("io_uring") == io_engine_kind::io_uring);
    CHECK_THROWS_WITH_AS(io_engine_kind_from_string("fast"), doctest::Contains("use auto, threads or io_uring"),
                         strata::error);
}

TEST_CASE("storage_file round-trips ranges around chunk and bounce boundaries, aligned or not, on every engine") {
    scratch s("io-storage");
    constexpr std::size_t chunk = storage_file::chunk_bytes, bounce = storage_file::bounce_bytes;
    const std::size_t size = bounce + 3 * chunk + 5 * page_size + 123;
    std::mt19937_64 rng(17);
    for (const auto& c : one_engine_per_kind()) {
        INFO(c.name);
        auto engine = c.make();
        storage_file file(s.dir / "chunks.strata", size, *engine);
        CHECK(&file.engine() == engine.get());
        std::vector<std::byte> model = random_bytes(size, rng);
        file.write(0, model.data(), size);
        const std::vector<std::byte> noise = random_bytes(size + page_size, rng);
        auto buffer = detail::make_aligned_buffer(size + 2 * page_size);
        // Writes [off, off + len) from a buffer `shift` bytes past a page boundary (shift ==
        // off % page: lined up with the file's pages, so whole pages move directly), reads it back.
        // (memcpy/memcmp rather than loops: ThreadSanitizer checks them as one range each.)
        const auto round_trip = [&](std::size_t off, std::size_t len, std::size_t shift) {
            if (off + len > size) return;
            CAPTURE(len);
            CAPTURE(off);
            CAPTURE(shift);
            std::byte* p = buffer.get() + shift;
            std::memcpy(p, noise.data() + rng() % page_size, len);
            file.write(off, p, len);
            std::memcpy(model.data() + off, p, len);
            std::memset(p, 0, len);
            file.read(off, p, len);
            REQUIRE(std::memcmp(p, model.data() + off, len) == 0);
        };
        for (std::size_t len : {std::size_t{1}, page_size - 1, page_size, page_size + 1, chunk - 1, chunk, chunk + 1,
                                2 * chunk + page_size})
            for (std::size_t off : {std::size_t{0}, std::size_t{1}, page_size - 1, page_size, chunk - 3, chunk + page_size})
                for (std::size_t shift : {std::size_t{0}, off % page_size, std::size_t{5}}) round_trip(off, len, shift);
        // Several bounce rounds (a buffer not lined up) and many chunks (lined up).
        for (std::size_t len : {bounce - 1, bounce + chunk + 17})
            for (std::size_t off : {std::size_t{1}, page_size})
                for (std::size_t shift : {off % page_size, std::size_t{5}}) round_trip(off, len, shift);
        std::vector<std::byte> all(size);
        file.read(0, all.data(), size);
        CHECK(all == model);  // no write disturbed bytes outside its range
        CHECK_THROWS_WITH_AS(file.write(size - 10, all.data(), 11), doctest::Contains("out of range"), strata::error);
    }
}

TEST_CASE("storage_file::copy moves any range between files, and within one file") {
    scratch s("io-copy");
    const std::size_t size = storage_file::bounce_bytes * 2 + 3 * page_size + 99;
    std::mt19937_64 rng(23);
    auto engine = make_io_engine({.kind = io_engine_kind::thread_pool, .workers = 4});
    storage_file a(s.dir / "a.strata", size, *engine), b(s.dir / "b.strata", size, *engine);
    const auto data = random_bytes(size, rng);
    a.write(0, data.data(), size);
    std::vector<std::byte> zeros(size), back(size);
    const std::size_t cases[][3] = {// src offset, dst offset, bytes
                                    {0, 0, size},
                                    {1, page_size + 7, storage_file::bounce_bytes + 5},
                                    {page_size, 3, 2 * storage_file::bounce_bytes},
                                    {17, 0, 100},
                                    {size - 1, 0, 1}};
    for (const auto& k : cases) {
        const std::size_t from = k[0], to = k[1], n = k[2];
        CAPTURE(from);
        CAPTURE(to);
        CAPTURE(n);
        b.write(0, zeros.data(), size);
        storage_file::copy(b, to, a, from, n);
        b.read(0, back.data(), size);
        CHECK(std::memcmp(back.data() + to, data.data() + from, n) == 0);
        CHECK(std::memcmp(back.data(), zeros.data(), to) == 0);  // nothing outside the range
        CHECK(std::memcmp(back.data() + to + n, zeros.data(), size - to - n) == 0);
    }
    // Within one file: the first half to the second.
    storage_file::copy(a, size / 2 + 1, a, 0, size / 2 - 1);
    a.read(0, back.data(), size);
    CHECK(std::memcmp(back.data() + size / 2 + 1, data.data(), size / 2 - 1) == 0);
    CHECK(std::memcmp(back.data(), data.data(), size / 2 + 1) == 0);
    CHECK_THROWS_WITH_AS(storage_file::copy(b, 1, a, 0, size), doctest::Contains("out of range"), strata::error);
}

TEST_CASE("storage_file I/O failures surface from read and write, naming the storage-tier file") {
    scratch s("io-fail");
    for (const auto& c : engines()) {
        INFO(c.name);
        auto engine = c.make();
        storage_file file(s.dir / "named.strata", 3 * page_size + 10, *engine);
        // Find the file's descriptor and put a read-only (then a write-only) one in its place.
        int fd = -1;
        for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
            std::error_code ec;
            if (std::filesystem::read_symlink(entry.path(), ec) == file.path()) fd = std::stoi(entry.path().filename());
        }
        if (fd < 0) {
            strata::test::skip("/proc/self/fd does not show the storage file's descriptor");
            return;
        }
        std::vector<std::byte> buf(3 * page_size);
        const std::string label = "storage-tier file " + file.path().string();
        file_descriptor ro(::open(file.path().c_str(), O_RDONLY)), wo(::open(file.path().c_str(), O_WRONLY));
        REQUIRE(::dup2(ro.fd, fd) == fd);
        const std::string write_failure = "write to " + label + " failed at byte";
        const std::string read_failure = "read from " + label + " failed at byte 0: Bad file descriptor";
        CHECK_THROWS_WITH_AS(file.write(page_size + 1, buf.data(), 2 * page_size),
                             doctest::Contains(write_failure.c_str()), strata::error);
        file.read(0, buf.data(), buf.size());  // reading still works
        REQUIRE(::dup2(wo.fd, fd) == fd);
        CHECK_THROWS_WITH_AS(file.read(0, buf.data(), 2 * page_size), doctest::Contains(read_failure.c_str()),
                             strata::error);
    }
}

}  // namespace io_engine_test
