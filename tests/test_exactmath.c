/* cl/lib/exactmath.cl: the logarithm, square root, sine and cosine of the
 * normal initialisation, built from correctly rounded operations only.
 *
 * The same file is compiled here as C (FP contraction off), so the host
 * computes the bits every device must compute. Cases (all run by default, or
 * name some on the command line, --list names them; `small` checks a subset on
 * the device, for Oclgrind):
 *   host_accuracy  every one of the 2^24 inputs u = k 2^-24 (k = 1 .. 2^24) and
 *                  t = k 2^-24 (k = 0 .. 2^24 - 1) against float64: -2 ln u and
 *                  sqrt(-2 ln u) within 1 ulp, sin(2 pi t) and cos(2 pi t) within
 *                  2 ulp and exact at the quarter turns; Box-Muller outputs of
 *                  2^20 random word pairs within 4 ulp of float64 Box-Muller;
 *                  the square root of 2^16 other floats within 1 ulp.
 *   device_bits    the device's bits equal the host's for every input (small:
 *                  every 61st), from the scalar functions and from the 16-lane
 *                  ones, so every device gives the same bits as every other (the
 *                  suite runs this on POCL, rusticl and Oclgrind).
 *   box_muller     the device's Box-Muller pairs (scalar and 16-lane) equal the
 *                  host's, bit for bit. */
#include "test_util.h"

#include <CL/cl.h>
#include <float.h>

#include "exactmath_host.h"


/* ulp of a float64 value as a float32 (the spacing of floats at |x|). */
static double ulp32(double x) {
  x = fabs(x);
  if (x < 0x1p-126) return 0x1p-149;
  int e;
  frexp(x, &e);
  return ldexp(1.0, e - 24);
}

static double ulps(float got, double want) {
  if (want == 0.0) return got == 0.0f ? 0.0 : INFINITY;
  return fabs((double)got - want) / ulp32(want);
}

/* sin and cos of 2 pi t in float64, exact at the quarter turns */
static void sincos_turns64(double t, double *s, double *c) {
  const double pi = 3.14159265358979323846;
  if (t == 0.0 || t == 0.25 || t == 0.5 || t == 0.75) {
    *s = t == 0.25 ? 1.0 : t == 0.75 ? -1.0 : 0.0;
    *c = t == 0.0 ? 1.0 : t == 0.5 ? -1.0 : 0.0;
    return;
  }
  *s = sin(2.0 * pi * t);
  *c = cos(2.0 * pi * t);
}

static uint64_t xorshift(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

TU_CASE(host_accuracy) {
  double worst[4] = {0, 0, 0, 0};
  uint32_t where[4] = {0, 0, 0, 0};
  for (uint32_t k = 0; k < (1u << 24); k++) {
    unsigned int a = k << 8 | (k & 0xFF); /* the low 8 bits must not matter */
    float u = ce_xm_unit_open0(a), t = ce_xm_unit(a);
    double L = -2.0 * log((double)u);
    float l = ce_xm_neg2log(u), r = ce_xm_sqrt(l), s, c;
    ce_xm_sincos_turns(t, &s, &c);
    double S, C;
    sincos_turns64((double)t, &S, &C);
    double e[4] = {ulps(l, L), ulps(r, sqrt(L)), ulps(s, S), ulps(c, C)};
    for (int i = 0; i < 4; i++)
      if (!(e[i] <= worst[i])) {
        worst[i] = e[i];
        where[i] = k;
      }
  }
  printf("host_accuracy: -2 ln u %.3f ulp (k %u), radius %.3f ulp (k %u), sin %.3f ulp (k %u), cos %.3f ulp (k %u)\n",
         worst[0], where[0], worst[1], where[1], worst[2], where[2], worst[3], where[3]);
  EXPECT(worst[0] <= 1.0, "-2 ln u: %.3f ulp at k = %u", worst[0], where[0]);
  EXPECT(worst[1] <= 1.0, "radius: %.3f ulp at k = %u", worst[1], where[1]);
  EXPECT(worst[2] <= 2.0, "sin: %.3f ulp at k = %u", worst[2], where[2]);
  EXPECT(worst[3] <= 2.0, "cos: %.3f ulp at k = %u", worst[3], where[3]);
  /* exact values */
  float s, c;
  ce_xm_sincos_turns(0.25f, &s, &c);
  EXPECT(s == 1.0f && as_uint(c) == 0u, "quarter turn: sin %a cos %a (+0)", s, c);
  ce_xm_sincos_turns(0.5f, &s, &c);
  EXPECT(as_uint(s) == 0u && c == -1.0f, "half turn: sin %a (+0) cos %a", s, c);
  ce_xm_sincos_turns(0.75f, &s, &c);
  EXPECT(s == -1.0f && as_uint(c) == 0u, "three quarters: sin %a cos %a (+0)", s, c);
  ce_xm_sincos_turns(0.0f, &s, &c);
  EXPECT(s == 0.0f && c == 1.0f, "no turn: sin %a cos %a", s, c);
  EXPECT(as_uint(ce_xm_neg2log(1.0f)) == 0u && as_uint(ce_xm_sqrt(0.0f)) == 0u, "u = 1 gives radius +0");
  float z0, z1;
  ce_xm_box_muller(0xFFFFFF00u, 0xC0000000u, &z0, &z1); /* radius 0, t = 3/4 */
  EXPECT(as_uint(z0) == 0u && as_uint(z1) == 0u, "radius 0: (%a, %a) must be (+0, +0)", z0, z1);
  /* Box-Muller on random word pairs */
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  double worst_z = 0.0;
  for (int i = 0; i < (1 << 20); i++) {
    uint64_t w = xorshift(&x);
    unsigned int a = (unsigned int)w, b = (unsigned int)(w >> 32);
    float z0, z1;
    ce_xm_box_muller(a, b, &z0, &z1);
    double R = sqrt(-2.0 * log((double)ce_xm_unit_open0(a))), S, C;
    sincos_turns64((double)ce_xm_unit(b), &S, &C);
    double e0 = ulps(z0, R * C), e1 = ulps(z1, R * S);
    if (e0 > worst_z) worst_z = e0;
    if (e1 > worst_z) worst_z = e1;
  }
  printf("host_accuracy: Box-Muller %.3f ulp over 2^20 pairs\n", worst_z);
  EXPECT(worst_z <= 4.0, "Box-Muller: %.3f ulp", worst_z);
  /* the square root over the whole range it promises (normal floats below 2^64) */
  double worst_sqrt = 0.0;
  for (int i = 0; i < (1 << 16); i++) {
    float v = as_float(0x00800000u + (unsigned int)(xorshift(&x) % (0x5F800000u - 0x00800000u)));
    double e = ulps(ce_xm_sqrt(v), sqrt((double)v));
    if (e > worst_sqrt) worst_sqrt = e;
  }
  EXPECT(worst_sqrt <= 1.0, "sqrt: %.3f ulp", worst_sqrt);
  EXPECT(ce_xm_sqrt(0.0f) == 0.0f, "sqrt(0)");
}

/* ------------------------------------------------------------- device */

static const char *eval_source =
    "__kernel void xm_eval(__global uint *out, uint stride, uint n) {\n"
    "  uint i = get_global_id(0);\n"
    "  if (i >= n) return;\n"
    "  uint k = (i * stride) & 0xFFFFFFu;\n"
    "  uint a = k << 8 | (k & 0xFFu);\n"
    "  float l = ce_xm_neg2log(ce_xm_unit_open0(a)), s, c;\n"
    "  ce_xm_sincos_turns(ce_xm_unit(a), &s, &c);\n"
    "  out[4 * (ulong)i] = as_uint(l);\n"
    "  out[4 * (ulong)i + 1] = as_uint(ce_xm_sqrt(l));\n"
    "  out[4 * (ulong)i + 2] = as_uint(s);\n"
    "  out[4 * (ulong)i + 3] = as_uint(c);\n"
    "}\n"
    "__kernel void xm_eval16(__global uint *out, uint stride, uint n) {\n"
    "  uint i0 = get_global_id(0) * 16;\n"
    "  if (i0 >= n) return;\n"
    "  uint16 i = (uint16)(i0) + (uint16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);\n"
    "  uint16 k = (i * stride) & (uint16)(0xFFFFFFu);\n"
    "  uint16 a = k << 8 | (k & (uint16)(0xFFu));\n"
    "  float16 l = ce_xm_neg2log16(ce_xm_unit_open016(a)), s, c;\n"
    "  ce_xm_sincos_turns16(ce_xm_unit16(a), &s, &c);\n"
    "  uint16 r = as_uint16(ce_xm_sqrt16(l)), lb = as_uint16(l), sb = as_uint16(s), cb = as_uint16(c);\n"
    "  for (uint j = 0; j < 16 && i0 + j < n; j++) {\n"
    "    ulong o = 4 * (ulong)(i0 + j);\n"
    "    uint lv[16], rv[16], sv[16], cv[16];\n"
    "    vstore16(lb, 0, lv); vstore16(r, 0, rv); vstore16(sb, 0, sv); vstore16(cb, 0, cv);\n"
    "    out[o] = lv[j]; out[o + 1] = rv[j]; out[o + 2] = sv[j]; out[o + 3] = cv[j];\n"
    "  }\n"
    "}\n"
    "__kernel void xm_box_muller16(__global const uint *in, __global float *out, uint n) {\n"
    "  uint i0 = get_global_id(0) * 16;\n"
    "  if (i0 >= n) return;\n"
    "  uint a[16], b[16];\n"
    "  for (uint j = 0; j < 16; j++) {\n"
    "    a[j] = i0 + j < n ? in[2 * (i0 + j)] : 0u;\n"
    "    b[j] = i0 + j < n ? in[2 * (i0 + j) + 1] : 0u;\n"
    "  }\n"
    "  float16 z0, z1;\n"
    "  ce_xm_box_muller16(vload16(0, a), vload16(0, b), &z0, &z1);\n"
    "  float x0[16], x1[16];\n"
    "  vstore16(z0, 0, x0); vstore16(z1, 0, x1);\n"
    "  for (uint j = 0; j < 16 && i0 + j < n; j++) { out[2 * (i0 + j)] = x0[j]; out[2 * (i0 + j) + 1] = x1[j]; }\n"
    "}\n"
    "__kernel void xm_box_muller(__global const uint2 *in, __global float2 *out, uint n) {\n"
    "  uint i = get_global_id(0);\n"
    "  if (i >= n) return;\n"
    "  float z0, z1;\n"
    "  ce_xm_box_muller(in[i].x, in[i].y, &z0, &z1);\n"
    "  out[i] = (float2)(z0, z1);\n"
    "}\n";

typedef struct device {
  cl_context cl;
  cl_device_id dev;
  cl_command_queue queue;
  cl_program program;
} device;

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  if (s) s[n] = 0;
  fclose(f);
  return s;
}

/* Builds exactmath.cl + the evaluation kernels on the context's device. */
static int device_open(clembed_context *ctx, device *d) {
  memset(d, 0, sizeof *d);
  d->queue = clembed_context_queue(ctx);
  clGetCommandQueueInfo(d->queue, CL_QUEUE_CONTEXT, sizeof d->cl, &d->cl, NULL);
  clGetCommandQueueInfo(d->queue, CL_QUEUE_DEVICE, sizeof d->dev, &d->dev, NULL);
  char *lib = read_text(CLEMBED_SOURCE_DIR "/cl/lib/exactmath.cl");
  EXPECT(lib != NULL, "cannot read %s", CLEMBED_SOURCE_DIR "/cl/lib/exactmath.cl");
  if (!lib) return -1;
  const char *srcs[2] = {lib, eval_source};
  cl_int e;
  d->program = clCreateProgramWithSource(d->cl, 2, srcs, NULL, &e);
  if (e == CL_SUCCESS) e = clBuildProgram(d->program, 1, &d->dev, "-cl-std=CL1.2", NULL, NULL);
  if (e != CL_SUCCESS) {
    char log[8192] = "";
    if (d->program) clGetProgramBuildInfo(d->program, d->dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    EXPECT(0, "building exactmath.cl: %d\n%s", e, log);
  }
  free(lib);
  return e == CL_SUCCESS ? 0 : -1;
}

static void device_close(device *d) {
  if (d->program) clReleaseProgram(d->program);
}

static void device_bits_kernel(device *dd, const char *kernel_name, size_t per_item);

static void device_bits(clembed_context *ctx) {
  device d;
  if (device_open(ctx, &d)) {
    device_close(&d);
    return;
  }
  device_bits_kernel(&d, "xm_eval", 1);
  device_bits_kernel(&d, "xm_eval16", 16);
  device_close(&d);
}

/* Runs kernel_name (one input per work-item, or 16) and compares with the host. */
static void device_bits_kernel(device *dd, const char *kernel_name, size_t per_item) {
  device d = *dd;
  cl_uint stride = tu_small ? 61 : 1, n = tu_small ? (1u << 24) / 61 + 1 : (1u << 24);
  size_t bytes = (size_t)n * 16;
  cl_int e;
  cl_mem out = clCreateBuffer(d.cl, CL_MEM_WRITE_ONLY, bytes, NULL, &e);
  cl_kernel k = e == CL_SUCCESS ? clCreateKernel(d.program, kernel_name, &e) : NULL;
  uint32_t *got = malloc(bytes);
  if (e == CL_SUCCESS) e = clSetKernelArg(k, 0, sizeof out, &out);
  if (e == CL_SUCCESS) e = clSetKernelArg(k, 1, sizeof stride, &stride);
  if (e == CL_SUCCESS) e = clSetKernelArg(k, 2, sizeof n, &n);
  size_t local = 64, items = (n + per_item - 1) / per_item, global = (items + local - 1) / local * local;
  if (e == CL_SUCCESS) e = clEnqueueNDRangeKernel(d.queue, k, 1, NULL, &global, &local, 0, NULL, NULL);
  if (e == CL_SUCCESS && got) e = clEnqueueReadBuffer(d.queue, out, CL_TRUE, 0, bytes, got, 0, NULL, NULL);
  EXPECT(e == CL_SUCCESS && got, "running %s: %d", kernel_name, e);
  if (e == CL_SUCCESS && got) {
    size_t bad[4] = {0, 0, 0, 0};
    const char *what[4] = {"-2 ln u", "radius", "sin", "cos"};
    for (cl_uint i = 0; i < n; i++) {
      uint32_t kk = (i * stride) & 0xFFFFFFu;
      unsigned int a = kk << 8 | (kk & 0xFF);
      float l = ce_xm_neg2log(ce_xm_unit_open0(a)), s, c;
      ce_xm_sincos_turns(ce_xm_unit(a), &s, &c);
      uint32_t want[4] = {as_uint(l), as_uint(ce_xm_sqrt(l)), as_uint(s), as_uint(c)};
      for (int j = 0; j < 4; j++)
        if (got[4 * (size_t)i + j] != want[j]) {
          if (bad[j] < 3)
            fprintf(stderr, "%s: k = %u: device %08x, host %08x\n", what[j], kk, got[4 * (size_t)i + j], want[j]);
          bad[j]++;
        }
    }
    for (int j = 0; j < 4; j++)
      EXPECT(bad[j] == 0, "%s: %s: %zu of %u inputs differ from the host's bits", kernel_name, what[j], bad[j], n);
    printf("device_bits: %s: %u inputs, each of 4 functions\n", kernel_name, n);
  }
  free(got);
  if (k) clReleaseKernel(k);
  if (out) clReleaseMemObject(out);
}

static void box_muller_kernel(device *dd, const char *kernel_name, size_t per_item);

static void box_muller(clembed_context *ctx) {
  device d;
  if (device_open(ctx, &d)) {
    device_close(&d);
    return;
  }
  box_muller_kernel(&d, "xm_box_muller", 1);
  box_muller_kernel(&d, "xm_box_muller16", 16);
  device_close(&d);
}

static void box_muller_kernel(device *dd, const char *kernel_name, size_t per_item) {
  device d = *dd;
  cl_uint n = tu_small ? 4096 : (1u << 20);
  uint32_t *in = malloc((size_t)n * 8);
  float *got = malloc((size_t)n * 8);
  uint64_t x = 0x2545F4914F6CDD1DULL;
  for (cl_uint i = 0; in && i < n; i++) {
    uint64_t w = xorshift(&x);
    in[2 * i] = (uint32_t)w;
    in[2 * i + 1] = (uint32_t)(w >> 32);
  }
  if (in) { /* the extremes: u = 2^-24 and u = 1, each quarter turn */
    in[0] = 0x000000FFu, in[1] = 0u;
    in[2] = 0xFFFFFF00u, in[3] = 0x40000000u;
    in[4] = 0x12345678u, in[5] = 0x80000000u;
    in[6] = 0x00000000u, in[7] = 0xC0000000u;
  }
  cl_int e = in && got ? CL_SUCCESS : CL_OUT_OF_HOST_MEMORY;
  cl_mem bin = NULL, bout = NULL;
  cl_kernel k = NULL;
  if (e == CL_SUCCESS) bin = clCreateBuffer(d.cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)n * 8, in, &e);
  if (e == CL_SUCCESS) bout = clCreateBuffer(d.cl, CL_MEM_WRITE_ONLY, (size_t)n * 8, NULL, &e);
  if (e == CL_SUCCESS) k = clCreateKernel(d.program, kernel_name, &e);
  if (e == CL_SUCCESS) e = clSetKernelArg(k, 0, sizeof bin, &bin);
  if (e == CL_SUCCESS) e = clSetKernelArg(k, 1, sizeof bout, &bout);
  if (e == CL_SUCCESS) e = clSetKernelArg(k, 2, sizeof n, &n);
  size_t local = 64, items = (n + per_item - 1) / per_item, global = (items + local - 1) / local * local;
  if (e == CL_SUCCESS) e = clEnqueueNDRangeKernel(d.queue, k, 1, NULL, &global, &local, 0, NULL, NULL);
  if (e == CL_SUCCESS) e = clEnqueueReadBuffer(d.queue, bout, CL_TRUE, 0, (size_t)n * 8, got, 0, NULL, NULL);
  EXPECT(e == CL_SUCCESS, "running %s: %d", kernel_name, e);
  if (e == CL_SUCCESS) {
    size_t bad = 0;
    for (cl_uint i = 0; i < n; i++) {
      float z0, z1;
      ce_xm_box_muller(in[2 * i], in[2 * i + 1], &z0, &z1);
      if (as_uint(z0) != as_uint(got[2 * i]) || as_uint(z1) != as_uint(got[2 * i + 1])) {
        if (bad < 3)
          fprintf(stderr, "words %08x %08x: device (%a, %a), host (%a, %a)\n", in[2 * i], in[2 * i + 1], got[2 * i],
                  got[2 * i + 1], z0, z1);
        bad++;
      }
    }
    EXPECT(bad == 0, "%s: %zu of %u Box-Muller pairs differ from the host's bits", kernel_name, bad, n);
    printf("box_muller: %s: %u pairs\n", kernel_name, n);
  }
  free(in);
  free(got);
  if (k) clReleaseKernel(k);
  if (bin) clReleaseMemObject(bin);
  if (bout) clReleaseMemObject(bout);
}

/* The device cases open the test device when the first of them runs, so that
 * host_accuracy alone needs none. */
static clembed_context *g_device = NULL;
static clembed_context *device_context(void) {
  if (!g_device) g_device = tu_context();
  return g_device;
}
TU_CASE(device_bits) { device_bits(device_context()); }
TU_CASE(box_muller) { box_muller(device_context()); }

static void teardown(clembed_context *unused) {
  (void)unused;
  clembed_context_destroy(g_device);
  g_device = NULL;
}

int main(int argc, char **argv) {
  return tu_main(argc, argv, (tu_suite){.name = "test_exactmath", .teardown = teardown});
}
