/* The values the host makes for a plain sharded forward (src/mpi/mpi_table.h):
 * ce_mpi_widen_row against a float32 conversion written plainly in double,
 * for every F16 and every BF16 value (a NaN made quiet, its payload kept), in
 * whole vectors and one by one, streamed and not; ce_mpi_lookup_row against
 * the quiet-NaN rule for every F16 and BF16 value and F32 values of every
 * class. No device and no MPI call: the values alone. */
#include "mpi_table.h"

#include <math.h>
#include <stdio.h>

static long failures = 0, checks = 0;

#define EXPECT_BITS(got, want, what, x)                                                                      \
  do {                                                                                                        \
    checks++;                                                                                                 \
    if ((got) != (want) && failures++ < 8)                                                                    \
      fprintf(stderr, "%s of 0x%x: 0x%08x, want 0x%08x\n", what, (unsigned)(x), (unsigned)(got),             \
              (unsigned)(want));                                                                              \
  } while (0)

/* F16 bits -> float32 bits: the value in double, rounded to float (exact), or the NaN/infinity spelled out */
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

static uint32_t bf16_ref(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  return (u & 0x7fffffffu) > 0x7f800000u ? u | 0x00400000u : u;
}

int main(void) {
  uint16_t in[64];
  uint32_t out[64] __attribute__((aligned(16)));
  for (uint32_t base = 0; base < 65536; base += 64) {
    for (int k = 0; k < 64; k++) in[k] = (uint16_t)(base + (uint32_t)k);
    for (int stream = 0; stream < 2; stream++) {
      ce_mpi_widen_row(out, in, 64, CLEMBED_F16, stream);
      for (int k = 0; k < 64; k++) EXPECT_BITS(out[k], f16_ref(in[k]), "F16 widened", in[k]);
      ce_mpi_widen_row(out, in, 64, CLEMBED_BF16, stream);
      for (int k = 0; k < 64; k++) EXPECT_BITS(out[k], bf16_ref(in[k]), "BF16 widened", in[k]);
    }
    ce_mpi_widen_row(out, in + 1, 13, CLEMBED_F16, 0); /* one vector, then five one by one */
    for (int k = 0; k < 13; k++) EXPECT_BITS(out[k], f16_ref(in[k + 1]), "F16 widened (13 cols)", in[k + 1]);
    ce_mpi_widen_row(out, in + 1, 13, CLEMBED_BF16, 0);
    for (int k = 0; k < 13; k++) EXPECT_BITS(out[k], bf16_ref(in[k + 1]), "BF16 widened (13 cols)", in[k + 1]);
    /* 16-bit rows as they are: 64 values (whole vectors), 13 (a vector, then one by one) */
    uint16_t o16[64] __attribute__((aligned(16)));
    for (int n = 64; n >= 13; n -= 51)
      for (int d = 0; d < 2; d++) {
        clembed_dtype dt = d ? CLEMBED_BF16 : CLEMBED_F16;
        uint16_t inf = d ? 0x7f80 : 0x7c00, quiet = d ? 0x0040 : 0x0200;
        ce_mpi_lookup_row(o16, in, (size_t)n * 2, dt, n == 64);
        for (int k = 0; k < n; k++) {
          uint16_t want = (in[k] & 0x7fff) > inf ? (uint16_t)(in[k] | quiet) : in[k];
          EXPECT_BITS(o16[k], want, d ? "BF16 row" : "F16 row", in[k]);
        }
      }
  }
  /* F32 rows: zeros, subnormals, normals, infinities, signalling and quiet NaNs of both signs */
  const uint32_t f32[12] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x3f800000u, 0xc2f60000u,
                            0x7f800000u, 0xff800000u, 0x7f800001u, 0xffa00000u, 0x7fc12345u, 0xffffffffu};
  uint32_t in32[13], o32[13] __attribute__((aligned(16)));
  for (int k = 0; k < 13; k++) in32[k] = f32[k % 12];
  for (int n = 12; n <= 13; n++) {
    ce_mpi_lookup_row(o32, in32, (size_t)n * 4, CLEMBED_F32, n == 12);
    for (int k = 0; k < n; k++) {
      uint32_t want = (in32[k] & 0x7fffffffu) > 0x7f800000u ? in32[k] | 0x00400000u : in32[k];
      EXPECT_BITS(o32[k], want, "F32 row", in32[k]);
    }
  }
  printf("test_mpi_values: %ld of %ld checks failed\n", failures, checks);
  return failures != 0;
}
