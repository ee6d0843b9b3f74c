/* The exact-angle code (cl/lib/angle.cl with the host preparation in
 * src/ops/freq.c) on its own, through a small test kernel: sin and cos of
 * p*w for positions near 2^20, 2^24, 2^28, 2^31 and 2^32-1 and random ones
 * below 2^32, against reference.h (p*w formed exactly, reduced with a
 * three-double 2*pi, sin/cos in double). Frequencies: the sinusoid's and
 * RoPE's base^(-k/d) for bases 1, 2, 10000, 500000 and 1e6 with d = 128 and 37
 * (every column), scaled ones (w/8, w/32, 1/(2pi), 1/3), and random ones in
 * [2^-40, 8]. Bound: 1e-6 (the contract); the measured worst error is printed,
 * with float32's p*w (as the frameworks compute it) beside it for comparison.
 * Usage: test_angle ANGLE_CL [small] [CASE...] (--list names the cases) */
#define CL_TARGET_OPENCL_VERSION 120
#include "test_util.h"
#include "../src/ops/freq.h"

#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECKCL(x)                                                        \
  do {                                                                    \
    cl_int e_ = (x);                                                      \
    if (e_ != CL_SUCCESS) {                                               \
      fprintf(stderr, "%s:%d: %s: OpenCL error %d\n", __FILE__, __LINE__, #x, e_); \
      exit(1);                                                            \
    }                                                                     \
  } while (0)

static const char *KERNEL =
    "__kernel void angle_test(__global const uint *pos, uint npos, __global const float *pieces, uint nf,\n"
    "                         __global float *out) {\n"
    "  size_t i = get_global_id(0);\n"
    "  if (i >= (size_t)npos * nf) return;\n"
    "  uint p = pos[i / nf];\n"
    "  size_t f = i % nf;\n"
    "  float4 a = vload4(0, pieces + 8 * f), b = vload4(0, pieces + 8 * f + 4);\n"
    "  float2 cs = ce_angle_cos_sin(p, a, b);\n"
    "  out[4 * i] = cs.x;\n"
    "  out[4 * i + 1] = cs.y;\n"
    "  out[4 * i + 2] = ce_angle_sin(p, a, b, 1);\n"
    "  out[4 * i + 3] = ce_angle_sin(p, a, b, 0);\n"
    "}\n";

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (fread(s, 1, (size_t)n, f) != (size_t)n) exit(1);
  s[n] = 0;
  fclose(f);
  return s;
}

static const char *g_angle_cl = NULL; /* the path of cl/lib/angle.cl */

/* sin and cos of p*w from every entry point of angle.cl, for every position
 * and frequency above, within 1e-6 of the exact values and inside [-1, 1]. */
TU_CASE(sin_cos_exact) {
  int small = tu_small;
  /* frequencies */
  size_t nf = 0, capf = 4096;
  double *w = malloc(capf * sizeof *w);
  const double bases[] = {1.0, 2.0, 10000.0, 500000.0, 1e6};
  const size_t dims[] = {128, 37};
  for (size_t b = 0; b < 5; b++)
    for (size_t di = 0; di < 2; di++)
      for (size_t c = 0; c < dims[di]; c++) {
        double wc = pow(bases[b], -(double)c / (double)dims[di]);
        w[nf++] = wc;
        if (di == 0 && c % 2 == 0) {
          w[nf++] = wc / 8.0;
          w[nf++] = wc / 32.0;
        }
      }
  w[nf++] = 1.0 / (2.0 * 3.141592653589793);
  w[nf++] = 1.0 / 3.0;
  w[nf++] = 0.5;
  w[nf++] = 0.0;
  while (nf < 1400u) w[nf++] = ldexp(1.0 + (double)(next() >> 11) * 0x1p-53, -40 + (int)(next() % 44));
  if (small) { /* (Oclgrind) every 7th frequency */
    size_t m = 0;
    for (size_t f = 0; f < nf; f += 7) w[m++] = w[f];
    nf = m;
  }
  float *pieces = malloc(nf * 8 * sizeof *pieces);
  for (size_t f = 0; f < nf; f++) ce_angle_pieces(w[f], pieces + 8 * f);

  /* positions */
  size_t np = 0;
  cl_uint pos[512];
  const uint64_t centers[] = {0, 1ull << 17, 1ull << 20, 1ull << 24, 1ull << 28, 1ull << 31, (1ull << 32) - 1};
  for (size_t i = 0; i < 7; i++)
    for (int d = -6; d <= 6; d++) {
      int64_t p = (int64_t)centers[i] + d;
      if (p >= 0 && p < (int64_t)(1ull << 32)) pos[np++] = (cl_uint)p;
    }
  while (np < (small ? 100u : 512u)) pos[np++] = (cl_uint)next();

  /* device */
  cl_platform_id plats[8];
  cl_uint nplat = 0;
  cl_device_id dev = NULL;
  if (clGetPlatformIDs(8, plats, &nplat) == CL_SUCCESS)
    for (cl_uint i = 0; i < nplat && !dev; i++)
      if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 1, &dev, NULL) != CL_SUCCESS) dev = NULL;
  if (!dev) {
    const char *allow = getenv("CLEMBED_ALLOW_NO_DEVICE");
    fprintf(stderr, "no OpenCL device\n");
    exit(allow && !strcmp(allow, "1") ? 77 : 1);
  }
  char name[256];
  clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL);
  printf("device: %s\n", name);
  cl_int err;
  cl_context cx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  CHECKCL(err);
  cl_command_queue q = clCreateCommandQueue(cx, dev, 0, &err);
  CHECKCL(err);
  char *lib = read_text(g_angle_cl);
  const char *srcs[2] = {lib, KERNEL};
  cl_program prog = clCreateProgramWithSource(cx, 2, srcs, NULL, &err);
  CHECKCL(err);
  if (clBuildProgram(prog, 1, &dev, "", NULL, NULL) != CL_SUCCESS) {
    char log[16384];
    clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
    EXPECT(0, "build failed:\n%s", log);
    return;
  }
  cl_kernel k = clCreateKernel(prog, "angle_test", &err);
  CHECKCL(err);
  size_t n = np * nf;
  cl_mem bpos = clCreateBuffer(cx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, np * sizeof *pos, pos, &err);
  CHECKCL(err);
  cl_mem bpie = clCreateBuffer(cx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nf * 8 * sizeof *pieces, pieces, &err);
  CHECKCL(err);
  cl_mem bout = clCreateBuffer(cx, CL_MEM_WRITE_ONLY, n * 4 * sizeof(float), NULL, &err);
  CHECKCL(err);
  cl_uint npu = (cl_uint)np, nfu = (cl_uint)nf;
  CHECKCL(clSetKernelArg(k, 0, sizeof bpos, &bpos));
  CHECKCL(clSetKernelArg(k, 1, sizeof npu, &npu));
  CHECKCL(clSetKernelArg(k, 2, sizeof bpie, &bpie));
  CHECKCL(clSetKernelArg(k, 3, sizeof nfu, &nfu));
  CHECKCL(clSetKernelArg(k, 4, sizeof bout, &bout));
  size_t local = 64, global = (n + local - 1) / local * local;
  CHECKCL(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL));
  float *out = malloc(n * 4 * sizeof *out);
  CHECKCL(clEnqueueReadBuffer(q, bout, CL_TRUE, 0, n * 4 * sizeof(float), out, 0, NULL, NULL));

  /* compare */
  double worst = 0.0, worst_f32 = 0.0, worst_band[7] = {0};
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t p = pos[i / nf];
    double wf = w[i % nf];
    double c = ref_cos_exact(p, wf), s = ref_sin_exact(p, wf);
    double e[4] = {fabs(out[4 * i] - c), fabs(out[4 * i + 1] - s), fabs(out[4 * i + 2] - c),
                   fabs(out[4 * i + 3] - s)};
    for (int j = 0; j < 4; j++) {
      float v = out[4 * i + j];
      if (!(e[j] <= 1e-6) || v > 1.0f || v < -1.0f) {
        if (bad++ < 10)
          fprintf(stderr, "FAIL p=%llu w=%a part %d: got %.9g exact %.12g\n", (unsigned long long)p, wf, j, v,
                  j % 2 ? s : c);
      }
      if (e[j] > worst) worst = e[j];
      for (int b = 0; b < 7; b++)
        if (p >= centers[b] && (b == 6 || p < centers[b + 1]) && e[j] > worst_band[b]) worst_band[b] = e[j];
    }
    /* what float32 p*w gives */
    float a32 = (float)p * (float)wf;
    double ef = fabs((double)sinf(a32) - s);
    if (ef > worst_f32) worst_f32 = ef;
  }
  printf("checked %zu values (%zu positions x %zu frequencies x 4)\n", n * 4, np, nf);
  printf("worst error %.3g (bound 1e-6); float32 p*w: worst %.3g\n", worst, worst_f32);
  printf("worst by position band [0,2^17) [2^17,2^20) [2^20,2^24) [2^24,2^28) [2^28,2^31) [2^31,2^32-1) [2^32-1]:");
  for (int b = 0; b < 7; b++) printf(" %.2g", worst_band[b]);
  printf("\n");
  clReleaseMemObject(bpos);
  clReleaseMemObject(bpie);
  clReleaseMemObject(bout);
  clReleaseKernel(k);
  clReleaseProgram(prog);
  clReleaseCommandQueue(q);
  clReleaseContext(cx);
  free(lib);
  free(out);
  free(pieces);
  free(w);
  EXPECT(bad == 0, "%zu of %zu values outside the bound 1e-6 (or outside [-1, 1])", bad, n * 4);
}

int main(int argc, char **argv) {
  /* the path of angle.cl comes first (but --list needs none) */
  if (argc > 1 && strncmp(argv[1], "--", 2) != 0) {
    g_angle_cl = argv[1];
    argv[1] = argv[0];
    argc--;
    argv++;
  } else if (argc < 2 || strcmp(argv[1], "--list")) {
    fprintf(stderr, "usage: test_angle ANGLE_CL [small] [CASE...]\n");
    return 2;
  }
  return tu_main(argc, argv, (tu_suite){.name = "test_angle"});
}
