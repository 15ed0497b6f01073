// The memory planner: its bytes are the model's and the trainer's real allocations, its choices
// follow the placement rules, and it refuses with the numbers when nothing fits.
#include <strata/nn/cpu_ops.hpp>       // ops<cpu_backend> (before the model is instantiated)
#include "support/random_batch.hpp"  // test::counting_batches
#include <strata/plan/planner.hpp>     // plan, memory_plan, plan_request, default_budgets
#include <strata/strata.hpp>           // cpu_backend, tier_options, tier_id
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model

#include <doctest/doctest.h>  // TEST_CASE, CHECK, REQUIRE

#include <algorithm>  // std::find
#include <array>    // std::array
#include <cmath>    // std::abs
#include <cstddef>  // std::size_t
#include <sstream>  // std::istringstream
#include <string>   // std::string, std::to_string
#include <vector>   // std::vector

namespace planner_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

gpt_config small() { return {.vocab_size = 64, .max_seq = 16, .n_layer = 8, .n_head = 4, .n_embd = 64}; }

// The GPT's footprint for B x T micro-batches: what the planner plans.
model_footprint footprint(const gpt_config& c, std::size_t B, std::size_t T) {
    return footprint_of<cpu_backend>(gpt_model<float, cpu_backend>(c), B, T);
}

plan_request request(const gpt_config& c, tier_bytes budgets) {
    return {.model = footprint(c, 2, 16), .accum = 1, .activations = activation_policy::recompute, .budgets = budgets};
}

constexpr std::size_t big = std::size_t(1) << 40;

std::string message_of(const plan_request& r) {
    try {
        (void)plan(r);
    } catch (const error& e) {
        return e.what();
    }
    return "";
}

// The settings a refused plan's hint names (strata::error::settings()).
std::vector<std::string> settings_of(const plan_request& r) {
    try {
        (void)plan(r);
    } catch (const error& e) {
        return e.settings();
    }
    return {};
}

bool names(const std::vector<std::string>& settings, const std::string& setting) {
    return std::find(settings.begin(), settings.end(), setting) != settings.end();
}

// Every line of the table, split into whitespace-separated cells.
std::vector<std::vector<std::string>> table_rows(const std::string& table) {
    std::vector<std::vector<std::string>> rows;
    std::istringstream lines(table);
    for (std::string line; std::getline(lines, line);) {
        std::istringstream cells(line);
        std::vector<std::string> row;
        for (std::string cell; cells >> cell;) row.push_back(cell);
        rows.push_back(row);
    }
    return rows;
}

// A table cell read back: "12.00 MiB" is 12 MiB, give or take the rounding to two decimals.
struct cell_value {
    double bytes = 0;
    double rounding = 0;
};

// The last three cells of a table row ("-" is 0). Right to left, since a label may hold spaces.
std::array<cell_value, 3> tier_cells(const std::vector<std::string>& row) {
    std::array<cell_value, 3> out{};
    std::size_t i = row.size();
    for (std::size_t cell = 3; cell-- > 0;) {
        REQUIRE(i > 0);
        const std::string last = row[--i];
        if (last == "-") continue;
        const std::vector<std::string> units{"B", "KiB", "MiB", "GiB", "TiB"};
        double scale = 1;
        bool found = false;
        for (const auto& u : units) {
            if (u == last) {
                found = true;
                break;
            }
            scale *= 1024;
        }
        REQUIRE(found);
        REQUIRE(i > 0);
        out[cell] = {std::stod(row[--i]) * scale, scale == 1 ? 0 : 0.005 * scale};
    }
    return out;
}

}  // namespace

TEST_CASE_TEMPLATE("a footprint's group bytes are the model's page-padded blocks", R, float, double) {
    for (const gpt_config& c : {small(), gpt_config{.vocab_size = 11, .max_seq = 6, .n_layer = 2, .n_head = 2, .n_embd = 6},
                                gpt_config{.vocab_size = 50257, .max_seq = 1024, .n_layer = 3, .n_head = 12, .n_embd = 768}}) {
        gpt_model<R, cpu_backend> model(c);
        const model_footprint f = footprint_of<cpu_backend>(model, 2, 4);
        CHECK(f.batch == 2);
        CHECK(f.seq == 4);
        CHECK(f.element_bytes == sizeof(R));
        CHECK(f.max_seq == c.max_seq);
        CHECK(f.blocks == c.n_layer);
        CHECK(f.parameters == c.parameter_count());
        REQUIRE(f.group_bytes.size() == model.group_count());
        REQUIRE(f.trainable_bytes.size() == model.group_count());
        for (std::size_t g = 0; g < f.group_bytes.size(); ++g) {
            CHECK(f.group_bytes[g] == model.groups()[g].bytes());
            CHECK(f.trainable_bytes[g] == model.groups()[g].bytes());  // nothing frozen
        }
    }
}

TEST_CASE_TEMPLATE("activation bytes equal what the model's activations allocate, for any number of kept blocks", R,
                   float, double) {
    const gpt_config c{.vocab_size = 50, .max_seq = 32, .n_layer = 3, .n_head = 4, .n_embd = 32};
    for (kept_activations kept : {kept_activations::none(), kept_activations{1}, kept_activations{2},
                                  kept_activations{3}, kept_activations::all(), kept_activations{0, true},
                                  kept_activations{1, true}, kept_activations{2, true}, kept_activations{3, true},
                                  kept_activations{0, false, true}, kept_activations{2, false, true},
                                  kept_activations{1, true, true}, kept_activations{3, true, true}})
        for (auto [B, T] : {std::pair<std::size_t, std::size_t>{1, 1}, {2, 16}, {3, 32}, {5, 7}}) {
            CAPTURE(kept.count);
            CAPTURE(kept.offload_inputs);
            CAPTURE(kept.keep_parts);
            CAPTURE(B);
            CAPTURE(T);
            cpu_backend backend({.device_bytes = 64 << 20, .host_bytes = 16 << 20});
            gpt_model<R, cpu_backend> model(c);
            typename gpt_model<R, cpu_backend>::activations act(backend, model, B, T, kept);
            const auto footprint = footprint_of<cpu_backend>(model, B, T);
            CHECK(footprint.activation_bytes(kept) == backend.budget(tier_id::device).used());
            CHECK(footprint.offloaded_input_bytes(kept) == backend.budget(tier_id::host).used());
        }
}

TEST_CASE("activations grow linearly with T on the CPU: attention saves one value per query row, not T x T") {
    // GPT-2 124M's block shape (C = 768, 12 heads). With (B, NH, T, T) probabilities saved, the
    // attention part alone would quadruple per doubling of T (a block's activations grew 2.9x from
    // T = 512 to 1024, the whole model's 3.5x at long T).
    const gpt_config c{.vocab_size = 64, .max_seq = 4096, .n_layer = 2, .n_head = 12, .n_embd = 768};
    const gpt_model<float, cpu_backend> model(c);
    for (std::size_t T = 64; T <= 2048; T *= 2) {
        CAPTURE(T);
        const auto at_t = footprint_of<cpu_backend>(model, 2, T), at_2t = footprint_of<cpu_backend>(model, 2, 2 * T);
        CHECK(at_2t.block_activation_bytes == 2 * at_t.block_activation_bytes);
        // Every allocation, each padded to whole pages: twice, give or take a page each.
        const std::size_t all_t = at_t.activation_bytes(kept_activations::all());
        const std::size_t all_2t = at_2t.activation_bytes(kept_activations::all());
        CHECK(all_2t <= 2 * all_t);
        CHECK(all_2t + 64 * page_size >= 2 * all_t);
    }
    CHECK(ops<cpu_backend>::attention_saved(2, 1024, 12) == 2 * 12 * 1024);
}

TEST_CASE("activation policies: recompute keeps none, keep keeps every block, auto keeps as many as the device holds") {
    const gpt_config c = small();  // 8 blocks
    plan_request r = request(c, {.device = big, .host = big, .storage = 0});
    const memory_plan none = plan(r);
    REQUIRE(none.where == placement::resident);
    CHECK(none.kept_blocks == 0);
    CHECK(none.block_count == 8);
    CHECK(none.kept() == kept_activations::none());
    r.activations = activation_policy::keep;
    const memory_plan all = plan(r);
    CHECK(all.kept_blocks == 8);
    // the kept blocks have their own buffers; the shared recompute buffer goes when none recomputes
    CHECK(all.activation_bytes - none.activation_bytes + page_size >= 7 * none.block_activation_bytes);
    CHECK(plan_table(all).find("activations device: 8 of 8 blocks keep theirs") != std::string::npos);
    CHECK(plan_table(none).find("0 of 8 blocks keep theirs") != std::string::npos);
    r.activations = activation_policy::automatic;
    CHECK(plan(r).kept_blocks == 8);  // room for all

    // Room for exactly k more blocks than none: auto keeps k (the shared buffer stays while any
    // block recomputes); a page less, k - 1.
    for (std::size_t k : {1, 3, 6}) {
        CAPTURE(k);
        auto total_with = [&](std::size_t kept) {
            return none.total(tier_id::device) - none.activation_bytes + r.model.activation_bytes({kept});
        };
        r.activations = activation_policy::automatic;
        r.budgets.device = total_with(k);
        const memory_plan p = plan(r);
        CHECK(p.where == placement::resident);
        CHECK(p.kept_blocks == k);
        CHECK(p.total(tier_id::device) == r.budgets.device);
        r.budgets.device -= 1;
        CHECK(plan(r).kept_blocks == k - 1);
    }
    // keep refuses what recompute would fit, and says what to do
    r.activations = activation_policy::keep;
    r.where = placement::resident;
    r.budgets.device = none.total(tier_id::device);
    const std::string message = message_of(r);
    CHECK(message.find("resident placement does not fit") != std::string::npos);
    CHECK(message.find("recompute the blocks' activations instead of keeping them") != std::string::npos);
}

TEST_CASE("offload: the recomputing blocks' inputs go to the host; auto offloads only when nothing else fits") {
    const gpt_config c = small();  // 8 blocks
    plan_request r = request(c, {.device = big, .host = big, .storage = 0});
    r.activations = activation_policy::recompute;
    const memory_plan none = plan(r);
    REQUIRE(none.offloaded_inputs == 0);
    CHECK(none.bytes_of(plan_category::activations, tier_id::host) == 0);
    const std::size_t input = none.block_input_bytes;
    CHECK(input == r.model.batch * r.model.seq * c.n_embd * sizeof(float));

    // offload with room for all: every block keeps its activations, nothing is offloaded
    r.activations = activation_policy::offload;
    const memory_plan roomy = plan(r);
    CHECK(roomy.kept_blocks == 8);
    CHECK(roomy.offloaded_inputs == 0);

    // offload with the device of `none`: no block fits more, so all 8 recompute, their inputs on the
    // host; the device holds the final norm's input and two staging slots instead of 9 inputs
    r.budgets.device = none.total(tier_id::device);
    const memory_plan offloaded = plan(r);
    REQUIRE(offloaded.fits());
    CHECK(offloaded.offloaded_inputs == 8 - offloaded.kept_blocks);
    CHECK(offloaded.kept() == kept_activations{offloaded.kept_blocks, true});
    CHECK(offloaded.bytes_of(plan_category::activations, tier_id::host) ==
          round_up(offloaded.offloaded_inputs * input, page_size));
    CHECK(plan_table(offloaded).find("recompute from their input (their inputs in pinned host memory: " +
                                    std::to_string(offloaded.offloaded_inputs) + " x ") != std::string::npos);
    // the 6 inputs it frees are less than one block's activations (GPT-2 keeps ~17 x B x T x C)
    REQUIRE(none.block_activation_bytes > 7 * input);
    CHECK(offloaded.kept_blocks == 0);
    CHECK(offloaded.total(tier_id::device) == none.total(tier_id::device) - 6 * input);

    // auto: the same budget fits without offloading, so nothing goes to the host
    r.activations = activation_policy::automatic;
    const memory_plan automatic = plan(r);
    CHECK(automatic.offloaded_inputs == 0);
    CHECK(automatic.kept_blocks == 0);
    // ... and a device that holds only the offloaded plan: auto offloads, recompute is refused
    r.budgets.device = none.total(tier_id::device) - 4 * input;
    r.where = placement::resident;
    const memory_plan forced = plan(r);
    CHECK(forced.where == placement::resident);
    CHECK(forced.offloaded_inputs == 8);
    CHECK(forced.kept_blocks == 0);
    r.activations = activation_policy::recompute;
    CHECK(message_of(r).find("offload the recomputing blocks' inputs to host memory") != std::string::npos);

    // the resident trainer allocates exactly the offloaded plan, on the device and the host
    r.activations = activation_policy::offload;
    r.budgets.device = none.total(tier_id::device);
    const memory_plan p = plan(r);
    gpt_model<float, cpu_backend> model(c);
    cpu_backend backend({.device_bytes = p.total(tier_id::device), .host_bytes = big});
    gpt_trainer<float, cpu_backend> t(backend, model,
                                  {.batch = r.model.batch, .seq = r.model.seq, .accum = r.accum, .activations = p.kept()});
    CHECK(backend.budget(tier_id::device).used() == p.total(tier_id::device));
    CHECK(backend.budget(tier_id::host).used() == p.total(tier_id::host));
}

TEST_CASE("auto keeps what fits, and the resident trainer allocates exactly that plan") {
    const gpt_config c = small();
    plan_request r = request(c, {.device = big, .host = big, .storage = 0});
    const memory_plan none = plan(r);
    r.activations = activation_policy::automatic;
    r.budgets.device = none.total(tier_id::device) + 3 * none.block_activation_bytes + 4096;
    const memory_plan p = plan(r);
    REQUIRE(p.kept_blocks == 3);
    gpt_model<float, cpu_backend> model(c);
    cpu_backend backend({.device_bytes = p.total(tier_id::device), .host_bytes = big});
    gpt_trainer<float, cpu_backend> t(backend, model,
                                  {.batch = r.model.batch, .seq = r.model.seq, .accum = r.accum, .activations = p.kept()});
    CHECK(backend.budget(tier_id::device).used() == p.total(tier_id::device));
}

TEST_CASE("a resident plan is what the resident trainer really allocates, on the device and the host") {
    const gpt_config c = small();
    plan_request r = request(c, {.device = 256 << 20, .host = 64 << 20, .storage = 0});
    r.accum = 3;
    const memory_plan p = plan(r);
    REQUIRE(p.where == placement::resident);
    CHECK(p.weights_home == tier_id::device);
    CHECK(p.grads_home == tier_id::device);
    CHECK(p.state_home == tier_id::device);
    CHECK(p.state_home == tier_id::device);
    CHECK(p.activations_home == tier_id::device);
    CHECK(p.slots == 0);
    CHECK(p.total(tier_id::storage) == 0);
    // 16 bytes per parameter, plus the page padding of each group
    CHECK(p.total(tier_id::device) - p.activation_bytes - p.device_staging_bytes == 4 * p.state_bytes);
    CHECK(4 * p.state_bytes >= 16 * c.parameter_count());

    cpu_backend backend({.device_bytes = r.budgets.device, .host_bytes = r.budgets.host});
    gpt_model<float, cpu_backend> model(c);
    gpt_trainer<float, cpu_backend> t(backend, model, {.batch = r.model.batch, .seq = r.model.seq, .accum = r.accum});
    CHECK(backend.budget(tier_id::device).used() == p.total(tier_id::device));
    t.initialize(1);
    backend.budget(tier_id::host).reset_peak();
    t.step(test::counting_batches({.vocab = c.vocab_size, .tokens = r.model.batch * r.model.seq, .count = r.accum}));
    CHECK(backend.budget(tier_id::host).peak() == p.total(tier_id::host));
    CHECK(backend.budget(tier_id::device).peak() == p.total(tier_id::device));
}

TEST_CASE("a device budget of a third of the resident footprint streams, within the budget") {
    const gpt_config c = small();
    const memory_plan resident = plan(request(c, {.device = big, .host = big, .storage = big}));
    REQUIRE(resident.where == placement::resident);
    const std::size_t third = resident.total(tier_id::device) / 3;

    plan_request forced = request(c, {.device = third, .host = big, .storage = 0});
    forced.where = placement::streamed;  // every group streams (auto would move some to the device)
    const memory_plan p = plan(forced);
    CHECK(p.where == placement::streamed);
    CHECK(p.total(tier_id::device) <= third);
    CHECK(p.weights_home == tier_id::host);
    CHECK(p.grads_home == tier_id::host);
    CHECK(p.state_home == tier_id::host);
    CHECK(p.state_home == tier_id::host);
    CHECK(p.activations_home == tier_id::device);
    CHECK(p.slots == 3);  // three slots fit in a third here
    CHECK(p.bytes_of(plan_category::slots, tier_id::device) == 2 * 3 * p.largest_block_bytes);
    // the embeddings and the final layernorm stay on the device, weights and grads
    const auto& groups = forced.model.group_bytes;
    CHECK(p.pinned_group_bytes == groups.front() + groups.back());
    CHECK(p.bytes_of(plan_category::pinned, tier_id::device) == 2 * (groups.front() + groups.back()));
    CHECK(p.bytes_of(plan_category::pinned, tier_id::host) == 0);
    CHECK(p.bytes_of(plan_category::weights, tier_id::device) == 0);
    CHECK(p.bytes_of(plan_category::grads, tier_id::device) == 0);
    // the grad norm's per-group partial sums and workspace are on the device as in resident
    CHECK(p.device_staging_bytes == resident.device_staging_bytes);
    CHECK(p.norm_partials_bytes == resident.norm_partials_bytes);
    CHECK(p.bytes_of(plan_category::staging, tier_id::device) == resident.device_staging_bytes);
    CHECK(p.bytes_of(plan_category::staging, tier_id::host) == resident.bytes_of(plan_category::staging, tier_id::host));
    CHECK(p.total(tier_id::device) ==
          6 * p.largest_block_bytes + 2 * p.pinned_group_bytes + p.activation_bytes + p.device_staging_bytes);
    CHECK(p.bytes_of(plan_category::weights, tier_id::host) == resident.state_bytes);
    CHECK(p.bytes_of(plan_category::grads, tier_id::host) == resident.state_bytes);
    CHECK(p.bytes_of(plan_category::moments, tier_id::host) == 2 * resident.state_bytes);
    CHECK(p.bytes_of(plan_category::activations, tier_id::device) == resident.activation_bytes);

    // the largest group: a transformer block here (12 C^2 + 13 C floats, page-padded)
    const std::size_t C = c.n_embd;
    CHECK(p.largest_group_bytes == round_up((12 * C * C + 13 * C) * 4, page_size));
    CHECK(p.largest_block_bytes == p.largest_group_bytes);
}

TEST_CASE("slots are sized to the largest transformer block, not to larger embeddings") {
    // V = 512, C = 16: the embeddings ((512 + 8) x 16 floats) outweigh a block (12 C^2 + 13 C)
    const gpt_config c{.vocab_size = 512, .max_seq = 8, .n_layer = 3, .n_head = 2, .n_embd = 16};
    plan_request r{.model = footprint(c, 2, 8), .activations = activation_policy::recompute,
                   .budgets = {.device = big, .host = big, .storage = big}};
    r.where = placement::streamed;
    r.slots = 2;
    r.state_on_storage = true;
    const memory_plan p = plan(r);
    const std::size_t C = c.n_embd;
    const std::size_t block = round_up((12 * C * C + 13 * C) * 4, page_size);
    const std::size_t embeddings = round_up((c.vocab_size + c.max_seq) * C * 4, page_size);
    REQUIRE(embeddings > block);
    CHECK(p.largest_block_bytes == block);
    CHECK(p.largest_group_bytes == embeddings);
    CHECK(p.bytes_of(plan_category::slots, tier_id::device) == 2 * 2 * block);
    CHECK(p.pinned_group_bytes == embeddings + round_up(2 * C * 4, page_size));
    CHECK(p.min_streamed_device_bytes ==
          4 * block + 2 * p.pinned_group_bytes + p.activation_bytes + p.device_staging_bytes);
    CHECK(p.total(tier_id::device) == p.min_streamed_device_bytes);
    // the optimizer's two pairs of m, v staging are a whole group each: the embeddings are the largest
    r.state_on_storage = false;
    CHECK(p.bytes_of(plan_category::staging, tier_id::host) ==
          plan(r).bytes_of(plan_category::staging, tier_id::host) + 4 * embeddings);
}

TEST_CASE("two slots when three do not fit; the least device budget is exactly the stated minimum") {
    const gpt_config c = small();
    const memory_plan any = plan(request(c, {.device = big, .host = big, .storage = big}));
    const std::size_t minimum = any.min_streamed_device_bytes;
    CHECK(minimum ==
          4 * any.largest_block_bytes + 2 * any.pinned_group_bytes + any.activation_bytes + any.device_staging_bytes);

    const memory_plan p = plan(request(c, {.device = minimum, .host = big, .storage = 0}));
    CHECK(p.where == placement::streamed);
    CHECK(p.slots == 2);
    CHECK(p.total(tier_id::device) == minimum);

    const plan_request too_small = request(c, {.device = minimum - 1, .host = big, .storage = 0});
    CHECK_THROWS_AS((void)plan(too_small), error);
    const std::string message = message_of(too_small);
    CAPTURE(message);
    CHECK(message.find(std::to_string(minimum) + " B") != std::string::npos);      // needed
    CHECK(message.find(std::to_string(minimum - 1) + " B") != std::string::npos);  // available
    CHECK(message.find("over by 1 B") != std::string::npos);
    CHECK(message.find("2 slots x (largest block's weights " + format_bytes(any.largest_block_bytes) + " + grads " +
                       format_bytes(any.largest_block_grad_bytes) + ")") != std::string::npos);
    CHECK(message.find("pinned groups " + format_bytes(2 * any.pinned_group_bytes)) != std::string::npos);
    CHECK(message.find(std::to_string(any.activation_bytes) + " B") != std::string::npos);
    CHECK(message.find("grad-norm staging " + format_bytes(any.device_staging_bytes)) != std::string::npos);
    CHECK(message.find("hint:") != std::string::npos);
    CHECK(message.find("lower the micro-batch") != std::string::npos);
    CHECK(message.find("--") == std::string::npos);  // the library names its settings, not a program's flags
    const auto settings = settings_of(too_small);
    CHECK(names(settings, "batch_size"));
    CHECK(names(settings, "seq_len"));
    CHECK(names(settings, "device_budget"));
}

TEST_CASE("the hint asks to recompute activations only when the plan keeps some") {
    plan_request r = request(small(), {.device = 4096, .host = big, .storage = 0});
    CHECK(message_of(r).find("recompute") == std::string::npos);
    r.activations = activation_policy::keep;
    CHECK(message_of(r).find("recompute the blocks' activations instead of keeping them") != std::string::npos);
}

TEST_CASE("state_on_storage moves m and v to storage, and storage must hold them") {
    const gpt_config c = small();
    const memory_plan any = plan(request(c, {.device = big, .host = big, .storage = big}));
    plan_request r = request(c, {.device = any.total(tier_id::device) / 3, .host = big, .storage = big});
    r.state_on_storage = true;
    r.where = placement::streamed;
    const memory_plan p = plan(r);
    CHECK(p.where == placement::streamed);
    CHECK(p.state_home == tier_id::storage);
    CHECK(p.state_home == tier_id::storage);
    CHECK(p.weights_home == tier_id::host);
    CHECK(p.bytes_of(plan_category::moments, tier_id::storage) == 2 * any.state_bytes);
    CHECK(p.bytes_of(plan_category::moments, tier_id::host) == 0);
    CHECK(p.total(tier_id::storage) == 2 * any.state_bytes);
    // tokens, targets and losses of the step, the grad norm's partials, and the m and v of two
    // groups read back from storage (one updated while the next is read)
    const std::size_t BT = r.model.batch * r.model.seq;
    CHECK(p.bytes_of(plan_category::staging, tier_id::host) ==
          r.accum * 3 * round_up(BT * 4, page_size) + p.norm_partials_bytes + 4 * any.largest_group_bytes);

    r.budgets.storage = 2 * any.state_bytes - 1;
    const std::string message = message_of(r);
    CAPTURE(message);
    CHECK(message.find("storage needs " + format_bytes(2 * any.state_bytes)) != std::string::npos);
    CHECK(message.find(std::to_string(2 * any.state_bytes - 1) + " B") != std::string::npos);
    CHECK(message.find("choose a storage directory on a disk with more free space") != std::string::npos);
    CHECK(names(settings_of(r), "storage_dir"));
}

TEST_CASE("moments go to storage when the host cannot hold them, and the error names both tiers otherwise") {
    const gpt_config c = small();
    const memory_plan any = plan(request(c, {.device = big, .host = big, .storage = big}));
    const std::size_t staging = any.bytes_of(plan_category::staging, tier_id::host);  // the norm's partials too
    // room for weights + grads + the step's staging + two groups' m and v, not for all of m and v
    const std::size_t host = 2 * any.state_bytes + staging + 4 * any.largest_group_bytes;
    plan_request r = request(c, {.device = any.min_streamed_device_bytes, .host = host, .storage = big});
    r.where = placement::streamed;
    const memory_plan p = plan(r);
    CHECK(p.state_home == tier_id::storage);
    CHECK(p.total(tier_id::host) <= host);
    // the last groups' moments went to storage, as few as the host needed
    CHECK(p.homes.back().moments == tier_id::storage);
    CHECK(p.bytes_of(plan_category::moments, tier_id::storage) + p.bytes_of(plan_category::moments, tier_id::host) ==
          2 * any.state_bytes);

    r.budgets.storage = 0;
    const std::string message = message_of(r);
    CAPTURE(message);
    CHECK(message.find("host needs") != std::string::npos);
    CHECK(message.find("storage needs " + format_bytes(2 * any.state_bytes) + " of a 0 B budget") != std::string::npos);

    r.budgets.host = 2 * any.state_bytes - 1;  // not even the weights and grads
    r.budgets.storage = big;
    CHECK(message_of(r).find("raise the host budget") != std::string::npos);
}

TEST_CASE("the table lists every tier and category, and its totals are the sums") {
    const gpt_config c = small();
    const memory_plan any = plan(request(c, {.device = big, .host = big, .storage = big}));
    plan_request r = request(c, {.device = any.total(tier_id::device) / 3, .host = 16 << 20, .storage = 64 << 20});
    r.state_on_storage = true;
    r.where = placement::streamed;
    const memory_plan p = plan(r);
    const std::string table = plan_table(p);
    CAPTURE(table);
    CHECK(table.find("streamed placement, 3 device slots") != std::string::npos);
    CHECK(table.find("homes: embeddings: host, AdamW m, v on storage; blocks 0-" + std::to_string(c.n_layer - 1) +
                     ": host, AdamW m, v on storage; final norm: host, AdamW m, v on storage") != std::string::npos);

    const auto rows = table_rows(table);
    // the header lines (placement, homes, activations, traffic per step), then the grid
    const std::size_t head = 4;
    REQUIRE(rows.size() == head + 1 + all_plan_categories.size() + 3);
    CHECK(rows[head] == std::vector<std::string>{"device", "host", "storage"});
    for (tier_id t : all_tiers) {
        std::size_t sum = 0;
        for (plan_category c2 : all_plan_categories) sum += p.bytes_of(c2, t);
        CHECK(sum == p.total(t));
        CHECK(sum > 0);  // every tier is used by this plan
    }
    for (const char* label : {"weights", "grads", "AdamW m, v", "activations", "device slots", "pinned groups",
                              "staging", "total", "budget", "used"})
        CHECK(table.find(std::string("\n") + label) != std::string::npos);
    // read the numbers back: per column, the category cells add up to the total cell
    const std::size_t total_row = head + 1 + all_plan_categories.size();
    std::array<cell_value, 3> sums{};
    for (std::size_t row = head + 1; row < total_row; ++row) {
        const auto cells = tier_cells(rows[row]);
        for (std::size_t t = 0; t < 3; ++t) {
            sums[t].bytes += cells[t].bytes;
            sums[t].rounding += cells[t].rounding;
        }
    }
    const auto totals = tier_cells(rows[total_row]);
    for (tier_id t : all_tiers) {
        const auto i = static_cast<std::size_t>(t);
        const double exact = static_cast<double>(p.total(t));
        CAPTURE(name_of(t));
        CHECK(std::abs(totals[i].bytes - exact) <= totals[i].rounding);
        CHECK(std::abs(sums[i].bytes - exact) <= sums[i].rounding);
    }
    CHECK(table.find("16.00 MiB") != std::string::npos);  // the host budget
    CHECK(table.find(detail::percent_of(p.total(tier_id::storage), 64 << 20)) != std::string::npos);
    // columns line up: every line of the grid has the same width
    std::istringstream lines(table);
    std::string line;
    for (std::size_t header = 0; header < head; ++header) std::getline(lines, line);
    std::size_t width = 0;
    while (std::getline(lines, line)) {
        if (width == 0) width = line.size();
        CHECK(line.size() == width);
    }
}

TEST_CASE("resident requested but not fitting is refused with the numbers; streamed requested streams") {
    const gpt_config c = small();
    const memory_plan any = plan(request(c, {.device = big, .host = big, .storage = big}));
    const std::size_t resident_bytes = any.total(tier_id::device);

    plan_request r = request(c, {.device = resident_bytes - 4096, .host = big, .storage = big});
    r.where = placement::resident;
    const std::string message = message_of(r);
    CAPTURE(message);
    CHECK(message.find("resident placement does not fit") != std::string::npos);
    CHECK(message.find(format_bytes(resident_bytes)) != std::string::npos);
    CHECK(message.find(format_bytes(resident_bytes - 4096)) != std::string::npos);
    CHECK(message.find("over by 4.00 KiB (4096 B)") != std::string::npos);

    r.budgets.device = resident_bytes;
    CHECK(plan(r).where == placement::resident);

    r.where = placement::streamed;
    const memory_plan s = plan(r);
    CHECK(s.where == placement::streamed);
    CHECK(s.weights_home == tier_id::host);
    CHECK(s.slots == 3);
}

TEST_CASE("requested slots are kept, checked, and refused below two") {
    const gpt_config c = small();
    plan_request r = request(c, {.device = big, .host = big, .storage = 0});
    r.where = placement::streamed;
    r.slots = 5;
    const memory_plan p = plan(r);
    CHECK(p.slots == 5);
    CHECK(p.bytes_of(plan_category::slots, tier_id::device) == 10 * p.largest_block_bytes);

    r.budgets.device = p.total(tier_id::device) - 1;
    CHECK(message_of(r).find("with 5 slots does not fit") != std::string::npos);

    r.slots = 1;
    CHECK(message_of(r).find("needs at least 2") != std::string::npos);
}

TEST_CASE("bad requests are refused before planning") {
    plan_request r = request(small(), {.device = big, .host = big, .storage = big});
    r.model = footprint(small(), 2, 17);
    CHECK(message_of(r).find("exceeds the model's context 16") != std::string::npos);
    CHECK(names(settings_of(r), "seq_len"));
    r.model = footprint(small(), 0, 16);
    CHECK(message_of(r).find("micro-batch must be positive") != std::string::npos);
    r.model = {};
    CHECK(message_of(r).find("must be positive") != std::string::npos);  // no footprint: nothing to plan
}

TEST_CASE("GPT-2 124M: 16 bytes per parameter, and a 1.5B model on an H200-sized budget streams") {
    const gpt_config gpt2{.vocab_size = 50257, .max_seq = 1024, .n_layer = 12, .n_head = 12, .n_embd = 768};
    plan_request r{.model = footprint(gpt2, 8, 1024), .budgets = {.device = 140'000'000'000, .host = big, .storage = 0}};
    const memory_plan p = plan(r);
    CHECK(p.where == placement::resident);
    CHECK(p.parameters == 124'439'808);
    const double per_param = 4.0 * static_cast<double>(p.state_bytes) / static_cast<double>(p.parameters);
    CHECK(per_param >= 16.0);
    CHECK(per_param < 16.01);  // page and 64-byte padding cost little

    const gpt_config xl{.vocab_size = 50257, .max_seq = 1024, .n_layer = 48, .n_head = 25, .n_embd = 1600};
    r = {.model = footprint(xl, 4, 1024), .budgets = {.device = 16'000'000'000, .host = 120'000'000'000, .storage = 0}};
    const memory_plan s = plan(r);
    CHECK(s.where == placement::streamed);
    CHECK(s.total(tier_id::device) <= r.budgets.device);
    CHECK(s.state_home == tier_id::host);
}

TEST_CASE("long context: the planned activations hold two chunks of logits, not 2 x T x V") {
    // GPT-2's vocabulary at T = 262144: unchunked, the logits and their gradient were
    // 2 x T x V x 4 B = 105 GB of the activations. The LM head now runs in chunks of
    // lm_head_chunk_rows positions (model/lm_head.hpp), and the vocabulary enters the activations
    // only through those two chunk buffers: compare with the same model over a vocabulary of one.
    const std::size_t T = 262144, V = 50257, chunk = lm_head_chunk_rows;
    const gpt_config gpt2{.vocab_size = V, .max_seq = T, .n_layer = 1, .n_head = 12, .n_embd = 768};
    gpt_config one_token = gpt2;
    one_token.vocab_size = 1;
    const tier_bytes budgets{.device = std::size_t(1) << 52, .host = big, .storage = 0};
    const memory_plan p =
        plan({.model = footprint(gpt2, 1, T), .activations = activation_policy::recompute, .budgets = budgets});
    const memory_plan q =
        plan({.model = footprint(one_token, 1, T), .activations = activation_policy::recompute, .budgets = budgets});
    REQUIRE(p.where == placement::resident);
    const std::size_t by_vocabulary = p.activation_bytes - q.activation_bytes;
    CHECK(by_vocabulary == 2 * (detail::charged(chunk * V * 4) - detail::charged(chunk * 1 * 4)));
    CHECK(by_vocabulary < 3'300'000'000);  // 2 x 8192 x 50257 x 4 B = 3.29 GB
    // (The total is not compared with 2 x T x V x 4 B: the CPU backend's attention keeps its
    // T x T probabilities per head, which dominate at this T.)
    MESSAGE("activations at T = 262144: " << p.activation_bytes / 1e9 << " GB, of which the logits chunks "
                                          << by_vocabulary / 1e9 << " GB (unchunked: " << 2.0 * T * V * 4 / 1e9 << " GB)");
    // B x T within one chunk: buffers of B x T rows, as before chunking.
    const auto f = gpt_model<float, cpu_backend>(gpt_config{.vocab_size = V, .max_seq = 1024, .n_layer = 1, .n_head = 12,
                                                            .n_embd = 768})
                       .activation_buffers(8, 1024, kept_activations::none());
    CHECK(f[5] == 8 * 1024 * V);  // logits
    CHECK(f[8] == 8 * 1024 * V);  // dlogits
}

TEST_CASE("placement names round-trip and default budgets read the machine") {
    for (placement p : {placement::automatic, placement::resident, placement::streamed})
        CHECK(placement_from_string(name_of(p)) == p);
    CHECK_THROWS_WITH_AS(placement_from_string("device"), doctest::Contains("unknown placement 'device'"), error);

    const tier_bytes b = default_budgets(123);
    CHECK(b.device == 123);
    CHECK(b.host == physical_memory_bytes() / 10 * 9);
    CHECK(b.host > 0);
    const std::size_t free_now = free_disk_bytes(std::filesystem::temp_directory_path());
    CHECK(b.storage > 0);
    // other processes write meanwhile: the two readings agree to within 1 %
    CHECK(static_cast<double>(b.storage) == doctest::Approx(static_cast<double>(free_now)).epsilon(0.01));
    CHECK(default_budgets(1, "/nonexistent-strata-dir/below").storage == free_disk_bytes("/"));
}

TEST_CASE("measure_links gives each host <-> device link a positive bandwidth, storage none") {
    cpu_backend backend({.device_bytes = 64 << 20, .host_bytes = 64 << 20, .storage_bytes = 0});
    const link_bandwidths l = measure_links(backend, 8 << 20);
    CHECK(l.h2d > 0);
    CHECK(l.d2h > 0);
    CHECK(l.storage_read == 0);
    CHECK(l.storage_write == 0);
    CHECK(backend.budget(tier_id::device).used() == 0);  // given back
    CHECK(backend.budget(tier_id::host).used() == 0);
}

}  // namespace planner_test
