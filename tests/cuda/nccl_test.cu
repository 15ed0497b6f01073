// comm/nccl_communicator.hpp on the GPUs this machine has (one is enough to run every collective;
// several GPUs are needed to see a reduction across ranks). Built where NCCL is found
// (STRATA_HAVE_NCCL); skipped without a GPU.
#include "cuda/cuda_test_util.cuh"  // skip_without_gpu, device_buffer, random_floats

#if defined(STRATA_HAVE_NCCL)

#include <strata/comm/communicator.hpp>       // Communicator
#include <strata/comm/nccl_communicator.hpp>  // nccl_group, nccl_communicator

#include <doctest/doctest.h>  // TEST_CASE, CHECK

#include <cstddef>  // std::size_t
#include <thread>   // std::thread
#include <vector>   // std::vector

namespace {

using namespace strata::test;

static_assert(strata::Communicator<strata::nccl_communicator>);

TEST_CASE("nccl_communicator: every collective on each GPU of a group, one thread per GPU") {
    if (skip_without_gpu()) return;
    int count = 0;
    REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
    std::vector<int> devices;
    for (int d = 0; d < count && d < 2; ++d) devices.push_back(d);
    strata::nccl_group group(devices);
    const std::size_t ranks = devices.size(), n = 1001;
    std::vector<std::vector<float>> reduced(ranks), gathered(ranks), scattered(ranks), broadcast(ranks);
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < ranks; ++r)
        threads.emplace_back([&, r] {
            strata::cuda_backend backend({}, group.device(r));
            auto s = backend.make_stream("nccl");
            strata::nccl_communicator comm(group, r);
            // integers: sums are exact in any order, so NCCL's order cannot change them
            std::vector<float> x(ranks * n);
            for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i % 97) + r);
            device_buffer<float> a(x), b(ranks * n), c(n), d(x);
            comm.all_reduce(s, a.get(), ranks * n);
            comm.all_gather(s, d.get(), b.get(), n);  // rank k's first n values, for each k
            comm.reduce_scatter(s, d.get(), c.get(), n);
            comm.broadcast(s, d.get(), ranks * n, 0).wait();
            reduced[r] = a.download();
            gathered[r] = b.download();
            scattered[r] = c.download();
            broadcast[r] = d.download();
        });
    for (auto& t : threads) t.join();
    const auto value = [](std::size_t i, std::size_t r) { return static_cast<float>((i % 97) + r); };
    for (std::size_t r = 0; r < ranks; ++r) {
        for (std::size_t i = 0; i < ranks * n; ++i) {
            float sum = 0;
            for (std::size_t k = 0; k < ranks; ++k) sum += value(i, k);
            REQUIRE(reduced[r][i] == sum);
            REQUIRE(gathered[r][i] == value(i % n, i / n));
            REQUIRE(broadcast[r][i] == value(i, 0));
        }
        for (std::size_t i = 0; i < n; ++i) {
            float sum = 0;
            for (std::size_t k = 0; k < ranks; ++k) sum += value(r * n + i, k);
            REQUIRE(scattered[r][i] == sum);
        }
    }
}

}  // namespace

#endif  // STRATA_HAVE_NCCL
