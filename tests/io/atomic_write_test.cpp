// Atomic file writes and directory commits: the new content appears whole or not at all, and every
// failure leaves the old content in place, no temporary behind, and an error naming the path.
#include <strata/io/atomic_write.hpp>  // write_file_atomically, atomic_file_writer, commit_directory_atomically

#include "scratch_dir.hpp"  // scratch_dir, read_text, write_text

#include <doctest/doctest.h>

#include <csignal>      // std::signal, SIGXFSZ
#include <cstddef>      // std::byte
#include <filesystem>   // std::filesystem
#include <stdexcept>    // std::runtime_error
#include <string>       // std::string
#include <vector>       // std::vector

#include <sched.h>         // unshare, CLONE_NEWNS
#include <sys/mount.h>     // mount, MS_PRIVATE, MS_REC
#include <sys/resource.h>  // getrlimit, setrlimit, RLIMIT_FSIZE
#include <sys/wait.h>      // waitpid, WIFEXITED, WEXITSTATUS
#include <unistd.h>        // fork, pipe, read, write, _exit

namespace atomic_write_test {  // this file's names: an area's files compile as one unit (unity build)

namespace fs = std::filesystem;
using strata::test::read_text;
using strata::test::scratch_dir;
using strata::test::write_text;

namespace {

struct writer_gave_up : std::runtime_error {
    writer_gave_up() : std::runtime_error("writer gave up midway") {}
};

std::string message_of(const auto& action) {
    try {
        action();
    } catch (const strata::error& e) {
        return e.what();
    }
    return "(no strata::error was thrown)";
}

}  // namespace

TEST_CASE("write_file_atomically creates a file and leaves no temporary behind") {
    scratch_dir dir;
    strata::write_file_atomically(dir / "a.txt", std::string_view("hello"));
    CHECK(read_text(dir / "a.txt") == "hello");
    CHECK(dir.list() == std::vector<std::string>{"a.txt"});
}

TEST_CASE("write_file_atomically replaces an existing file") {
    scratch_dir dir;
    write_text(dir / "a.txt", "old content that is longer than the new one");
    const std::vector<std::byte> bytes{std::byte{'n'}, std::byte{0}, std::byte{'w'}};
    strata::write_file_atomically(dir / "a.txt", std::span<const std::byte>(bytes));
    CHECK(read_text(dir / "a.txt") == std::string("n\0w", 3));
    CHECK(dir.list() == std::vector<std::string>{"a.txt"});
}

TEST_CASE("the streaming variant writes every chunk in order") {
    scratch_dir dir;
    std::uint64_t counted = 0;
    strata::write_file_atomically(dir / "s.txt", [&](strata::atomic_file_writer& out) {
        for (int i = 0; i < 1000; ++i) out.write(std::to_string(i) + ",");
        counted = out.bytes_written();
        // Until commit the target does not exist: readers never see a partial file.
        CHECK_FALSE(fs::exists(dir / "s.txt"));
        CHECK(fs::exists(out.temporary_path()));
        CHECK(out.temporary_path().filename().string().starts_with("s.txt.tmp-"));
    });
    std::string expected;
    for (int i = 0; i < 1000; ++i) expected += std::to_string(i) + ",";
    CHECK(read_text(dir / "s.txt") == expected);
    CHECK(counted == expected.size());
    CHECK(dir.list() == std::vector<std::string>{"s.txt"});
}

TEST_CASE("a writer callback that throws midway leaves the old file intact") {
    scratch_dir dir;
    write_text(dir / "ckpt.bin", "the previous good checkpoint");
    CHECK_THROWS_AS(strata::write_file_atomically(dir / "ckpt.bin",
                                                  [](strata::atomic_file_writer& out) {
                                                      out.write(std::string(100000, 'x'));
                                                      throw writer_gave_up();
                                                  }),
                    writer_gave_up);
    CHECK(read_text(dir / "ckpt.bin") == "the previous good checkpoint");
    CHECK(dir.list() == std::vector<std::string>{"ckpt.bin"});
}

TEST_CASE("a missing parent directory is an error naming the path, with a hint") {
    scratch_dir dir;
    const fs::path target = dir / "no/such/dir/file.bin";
    try {
        strata::write_file_atomically(target, std::string_view("x"));
        FAIL("expected strata::error");
    } catch (const strata::error& e) {
        const std::string what = e.what();
        CHECK(what.find(target.string()) != std::string::npos);
        CHECK(what.find("No such file or directory") != std::string::npos);
        CHECK(e.hint().find("create") != std::string::npos);
    }
    CHECK(dir.list().empty());
}

// The kernel refuses writes past RLIMIT_FSIZE with EFBIG, the same path a full disk (ENOSPC) takes:
// write(2) fails midway through a real file.
TEST_CASE("a write that the kernel refuses midway removes the temporary and keeps the old file") {
    scratch_dir dir;
    write_text(dir / "big.bin", "old");

    rlimit saved{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    const auto saved_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = saved;
    small.rlim_cur = 4096;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    const std::string message = message_of([&] {
        strata::write_file_atomically(dir / "big.bin", std::string_view(std::string(1 << 20, 'z')));
    });
    ::setrlimit(RLIMIT_FSIZE, &saved);  // before any CHECK writes to a log file
    std::signal(SIGXFSZ, saved_handler);

    CHECK(message.find((dir / "big.bin").string()) != std::string::npos);
    CHECK(message.find("File too large") != std::string::npos);
    CHECK(message.find("hint:") != std::string::npos);
    CHECK(read_text(dir / "big.bin") == "old");
    CHECK(dir.list() == std::vector<std::string>{"big.bin"});
}

// A real full disk: a child process mounts a 64 KiB tmpfs in its own mount namespace (needs root or
// CAP_SYS_ADMIN, as CI has) and writes 1 MiB over an existing file there. It reports what it saw
// through a pipe: the error message, the old file's content, and the directory listing.
TEST_CASE("a full disk (ENOSPC on a tiny tmpfs) keeps the old file and names the problem") {
    scratch_dir dir;
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::close(fds[0]);
        const fs::path mnt = dir / "tiny";
        fs::create_directory(mnt);
        if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            ::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0)
            ::_exit(77);
        write_text(mnt / "ckpt.bin", "old");
        std::string report = message_of([&] {
            strata::write_file_atomically(mnt / "ckpt.bin", std::string_view(std::string(1 << 20, 'z')));
        });
        report += "\n" + read_text(mnt / "ckpt.bin") + "\n";
        for (const auto& name : dir.list(mnt)) report += name + ";";
        (void)!::write(fds[1], report.data(), report.size());
        ::_exit(0);
    }
    ::close(fds[1]);
    std::string report;
    char buffer[4096];
    for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) report.append(buffer, static_cast<std::size_t>(n));
    ::close(fds[0]);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) {
        MESSAGE("cannot mount a tmpfs here (not root?): the ENOSPC path is covered by the EFBIG test only");
        return;
    }
    REQUIRE(WEXITSTATUS(status) == 0);
    INFO("child report: " << report);
    CHECK(report.find("No space left on device") != std::string::npos);
    CHECK(report.find("free disk space") != std::string::npos);
    CHECK(report.find("ckpt.bin") != std::string::npos);
    CHECK(report.find("\nold\nckpt.bin;") != std::string::npos);  // old content, and no temporary left
}

TEST_CASE("an existing directory at the target path is not replaced by a file") {
    scratch_dir dir;
    fs::create_directory(dir / "taken");
    write_text(dir / "taken" / "inside.txt", "keep me");
    const std::string message =
        message_of([&] { strata::write_file_atomically(dir / "taken", std::string_view("x")); });
    CHECK(message.find("taken") != std::string::npos);
    CHECK(message.find("old file is untouched") != std::string::npos);
    CHECK(read_text(dir / "taken" / "inside.txt") == "keep me");
    CHECK(dir.list() == std::vector<std::string>{"taken"});
}

TEST_CASE("atomic_file_writer: destroyed without commit leaves nothing; commit runs once") {
    scratch_dir dir;
    {
        strata::atomic_file_writer out(dir / "never.txt");
        out.write(std::string_view("abandoned"));
    }
    CHECK(dir.list().empty());

    strata::atomic_file_writer out(dir / "once.txt");
    out.write(std::string_view("1"));
    out.commit();
    CHECK_THROWS_WITH_AS(out.commit(), doctest::Contains("already committed"), strata::error);
    CHECK_THROWS_WITH_AS(out.write(std::string_view("2")), doctest::Contains("already committed"),
                         strata::error);
    CHECK(read_text(dir / "once.txt") == "1");
}

// ---- directories -------------------------------------------------------------------------------

namespace {

void make_checkpoint(const fs::path& dir, const std::string& tag) {
    fs::create_directories(dir / "optimizer");
    write_text(dir / "model.safetensors", "weights " + tag);
    write_text(dir / "optimizer" / "state.bin", "moments " + tag);
}

}  // namespace

TEST_CASE("commit_directory_atomically publishes a directory with everything inside") {
    scratch_dir dir;
    make_checkpoint(dir / "step-000100.tmp", "new");
    strata::commit_directory_atomically(dir / "step-000100.tmp", dir / "step-000100");
    CHECK(dir.list() == std::vector<std::string>{"step-000100"});
    CHECK(read_text(dir / "step-000100" / "model.safetensors") == "weights new");
    CHECK(read_text(dir / "step-000100" / "optimizer" / "state.bin") == "moments new");
}

TEST_CASE("commit_directory_atomically refuses an existing target unless told to replace") {
    scratch_dir dir;
    make_checkpoint(dir / "tmp", "new");
    make_checkpoint(dir / "final", "old");
    CHECK_THROWS_WITH_AS(strata::commit_directory_atomically(dir / "tmp", dir / "final"),
                         doctest::Contains("already exists"), strata::error);
    CHECK(read_text(dir / "final" / "model.safetensors") == "weights old");
    CHECK(read_text(dir / "tmp" / "model.safetensors") == "weights new");

    // rename(2) alone would silently replace an empty directory.
    fs::create_directory(dir / "empty");
    CHECK_THROWS_WITH_AS(strata::commit_directory_atomically(dir / "tmp", dir / "empty"),
                         doctest::Contains("already exists"), strata::error);
    CHECK(fs::exists(dir / "tmp" / "model.safetensors"));
}

TEST_CASE("commit_directory_atomically replaces an existing directory when told to") {
    scratch_dir dir;
    make_checkpoint(dir / "tmp", "new");
    make_checkpoint(dir / "final", "old");
    write_text(dir / "final" / "only-in-old.txt", "stale");
    strata::commit_directory_atomically(dir / "tmp", dir / "final", {.replace_existing = true});
    CHECK(dir.list() == std::vector<std::string>{"final"});
    CHECK(read_text(dir / "final" / "model.safetensors") == "weights new");
    CHECK_FALSE(fs::exists(dir / "final" / "only-in-old.txt"));
}

TEST_CASE("the rename-based fallback replaces a directory and cleans up the old one") {
    scratch_dir dir;
    make_checkpoint(dir / "tmp", "new");
    make_checkpoint(dir / "final", "old");
    strata::detail::replace_directory_by_renames(dir / "tmp", dir / "final");
    CHECK(dir.list() == std::vector<std::string>{"final"});
    CHECK(read_text(dir / "final" / "optimizer" / "state.bin") == "moments new");
}

TEST_CASE("the rename-based fallback puts the old directory back when the new one cannot move in") {
    scratch_dir dir;
    make_checkpoint(dir / "final", "old");
    CHECK_THROWS_WITH_AS(strata::detail::replace_directory_by_renames(dir / "missing-tmp", dir / "final"),
                         doctest::Contains("move the new directory in"), strata::error);
    CHECK(dir.list() == std::vector<std::string>{"final"});
    CHECK(read_text(dir / "final" / "model.safetensors") == "weights old");
}

TEST_CASE("commit_directory_atomically: clear errors for bad arguments") {
    scratch_dir dir;
    CHECK_THROWS_WITH_AS(strata::commit_directory_atomically(dir / "absent", dir / "final"),
                         doctest::Contains("is not a directory"), strata::error);

    make_checkpoint(dir / "tmp", "new");
    CHECK_THROWS_WITH_AS(strata::commit_directory_atomically(dir / "tmp", dir / "tmp"),
                         doctest::Contains("onto itself"), strata::error);

    write_text(dir / "a-file", "not a directory");
    CHECK_THROWS_WITH_AS(
        strata::commit_directory_atomically(dir / "tmp", dir / "a-file", {.replace_existing = true}),
        doctest::Contains("it is not a directory"), strata::error);
    CHECK(read_text(dir / "a-file") == "not a directory");

    CHECK_THROWS_WITH_AS(strata::commit_directory_atomically(dir / "tmp", dir / "no" / "parent"),
                         doctest::Contains("No such file or directory"), strata::error);
    CHECK(read_text(dir / "tmp" / "model.safetensors") == "weights new");
}

}  // namespace atomic_write_test
