/* Shared by the fuzz targets of the library's file readers (fuzz_npy_lib.c,
 * fuzz_safetensors.c, fuzz_gguf.c): each one shapes its input into the format
 * it fuzzes (FUZZ_SHAPE), parses it with the reader (src/io, compiled into the
 * target with the sanitizers) and checks the contract, aborting (a crash for
 * the fuzzer) when it breaks:
 * - failure: a message saying what is wrong, the table freed (LeakSanitizer);
 * - success: for every tensor, a name and a type name, 0 to 4 dimensions with
 *   the unused ones 0 (more than 4: the first three and the product of the
 *   rest, the whole shape of up to CE_IO_MAX_DIMS in the table), a dtype of -1
 *   or a clembed dtype, its data inside the input (every byte is read, so
 *   AddressSanitizer sees an overrun), bytes = elements times the type's size
 *   (per block for block types), and the names unique (each found at its own
 *   index); then the target's own FUZZ_AFTER(table, file, size) when it has
 *   one (fuzz_npy.c: the tool's writer).
 * Built with CLEMBED_FUZZ_REPLAY, a main() feeds every file of the directories
 * or files on its command line through the same checks (a CTest over the
 * corpora, and the way to replay a crash file). */
#ifndef CLEMBED_FUZZ_IO_H
#define CLEMBED_FUZZ_IO_H
#define _GNU_SOURCE
#include "io/io.h"
#include "runtime/dtypes.h" /* the dtype facts (macros and one inline function) */
#include "fuzz_replay.h"    /* REQUIRE, and the replay's main */

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


/* Makes the input a file of the target's format: *out (malloc'd, exactly
 * *n bytes) or NULL to skip the input. */
static uint8_t *FUZZ_SHAPE(const uint8_t *data, size_t size, size_t *n);

static volatile unsigned fuzz_sink;

static void fuzz_check(const uint8_t *file, size_t size) {
  ce_io_table t;
  memset(&t, 0xA5, sizeof t);
  if (ce_io_parse(file, size, &t) != 0) {
    REQUIRE(memchr(t.message, '\0', sizeof t.message) && t.message[0], "no message on a failure");
    REQUIRE(t.t == NULL && t.strings == NULL && t.count == 0, "a failed parse kept its table");
    return;
  }
  for (size_t i = 0; i < t.count; i++) {
    const ce_io_tensor *e = &t.t[i];
    const clembed_tensor_info *in = &e->info;
    REQUIRE(in->name && in->type_name && in->type_name[0], "tensor %zu: no name or type name", i);
    REQUIRE(in->ndim >= 0 && in->ndim <= 4, "tensor %zu: ndim %d", i, in->ndim);
    uint64_t elements = 1, nonzero = 1; /* the product of the non-zero dimensions fits too */
    for (int d = 0; d < 4; d++) {
      if (d >= in->ndim) {
        REQUIRE(in->shape[d] == 0, "tensor %zu: unused shape[%d] = %llu", i, d, (unsigned long long)in->shape[d]);
        continue;
      }
      elements *= in->shape[d];
      if (in->shape[d]) REQUIRE(ce_io_mul(nonzero, in->shape[d], &nonzero), "tensor %zu: the shape overflows", i);
    }
    if (e->dims_off != (size_t)-1) { /* more than 4 dimensions: the whole shape folds into info's */
      REQUIRE(e->ndim > 4 && e->ndim <= CE_IO_MAX_DIMS && in->ndim == 4, "tensor %zu: ndim %d (info %d)", i, e->ndim,
              in->ndim);
      REQUIRE(e->dims_off <= t.dims_len && (size_t)e->ndim <= t.dims_len - e->dims_off, "tensor %zu: dims outside", i);
      uint64_t folded = 1;
      for (int d = 0; d < e->ndim; d++) {
        uint64_t v = t.dims[e->dims_off + (size_t)d];
        if (d < 3) REQUIRE(v == in->shape[d], "tensor %zu: dimension %d is %llu, info %llu", i, d,
                           (unsigned long long)v, (unsigned long long)in->shape[d]);
        else folded *= v;
      }
      REQUIRE(folded == in->shape[3], "tensor %zu: the dimensions from the fourth on fold to %llu, info %llu", i,
              (unsigned long long)folded, (unsigned long long)in->shape[3]);
    }
    REQUIRE(elements == e->elements, "tensor %zu: %llu elements, the shape gives %llu", i,
            (unsigned long long)e->elements, (unsigned long long)elements);
    const ce_dtype_facts *facts = ce_dtype_facts_of(in->dtype); /* a dtype's blocks are its facts' */
    REQUIRE(in->dtype == -1 || (facts && facts->block_values == e->block_values && facts->block_bytes == e->block_bytes),
            "tensor %zu: dtype %d with blocks of %u values, %u bytes", i, in->dtype, e->block_values, e->block_bytes);
    REQUIRE(e->block_values >= 1 && e->block_bytes >= 1 && elements % e->block_values == 0,
            "tensor %zu: blocks of %u values, %u bytes, for %llu elements", i, e->block_values, e->block_bytes,
            (unsigned long long)elements);
    REQUIRE(in->bytes == elements / e->block_values * e->block_bytes, "tensor %zu: %llu bytes for %llu elements", i,
            (unsigned long long)in->bytes, (unsigned long long)elements);
    REQUIRE(e->offset <= size && in->bytes <= size - e->offset, "tensor %zu: data [%llu, +%llu) outside %zu bytes", i,
            (unsigned long long)e->offset, (unsigned long long)in->bytes, size);
    unsigned sum = 0;
    for (uint64_t k = 0; k < in->bytes; k++) sum += file[e->offset + k];
    fuzz_sink += sum;
    for (size_t k = 0; k < i; k++) REQUIRE(strcmp(t.t[k].info.name, in->name), "tensors %zu and %zu share a name", k, i);
    if (i > 64) break; /* the quadratic name check: enough */
  }
#ifdef FUZZ_AFTER
  FUZZ_AFTER(&t, file, size);
#endif
  ce_io_table_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t n = 0;
  uint8_t *file = FUZZ_SHAPE(data, size, &n);
  if (!file) return 0;
  fuzz_check(file, n);
  free(file);
  return 0;
}

#endif
