/* A small recommendation model trained from C: two sparse features, pooled
 * bags, row-wise Adagrad.
 *
 * Each sample is a user: the bag of items they clicked (a variable number,
 * pooled by MEAN from an items table) and their city (one id, SUM from a
 * cities table). One clembed_embedding_bags call pools both features into a
 * batch x (16 + 8) matrix (the features side by side); a logistic regression
 * on the host predicts whether the user clicks a shown item, and the gradient
 * of its cross-entropy with respect to the pooled rows goes to
 * clembed_bags_optimizer_step, which folds each table's contributions per row
 * (no dense gradient) and steps the rows that occur, with row-wise Adagrad
 * (FBGEMM's, one state value per row). The labels come from a hidden rule of
 * the same form, so the loss can fall; the program exits with status 1 if it
 * does not fall below 70% of where it started.
 *
 *   cc train_bags.c -lclembed -lOpenCL -lm && ./a.out [device]
 */
#include "clembed.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define TRY(call)                                                                              \
  do {                                                                                         \
    clembed_status s_ = (call);                                                                \
    if (s_ != CLEMBED_OK) {                                                                    \
      fprintf(stderr, "%s: %s: %s\n", #call, clembed_status_string(s_),                        \
              ctx ? clembed_context_message(ctx) : clembed_last_error_message());              \
      goto done;                                                                               \
    }                                                                                          \
  } while (0)

enum { ITEMS = 500, CITIES = 40, DI = 16, DC = 8, D = DI + DC, B = 256, MAXCLICKS = 12, STEPS = 60 };

static unsigned rng = 2024u;
static unsigned next(unsigned n) {
  rng = rng * 1664525u + 1013904223u;
  return (rng >> 8) % n;
}

int main(int argc, char **argv) {
  clembed_context *ctx = NULL;
  clembed_matrix items = {0}, cities = {0}, items_m = {0}, cities_m = {0}, pooled = {0}, grad = {0};
  clembed_ids clicks = {0}, click_off = {0}, city = {0};
  static int32_t click_ids[B * MAXCLICKS], offs[B + 1], city_ids[B];
  static float label[B], x[B * D], g[B * D], w[D], secret_item[ITEMS], secret_city[CITIES];
  double first = 0.0, loss = 0.0;
  float bias = 0.0f;
  int rc = 1;

  /* the hidden rule: a user clicks when their items and city add up to more than 0 */
  for (int v = 0; v < ITEMS; v++) secret_item[v] = (float)sin(0.61 * v);
  for (int v = 0; v < CITIES; v++) secret_city[v] = (float)cos(1.7 * v);
  offs[0] = 0;
  for (int b = 0; b < B; b++) {
    int len = 1 + (int)next(MAXCLICKS);
    float score = 0.0f;
    for (int k = 0; k < len; k++) {
      int32_t v = (int32_t)next(ITEMS);
      click_ids[offs[b] + k] = v;
      score += secret_item[v] / (float)len;
    }
    offs[b + 1] = offs[b] + len;
    city_ids[b] = (int32_t)next(CITIES);
    label[b] = score + 0.5f * secret_city[city_ids[b]] > 0.0f ? 1.0f : 0.0f;
  }
  for (int c = 0; c < D; c++) w[c] = 0.1f;

  TRY(clembed_context_create(argc > 1 ? argv[1] : NULL, &ctx));
  TRY(clembed_matrix_create(ctx, ITEMS, DI, CLEMBED_F32, &items));
  TRY(clembed_matrix_create(ctx, CITIES, DC, CLEMBED_F32, &cities));
  TRY(clembed_matrix_create(ctx, ITEMS, 1, CLEMBED_F32, &items_m)); /* row-wise Adagrad: a value per row */
  TRY(clembed_matrix_create(ctx, CITIES, 1, CLEMBED_F32, &cities_m));
  TRY(clembed_matrix_create(ctx, B, D, CLEMBED_F32, &pooled));
  TRY(clembed_matrix_create(ctx, B, D, CLEMBED_F32, &grad));
  TRY(clembed_matrix_init_normal(ctx, &items, 0.0f, 0.1f, 1, 0, NULL, NULL));
  TRY(clembed_matrix_init_normal(ctx, &cities, 0.0f, 0.1f, 2, 0, NULL, NULL));
  TRY(clembed_ids_create(ctx, click_ids, (size_t)offs[B], CLEMBED_I32, &clicks));
  TRY(clembed_ids_create(ctx, offs, B + 1, CLEMBED_I32, &click_off));
  TRY(clembed_ids_create(ctx, city_ids, B, CLEMBED_I32, &city));

  /* option structs start from their _defaults() (which set struct_size), then the fields wanted */
  clembed_bag_feature features[2] = {clembed_bag_feature_defaults(), clembed_bag_feature_defaults()};
  features[0].table = &items;
  features[0].ids = &clicks;
  features[0].offsets = &click_off;
  features[0].options.mode = CLEMBED_BAG_MEAN;
  features[1].table = &cities; /* offsets NULL: fixed bags of one id */
  features[1].ids = &city;
  clembed_optimizer opt[2] = {clembed_optimizer_defaults(CLEMBED_ROWWISE_ADAGRAD),
                              clembed_optimizer_defaults(CLEMBED_ROWWISE_ADAGRAD)};
  opt[0].learning_rate = opt[1].learning_rate = 0.5f;
  opt[0].state = &items_m;
  opt[1].state = &cities_m;

  for (int step = 1; step <= STEPS; step++) {
    TRY(clembed_embedding_bags(ctx, features, 2, &pooled, 0, NULL, NULL));
    TRY(clembed_matrix_read(ctx, &pooled, x, CLEMBED_F32));
    /* p = sigmoid(w . x + bias); loss = mean cross-entropy; dloss/dx = (p - y) w / B */
    loss = 0.0;
    float gw[D] = {0}, gb = 0.0f;
    for (int b = 0; b < B; b++) {
      float z = bias;
      for (int c = 0; c < D; c++) z += w[c] * x[b * D + c];
      float p = 1.0f / (1.0f + expf(-z)), e = (p - label[b]) / B;
      loss -= (label[b] > 0.5f ? log(p + 1e-7) : log(1.0 - p + 1e-7)) / B;
      for (int c = 0; c < D; c++) {
        g[b * D + c] = e * w[c];
        gw[c] += e * x[b * D + c];
      }
      gb += e;
    }
    if (step == 1) first = loss;
    if (step == 1 || step % 10 == 0) printf("step %3d  loss %.6f\n", step, loss);
    for (int c = 0; c < D; c++) w[c] -= 2.0f * gw[c]; /* the dense part, plain SGD on the host */
    bias -= 2.0f * gb;
    TRY(clembed_matrix_write(ctx, &grad, g, CLEMBED_F32));
    TRY(clembed_bags_optimizer_step(ctx, features, 2, &grad, opt, 0, NULL, NULL));
  }
  TRY(clembed_finish(ctx));
  rc = loss < 0.7 * first ? 0 : 1;
  printf("loss %.6f -> %.6f: %s\n", first, loss, rc ? "did not fall enough" : "trained");
done:
  clembed_ids_release(&clicks);
  clembed_ids_release(&click_off);
  clembed_ids_release(&city);
  clembed_matrix_release(&items);
  clembed_matrix_release(&cities);
  clembed_matrix_release(&items_m);
  clembed_matrix_release(&cities_m);
  clembed_matrix_release(&pooled);
  clembed_matrix_release(&grad);
  clembed_context_destroy(ctx);
  return rc;
}
