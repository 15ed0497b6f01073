// The one doctest main shared by every strata test executable. Beyond doctest's own main, it
// keeps skips honest (support/skip.hpp): a case that called strata::test::skip() is listed as
// skipped with its reason, and when every case that ran was skipped the executable exits with
// skip_exit_code (CTest: "Skipped"). A run in which no case matched the filters fails, so a
// CTest entry whose case was renamed or removed cannot pass silently.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "support/skip.hpp"

#include <cstdio>   // std::printf
#include <string>   // std::string
#include <utility>  // std::move
#include <vector>   // std::vector

namespace {

struct skipped_case {
    std::string name;
    std::string reason;
};

struct skip_state {
    std::string current;          // the test case running now
    std::string reason;           // set by skip() during it
    bool skip_called = false;
    int cases_run = 0;
    std::vector<skipped_case> skipped;
};

skip_state& state() {
    static skip_state s;
    return s;
}

// Sees each test case start and end (after all its subcases), so skip() knows whom it skips.
struct skip_listener : doctest::IReporter {
    explicit skip_listener(const doctest::ContextOptions&) {}
    void report_query(const doctest::QueryData&) override {}
    void test_run_start() override {}
    void test_run_end(const doctest::TestRunStats&) override {}
    void test_case_start(const doctest::TestCaseData& tc) override {
        state().current = tc.m_name;
        state().reason.clear();
        state().skip_called = false;
    }
    void test_case_reenter(const doctest::TestCaseData&) override {}
    void test_case_end(const doctest::CurrentTestCaseStats& stats) override {
        ++state().cases_run;
        if (state().skip_called && stats.testCaseSuccess)
            state().skipped.push_back({state().current, std::move(state().reason)});
    }
    void test_case_exception(const doctest::TestCaseException&) override {}
    void subcase_start(const doctest::SubcaseSignature&) override {}
    void subcase_end() override {}
    void log_assert(const doctest::AssertData&) override {}
    void log_message(const doctest::MessageData&) override {}
    void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("strata_skips", 1, skip_listener);

}  // namespace

namespace strata::test {

void skip(const std::string& reason) {
    MESSAGE("SKIPPED: " << reason);
    auto& s = state();
    if (s.skip_called) s.reason += "; ";
    s.reason += reason;
    s.skip_called = true;
}

}  // namespace strata::test

int main(int argc, char** argv) {
    doctest::Context context(argc, argv);
    const int result = context.run();
    if (context.shouldExit() || result != 0) return result;  // --help, --list-test-cases, failures
    const auto& s = state();
    if (s.cases_run == 0) {
        std::printf("[strata] no test case ran: the filters match none\n");
        return 1;
    }
    for (const auto& c : s.skipped) std::printf("[strata] SKIPPED %s: %s\n", c.name.c_str(), c.reason.c_str());
    if (static_cast<int>(s.skipped.size()) == s.cases_run) {
        std::printf("[strata] every test case that ran (%d) was skipped\n", s.cases_run);
        return strata::test::skip_exit_code;
    }
    if (!s.skipped.empty())
        std::printf("[strata] %zu of %d test cases skipped\n", s.skipped.size(), s.cases_run);
    return 0;
}
