// param_layout: where each named parameter of one layer group lives inside that group's single
// contiguous, page-aligned block. Weights, gradients and both AdamW moments use the same layout,
// so moving a layer group between tiers is one copy, and the optimizer is one flat loop.
//
// Trainable and frozen parameters: the trainable tensors are laid out first (in declaration
// order), then the frozen ones. Gradients and AdamW moments exist only for the trainable prefix,
// trainable_numel() elements (page-padded; 0 when the whole group is frozen): a frozen tensor has
// no gradient and no moments, and its gradient is never written or copied. With every tensor
// trainable (the default) the layout is exactly the declaration order and trainable_numel() ==
// numel().
#pragma once

#include <strata/core/bytes.hpp>  // page_size, round_up
#include <strata/core/error.hpp>  // strata::error
#include <strata/core/shape.hpp>  // shape

#include <cstddef>  // std::size_t
#include <string>   // std::string
#include <utility>  // std::move
#include <vector>   // std::vector

namespace strata {

// What a layer declares about one of its parameters.
struct param_spec {
    std::string name;    // e.g. "attn.c_attn.weight"
    strata::shape shape; // e.g. {C, 3C}
    bool decay;          // AdamW weight decay applies (2-D weights, embeddings), not biases/norms
    bool trainable = true;  // false: frozen (no gradient, no AdamW moments; e.g. LoRA's base weights)
};

// One tensor's entry in a layout: its spec and where it starts in the group's block. (A "slot" is
// something else: a device buffer that blocks or activations take in turn, in the pipeline.)
struct param_entry {
    param_spec spec;
    std::size_t offset;  // in elements from the start of the block
};

class param_layout {
public:
    // Each tensor starts on a 64-byte boundary (a cache line, a full AVX-512 vector);
    // the block is padded to whole pages.
    static constexpr std::size_t tensor_alignment_bytes = 64;

    param_layout() = default;

    template <class T>
    static param_layout of(std::vector<param_spec> specs) {
        param_layout layout;
        layout.m_element_bytes = sizeof(T);
        std::size_t offset = 0;
        const std::size_t align = tensor_alignment_bytes / sizeof(T);
        for (auto& s : specs) layout.m_entries.push_back({std::move(s), 0});
        for (bool trainable : {true, false}) {  // the trainable prefix first
            for (auto& entry : layout.m_entries) {
                if (entry.spec.trainable != trainable) continue;
                offset = round_up(offset, align);
                entry.offset = offset;
                offset += entry.spec.shape.numel();
            }
            if (trainable) layout.m_trainable_numel = round_up(offset * sizeof(T), page_size) / sizeof(T);
        }
        layout.m_used = offset;
        layout.m_numel = round_up(offset * sizeof(T), page_size) / sizeof(T);
        return layout;
    }

    const std::vector<param_entry>& entries() const { return m_entries; }
    // Elements in the block including alignment gaps and the page padding (gaps stay zero).
    std::size_t numel() const { return m_numel; }
    std::size_t bytes() const { return m_numel * m_element_bytes; }
    // Elements of the trainable prefix (gradients, AdamW m and v), page padding included; every
    // trainable entry ends inside it. 0: the whole group is frozen.
    std::size_t trainable_numel() const { return m_trainable_numel; }
    std::size_t trainable_bytes() const { return m_trainable_numel * m_element_bytes; }
    bool frozen() const { return m_trainable_numel == 0; }
    // Real parameters, without gaps.
    std::size_t parameter_count() const {
        std::size_t n = 0;
        for (auto& s : m_entries) n += s.spec.shape.numel();
        return n;
    }
    std::size_t trainable_parameter_count() const {
        std::size_t n = 0;
        for (auto& s : m_entries) n += s.spec.trainable ? s.spec.shape.numel() : 0;
        return n;
    }

    const param_entry& find(const std::string& name) const {
        for (auto& s : m_entries)
            if (s.spec.name == name) return s;
        throw error("no parameter named '" + name + "' in this layer");
    }

private:
    std::vector<param_entry> m_entries;
    std::size_t m_used = 0;
    std::size_t m_numel = 0;
    std::size_t m_trainable_numel = 0;
    std::size_t m_element_bytes = 4;
};

}  // namespace strata
