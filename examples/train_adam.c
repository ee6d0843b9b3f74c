/* Training an embedding table with Adam, from C.
 *
 * The table learns to map each token to a target vector: each step looks up
 * a batch of random tokens, takes the squared error against the targets on
 * the host, and hands its gradient to clembed_optimizer_step, which folds it
 * per row and steps the rows (and their Adam moments) that occur in the batch.
 * The loss falls from about 1 to near 0; the program exits with status 1 if
 * it does not fall below a twentieth of where it started.
 *
 *   cc train_adam.c -lclembed -lOpenCL -lm && ./a.out [device]
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

int main(int argc, char **argv) {
  enum { V = 64, D = 16, N = 256, STEPS = 150 };
  clembed_context *ctx = NULL;
  clembed_matrix table = {0}, m = {0}, u = {0}, out = {0}, grad = {0};
  clembed_ids ids = {0};
  static float target[V * D], got[N * D], g[N * D];
  int32_t batch[N];
  double first = 0.0, loss = 0.0;
  int rc = 1;
  unsigned rng = 12345u;
  for (int v = 0; v < V; v++)
    for (int c = 0; c < D; c++) target[v * D + c] = (float)sin(0.37 * v + 1.3 * c);

  TRY(clembed_context_create(argc > 1 ? argv[1] : NULL, &ctx));
  TRY(clembed_matrix_create(ctx, V, D, CLEMBED_F32, &table));
  TRY(clembed_matrix_create(ctx, V, D, CLEMBED_F32, &m)); /* Adam's moments start at zero */
  TRY(clembed_matrix_create(ctx, V, D, CLEMBED_F32, &u));
  TRY(clembed_matrix_create(ctx, N, D, CLEMBED_F32, &out));
  TRY(clembed_matrix_create(ctx, N, D, CLEMBED_F32, &grad));
  TRY(clembed_matrix_init_normal(ctx, &table, 0.0f, 0.5f, 42, 0, NULL, NULL));

  clembed_optimizer adam = clembed_optimizer_defaults(CLEMBED_ADAM);
  adam.learning_rate = 0.05f;
  adam.state = &m;
  adam.state2 = &u;
  clembed_backward_options bo = clembed_backward_defaults();

  for (int step = 1; step <= STEPS; step++) {
    for (int i = 0; i < N; i++) {
      rng = rng * 1664525u + 1013904223u;
      batch[i] = (int32_t)((rng >> 8) % V);
    }
    clembed_ids_release(&ids);
    TRY(clembed_ids_create(ctx, batch, N, CLEMBED_I32, &ids));
    TRY(clembed_lookup(ctx, &table, &ids, &out, 0, NULL, NULL));
    TRY(clembed_matrix_read(ctx, &out, got, CLEMBED_F32));
    /* loss = mean over the batch of 0.5 * |row - target|^2; its gradient */
    loss = 0.0;
    for (int i = 0; i < N; i++)
      for (int c = 0; c < D; c++) {
        float diff = got[i * D + c] - target[batch[i] * D + c];
        loss += 0.5 * diff * diff / N;
        g[i * D + c] = diff / N;
      }
    if (step == 1) first = loss;
    if (step == 1 || step % 25 == 0) printf("step %3d  loss %.6f\n", step, loss);
    TRY(clembed_matrix_write(ctx, &grad, g, CLEMBED_F32));
    adam.step = (uint64_t)step; /* counted by the caller */
    TRY(clembed_optimizer_step(ctx, &grad, &ids, &bo, &adam, &table, 0, NULL, NULL));
  }
  TRY(clembed_finish(ctx));
  rc = loss < first / 20.0 ? 0 : 1;
  printf("loss %.6f -> %.6f: %s\n", first, loss, rc ? "did not fall enough" : "trained");
done:
  clembed_ids_release(&ids);
  clembed_matrix_release(&table);
  clembed_matrix_release(&m);
  clembed_matrix_release(&u);
  clembed_matrix_release(&out);
  clembed_matrix_release(&grad);
  clembed_context_destroy(ctx);
  return rc;
}
