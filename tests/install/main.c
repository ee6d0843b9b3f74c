/* A consumer of the installed library: only <clembed.h> and clembed::clembed.
 * Creates a context, looks up 3 ids, checks the values exactly.
 * Exit 0 on success, 1 on a failure, 77 when there is no OpenCL device and
 * CLEMBED_ALLOW_NO_DEVICE=1. */
#include <clembed.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  if (clembed_version_number() != CLEMBED_VERSION_NUMBER) {
    fprintf(stderr, "header version %d, library version %u\n", CLEMBED_VERSION_NUMBER, clembed_version_number());
    return 1;
  }
  clembed_context *ctx = NULL;
  clembed_status s = clembed_context_create(NULL, &ctx);
  if (s != CLEMBED_OK) {
    const char *allow = getenv("CLEMBED_ALLOW_NO_DEVICE");
    fprintf(stderr, "no OpenCL device: %s: %s\n", clembed_status_string(s), clembed_last_error_message());
    return (s == CLEMBED_ERR_NO_DEVICE && allow && !strcmp(allow, "1")) ? 77 : 1;
  }
  printf("device: %s\n", clembed_context_device_name(ctx));

  enum { V = 5, D = 3, N = 3 };
  float w[V * D], out[N * D];
  for (int i = 0; i < V * D; i++) w[i] = 0.5f * (float)i - 2.0f;
  const int64_t ids[N] = {4, 0, 2};
  clembed_matrix table = {0}, o = {0};
  clembed_ids dids = {0};
  int failed = 0;
#define TRY(call)                                                                                        \
  do {                                                                                                   \
    clembed_status t_ = (call);                                                                          \
    if (t_ != CLEMBED_OK) {                                                                              \
      fprintf(stderr, "%s: %s: %s\n", #call, clembed_status_string(t_), clembed_context_message(ctx)); \
      failed = 1;                                                                                        \
      goto done;                                                                                         \
    }                                                                                                    \
  } while (0)
  TRY(clembed_matrix_create(ctx, V, D, CLEMBED_F32, &table));
  TRY(clembed_matrix_write(ctx, &table, w, CLEMBED_F32));
  TRY(clembed_ids_create(ctx, ids, N, CLEMBED_I64, &dids));
  TRY(clembed_matrix_create(ctx, N, D, CLEMBED_F32, &o));
  TRY(clembed_lookup(ctx, &table, &dids, &o, 0, NULL, NULL));
  TRY(clembed_matrix_read(ctx, &o, out, CLEMBED_F32));
  for (int i = 0; i < N; i++)
    for (int k = 0; k < D; k++)
      if (out[i * D + k] != w[ids[i] * D + k]) {
        fprintf(stderr, "out[%d][%d] = %g, expected %g\n", i, k, out[i * D + k], w[ids[i] * D + k]);
        failed = 1;
      }
  if (!failed) printf("lookup of 3 ids: ok\n");
done:
  clembed_matrix_release(&table);
  clembed_matrix_release(&o);
  clembed_ids_release(&dids);
  clembed_context_destroy(ctx);
  return failed;
}
