/* Fuzz target for a .npy file's way through the command-line tool: the
 * library's reader (src/io, compiled in; every input the tool reads goes
 * through it) and the tool's .npy writer (tools/cli/npy_write.c).
 *
 * The input is taken as it is (fuzz_npy_lib puts the .npy magic in front of
 * its inputs; this target also reaches the recognition of the formats), and
 * checked as fuzz_io.h says. Then every tensor of a type the writer writes
 * (f32, f16, i32, i64), of any shape up to CE_IO_MAX_DIMS dimensions, goes
 * through npy_write_fd into a temporary file, and the reader must read that
 * back as one tensor of the same type, shape and bytes. A violation aborts,
 * which the fuzzer reports as a crash.
 *
 * Built two ways (tests/CMakeLists.txt):
 * - fuzz_npy (clang, -DCLEMBED_FUZZ=ON): libFuzzer with ASan and UBSan; run it
 *   with tests/run_fuzz.sh BUILD_DIR SECONDS or ./tools/check.sh --fuzz;
 * - fuzz_npy_replay (any compiler, CLEMBED_FUZZ_REPLAY): a main() that feeds
 *   every file of the directories or files given on the command line through the
 *   same checks (a ctest over the corpora, and a way to replay a crash file). */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>

struct ce_io_table;
static void writer_round_trip(const struct ce_io_table *t, const uint8_t *file, size_t size);

#define FUZZ_NAME "fuzz_npy"
#define FUZZ_SHAPE shape_as_is
#define FUZZ_AFTER writer_round_trip
#include "fuzz_io.h"
#include "npy_write.h"

#include <unistd.h>

static uint8_t *shape_as_is(const uint8_t *data, size_t size, size_t *n) {
  uint8_t *out = malloc(size ? size : 1);
  if (!out) return NULL;
  if (size) memcpy(out, data, size);
  *n = size;
  return out;
}

static FILE *g_out; /* the writer's file, reused */

static void writer_round_trip(const ce_io_table *t, const uint8_t *file, size_t size) {
  (void)size;
  for (size_t i = 0; i < t->count && i < 8; i++) {
    const ce_io_tensor *e = &t->t[i];
    npy_dtype dt;
    if (e->kind == CE_IO_F32) dt = NPY_F4;
    else if (e->kind == CE_IO_F16) dt = NPY_F2;
    else if (e->kind == CE_IO_I32) dt = NPY_I4;
    else if (e->kind == CE_IO_I64) dt = NPY_I8;
    else continue;
    int ndim = e->dims_off != (size_t)-1 ? e->ndim : e->info.ndim;
    const uint64_t *dims = e->dims_off != (size_t)-1 ? t->dims + e->dims_off : e->info.shape;
    size_t shape[CE_IO_MAX_DIMS];
    int fits = 1;
    for (int d = 0; d < ndim; d++) {
      if (dims[d] > SIZE_MAX) fits = 0;
      shape[d] = (size_t)dims[d];
    }
    if (!fits) continue;
    if (!g_out) g_out = tmpfile();
    REQUIRE(g_out != NULL, "cannot create a temporary file");
    int fd = fileno(g_out);
    REQUIRE(ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0, "cannot reset the temporary file");
    char err[512];
    memset(err, 'Z', sizeof err);
    int rc = npy_write_fd(fd, "roundtrip.npy", dt, ndim, ndim ? shape : NULL,
                          e->info.bytes ? (const void *)(file + e->offset) : NULL, err, sizeof err);
    REQUIRE(rc == 0, "npy_write_fd of what the reader gave: %s", err);
    off_t len = lseek(fd, 0, SEEK_END);
    REQUIRE(len > 0, "npy_write_fd wrote nothing");
    uint8_t *back = malloc((size_t)len);
    REQUIRE(back != NULL, "out of memory");
    REQUIRE(pread(fd, back, (size_t)len, 0) == (ssize_t)len, "cannot read back the written file");
    ce_io_table u;
    REQUIRE(ce_io_parse(back, (size_t)len, &u) == 0, "the reader refuses what the writer wrote: %s", u.message);
    const ce_io_tensor *b = &u.t[0];
    int bndim = b->dims_off != (size_t)-1 ? b->ndim : b->info.ndim;
    const uint64_t *bdims = b->dims_off != (size_t)-1 ? u.dims + b->dims_off : b->info.shape;
    REQUIRE(u.count == 1 && b->kind == e->kind && bndim == ndim && b->info.bytes == e->info.bytes,
            "the written file reads back as %zu tensors of kind %d, %d dimensions, %llu bytes (wrote kind %d, %d, "
            "%llu)", u.count, (int)b->kind, bndim, (unsigned long long)b->info.bytes, (int)e->kind, ndim,
            (unsigned long long)e->info.bytes);
    for (int d = 0; d < ndim; d++)
      REQUIRE(bdims[d] == dims[d], "dimension %d reads back as %llu, written %llu", d,
              (unsigned long long)bdims[d], (unsigned long long)dims[d]);
    REQUIRE(e->info.bytes == 0 || !memcmp(back + b->offset, file + e->offset, (size_t)e->info.bytes),
            "the data read back differ");
    ce_io_table_free(&u);
    free(back);
  }
}
