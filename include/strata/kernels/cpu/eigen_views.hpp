// Eigen views over the raw row-major buffers the kernels take.
//
// The kernels keep llm.c-style pointer arguments (so the CPU backend, the CUDA parity tests and the
// tiered storage all pass plain memory), and wrap them here to reach Eigen's GEMM. A view may skip
// elements between rows: a head's query slice of qkv (B, T, 3C) is a (T, HS) matrix whose rows are
// 3C apart.
#pragma once

#include <cstddef>     // std::size_t
#include <Eigen/Core>  // Eigen::Map, Eigen::Matrix, Eigen::OuterStride, Eigen::Index

namespace strata::kernels::cpu {

template <class Real>
using row_major_matrix = Eigen::Matrix<Real, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Maps of a const matrix stay read-only, so a const input can never be written through its view.
template <class Real>
using matrix_view = Eigen::Map<row_major_matrix<Real>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class Real>
using const_matrix_view =
    Eigen::Map<const row_major_matrix<Real>, Eigen::Unaligned, Eigen::OuterStride<>>;

// (rows, cols) starting at data, rows row_stride elements apart (row_stride >= cols).
template <class Real>
matrix_view<Real> view(Real* data, std::size_t rows, std::size_t cols, std::size_t row_stride) {
    return {data, static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols),
            Eigen::OuterStride<>(static_cast<Eigen::Index>(row_stride))};
}
template <class Real>
const_matrix_view<Real> view(const Real* data, std::size_t rows, std::size_t cols,
                             std::size_t row_stride) {
    return {data, static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols),
            Eigen::OuterStride<>(static_cast<Eigen::Index>(row_stride))};
}

// A contiguous (rows, cols) matrix.
template <class Real>
matrix_view<Real> view(Real* data, std::size_t rows, std::size_t cols) {
    return view(data, rows, cols, cols);
}
template <class Real>
const_matrix_view<Real> view(const Real* data, std::size_t rows, std::size_t cols) {
    return view(data, rows, cols, cols);
}

}  // namespace strata::kernels::cpu
