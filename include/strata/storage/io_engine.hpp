// io_engine: asynchronous storage-tier I/O with many requests in flight.
//
//   io_engine& engine = shared_io_engine();
//   io_request reqs[] = {{fd, 0, buf, n, io_op::read, "weights.strata"}, ...};
//   io_completion done = engine.submit(reqs);   // returns at once
//   done.wait();                                // named wait; throws the first failure
//
// Two implementations behind the io_engine interface (storage/io_request.hpp):
//   thread_pool_io_engine  N workers doing pread/pwrite (storage/io_thread_pool.hpp): always there;
//   io_uring_engine        one io_uring ring (storage/io_uring.hpp): when strata is built with
//                          liburing (STRATA_HAVE_LIBURING) and the kernel allows io_uring.
// make_io_engine() picks one from io_engine_options; `automatic` prefers io_uring and falls back
// to the thread pool, logged, where the kernel refuses a ring (an explicit, announced policy).
//
// The library reads no environment variable: the engine is the caller's choice. A backend's
// storage files use the engine its tier_options::io asks for (made once per backend, on its first
// file); without one, the process's shared_io_engine() (the default options, made on first use,
// destroyed at exit, joining its threads), so that the CPU streams and the CUDA host callbacks of
// every backend submit to one queue and the disk sees one queue depth, not one per stream. Tests
// and benchmarks build their own engines with make_io_engine.
//
// ODR note: the definitions that depend on STRATA_HAVE_LIBURING live in an inline namespace named
// after it, so translation units built with and without liburing do not share a definition.
#pragma once

#include <strata/core/error.hpp>              // strata::error
#include <strata/core/log.hpp>                // log_note
#include <strata/storage/io_request.hpp>      // io_engine, io_request, io_completion, io_op
#include <strata/storage/io_thread_pool.hpp>  // thread_pool_io_engine
#ifdef STRATA_HAVE_LIBURING
#include <strata/storage/io_uring.hpp>  // io_uring_engine
#endif

#include <cstddef>      // std::size_t
#include <memory>       // std::unique_ptr, std::make_unique
#include <string>       // std::string
#include <string_view>  // std::string_view

namespace strata {

enum class io_engine_kind { automatic, thread_pool, io_uring };

struct io_engine_options {
    io_engine_kind kind = io_engine_kind::automatic;
    std::size_t workers = 0;      // thread pool: worker threads (0: thread_pool_io_engine::default_workers())
    std::size_t queue_depth = 0;  // io_uring: requests in the kernel at once (0: 64)
};

// Every engine kind, in the order a command line lists them, and each one's name.
inline constexpr io_engine_kind io_engine_kinds[] = {io_engine_kind::automatic, io_engine_kind::thread_pool,
                                                     io_engine_kind::io_uring};
constexpr std::string_view name_of(io_engine_kind kind) {
    switch (kind) {
        case io_engine_kind::automatic: return "auto";
        case io_engine_kind::thread_pool: return "threads";
        case io_engine_kind::io_uring: return "io_uring";
    }
    return "unknown";
}

// "auto", "threads" or "io_uring" (the names a program's option may take) as an io_engine_kind.
inline io_engine_kind io_engine_kind_from_string(std::string_view name) {
    for (io_engine_kind kind : io_engine_kinds)
        if (name == name_of(kind)) return kind;
    throw error("'" + std::string(name) + "' is not an I/O engine", "use auto, threads or io_uring");
}

#ifdef STRATA_HAVE_LIBURING
inline namespace io_with_liburing {
#else
inline namespace io_without_liburing {
#endif

// Does this build contain the io_uring engine?
constexpr bool io_uring_compiled() {
#ifdef STRATA_HAVE_LIBURING
    return true;
#else
    return false;
#endif
}

inline std::unique_ptr<io_engine> make_io_engine(const io_engine_options& options = {}) {
    const auto pool = [&] {
        return std::make_unique<thread_pool_io_engine>(options.workers ? options.workers
                                                                       : thread_pool_io_engine::default_workers());
    };
    if (options.kind == io_engine_kind::thread_pool) return pool();
#ifdef STRATA_HAVE_LIBURING
    const std::size_t depth = options.queue_depth ? options.queue_depth : io_uring_engine::default_queue_depth;
    if (options.kind == io_engine_kind::io_uring) return std::make_unique<io_uring_engine>(depth);
    try {
        return std::make_unique<io_uring_engine>(depth);
    } catch (const error& e) {
        log_note(std::string("storage I/O: io_uring is unavailable (") + e.what() + "); using a thread pool");
        return pool();
    }
#else
    if (options.kind == io_engine_kind::io_uring)
        throw error("the io_uring I/O engine was asked for, but strata was built without liburing",
                    "install liburing-dev and reconfigure, or ask for the thread pool engine (io_engine_kind::thread_pool)");
    return pool();
#endif
}

// The process-wide engine (see the top of this file).
inline io_engine& shared_io_engine() {
    static const std::unique_ptr<io_engine> engine = make_io_engine();
    return *engine;
}

}  // inline namespace io_with_liburing or io_without_liburing

}  // namespace strata
