// CPU reference kernels of every GPT-2 op, forward and backward (llm.c conventions: free functions,
// arguments in the order outputs, saved activations, inputs, weights, sizes; backward accumulates).
// They are the CPU backend's compute and the oracle the CUDA kernels are compared against.
#pragma once

#include <strata/kernels/cpu/attention.hpp>       // attention_forward, attention_backward
#include <strata/kernels/cpu/attention_decode.hpp>  // attention_decode
#include <strata/kernels/cpu/cross_entropy.hpp>   // cross_entropy_forward/backward, ignore_index
#include <strata/kernels/cpu/elementwise.hpp>     // add_inplace, scale_inplace, sum_of_squares
#include <strata/kernels/cpu/embedding.hpp>       // embedding_forward, embedding_backward
#include <strata/kernels/cpu/gelu.hpp>            // gelu_forward, gelu_backward
#include <strata/kernels/cpu/gradient_check.hpp>  // numeric_gradient, compare, random_vector
#include <strata/kernels/cpu/layernorm.hpp>       // layernorm_*, residual_layernorm_forward
#include <strata/kernels/cpu/matmul.hpp>          // matmul_*, lm_head_*
#include <strata/kernels/cpu/residual.hpp>        // residual_forward, residual_backward
