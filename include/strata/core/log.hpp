// Notes the library logs: explicit fallbacks (e.g. buffered I/O where O_DIRECT is refused) are
// announced once, never taken silently. The sink defaults to stderr and can be replaced.
#pragma once

#include <cstdio>       // std::fprintf, stderr
#include <functional>   // std::function
#include <mutex>        // std::mutex, std::lock_guard
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <utility>      // std::move

namespace strata {

using log_sink = std::function<void(std::string_view)>;

namespace detail {
struct log_state {
    std::mutex mutex;
    log_sink sink;
};
inline log_state& log() {
    static log_state state;
    return state;
}
}  // namespace detail

// Replace where notes go (tests capture them; an application may route them to its logger).
// Returns the previous sink; an empty sink means stderr.
inline log_sink set_log_sink(log_sink sink) {
    auto& state = detail::log();
    std::lock_guard lock(state.mutex);
    std::swap(state.sink, sink);
    return sink;
}

inline void log_note(std::string_view message) {
    auto& state = detail::log();
    std::lock_guard lock(state.mutex);
    if (state.sink)
        state.sink(message);
    else
        std::fprintf(stderr, "strata: note: %.*s\n", static_cast<int>(message.size()), message.data());
}

}  // namespace strata
