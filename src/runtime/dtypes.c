/* The dtypes' sizes and names, from the one list of dtype facts (dtypes.h),
 * which is checked here against the header's enum. */
#include "runtime.h"

#include <stdio.h>
#include <string.h>

#define CE_DTYPE_MATCHES(ID, value, name, qk, bytes) \
  _Static_assert(CLEMBED_##ID == value, "dtypes.h: CLEMBED_" #ID " is not " #value " in clembed.h");
CE_DTYPES(CE_DTYPE_MATCHES)
#undef CE_DTYPE_MATCHES
#define CE_ROWWISE_MATCHES(ID, value, name, bits, sb, first, mult, pad) \
  _Static_assert(CLEMBED_##ID == value, "dtypes.h: CLEMBED_" #ID " is not " #value " in clembed.h");
CE_ROWWISE_DTYPES(CE_ROWWISE_MATCHES)
#undef CE_ROWWISE_MATCHES

size_t clembed_dtype_size(clembed_dtype dtype) {
  const ce_dtype_facts *f = ce_dtype_facts_of((int)dtype);
  return f && f->block_values == 1 ? f->block_bytes : 0; /* 0: unknown, or a block type */
}

size_t clembed_dtype_block_values(clembed_dtype dtype) {
  const ce_dtype_facts *f = ce_dtype_facts_of((int)dtype);
  return f ? f->block_values : 0;
}

size_t clembed_dtype_row_bytes(clembed_dtype dtype, size_t cols) {
  const ce_rowwise_facts *r = ce_rowwise_of((int)dtype);
  if (r) return !cols || cols % ce_rowwise_cols_multiple(r) || cols > SIZE_MAX / 2 ? 0 : ce_rowwise_row_bytes(r, cols);
  const ce_dtype_facts *f = ce_dtype_facts_of((int)dtype);
  if (!f || cols % f->block_values) return 0;
  size_t blocks = cols / f->block_values, bytes;
  return ce_mul_overflows(blocks, f->block_bytes, &bytes) ? 0 : bytes;
}

const char *clembed_dtype_name(clembed_dtype dtype) {
  const ce_dtype_facts *f = ce_dtype_facts_of((int)dtype);
  const ce_rowwise_facts *r = ce_rowwise_of((int)dtype);
  return f ? f->name : r ? r->name : "unknown";
}

int ce_dtype_is_block(clembed_dtype t) {
  const ce_dtype_facts *f = ce_dtype_facts_of((int)t);
  return (f && f->block_values > 1) || ce_rowwise_of((int)t);
}

int ce_dtype_known(clembed_dtype t) { return ce_dtype_facts_of((int)t) || ce_rowwise_of((int)t); }

size_t ce_dtype_unit(clembed_dtype t, size_t width) {
  const ce_rowwise_facts *r = ce_rowwise_of((int)t);
  return r ? width : clembed_dtype_block_values(t);
}

size_t ce_dtype_bytes_at(clembed_dtype t, size_t width, size_t values) {
  if (!ce_rowwise_of((int)t)) return clembed_dtype_row_bytes(t, values);
  if (!width) return 0;
  size_t rb = clembed_dtype_row_bytes(t, width), bytes;
  return !rb || values % width || ce_mul_overflows(values / width, rb, &bytes) ? 0 : bytes;
}

const char *ce_dtype_name(clembed_dtype t) {
  const ce_dtype_facts *f = ce_dtype_facts_of((int)t);
  const ce_rowwise_facts *r = ce_rowwise_of((int)t);
  return f ? f->id : r ? r->id : "unknown";
}

void ce_rowwise_option(char *opts, size_t cap, clembed_dtype t, size_t width, int exact_div) {
  size_t used = strlen(opts);
  if (ce_rowwise_of((int)t) && used < cap)
    snprintf(opts + used, cap - used, " -DCE_RW_COLS=%zu%s", width,
             t == CLEMBED_FP8_ROWWISE && exact_div && !strstr(opts, "-cl-fp32-correctly-rounded-divide-sqrt")
                 ? " -cl-fp32-correctly-rounded-divide-sqrt"
                 : "");
}
