// shape: the extents of a row-major tensor, e.g. {B, T, C}.
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <cstddef>           // std::size_t
#include <initializer_list>  // std::initializer_list
#include <string>            // std::string
#include <vector>            // std::vector

namespace strata {

class shape {
public:
    shape() = default;  // a scalar: rank 0, one element
    shape(std::initializer_list<std::size_t> extents) : m_extents(extents) {}
    explicit shape(std::vector<std::size_t> extents) : m_extents(std::move(extents)) {}

    std::size_t rank() const { return m_extents.size(); }
    std::size_t operator[](std::size_t axis) const {
        if (axis >= m_extents.size())
            throw error("shape " + to_string() + " has no axis " + std::to_string(axis));
        return m_extents[axis];
    }
    std::size_t numel() const {
        std::size_t n = 1;
        for (std::size_t e : m_extents) n *= e;
        return n;
    }
    const std::vector<std::size_t>& extents() const { return m_extents; }

    // The shape of one slice along axis 0, e.g. {4, 3, 2} -> {3, 2}.
    shape inner() const {
        if (m_extents.empty()) throw error("a scalar shape has no inner shape");
        return shape(std::vector<std::size_t>(m_extents.begin() + 1, m_extents.end()));
    }

    std::string to_string() const {
        std::string s = "[";
        for (std::size_t i = 0; i < m_extents.size(); ++i) s += (i ? ", " : "") + std::to_string(m_extents[i]);
        return s + "]";
    }

    friend bool operator==(const shape&, const shape&) = default;

private:
    std::vector<std::size_t> m_extents;
};

}  // namespace strata
