// pipeline_engine's protocol, driven directly on cpu_backend with a hand-made pass of two
// streamed groups (1 and 2): a correct pass moves weights and gradients as planned, and every
// way a model binder can break the protocol is a strata::error that names the problem, never an
// out-of-range read or a gradient copied into the wrong group's home.
#include <strata/nn/cpu_ops.hpp>                // ops<cpu_backend>
#include <strata/stream/prefetch_pipeline.hpp>  // pipeline_engine
#include <strata/strata.hpp>                    // cpu_backend

#include <doctest/doctest.h>

#include <functional>  // std::function
#include <string>      // std::string
#include <vector>      // std::vector

namespace pipeline_protocol_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

constexpr std::size_t n = 8;  // elements of each streamed block (weights and gradients)

// Host homes of groups 0..2 (0 does not stream: the pass gives it no home) and the pass that
// uses 1 and 2 forward, then backward: the order a two-block model's forward_backward follows.
struct fixture {
    cpu_backend backend;
    pipeline_engine<float, cpu_backend> engine{backend, 3, n, n};
    cpu_backend::stream compute = backend.make_stream("compute");
    std::vector<float> params1 = std::vector<float>(n, 1.0f), params2 = std::vector<float>(n, 2.0f);
    std::vector<float> grads1 = std::vector<float>(n, -1.0f), grads2 = std::vector<float>(n, -1.0f);
    std::vector<cpu_backend::event> last_d2h = std::vector<cpu_backend::event>(3);

    using pass = pipeline_engine<float, cpu_backend>::pass;

    // `adjust` may add to the pass before it begins (e.g. before_h2d, h2d_ready).
    explicit fixture(const std::function<void(pass&)>& adjust = {}) {
        pass p;
        p.order = {{1, group_use::forward}, {2, group_use::forward}, {2, group_use::backward}, {1, group_use::backward}};
        p.host_params = {nullptr, params1.data(), params2.data()};
        p.host_grads = {nullptr, grads1.data(), grads2.data()};
        p.bytes = {0, n * sizeof(float), n * sizeof(float)};
        p.grad_bytes = {0, n * sizeof(float), n * sizeof(float)};
        p.last_d2h = &last_d2h;
        p.first_micro = true;
        if (adjust) adjust(p);
        engine.begin(std::move(p));
    }
    ~fixture() {
        compute.synchronize();
        engine.h2d().synchronize();
        engine.d2h().synchronize();
    }

    void use(std::size_t g, group_use u) {
        (void)engine.params(g, compute, u);
        engine.done(g, compute, u);
    }
};

// The message of the strata::error that `f` throws ("" if it throws none or another type).
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("pipeline_engine: a pass in the planned order moves weights in and gradients out") {
    fixture f;
    CHECK_FALSE(f.engine.streams(0));
    CHECK(f.engine.streams(2));
    const float* w1 = f.engine.params(1, f.compute, group_use::forward);
    f.compute.synchronize();
    CHECK(w1[0] == 1.0f);  // group 1's weights are in the slot once compute has waited for them
    f.engine.done(1, f.compute, group_use::forward);
    f.use(2, group_use::forward);
    for (std::size_t g : {2u, 1u}) {
        (void)f.engine.params(g, f.compute, group_use::backward);
        float* grads = f.engine.grads(g, f.compute);
        CHECK(grads == f.engine.grads_in_use());
        f.compute.enqueue([grads, g] {
            for (std::size_t i = 0; i < n; ++i) grads[i] += static_cast<float>(10 * g);  // a "backward" adds
        });
        f.engine.done(g, f.compute, group_use::backward);
    }
    f.engine.end();
    f.last_d2h[1].wait();
    f.last_d2h[2].wait();
    CHECK(f.grads1 == std::vector<float>(n, 10.0f));  // the first micro-batch starts from zero
    CHECK(f.grads2 == std::vector<float>(n, 20.0f));
}

TEST_CASE("pipeline_engine: a use ahead is issued only once its weights are ready; the use in progress always is") {
    // The trainer's optimizer is still updating group 2 (h2d_ready false throughout): the host
    // must not wait for it (before_h2d) before group 2 itself is in use, so that group 1's kernels
    // are enqueued without waiting for group 2's update.
    std::vector<std::size_t> waited;  // the groups before_h2d was called for, in order
    fixture f([&](fixture::pass& p) {
        p.before_h2d = [&](std::size_t g) { waited.push_back(g); };
        p.h2d_ready = [](std::size_t g) { return g != 2; };
    });
    (void)f.engine.params(1, f.compute, group_use::forward);
    CHECK(waited == std::vector<std::size_t>{1});  // (2, forward) next, not ready: not issued yet
    f.engine.done(1, f.compute, group_use::forward);
    const float* w2 = f.engine.params(2, f.compute, group_use::forward);
    CHECK(waited == std::vector<std::size_t>{1, 2});  // in progress: issued (the host waits here)
    f.compute.synchronize();
    CHECK(w2[0] == 2.0f);
    f.engine.done(2, f.compute, group_use::forward);
    (void)f.engine.params(2, f.compute, group_use::backward);
    CHECK(waited == std::vector<std::size_t>{1, 2, 2, 1});  // then (1, backward), ready, ahead
    f.engine.done(2, f.compute, group_use::backward);
    f.use(1, group_use::backward);
    f.engine.end();
    f.last_d2h[1].wait();
    f.last_d2h[2].wait();
}

TEST_CASE("pipeline_engine: a group used out of the planned order is an error naming the group and the use") {
    fixture f;
    SUBCASE("skipping ahead") {
        const std::string what = error_of([&] { (void)f.engine.params(2, f.compute, group_use::forward); });
        CHECK(what.find("used group 2 out of the planned order (use 0)") != std::string::npos);
        CHECK(what.find("hint:") != std::string::npos);
    }
    SUBCASE("the right group with the wrong use") {
        const std::string what = error_of([&] { (void)f.engine.params(1, f.compute, group_use::backward); });
        CHECK(what.find("used group 1 out of the planned order (use 0)") != std::string::npos);
    }
    SUBCASE("one use more than planned") {
        f.use(1, group_use::forward);
        f.use(2, group_use::forward);
        f.use(2, group_use::backward);
        f.use(1, group_use::backward);
        const std::string what = error_of([&] { (void)f.engine.params(1, f.compute, group_use::backward); });
        CHECK(what.find("used group 1 out of the planned order (use 4)") != std::string::npos);
    }
    SUBCASE("done() for a group that is not the use in progress") {
        (void)f.engine.params(1, f.compute, group_use::forward);
        const std::string what = error_of([&] { f.engine.done(2, f.compute, group_use::forward); });
        CHECK(what.find("group 2") != std::string::npos);
        CHECK(what.find("use in progress") != std::string::npos);
    }
    SUBCASE("done() with the wrong use: a forward ended as a backward would copy gradients home") {
        (void)f.engine.params(1, f.compute, group_use::forward);
        const std::string what = error_of([&] { f.engine.done(1, f.compute, group_use::backward); });
        CHECK(what.find("group 1") != std::string::npos);
        f.engine.d2h().synchronize();
        CHECK(f.grads1 == std::vector<float>(n, -1.0f));  // nothing was copied into its home
    }
    SUBCASE("done() after the pass is over") {
        f.use(1, group_use::forward);
        f.use(2, group_use::forward);
        f.use(2, group_use::backward);
        f.use(1, group_use::backward);
        const std::string what = error_of([&] { f.engine.done(1, f.compute, group_use::backward); });
        CHECK(what.find("group 1") != std::string::npos);
    }
}

TEST_CASE("pipeline_engine: gradients asked for outside a backward use are an error") {
    fixture f;
    SUBCASE("during a forward use") {
        (void)f.engine.params(1, f.compute, group_use::forward);
        const std::string what = error_of([&] { (void)f.engine.grads(1, f.compute); });
        CHECK(what.find("gradients of group 1 asked for outside its backward") != std::string::npos);
    }
    SUBCASE("of another group than the backward in progress") {
        f.use(1, group_use::forward);
        f.use(2, group_use::forward);
        (void)f.engine.params(2, f.compute, group_use::backward);
        const std::string what = error_of([&] { (void)f.engine.grads(1, f.compute); });
        CHECK(what.find("gradients of group 1 asked for outside its backward") != std::string::npos);
    }
    SUBCASE("after the pass is over (no use left to index)") {
        f.use(1, group_use::forward);
        f.use(2, group_use::forward);
        f.use(2, group_use::backward);
        f.use(1, group_use::backward);
        const std::string what = error_of([&] { (void)f.engine.grads(1, f.compute); });
        CHECK(what.find("gradients of group 1 asked for outside its backward") != std::string::npos);
    }
}

TEST_CASE("pipeline_engine: grads_in_use with no backward in progress is an error") {
    fixture f;
    SUBCASE("before the first use") {
        CHECK(error_of([&] { (void)f.engine.grads_in_use(); }).find("no backward use in progress (use 0)") !=
              std::string::npos);
    }
    SUBCASE("during a forward use") {
        (void)f.engine.params(1, f.compute, group_use::forward);
        CHECK(error_of([&] { (void)f.engine.grads_in_use(); }).find("no backward use in progress (use 0)") !=
              std::string::npos);
    }
    SUBCASE("after the pass is over") {
        f.use(1, group_use::forward);
        f.use(2, group_use::forward);
        f.use(2, group_use::backward);
        f.use(1, group_use::backward);
        CHECK(error_of([&] { (void)f.engine.grads_in_use(); }).find("no backward use in progress (use 4)") !=
              std::string::npos);
    }
}

}  // namespace pipeline_protocol_test
