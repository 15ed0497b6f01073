// The tied LM head and softmax cross-entropy, a chunk of positions at a time: the end of both
// decoder_model's forward (gpt_model's too: it is one) and the start of its backward.
//
// Glossary: B batch, T time, C channels, V vocab; a row is one position of the B x T micro-batch.
//
// The logits of a micro-batch are (B x T, V): 53 GB at T = 262144 for GPT-2's V = 50257, and
// training used to keep them twice (logits and dlogits). From the final norm's output on, rows are
// independent, so the head runs over chunks of at most `chunk_rows` rows through two buffers of
// (chunk, V). Training runs, for each chunk in turn,
//   logits = inp @ wte^T  ->  losses, lse and dlogits = scale (softmax - onehot), one op
//   ->  dinp += dlogits @ wte, dwte += dlogits^T @ inp,
// so each chunk's logits are computed once and are dead when the next chunk starts. dlogits has a
// buffer of its own (ops' cross_entropy_forward_backward writes it beside the logits it reads). Evaluation runs the first two steps only.
//
// Bits: a micro-batch of at most chunk_rows rows is one chunk, which makes the same calls on the
// same (batch, seq) as the head did before chunking: today's benchmark shapes (B x T = 8192 and
// 4096) compute the same bits. With more rows, dwte adds the chunks' products one after the other
// and each GEMM sees fewer rows, so the results agree with one chunk up to FP32 summation order
// (tests/model/lm_head_chunk_test.cpp). The chunks depend only on B x T and chunk_rows, never on
// the activation policy or where the weights live, so every policy and placement still computes
// the same bits as every other.
//
// A chunk other than the whole micro-batch goes to the kernels as batch 1 x `rows` positions:
// positions in cross_entropy's error messages then count from the chunk's first row (the trainers
// check targets on the host before any kernel sees them).
#pragma once

#include <strata/core/error.hpp>  // strata::error
#include <strata/nn/ops.hpp>      // ops

#include <algorithm>  // std::min, std::max
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int32_t
#include <string>     // std::to_string

namespace strata {

// lm_head_chunk_rows, the rows per chunk unless a model's config says otherwise, is in nn/ops.hpp
// (the configs of the layers below include it).

// Rows of each chunk buffer for micro-batches of up to `rows` rows.
constexpr std::size_t lm_head_buffer_rows(std::size_t rows, std::size_t chunk_rows) {
    return std::max<std::size_t>(std::min(rows, chunk_rows), 1);
}

// Rows [first, first + batch x seq) of a micro-batch, as the kernels take them.
struct row_chunk {
    std::size_t first = 0, batch = 0, seq = 0;
    constexpr std::size_t rows() const { return batch * seq; }
};

// Calls f(row_chunk) for the chunks of a batch x seq micro-batch, in row order: the whole
// micro-batch when it has at most chunk_rows rows, else chunk_rows rows at a time (the last one
// shorter).
template <class F>
void for_each_row_chunk(std::size_t batch, std::size_t seq, std::size_t chunk_rows, F&& f) {
    if (chunk_rows == 0) throw error("lm head: chunks of 0 rows", "set head_chunk_rows to at least 1");
    const std::size_t rows = batch * seq;
    if (rows <= chunk_rows) {
        f(row_chunk{0, batch, seq});
        return;
    }
    for (std::size_t first = 0; first < rows; first += chunk_rows)
        f(row_chunk{first, 1, std::min(chunk_rows, rows - first)});
}

// The chunk the logits buffer holds after a forward over batch x seq: the last one.
inline row_chunk last_row_chunk(std::size_t batch, std::size_t seq, std::size_t chunk_rows) {
    row_chunk last;
    for_each_row_chunk(batch, seq, chunk_rows, [&](row_chunk c) { last = c; });
    return last;
}

// Where rows [first_row, first_row + rows) of a forward over batch x seq sit in the logits buffer,
// in rows from its start. Only the last chunk's logits are held: other rows are a strata::error.
inline std::size_t held_logits_row(std::size_t batch, std::size_t seq, std::size_t chunk_rows, std::size_t first_row,
                                   std::size_t rows) {
    const row_chunk held = last_row_chunk(batch, seq, chunk_rows);
    if (first_row < held.first || first_row + rows > held.first + held.rows())
        throw error("logits of rows [" + std::to_string(first_row) + ", " + std::to_string(first_row + rows) +
                        ") asked for: after a forward over " + std::to_string(batch) + " x " + std::to_string(seq) +
                        " positions in chunks of " + std::to_string(chunk_rows) + " rows, only rows [" +
                        std::to_string(held.first) + ", " + std::to_string(held.first + held.rows()) + ") are held",
                    "read the last positions, or build the model with head_chunk_rows >= batch x seq");
    return first_row - held.first;
}

// A model refuses activations whose logits buffers were sized for another chunk.
inline void check_head_chunk_rows(std::size_t activations_rows, std::size_t model_rows) {
    if (activations_rows != model_rows)
        throw error("activations made for LM head chunks of " + std::to_string(activations_rows) +
                        " rows, the model runs chunks of " + std::to_string(model_rows),
                    "make the activations from this model");
}

namespace detail {
// One chunk's logits, then its losses and lse.
template <class B, class R>
void lm_head_chunk_loss(typename B::stream& s, row_chunk c, R* losses, R* lse, R* logits, const R* inp, const R* wte,
                        const std::int32_t* targets, std::size_t C, std::size_t V) {
    ops<B>::lm_head_forward(s, logits, inp + c.first * C, wte, c.batch, c.seq, C, V);
    ops<B>::cross_entropy_forward(s, losses + c.first, lse + c.first, logits, targets + c.first, c.batch, c.seq, V);
}
}  // namespace detail

// Evaluation: losses and lse of every row. `logits` is the chunk buffer; it ends holding the
// last chunk's logits.
template <class B, class R>
void lm_head_loss_forward(typename B::stream& s,
                          R* losses,                    // (B, T)
                          R* lse,                       // (B, T)
                          R* logits,                    // (chunk, V)
                          const R* inp,                 // (B, T, C)
                          const R* wte,                 // (V, C)
                          const std::int32_t* targets,  // (B, T)
                          std::size_t batch, std::size_t seq, std::size_t C, std::size_t V, std::size_t chunk_rows) {
    for_each_row_chunk(batch, seq, chunk_rows, [&](row_chunk c) {
        detail::lm_head_chunk_loss<B>(s, c, losses, lse, logits, inp, wte, targets, C, V);
    });
}

// Training: losses and lse of every row, dinp += dloss/dinp and dwte += dloss/dwte for
// loss = scale x sum(losses). dwte may be null (a frozen embedding). `logits` and `dlogits` are
// the chunk buffers; logits ends holding the last chunk's logits.
template <class B, class R>
void lm_head_loss_backward(typename B::stream& s,
                           R* dinp,                      // (B, T, C), accumulated
                           R* dwte,                      // (V, C), accumulated, or null
                           R* losses,                    // (B, T)
                           R* lse,                       // (B, T)
                           R* logits,                    // (chunk, V)
                           R* dlogits,                   // (chunk, V)
                           const R* inp,                 // (B, T, C)
                           const R* wte,                 // (V, C)
                           const std::int32_t* targets,  // (B, T)
                           double scale, std::size_t batch, std::size_t seq, std::size_t C, std::size_t V,
                           std::size_t chunk_rows) {
    using op = ops<B>;
    for_each_row_chunk(batch, seq, chunk_rows, [&](row_chunk c) {
        const std::size_t r = c.first;
        op::lm_head_forward(s, logits, inp + r * C, wte, c.batch, c.seq, C, V);
        // losses, lse and dlogits in one pass over the logits (the bits of forward, zero, backward)
        op::cross_entropy_forward_backward(s, losses + r, lse + r, dlogits, logits, targets + r, scale, c.batch,
                                           c.seq, V);
        op::lm_head_backward(s, dinp + r * C, dwte, dlogits, inp + r * C, wte, c.batch, c.seq, C, V);
    });
}

}  // namespace strata
