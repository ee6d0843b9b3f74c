/* The values of a plain sharded forward (clembed_mpi_embed with the default
 * options), every one computed by the ranks' devices, under mpirun: a table
 * holding every F16 value (and one holding every BF16 value), split over the
 * ranks and looked up whole by every rank (rows from the other ranks' shards
 * and from its own), to an output of the table's dtype (the owners'
 * clembed_lookup: a NaN made quiet, every other value as it is) and to an F32
 * output (the rank's clembed_embed: each value widened exactly, a NaN made
 * quiet with its payload kept), against a float32 conversion written plainly
 * in double; rows of 64 columns and of 13; F32 values of every class.
 *
 *   mpirun -n N test_mpi_values [CASE ...]   (--list names the cases) */
#define _GNU_SOURCE
#include "clembed_mpi.h"
#include "test_mpi_util.h"

#include <stdlib.h>

static int g_rank, g_size;

/* F16 bits -> float32 bits: the value in double, rounded to float (exact), or
 * the NaN/infinity spelled out (a NaN quiet, its payload kept) */
static uint32_t f16_ref(uint16_t h) {
  int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  uint32_t u;
  if (e == 31) {
    u = (sign ? 0x80000000u : 0) | 0x7f800000u | (uint32_t)m << 13;
    return m ? u | 0x00400000u : u;
  }
  double v = e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m / 1024.0, -14);
  float f = (float)(sign ? -v : v);
  memcpy(&u, &f, 4);
  return u;
}

/* BF16 bits -> float32 bits: the top half, a NaN quiet */
static uint32_t bf16_ref(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  return (u & 0x7fffffffu) > 0x7f800000u ? u | 0x00400000u : u;
}

/* A 16-bit value as the lookup gives it: a NaN quiet, every other as it is */
static uint16_t quiet16(uint16_t h, clembed_dtype dt) {
  uint16_t inf = dt == CLEMBED_BF16 ? 0x7f80 : 0x7c00, quiet = dt == CLEMBED_BF16 ? 0x0040 : 0x0200;
  return (h & 0x7fff) > inf ? (uint16_t)(h | quiet) : h;
}

/* clembed_mpi_embed, default options, of every row of the R x C table of dt
 * holding `vals` (R * C elements), asked by this rank in the order ids[i] =
 * (389 i + rank) mod R (389 prime to R: every row once), into an output of
 * out_dt: its bytes (host, malloc'd), ids in *ids_out. */
static void *sharded_forward(clembed_context *ctx, const void *vals, size_t R, size_t C, clembed_dtype dt,
                             clembed_dtype out_dt, int64_t **ids_out) {
  size_t es = clembed_dtype_size(dt), first = 0;
  clembed_mpi_table *t = NULL;
  clembed_matrix shard = {0}, out = {0};
  clembed_ids ids = {0};
  int64_t *h = malloc(R * sizeof *h);
  void *got = calloc(R * C + 1, clembed_dtype_size(out_dt));
  for (size_t i = 0; i < R; i++) h[i] = (int64_t)((i * 389 + (size_t)g_rank) % R);
  OK(ctx, clembed_mpi_table_create(ctx, MPI_COMM_WORLD, R, C, dt, &t));
  OK(ctx, clembed_mpi_table_shard(t, &first, &shard));
  if (shard.rows) OK(ctx, clembed_matrix_write(ctx, &shard, (const char *)vals + first * C * es, dt));
  OK(ctx, clembed_ids_create(ctx, h, R, CLEMBED_I64, &ids));
  OK(ctx, clembed_matrix_create(ctx, R, C, out_dt, &out));
  OK(ctx, clembed_mpi_embed(t, &ids, NULL, &out));
  OK(ctx, clembed_matrix_read(ctx, &out, got, out_dt));
  clembed_matrix_release(&out);
  clembed_ids_release(&ids);
  clembed_mpi_table_release(t);
  *ids_out = h;
  return got;
}

/* Every F16 and every BF16 value (64 columns: 1,024 rows; 13: 5,042 rows, the
 * values from 0 on again at the end), to the table's dtype and to F32. */
TU_CASE(every_16bit_value) {
  for (int k = 0; k < 4; k++) {
    clembed_dtype dt = k % 2 ? CLEMBED_BF16 : CLEMBED_F16;
    const char *name = k % 2 ? "BF16" : "F16";
    size_t C = k < 2 ? 64 : 13, R = (65536 + C - 1) / C;
    uint16_t *v = malloc(R * C * sizeof *v);
    for (size_t i = 0; i < R * C; i++) v[i] = (uint16_t)i;
    for (int to_f32 = 0; to_f32 < 2; to_f32++) {
      int64_t *ids = NULL;
      void *got = sharded_forward(ctx, v, R, C, dt, to_f32 ? CLEMBED_F32 : dt, &ids);
      long bad = 0;
      for (size_t i = 0; i < R; i++)
        for (size_t c = 0; c < C; c++) {
          uint16_t x = v[(size_t)ids[i] * C + c];
          uint32_t g = to_f32 ? ((const uint32_t *)got)[i * C + c] : ((const uint16_t *)got)[i * C + c];
          uint32_t want = to_f32 ? (dt == CLEMBED_BF16 ? bf16_ref(x) : f16_ref(x)) : quiet16(x, dt);
          if (g != want && bad++ < 8)
            fprintf(stderr, "rank %d: %s 0x%04x, %zu cols, to %s: 0x%08x, want 0x%08x\n", g_rank, name, x, C,
                    to_f32 ? "F32" : name, g, want);
        }
      EXPECT(bad == 0, "rank %d: %ld of %zu %s values (%zu cols) to %s differ", g_rank, bad, R * C, name, C,
             to_f32 ? "F32" : name);
      free(got);
      free(ids);
    }
    free(v);
  }
}

/* F32 rows: zeros, subnormals, normals, infinities, signalling and quiet NaNs
 * of both signs, 13 columns (each value in every column over the rows). */
TU_CASE(f32_classes) {
  const uint32_t f32[12] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x3f800000u, 0xc2f60000u,
                            0x7f800000u, 0xff800000u, 0x7f800001u, 0xffa00000u, 0x7fc12345u, 0xffffffffu};
  const size_t R = 12, C = 13;
  uint32_t v[12 * 13];
  for (size_t i = 0; i < R * C; i++) v[i] = f32[(i + i / C) % 12];
  int64_t *ids = NULL;
  uint32_t *got = sharded_forward(ctx, v, R, C, CLEMBED_F32, CLEMBED_F32, &ids);
  for (size_t i = 0; i < R; i++)
    for (size_t c = 0; c < C; c++) {
      uint32_t x = v[(size_t)ids[i] * C + c], want = (x & 0x7fffffffu) > 0x7f800000u ? x | 0x00400000u : x;
      EXPECT(got[i * C + c] == want, "rank %d: F32 0x%08x: 0x%08x, want 0x%08x", g_rank, x, got[i * C + c], want);
    }
  free(got);
  free(ids);
}

int main(int argc, char **argv) { return tu_mpi_main(argc, argv, "test_mpi_values", 600, &g_rank, &g_size); }
