// Learning-rate schedules at their key steps: warmup ends, decay midpoints and ends, drops.
#include <strata/train/schedule.hpp>  // lr_schedule, lr_at, parse_lr_kind

#include <doctest/doctest.h>  // TEST_CASE, CHECK

#include <cmath>    // std::cos
#include <numbers>  // std::numbers::pi
#include <string>   // std::string

namespace schedule_test {  // this file's names: an area's files compile as one unit (unity build)

using strata::lr_kind;
using strata::lr_schedule;

namespace {

lr_schedule make(lr_kind kind, long warmup, long total) {
    lr_schedule s;
    s.kind = kind;
    s.lr = 1.0;
    s.min_lr = 0.1;
    s.warmup_steps = warmup;
    s.total_steps = total;
    return s;
}

std::string message_of(const lr_schedule& s, long step) {
    try {
        strata::lr_at(s, step);
    } catch (const strata::error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("warmup is linear from lr/warmup at step 0 to lr at step warmup-1, for every kind") {
    for (lr_kind kind : {lr_kind::constant, lr_kind::cosine, lr_kind::linear, lr_kind::step}) {
        const lr_schedule s = make(kind, 4, 100);
        CHECK(strata::lr_at(s, 0) == doctest::Approx(0.25));
        CHECK(strata::lr_at(s, 1) == doctest::Approx(0.5));
        CHECK(strata::lr_at(s, 3) == doctest::Approx(1.0));
        CHECK(strata::lr_at(s, 4) == doctest::Approx(1.0));  // first step after warmup: peak
    }
}

TEST_CASE("no warmup starts at the peak") {
    CHECK(strata::lr_at(make(lr_kind::cosine, 0, 100), 0) == 1.0);
    CHECK(strata::lr_at(make(lr_kind::linear, 0, 100), 0) == 1.0);
}

TEST_CASE("constant holds lr after warmup, also past total_steps") {
    const lr_schedule s = make(lr_kind::constant, 2, 10);
    CHECK(strata::lr_at(s, 2) == 1.0);
    CHECK(strata::lr_at(s, 9) == 1.0);
    CHECK(strata::lr_at(s, 1000) == 1.0);
}

TEST_CASE("cosine decays from lr to min_lr between warmup and total_steps") {
    const lr_schedule s = make(lr_kind::cosine, 10, 110);
    CHECK(strata::lr_at(s, 10) == doctest::Approx(1.0));
    CHECK(strata::lr_at(s, 35) == doctest::Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi / 4))));
    CHECK(strata::lr_at(s, 60) == doctest::Approx(0.55));  // halfway: mean of lr and min_lr
    CHECK(strata::lr_at(s, 109) > 0.1);
    CHECK(strata::lr_at(s, 109) < 0.1 + 1e-3);
    CHECK(strata::lr_at(s, 110) == 0.1);
    CHECK(strata::lr_at(s, 5000) == 0.1);
}

TEST_CASE("cosine is monotone non-increasing after warmup") {
    const lr_schedule s = make(lr_kind::cosine, 7, 300);
    for (long step = 7; step < 320; ++step) CHECK(strata::lr_at(s, step + 1) <= strata::lr_at(s, step));
}

TEST_CASE("linear decays from lr to min_lr between warmup and total_steps") {
    const lr_schedule s = make(lr_kind::linear, 10, 110);
    CHECK(strata::lr_at(s, 10) == doctest::Approx(1.0));
    CHECK(strata::lr_at(s, 35) == doctest::Approx(0.775));
    CHECK(strata::lr_at(s, 60) == doctest::Approx(0.55));
    CHECK(strata::lr_at(s, 109) == doctest::Approx(0.109));
    CHECK(strata::lr_at(s, 110) == 0.1);
    CHECK(strata::lr_at(s, 111) == 0.1);
}

TEST_CASE("warmup filling the whole run goes to min_lr at total_steps without dividing by zero") {
    for (lr_kind kind : {lr_kind::cosine, lr_kind::linear}) {
        const lr_schedule s = make(kind, 10, 10);
        CHECK(strata::lr_at(s, 9) == doctest::Approx(1.0));
        CHECK(strata::lr_at(s, 10) == 0.1);
    }
}

TEST_CASE("step decay drops by gamma every step_size steps after warmup, floored at min_lr") {
    lr_schedule s = make(lr_kind::step, 5, 1000);
    s.step_size = 10;
    s.gamma = 0.5;
    CHECK(strata::lr_at(s, 5) == 1.0);
    CHECK(strata::lr_at(s, 14) == 1.0);
    CHECK(strata::lr_at(s, 15) == 0.5);
    CHECK(strata::lr_at(s, 24) == 0.5);
    CHECK(strata::lr_at(s, 25) == 0.25);
    CHECK(strata::lr_at(s, 35) == 0.125);
    CHECK(strata::lr_at(s, 45) == 0.1);  // 0.0625 would be below min_lr
    CHECK(strata::lr_at(s, 5000) == 0.1);
}

TEST_CASE("schedule names parse, and an unknown name lists the valid ones") {
    CHECK(strata::parse_lr_kind("constant") == lr_kind::constant);
    CHECK(strata::parse_lr_kind("cosine") == lr_kind::cosine);
    CHECK(strata::parse_lr_kind("linear") == lr_kind::linear);
    CHECK(strata::parse_lr_kind("step") == lr_kind::step);
    for (lr_kind kind : {lr_kind::constant, lr_kind::cosine, lr_kind::linear, lr_kind::step})
        CHECK(strata::parse_lr_kind(strata::to_string(kind)) == kind);
    try {
        strata::parse_lr_kind("cosin");
        FAIL("expected strata::error");
    } catch (const strata::error& e) {
        const std::string what = e.what();
        CHECK(what.find("'cosin'") != std::string::npos);
        CHECK(what.find("constant, cosine, linear, step") != std::string::npos);
    }
}

TEST_CASE("the constant schedule never uses min_lr, so a min_lr above lr is no error there") {
    // the programs' default --min-lr (1e-4) with --schedule constant --lr 3e-7 trained nothing before
    lr_schedule s = make(lr_kind::constant, 0, 10);
    s.lr = 3e-7;
    s.min_lr = 1e-4;
    for (long step : {0L, 5L, 9L, 10L}) CHECK(strata::lr_at(s, step) == 3e-7);
    s.kind = lr_kind::step;  // the step schedule floors at min_lr: there it is refused
    CHECK(message_of(s, 0).find("min_lr (0.0001) is larger than lr (3e-07)") != std::string::npos);
}

TEST_CASE("inconsistent schedules are refused with the offending field") {
    lr_schedule s = make(lr_kind::cosine, 0, 100);
    s.min_lr = 2.0;
    CHECK(message_of(s, 0).find("min_lr") != std::string::npos);

    s = make(lr_kind::linear, 0, 100);  // small rates are printed as they were given, not 0.000000
    s.lr = 3e-8;
    s.min_lr = 1e-4;
    CHECK(message_of(s, 0).find("min_lr (0.0001) is larger than lr (3e-08)") != std::string::npos);

    s = make(lr_kind::cosine, 101, 100);
    CHECK(message_of(s, 0).find("warmup_steps (101) exceeds total_steps (100)") != std::string::npos);

    s = make(lr_kind::linear, 0, 100);
    s.lr = 0;
    CHECK(message_of(s, 0).find("lr must be a positive") != std::string::npos);

    s = make(lr_kind::linear, 0, 0);
    CHECK(message_of(s, 0).find("total_steps") != std::string::npos);

    s = make(lr_kind::linear, -1, 10);
    CHECK(message_of(s, 0).find("warmup_steps must be >= 0") != std::string::npos);

    s = make(lr_kind::step, 0, 100);
    s.step_size = 0;
    CHECK(message_of(s, 0).find("step_size") != std::string::npos);

    s = make(lr_kind::step, 0, 100);
    s.gamma = 1.5;
    CHECK(message_of(s, 0).find("gamma") != std::string::npos);

    CHECK(message_of(make(lr_kind::cosine, 0, 100), -1).find("step must be >= 0") != std::string::npos);
    CHECK(message_of(make(lr_kind::cosine, 0, 100), 0).empty());
}

}  // namespace schedule_test
