/* Host-only tests of the RoPE frequencies and the exact-angle pieces
 * (src/ops/freq.c), no device. Named cases (test_util.h): --list names
 * them; run one with its name.
 *   hf_values:   frequencies against values computed by hand from Hugging Face
 *                transformers' formulas (modeling_rope_utils.py, in float64):
 *                Llama 3.1 (llama3), YaRN (two configurations, with their
 *                correction ranges and attention factors), NTK and linear;
 *   reference:   the library's frequencies equal reference_rope.h's, bit for
 *                bit, over a sweep of every scaling, base and dimension (so the
 *                device tests' exact values use the library's own doubles);
 *   errors:      every parameter the contract refuses gives a message;
 *   pieces:      the angle pieces are 7-bit digits and a remainder, and they
 *                add up to frac(2^16 w/2pi) and frac(w/2pi) within 2^-45. */
#include "test_util.h"
#include "../src/ops/freq.h"
#include "reference_rope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static clembed_rope rope(double base, size_t R, clembed_rope_scaling sc, double factor) {
  clembed_rope r;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  r.base = base;
  r.head_dim = R;
  r.layout = CLEMBED_ROPE_NEOX;
  r.scaling = sc;
  r.factor = factor;
  r.original_max_position = 8192;
  r.low_freq_factor = 1.0;
  r.high_freq_factor = 4.0;
  r.beta_fast = 32.0;
  r.beta_slow = 1.0;
  return r;
}

typedef struct kv {
  size_t k;
  double w;
} kv;

static void expect_values(const char *what, const clembed_rope *r, const kv *want, size_t n, double attention) {
  double w[512], a = -1.0;
  const char *why;
  size_t R = ce_rope_rotary_dim(r, &why);
  EXPECT(R > 0, "%s: %s", what, why ? why : "");
  const char *msg = ce_rope_frequencies(r, R, w, &a);
  EXPECT(msg == NULL, "%s: %s", what, msg ? msg : "");
  if (msg) return;
  for (size_t i = 0; i < n; i++)
    EXPECT(fabs(w[want[i].k] - want[i].w) <= 1e-15 * want[i].w, "%s: w[%zu] = %.17g, transformers gives %.17g", what,
           want[i].k, w[want[i].k], want[i].w);
  EXPECT(fabs(a - attention) <= 1e-15, "%s: attention factor %.17g, want %.17g", what, a, attention);
}

TU_CASE(hf_values) {
  /* Llama 3.1 8B: rope_theta 500000, head_dim 128, factor 8, low 1, high 4, original 8192 */
  clembed_rope r = rope(500000.0, 128, CLEMBED_ROPE_SCALING_LLAMA3, 8.0);
  const kv llama[] = {{0, 1.0},
                      {20, 0.016560440080994446},
                      {40, 3.428102195952591e-05},
                      {44, 1.509621717643313e-05},
                      {46, 1.0017868402809974e-05},
                      {48, 6.647869871181235e-06},
                      {50, 4.411534674558404e-06},
                      {52, 2.9274998701761677e-06},
                      {63, 3.068925988914511e-07}};
  expect_values("llama3", &r, llama, sizeof llama / sizeof *llama, 1.0);
  /* YaRN: base 10000, R 128, factor 4, original 4096: correction range [20, 46] */
  r = rope(10000.0, 128, CLEMBED_ROPE_SCALING_YARN, 4.0);
  r.original_max_position = 4096;
  const kv yarn[] = {{0, 1.0},
                     {19, 0.06493816315762113},
                     {20, 0.05623413251903491},
                     {21, 0.047292038501684786},
                     {30, 0.009488517882700576},
                     {45, 0.0004294025889973583},
                     {46, 0.000333380358040831},
                     {47, 0.00028869549617236453},
                     {63, 2.8869549617236455e-05}};
  expect_values("yarn", &r, yarn, sizeof yarn / sizeof *yarn, 1.138629436111989);
  /* YaRN with defaults for beta (0 means 32 and 1): base 1e6, R 64, factor 4, original 32768: range [11, 20] */
  r = rope(1e6, 64, CLEMBED_ROPE_SCALING_YARN, 4.0);
  r.original_max_position = 32768;
  r.beta_fast = r.beta_slow = 0.0;
  const kv yarn2[] = {{0, 1.0},
                      {5, 0.11547819846894582},
                      {10, 0.01333521432163324},
                      {15, 0.0010266176840396614},
                      {20, 4.445698525097307e-05},
                      {25, 5.133812566142866e-06},
                      {31, 3.84981631514873e-07}};
  expect_values("yarn2", &r, yarn2, sizeof yarn2 / sizeof *yarn2, 1.138629436111989);
  r.attention_factor = 0.5; /* given: used as is */
  expect_values("yarn2 attention", &r, yarn2, sizeof yarn2 / sizeof *yarn2, 0.5);
  /* NTK: base 10000 * 2^(64/62) = 20452.228712025368 */
  r = rope(10000.0, 64, CLEMBED_ROPE_SCALING_NTK, 2.0);
  const kv ntk[] = {{0, 1.0}, {1, 0.7333129507705318}, {16, 0.006992454992116262}, {31, 6.66760716081662e-05}};
  expect_values("ntk", &r, ntk, sizeof ntk / sizeof *ntk, 1.0);
  /* linear: 10000^(-2k/64) / 4; partial rotary (R = 32 of head_dim 64) */
  r = rope(10000.0, 64, CLEMBED_ROPE_SCALING_LINEAR, 4.0);
  r.rotary_dim = 32;
  const kv lin[] = {{0, 0.25}, {1, 0.5623413251903491 / 4.0}, {8, 0.01 / 4.0}, {15, 0.0001778279410038923 / 4.0}};
  expect_values("linear", &r, lin, sizeof lin / sizeof *lin, 1.0);
}

TU_CASE(reference) {
  const double bases[] = {1.5, 2.0, 10000.0, 500000.0, 1e6};
  const size_t dims[] = {4, 6, 64, 80, 128, 256};
  size_t n = 0;
  for (int sc = 0; sc <= 4; sc++)
    for (size_t b = 0; b < 5; b++)
      for (size_t d = 0; d < 6; d++)
        for (int f = 0; f < 3; f++) {
          const double factors[] = {0.5, 4.0, 32.0};
          clembed_rope r = rope(bases[b], dims[d], (clembed_rope_scaling)sc, factors[f]);
          if (sc == CLEMBED_ROPE_SCALING_YARN) r.original_max_position = 4096 << f;
          double w[256], rw[256], a = 0, ra = 0;
          const char *msg = ce_rope_frequencies(&r, dims[d], w, &a);
          EXPECT(msg == NULL, "scaling %d base %g R %zu: %s", sc, bases[b], dims[d], msg ? msg : "");
          EXPECT(ref_rope_freq(&r, dims[d], rw, &ra) == 0, "reference refused scaling %d", sc);
          if (msg) continue;
          for (size_t k = 0; k < dims[d] / 2; k++, n++)
            EXPECT(memcmp(&w[k], &rw[k], sizeof(double)) == 0, "scaling %d base %g R %zu k %zu: %a vs reference %a",
                   sc, bases[b], dims[d], k, w[k], rw[k]);
          EXPECT(a == ra, "scaling %d: attention %g vs %g", sc, a, ra);
        }
  printf("reference: %zu frequencies identical\n", n);
}

TU_CASE(errors) {
  double w[256], a;
  const char *why;
  clembed_rope r = rope(10000.0, 64, CLEMBED_ROPE_SCALING_NONE, 1.0);
  r.head_dim = 0;
  EXPECT(ce_rope_rotary_dim(&r, &why) == 0 && why, "head_dim 0 accepted");
  r.head_dim = 63;
  EXPECT(ce_rope_rotary_dim(&r, &why) == 0 && why && strstr(why, "odd"), "odd head_dim accepted");
  r.rotary_dim = 32;
  EXPECT(ce_rope_rotary_dim(&r, &why) == 32, "odd head_dim with even rotary_dim refused");
  r.rotary_dim = 31;
  EXPECT(ce_rope_rotary_dim(&r, &why) == 0 && why && strstr(why, "even"), "odd rotary_dim accepted");
  r.rotary_dim = 66;
  EXPECT(ce_rope_rotary_dim(&r, &why) == 0 && why && strstr(why, "<= head_dim"), "rotary_dim > head_dim accepted");
  struct {
    const char *name, *needle;
    clembed_rope r;
    size_t R;
  } bad[16];
  size_t nb = 0;
#define BAD(n, s, R_, code)                      \
  do {                                           \
    bad[nb].name = n;                            \
    bad[nb].needle = s;                          \
    bad[nb].R = R_;                              \
    bad[nb].r = rope(10000.0, 64, CLEMBED_ROPE_SCALING_NONE, 1.0); \
    { clembed_rope *x = &bad[nb].r; code; }      \
    nb++;                                        \
  } while (0)
  BAD("base 0", "base", 64, x->base = 0.0);
  BAD("base nan", "base", 64, x->base = NAN);
  BAD("base inf", "base", 64, x->base = INFINITY);
  BAD("layout 7", "layout", 64, x->layout = (clembed_rope_layout)7);
  BAD("scaling 9", "scaling", 64, x->scaling = (clembed_rope_scaling)9);
  BAD("linear factor 0", "factor", 64, (x->scaling = CLEMBED_ROPE_SCALING_LINEAR, x->factor = 0.0));
  BAD("yarn factor nan", "factor", 64, (x->scaling = CLEMBED_ROPE_SCALING_YARN, x->factor = NAN));
  BAD("ntk R 2", "NTK", 2, (x->scaling = CLEMBED_ROPE_SCALING_NTK, x->factor = 2.0));
  BAD("yarn base 1", "base > 1", 64, (x->scaling = CLEMBED_ROPE_SCALING_YARN, x->factor = 2.0, x->base = 1.0));
  BAD("yarn original 0", "original_max_position", 64,
      (x->scaling = CLEMBED_ROPE_SCALING_YARN, x->factor = 2.0, x->original_max_position = 0));
  BAD("yarn beta -1", "beta", 64, (x->scaling = CLEMBED_ROPE_SCALING_YARN, x->factor = 2.0, x->beta_fast = -1.0));
  BAD("llama3 high <= low", "freq_factor", 64,
      (x->scaling = CLEMBED_ROPE_SCALING_LLAMA3, x->factor = 8.0, x->high_freq_factor = 1.0));
  BAD("llama3 original 0", "original_max_position", 64,
      (x->scaling = CLEMBED_ROPE_SCALING_LLAMA3, x->factor = 8.0, x->original_max_position = 0));
  BAD("attention -1", "attention_factor", 64, x->attention_factor = -1.0);
  BAD("linear factor tiny", "not finite", 64, (x->scaling = CLEMBED_ROPE_SCALING_LINEAR, x->factor = 1e-320));
  for (size_t i = 0; i < nb; i++) {
    const char *msg = ce_rope_frequencies(&bad[i].r, bad[i].R, w, &a);
    EXPECT(msg && strstr(msg, bad[i].needle), "%s: %s (want a message naming '%s')", bad[i].name,
           msg ? msg : "accepted", bad[i].needle);
  }
}

/* v is a multiple of 2^-bits in [0, 1) with at most 7 significant bits: a digit at that place */
static int is_digit_grid(float v, int bits) {
  double m = ldexp((double)v, bits);
  return v >= 0.0f && m == floor(m) && m < 128.0;
}

TU_CASE(pieces) {
  uint64_t s = 12345;
  size_t n = 0;
  double worst = 0.0;
  for (int i = 0; i < 20000; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    double w = i < 4 ? (double[]){0.0, 1.0, 0.5, 6.283185307179586}[i]
                     : ldexp(1.0 + (double)(s >> 11) * 0x1p-53, -60 + (int)(s % 70));
    float p[CE_ANGLE_PIECES];
    ce_angle_pieces(w, p);
    for (int h = 0; h < 2; h++) {
      const float *d = p + 4 * h;
      EXPECT(is_digit_grid(d[0], 7), "w %a: digit 1 %a", w, d[0]);
      EXPECT(is_digit_grid(d[1], 14), "w %a: digit 2 %a", w, d[1]);
      EXPECT(is_digit_grid(d[2], 21), "w %a: digit 3 %a", w, d[2]);
      EXPECT(fabs(d[3]) <= 0x1p-22 + 0x1p-45, "w %a: rest %a", w, d[3]);
      /* the fraction it stands for, from the reference: r = p*w mod 2pi */
      ref_dd r = ref_angle(h == 0 ? 65536u : 1u, w);
      double t = r.hi / REF_2PI_1;
      double sum = (double)d[0] + (double)d[1] + (double)d[2] + (double)d[3];
      double diff = fabs((sum - t) - nearbyint(sum - t));
      if (diff > worst) worst = diff;
      EXPECT(diff <= 0x1p-45, "w %a (%s): pieces %a, fraction %a", w, h ? "w" : "2^16 w", sum, t);
      n++;
    }
  }
  printf("pieces: %zu fractions, worst %.3g turns (bound 2^-45 = %.3g)\n", n, worst, 0x1p-45);
}

int main(int argc, char **argv) { return tu_main(argc, argv, (tu_suite){.name = "test_rope_freq"}); }
