/* The dtypes' sizes and names, from the one list of dtype facts (dtypes.h),
 * which is checked here against the header's enum. */
#include "runtime.h"

#define CE_DTYPE_MATCHES(ID, value, name, qk, bytes) \
  _Static_assert(CLEMBED_##ID == value, "dtypes.h: CLEMBED_" #ID " is not " #value " in clembed.h");
CE_DTYPES(CE_DTYPE_MATCHES)
#undef CE_DTYPE_MATCHES

size_t clembed_dtype_size(clembed_dtype dtype) {
  const ce_dtype_facts *f = ce_dtype_facts_of((int)dtype);
  return f && f->block_values == 1 ? f->block_bytes : 0; /* 0: unknown, or a block type */
}

size_t clembed_dtype_block_values(clembed_dtype dtype) {
  const ce_dtype_facts *f = ce_dtype_facts_of((int)dtype);
  return f ? f->block_values : 0;
}

size_t clembed_dtype_row_bytes(clembed_dtype dtype, size_t cols) {
  const ce_dtype_facts *f = ce_dtype_facts_of((int)dtype);
  if (!f || cols % f->block_values) return 0;
  size_t blocks = cols / f->block_values, bytes;
  return ce_mul_overflows(blocks, f->block_bytes, &bytes) ? 0 : bytes;
}

const char *clembed_dtype_name(clembed_dtype dtype) {
  const ce_dtype_facts *f = ce_dtype_facts_of((int)dtype);
  return f ? f->name : "unknown";
}

int ce_dtype_is_block(clembed_dtype t) {
  const ce_dtype_facts *f = ce_dtype_facts_of((int)t);
  return f && f->block_values > 1;
}

const char *ce_dtype_name(clembed_dtype t) {
  const ce_dtype_facts *f = ce_dtype_facts_of((int)t);
  return f ? f->id : "unknown";
}
