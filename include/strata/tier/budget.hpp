// tier_budget: the byte budget of one tier. Every allocation in a tier reserves bytes here first,
// so going over budget is one clear error before anything is allocated.
#pragma once

#include <strata/core/bytes.hpp>  // format_bytes
#include <strata/core/error.hpp>  // strata::error
#include <strata/tier/tier.hpp>   // tier_id, name_of

#include <atomic>   // std::atomic
#include <cstddef>  // std::size_t
#include <string>   // std::string

namespace strata {

class tier_budget {
public:
    tier_budget(tier_id tier, std::size_t limit) : m_tier(tier), m_limit(limit) {}
    tier_budget(const tier_budget&) = delete;
    tier_budget& operator=(const tier_budget&) = delete;

    // Reserve `bytes` or throw naming the tier, the bytes asked for and the bytes left.
    // `what` names the allocation for the message (a tensor name, "staging buffer", ...).
    void reserve(std::size_t bytes, const std::string& what = {}) {
        std::size_t used = m_used.load(std::memory_order_relaxed);
        do {
            if (bytes > m_limit - used)
                throw error(std::string(name_of(m_tier)) + " tier over budget" + (what.empty() ? "" : " for '" + what + "'") +
                                ": asked for " + format_bytes(bytes) + ", " + format_bytes(m_limit - used) + " left of " +
                                format_bytes(m_limit),
                            "raise the " + std::string(name_of(m_tier)) +
                                " tier budget, or place less in this tier (smaller batch, fewer device slots, "
                                "or move state to a slower tier)");
        } while (!m_used.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
        std::size_t peak = m_peak.load(std::memory_order_relaxed);
        while (used + bytes > peak && !m_peak.compare_exchange_weak(peak, used + bytes, std::memory_order_relaxed)) {
        }
    }

    void release(std::size_t bytes) noexcept { m_used.fetch_sub(bytes, std::memory_order_relaxed); }

    tier_id tier() const { return m_tier; }
    std::size_t limit() const { return m_limit; }
    std::size_t used() const { return m_used.load(std::memory_order_relaxed); }
    std::size_t left() const { return m_limit - used(); }
    std::size_t peak() const { return m_peak.load(std::memory_order_relaxed); }
    void reset_peak() { m_peak.store(used(), std::memory_order_relaxed); }

private:
    tier_id m_tier;
    std::size_t m_limit;
    std::atomic<std::size_t> m_used{0};
    std::atomic<std::size_t> m_peak{0};
};

}  // namespace strata
