// Where an optimizer's state lives inside one layer group: for each state tensor it names, one
// block per group, holding that state of each trainable tensor in the group's order, each part as
// large as the optimizer's state_shape says for that tensor's shape, starting on a 64-byte line,
// the block padded to whole pages (as param_layout does the weights). An element-wise optimizer
// (AdamW, SGD) gets exactly the gradients' layout (param_layout's trainable prefix); Adafactor's
// factored row and column variances get blocks a fraction of that size.
//
// The trainers allocate one block per state tensor and group from numel(i), hand the optimizer the
// parts at part(i, entry), the planner counts bytes(), checkpoints cut the blocks into tensors.
// A group's block is never empty (at least one page), so that every state tensor is an allocation.
#pragma once

#include <strata/core/bytes.hpp>           // page_size, round_up
#include <strata/core/error.hpp>           // strata::error
#include <strata/optim/optimizer.hpp>      // Optimizer
#include <strata/tensor/param_layout.hpp>  // param_layout, param_entry

#include <algorithm>  // std::max
#include <cstddef>    // std::size_t
#include <vector>   // std::vector

namespace strata {

class optimizer_state_layout {
public:
    // Where one trainable tensor's part of one state tensor is in that state's block.
    struct part {
        std::size_t offset = 0;  // elements from the block's start
        std::size_t numel = 0;   // 0: this state tensor has nothing for this parameter
        strata::shape shape;     // the optimizer's state_shape
    };

    optimizer_state_layout() = default;

    // The layout of optimizer o's state for group `group`, in elements of R (the group's element
    // type). A frozen group has none: state_count() 0.
    template <class R, Optimizer O>
    static optimizer_state_layout of(const O& o, const param_layout& group) {
        optimizer_state_layout l;
        if (group.frozen()) return l;
        const std::size_t align = param_layout::tensor_alignment_bytes / sizeof(R);
        const std::size_t states = o.state_names().size();
        const auto& entries = group.entries();
        l.m_parts.assign(states, std::vector<part>(entries.size()));
        l.m_numel.assign(states, 0);
        for (std::size_t i = 0; i < states; ++i) {
            std::size_t offset = 0;
            for (std::size_t e = 0; e < entries.size(); ++e) {
                if (!entries[e].spec.trainable) continue;
                part& p = l.m_parts[i][e];
                p.shape = o.state_shape(i, entries[e].spec.shape);
                p.numel = p.shape.numel();
                if (p.numel == 0) continue;
                offset = round_up(offset, align);
                p.offset = offset;
                offset += p.numel;
            }
            l.m_numel[i] = round_up(std::max<std::size_t>(offset, 1) * sizeof(R), page_size) / sizeof(R);
        }
        l.m_element_bytes = sizeof(R);
        return l;
    }

    // State tensors (the optimizer's state_names()); 0 for a frozen group.
    std::size_t state_count() const { return m_numel.size(); }
    // Elements of state tensor i's block (page-padded).
    std::size_t numel(std::size_t i) const { return m_numel.at(i); }
    // Bytes of every state block of the group (what the planner counts).
    std::size_t bytes() const {
        std::size_t n = 0;
        for (std::size_t b : m_numel) n += b;
        return n * m_element_bytes;
    }
    // Trainable entry e's (param_layout::entries() index) part of state tensor i.
    const part& at(std::size_t i, std::size_t e) const { return m_parts.at(i).at(e); }

private:
    std::vector<std::vector<part>> m_parts;  // by state, then by entry
    std::vector<std::size_t> m_numel;        // by state
    std::size_t m_element_bytes = 0;
};

}  // namespace strata
