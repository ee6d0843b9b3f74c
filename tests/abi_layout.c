/* The layout of every public struct and the value of every public enum constant, as the
 * compiler sees the headers, for python/tests/test_abi.py to compare with the ctypes
 * mirrors in python/clembed/_lib.py (and with the headers' own field lists). No device.
 * Output, one a line:
 *   struct NAME SIZE ALIGN
 *   field NAME FIELD OFFSET SIZE
 *   const NAME VALUE
 * A struct or enum constant added to a header is added here (one line) and to
 * _lib.py / the Python tables; test_abi.py fails until all three agree. */
#include "clembed.h"
#include "clembed_io.h"

#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>

#define STRUCT(T) printf("struct %s %zu %zu\n", #T, sizeof(T), alignof(T));
#define FIELD(T, f) printf("field %s %s %zu %zu\n", #T, #f, offsetof(T, f), sizeof(((T *)0)->f));
#define CONST(C) printf("const %s %lld\n", #C, (long long)(C));

int main(void) {
  STRUCT(clembed_device_info)
  FIELD(clembed_device_info, spec)
  FIELD(clembed_device_info, platform)
  FIELD(clembed_device_info, name)
  FIELD(clembed_device_info, type)
  FIELD(clembed_device_info, is_default)
  FIELD(clembed_device_info, global_mem_bytes)
  FIELD(clembed_device_info, max_alloc_bytes)

  STRUCT(clembed_error_detail)
  FIELD(clembed_error_detail, status)
  FIELD(clembed_error_detail, operation)
  FIELD(clembed_error_detail, argument)
  FIELD(clembed_error_detail, index)
  FIELD(clembed_error_detail, value)

  STRUCT(clembed_matrix)
  FIELD(clembed_matrix, buffer)
  FIELD(clembed_matrix, offset)
  FIELD(clembed_matrix, rows)
  FIELD(clembed_matrix, cols)
  FIELD(clembed_matrix, ld)
  FIELD(clembed_matrix, dtype)

  STRUCT(clembed_ids)
  FIELD(clembed_ids, buffer)
  FIELD(clembed_ids, offset)
  FIELD(clembed_ids, count)
  FIELD(clembed_ids, type)

  STRUCT(clembed_sinusoid)
  FIELD(clembed_sinusoid, base)
  FIELD(clembed_sinusoid, exponent)
  FIELD(clembed_sinusoid, layout)

  STRUCT(clembed_embed_options)
  FIELD(clembed_embed_options, scale)
  FIELD(clembed_embed_options, policy)
  FIELD(clembed_embed_options, padding_idx)
  FIELD(clembed_embed_options, positions)
  FIELD(clembed_embed_options, sinusoid)
  FIELD(clembed_embed_options, position_table)
  FIELD(clembed_embed_options, seq_len)
  FIELD(clembed_embed_options, position_offset)
  FIELD(clembed_embed_options, sequence_offsets)
  FIELD(clembed_embed_options, dropout)
  FIELD(clembed_embed_options, dropout_seed)

  STRUCT(clembed_backward_options)
  FIELD(clembed_backward_options, scale)
  FIELD(clembed_backward_options, policy)
  FIELD(clembed_backward_options, padding_idx)
  FIELD(clembed_backward_options, scale_grad_by_freq)
  FIELD(clembed_backward_options, deterministic)
  FIELD(clembed_backward_options, accumulate)
  FIELD(clembed_backward_options, seq_len)
  FIELD(clembed_backward_options, position_offset)
  FIELD(clembed_backward_options, sequence_offsets)
  FIELD(clembed_backward_options, position_grad)
  FIELD(clembed_backward_options, dropout)
  FIELD(clembed_backward_options, dropout_seed)

  STRUCT(clembed_optimizer)
  FIELD(clembed_optimizer, kind)
  FIELD(clembed_optimizer, learning_rate)
  FIELD(clembed_optimizer, eps)
  FIELD(clembed_optimizer, beta1)
  FIELD(clembed_optimizer, beta2)
  FIELD(clembed_optimizer, weight_decay)
  FIELD(clembed_optimizer, step)
  FIELD(clembed_optimizer, state)
  FIELD(clembed_optimizer, state2)

  STRUCT(clembed_rope)
  FIELD(clembed_rope, base)
  FIELD(clembed_rope, head_dim)
  FIELD(clembed_rope, rotary_dim)
  FIELD(clembed_rope, layout)
  FIELD(clembed_rope, scaling)
  FIELD(clembed_rope, factor)
  FIELD(clembed_rope, original_max_position)
  FIELD(clembed_rope, low_freq_factor)
  FIELD(clembed_rope, high_freq_factor)
  FIELD(clembed_rope, beta_fast)
  FIELD(clembed_rope, beta_slow)
  FIELD(clembed_rope, attention_factor)

  STRUCT(clembed_tensor_info)
  FIELD(clembed_tensor_info, name)
  FIELD(clembed_tensor_info, dtype)
  FIELD(clembed_tensor_info, type_name)
  FIELD(clembed_tensor_info, ndim)
  FIELD(clembed_tensor_info, shape)
  FIELD(clembed_tensor_info, bytes)

  CONST(CLEMBED_OK)
  CONST(CLEMBED_ERR_INVALID_ARGUMENT)
  CONST(CLEMBED_ERR_INDEX_OUT_OF_RANGE)
  CONST(CLEMBED_ERR_NO_DEVICE)
  CONST(CLEMBED_ERR_BUILD_FAILED)
  CONST(CLEMBED_ERR_OUT_OF_MEMORY)
  CONST(CLEMBED_ERR_UNSUPPORTED)
  CONST(CLEMBED_ERR_COMMUNICATION)
  CONST(CLEMBED_F32)
  CONST(CLEMBED_F16)
  CONST(CLEMBED_BF16)
  CONST(CLEMBED_Q8_0)
  CONST(CLEMBED_Q4_0)
  CONST(CLEMBED_Q4_K)
  CONST(CLEMBED_Q6_K)
  CONST(CLEMBED_I32)
  CONST(CLEMBED_I64)
  CONST(CLEMBED_INDEX_CHECK)
  CONST(CLEMBED_INDEX_CLAMP)
  CONST(CLEMBED_INDEX_ZERO)
  CONST(CLEMBED_INDEX_WRAP)
  CONST(CLEMBED_EXPONENT_PAIR)
  CONST(CLEMBED_EXPONENT_INDEX)
  CONST(CLEMBED_LAYOUT_INTERLEAVED)
  CONST(CLEMBED_LAYOUT_HALVES)
  CONST(CLEMBED_POSITIONS_NONE)
  CONST(CLEMBED_POSITIONS_SINUSOID)
  CONST(CLEMBED_POSITIONS_TABLE)
  CONST(CLEMBED_SGD)
  CONST(CLEMBED_ADAGRAD)
  CONST(CLEMBED_ROWWISE_ADAGRAD)
  CONST(CLEMBED_ADAM)
  CONST(CLEMBED_ROPE_NEOX)
  CONST(CLEMBED_ROPE_GPTJ)
  CONST(CLEMBED_ROPE_SCALING_NONE)
  CONST(CLEMBED_ROPE_SCALING_LINEAR)
  CONST(CLEMBED_ROPE_SCALING_NTK)
  CONST(CLEMBED_ROPE_SCALING_YARN)
  CONST(CLEMBED_ROPE_SCALING_LLAMA3)
  CONST(CLEMBED_NO_PADDING)
  CONST(CLEMBED_VERSION_MAJOR)
  CONST(CLEMBED_VERSION_MINOR)
  CONST(CLEMBED_VERSION_PATCH)
  return 0;
}
