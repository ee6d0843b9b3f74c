/* bench_mpi_sets: a recommendation model's features over MPI ranks, one
 * feature set under the planner's plan and under each forced plan, against
 * its parts measured in the same run (docs/scaling.md).
 *
 *   mpirun -n 2 bench_mpi_sets [--features F] [--rows R] [--cols C] [--bags B] [--pooling L]
 *                              [--plans auto,table,row,column,table_row] [--reps K] [--quick]
 *                              [--device SPEC]
 *
 * F tables of R x C F32 (the bench's 26 features of 100,000 x 64 by default),
 * every rank passing B bags of L ids a feature (data parallel: the global
 * batch is the ranks' batches one after another), ids uniform over each
 * table. For each plan, per repetition, one part after another on every rank
 * (a barrier between; a time is the slowest rank's):
 *   sharded forward  clembed_mpi_embedding_bags of the rank's bags;
 *   local forward    the device work the plan gives the rank: one
 *                    clembed_embedding_bags of every rank's bags of the
 *                    tables (or column blocks) it holds whole, and one of its
 *                    own bags over its rows of the tables cut by rows (ids
 *                    taken into its shard);
 *   raw exchange     two MPI_Alltoallv of exactly the bytes the plan must move:
 *                    to each owner the bags of its whole tables (offsets and
 *                    ids) and the distinct ids of its rows; back the pooled
 *                    rows (F32) and the rows asked for;
 *   sharded step     clembed_mpi_bags_optimizer_step, row-wise Adagrad (COLUMN
 *                    plans: Adagrad, whose state is per value; the local step
 *                    there too);
 *   local step       clembed_bags_optimizer_step of the same device work;
 *   raw exchange     one MPI_Alltoallv: the bags and their gradient rows to
 *                    the owners of whole tables, each taken id's contribution
 *                    (its row index and an F32 row) to the owner of its row.
 * A warm-up run of the first plan comes first, not printed. Printed per
 * plan: the medians and sharded / (local + raw), the figure the calls are
 * judged by; the plan's choices; at the end the planner's time against the
 * fastest forced plan. Uses the public APIs and MPI only. */
#define _POSIX_C_SOURCE 200809L
#include "clembed_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_NAME "bench_mpi_sets"
#include "bench_mpi_util.h"
#include "timing.h"

static int rank, size;
static clembed_context *ctx;



static uint64_t next(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}

/* Rank r's ids of feature f: B*L, uniform over rows (a function of r and f). */
static void ids_of(int r, size_t f, size_t n, size_t rows, int64_t *out) {
  uint64_t s = 88172645463325252ULL ^ ((uint64_t)r * 0x9E3779B97F4A7C15ULL + f * 0xBF58476D1CE4E5B9ULL + 1);
  for (size_t i = 0; i < n; i++) out[i] = (int64_t)(next(&s) % rows);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Row r's owner among ranks [first, first + k) splitting rows evenly (as the library does). */
static int row_owner(size_t rows, int first, int k, int64_t r) {
  size_t q = rows / (size_t)k, rem = rows % (size_t)k;
  for (int j = k - 1; j >= 0; j--) {
    size_t lo = (size_t)j * q + (size_t)j * rem / (size_t)k;
    if ((size_t)r >= lo) return first + j;
  }
  return first;
}

static void block_of(size_t cols, int first, int ranks, int d, size_t *c0, size_t *w) {
  *c0 = *w = 0;
  if (d < first || d >= first + ranks) return;
  size_t j = (size_t)(d - first);
  *c0 = j * cols / (size_t)ranks;
  *w = (j + 1) * cols / (size_t)ranks - *c0;
}

typedef struct plan_t {
  clembed_shard_kind kind;
  int first, ranks;
} plan_t;

/* A byte exchange: counts out, counts back (Alltoall), buffers. */
typedef struct xchg {
  int *sc, *rc, *sd, *rd;
  char *out, *in;
} xchg;

static void xchg_make(xchg *x, const long long *bytes) {
  x->sc = calloc(4 * (size_t)size, sizeof(int));
  x->rc = x->sc + size, x->sd = x->rc + size, x->rd = x->sd + size;
  for (int r = 0; r < size; r++) x->sc[r] = (int)bytes[r];
  MPI_Alltoall(x->sc, 1, MPI_INT, x->rc, 1, MPI_INT, MPI_COMM_WORLD);
  long long a = 0, b = 0;
  for (int r = 0; r < size; r++) x->sd[r] = (int)a, x->rd[r] = (int)b, a += x->sc[r], b += x->rc[r];
  x->out = calloc((size_t)a + 1, 1);
  x->in = calloc((size_t)b + 1, 1);
}

static void xchg_run(xchg *x) {
  MPI_Alltoallv(x->out, x->sc, x->sd, MPI_BYTE, x->in, x->rc, x->rd, MPI_BYTE, MPI_COMM_WORLD);
}

static void xchg_free(xchg *x) {
  free(x->sc);
  free(x->out);
  free(x->in);
}

typedef struct result {
  double fwd, step, rf, rs; /* medians: sharded forward, sharded step, their ratios */
  int ok;
} result;

static const char *kind_name(clembed_shard_kind k) {
  static const char *const n[] = {"row", "table", "column", "table_row", "auto"};
  return n[k];
}

static int quiet; /* the warm-up run prints nothing */

static result run_plan(clembed_shard_kind forced, size_t F, size_t R, size_t C, size_t B, size_t L, int reps) {
  result res = {0};
  size_t n = B * L, W = F * C;
  /* every rank's ids (each rank makes them all: the owners' local work and the bytes need them) */
  int64_t **all = malloc((size_t)size * F * sizeof *all);
  for (int r = 0; r < size; r++)
    for (size_t f = 0; f < F; f++) {
      all[(size_t)r * F + f] = malloc(n * sizeof(int64_t));
      ids_of(r, f, n, R, all[(size_t)r * F + f]);
    }
  /* the set: a sample of the rank's ids per table for the planner */
  clembed_mpi_table_spec *sp = calloc(F, sizeof *sp);
  clembed_ids *samples = calloc(F, sizeof *samples);
  char (*names)[24] = calloc(F, sizeof *names);
  for (size_t f = 0; f < F; f++) {
    snprintf(names[f], sizeof names[f], "t%zu", f);
    sp[f] = (clembed_mpi_table_spec){names[f], R, C, CLEMBED_F32, forced, -1, NULL, 0};
    if (forced == CLEMBED_SHARD_AUTO) {
      TRY(clembed_ids_create(ctx, all[(size_t)rank * F + f], n, CLEMBED_I64, &samples[f]));
      sp[f].id_sample = &samples[f];
      sp[f].sample_bags = B;
    }
  }
  clembed_mpi_feature_set *s = NULL;
  TRY(clembed_mpi_feature_set_create(ctx, MPI_COMM_WORLD, sp, F, &s));
  plan_t *pl = calloc(F, sizeof *pl);
  int counts[5] = {0};
  for (size_t f = 0; f < F; f++) {
    TRY(clembed_mpi_feature_set_plan(s, f, &pl[f].kind, &pl[f].first, &pl[f].ranks));
    TRY(clembed_mpi_table_init_normal(clembed_mpi_feature_set_table(s, f), 0.0f, 0.02f, 1 + f));
    counts[pl[f].kind]++;
  }
  if (rank == 0 && !quiet) {
    printf("\nplan %s: %d table, %d row, %d column, %d table_row", kind_name(forced), counts[1], counts[0], counts[2],
           counts[3]);
    if (counts[1]) {
      printf("; owners");
      for (size_t f = 0; f < F; f++)
        if (pl[f].kind == CLEMBED_SHARD_TABLE) printf(" %d", pl[f].first);
    }
    printf("\n");
  }
  int column = forced == CLEMBED_SHARD_COLUMN;
  clembed_optimizer_kind ok = column ? CLEMBED_ADAGRAD : CLEMBED_ROWWISE_ADAGRAD;

  /* the rank's own call: features, out, gradient */
  size_t Bt = B * (size_t)size;
  int64_t *offs = malloc((Bt + 1) * sizeof *offs);
  for (size_t b = 0; b <= Bt; b++) offs[b] = (int64_t)(b * L);
  clembed_ids *ids = calloc(F, sizeof *ids), offsets = {0}, all_offsets = {0};
  clembed_bag_feature *fe = calloc(F, sizeof *fe);
  TRY(clembed_ids_create(ctx, offs, B + 1, CLEMBED_I64, &offsets));
  TRY(clembed_ids_create(ctx, offs, Bt + 1, CLEMBED_I64, &all_offsets));
  for (size_t f = 0; f < F; f++) {
    TRY(clembed_ids_create(ctx, all[(size_t)rank * F + f], n, CLEMBED_I64, &ids[f]));
    fe[f] = clembed_bag_feature_defaults();
    fe[f].ids = &ids[f];
    fe[f].offsets = &offsets;
  }
  clembed_matrix out = {0}, grad = {0};
  TRY(clembed_matrix_create(ctx, B, W, CLEMBED_F32, &out));
  TRY(clembed_matrix_create(ctx, B, W, CLEMBED_F32, &grad));
  TRY(clembed_matrix_init_normal(ctx, &grad, 0.0f, 1e-3f, 7 + (uint64_t)rank, 0, NULL, NULL));
  clembed_optimizer *o = calloc(F, sizeof *o);
  for (size_t f = 0; f < F; f++) o[f] = clembed_optimizer_defaults(ok);

  /* the local work: whole tables (blocks) over every rank's bags; rows of the cut ones over the rank's own */
  size_t kw = 0, kr = 0, Ww = 0, Wr = 0;
  clembed_bag_feature *fw = calloc(F, sizeof *fw), *fr = calloc(F, sizeof *fr);
  clembed_ids *wids = calloc(F, sizeof *wids), *rids = calloc(F, sizeof *rids);
  clembed_matrix *views = calloc(F, sizeof *views), *st_w = calloc(F, sizeof *st_w), *st_r = calloc(F, sizeof *st_r);
  clembed_optimizer *ow = calloc(F, sizeof *ow), *orr = calloc(F, sizeof *orr);
  long long *fwd_out = calloc((size_t)size, sizeof(long long)), *fwd_back = calloc((size_t)size, sizeof(long long));
  long long *stp_out = calloc((size_t)size, sizeof(long long));
  int64_t *tmp = malloc((n * (size_t)size + 1) * sizeof *tmp);
  for (size_t f = 0; f < F; f++) {
    size_t first_row = 0;
    TRY(clembed_mpi_table_shard(clembed_mpi_feature_set_table(s, f), &first_row, &views[f]));
    if (pl[f].kind == CLEMBED_SHARD_TABLE || pl[f].kind == CLEMBED_SHARD_COLUMN) {
      size_t c0, w;
      block_of(C, pl[f].first, pl[f].ranks, rank, &c0, &w);
      /* bytes: to each owner the bags; back their pooled rows; the step adds the gradient rows */
      for (int d = 0; d < size; d++) {
        size_t c0d, wd;
        block_of(C, pl[f].first, pl[f].ranks, d, &c0d, &wd);
        if (!wd) continue;
        long long bag = 8 + (long long)(B + 1) * 8 + (long long)n * 8;
        fwd_out[d] += bag;
        fwd_back[d] += (long long)(B * wd * 4);
        stp_out[d] += bag + (long long)(B * wd * 4);
      }
      if (!w) continue;
      for (int r = 0; r < size; r++) memcpy(tmp + (size_t)r * n, all[(size_t)r * F + f], n * sizeof *tmp);
      TRY(clembed_ids_create(ctx, tmp, n * (size_t)size, CLEMBED_I64, &wids[kw]));
      fw[kw] = clembed_bag_feature_defaults();
      fw[kw].table = &views[f];
      fw[kw].ids = &wids[kw];
      fw[kw].offsets = &all_offsets;
      ow[kw] = clembed_optimizer_defaults(ok);
      TRY(clembed_matrix_create(ctx, R, ok == CLEMBED_ROWWISE_ADAGRAD ? 1 : w, CLEMBED_F32, &st_w[kw]));
      ow[kw].state = &st_w[kw];
      kw++;
      Ww += w;
    } else {
      /* the rank's own ids taken into its rows; bytes: distinct ids to their owners, rows back; the step's contributions */
      size_t rows_here = views[f].rows ? views[f].rows : 1;
      for (size_t i = 0; i < n; i++) tmp[i] = all[(size_t)rank * F + f][i] % (int64_t)rows_here;
      TRY(clembed_ids_create(ctx, tmp, n, CLEMBED_I64, &rids[kr]));
      memcpy(tmp, all[(size_t)rank * F + f], n * sizeof *tmp);
      for (size_t i = 0; i < n; i++) stp_out[row_owner(R, pl[f].first, pl[f].ranks, tmp[i])] += 8 + (long long)C * 4;
      qsort(tmp, n, sizeof *tmp, cmp_i64);
      for (size_t i = 0; i < n; i++)
        if (i == 0 || tmp[i] != tmp[i - 1]) {
          int d = row_owner(R, pl[f].first, pl[f].ranks, tmp[i]);
          fwd_out[d] += 8;
          fwd_back[d] += (long long)C * 4;
        }
      if (!views[f].rows) continue; /* (a TABLE_ROW table this rank has no rows of: no local work) */
      fr[kr] = clembed_bag_feature_defaults();
      fr[kr].table = &views[f];
      fr[kr].ids = &rids[kr];
      fr[kr].offsets = &offsets;
      orr[kr] = clembed_optimizer_defaults(ok);
      TRY(clembed_matrix_create(ctx, views[f].rows, ok == CLEMBED_ROWWISE_ADAGRAD ? 1 : C, CLEMBED_F32, &st_r[kr]));
      orr[kr].state = &st_r[kr];
      kr++;
      Wr += C;
    }
  }
  /* the raw exchanges: out (ids, bags) then back (what each owner sends each rank) */
  xchg xo, xb, xs;
  long long *back_out = calloc((size_t)size, sizeof(long long));
  MPI_Alltoall(fwd_back, 1, MPI_LONG_LONG, back_out, 1, MPI_LONG_LONG, MPI_COMM_WORLD);
  xchg_make(&xo, fwd_out);
  xchg_make(&xb, back_out);
  xchg_make(&xs, stp_out);
  clembed_matrix lout_w = {0}, lout_r = {0}, lgrad_w = {0}, lgrad_r = {0};
  TRY(clembed_matrix_create(ctx, Bt, Ww ? Ww : 1, CLEMBED_F32, &lout_w));
  TRY(clembed_matrix_create(ctx, B, Wr ? Wr : 1, CLEMBED_F32, &lout_r));
  TRY(clembed_matrix_create(ctx, Bt, Ww ? Ww : 1, CLEMBED_F32, &lgrad_w));
  TRY(clembed_matrix_create(ctx, B, Wr ? Wr : 1, CLEMBED_F32, &lgrad_r));
  TRY(clembed_matrix_init_normal(ctx, &lgrad_w, 0.0f, 1e-3f, 3, 0, NULL, NULL));
  TRY(clembed_matrix_init_normal(ctx, &lgrad_r, 0.0f, 1e-3f, 4, 0, NULL, NULL));
  lout_w.cols = lgrad_w.cols = Ww;
  lout_r.cols = lgrad_r.cols = Wr;

  double *m[6], *rf = malloc((size_t)reps * sizeof(double)), *rs = malloc((size_t)reps * sizeof(double));
  for (int k = 0; k < 6; k++) m[k] = malloc((size_t)reps * sizeof(double));
  for (int rep = -1; rep < reps; rep++) {
    double v[6], t0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = now();
    TRY(clembed_mpi_embedding_bags(s, fe, F, &out));
    v[0] = slowest(t0);
    t0 = now();
    if (kw) TRY(clembed_embedding_bags(ctx, fw, kw, &lout_w, 0, NULL, NULL));
    if (kr) TRY(clembed_embedding_bags(ctx, fr, kr, &lout_r, 0, NULL, NULL));
    TRY(clembed_finish(ctx));
    v[1] = slowest(t0);
    t0 = now();
    xchg_run(&xo);
    xchg_run(&xb);
    v[2] = slowest(t0);
    t0 = now();
    TRY(clembed_mpi_bags_optimizer_step(s, fe, F, &grad, o));
    v[3] = slowest(t0);
    t0 = now();
    if (kw) TRY(clembed_bags_optimizer_step(ctx, fw, kw, &lgrad_w, ow, 0, NULL, NULL));
    if (kr) TRY(clembed_bags_optimizer_step(ctx, fr, kr, &lgrad_r, orr, 0, NULL, NULL));
    TRY(clembed_finish(ctx));
    v[4] = slowest(t0);
    t0 = now();
    xchg_run(&xs);
    v[5] = slowest(t0);
    if (rep < 0) continue;
    for (int k = 0; k < 6; k++) m[k][rep] = v[k];
    rf[rep] = v[0] / (v[1] + v[2]);
    rs[rep] = v[3] / (v[4] + v[5]);
  }
  long long sent[2] = {0, 0};
  for (int d = 0; d < size; d++) {
    if (d == rank) continue;
    sent[0] += fwd_out[d] + back_out[d];
    sent[1] += stp_out[d];
  }
  if (rank == 0 && !quiet) {
    static const char *const part[6] = {"sharded forward", "local forward", "raw exchange (forward)",
                                        "sharded step", "local step", "raw exchange (step)"};
    printf("rank 0 sends %lld bytes in the forward's exchanges, %lld in the step's (to other ranks)\n", sent[0],
           sent[1]);
    for (int k = 0; k < 6; k++) printf("  %-24s %10.3f ms (median)\n", part[k], 1e3 * median(m[k], reps));
    printf("forward: sharded / (local + raw exchange) = %.3f (median of %d)\n", median(rf, reps), reps);
    printf("step (%s): sharded / (local + raw exchange) = %.3f (median of %d)\n",
           ok == CLEMBED_ROWWISE_ADAGRAD ? "rowwise_adagrad" : "adagrad", median(rs, reps), reps);
  }
  res.fwd = median(m[0], reps);
  res.step = median(m[3], reps);
  res.rf = median(rf, reps);
  res.rs = median(rs, reps);
  res.ok = !column;
  for (int k = 0; k < 6; k++) free(m[k]);
  free(rf), free(rs);
  xchg_free(&xo), xchg_free(&xb), xchg_free(&xs);
  for (size_t k = 0; k < F; k++) {
    clembed_ids_release(&wids[k]);
    clembed_ids_release(&rids[k]);
    clembed_ids_release(&ids[k]);
    clembed_ids_release(&samples[k]);
    clembed_matrix_release(&st_w[k]);
    clembed_matrix_release(&st_r[k]);
  }
  clembed_ids_release(&offsets);
  clembed_ids_release(&all_offsets);
  clembed_matrix_release(&out);
  clembed_matrix_release(&grad);
  lout_w.cols = lout_r.cols = lgrad_w.cols = lgrad_r.cols = 1;
  clembed_matrix_release(&lout_w);
  clembed_matrix_release(&lout_r);
  clembed_matrix_release(&lgrad_w);
  clembed_matrix_release(&lgrad_r);
  clembed_mpi_feature_set_release(s);
  for (size_t k = 0; k < (size_t)size * F; k++) free(all[k]);
  free(all), free(sp), free(samples), free(names), free(pl), free(offs), free(ids), free(fe), free(o);
  free(fw), free(fr), free(wids), free(rids), free(views), free(st_w), free(st_r), free(ow), free(orr);
  free(fwd_out), free(fwd_back), free(stp_out), free(back_out), free(tmp);
  return res;
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t F = 26, R = 100000, C = 64, B = 4096, L = 32;
  int reps = 7;
  const char *plans = "auto,table,row,column,table_row", *device = NULL;
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "--quick")) {
      R = 20000, B = 1024, reps = 3;
    } else if (a + 1 < argc && !strcmp(argv[a], "--features")) {
      F = strtoull(argv[++a], NULL, 10);
    } else if (a + 1 < argc && !strcmp(argv[a], "--rows")) {
      R = strtoull(argv[++a], NULL, 10);
    } else if (a + 1 < argc && !strcmp(argv[a], "--cols")) {
      C = strtoull(argv[++a], NULL, 10);
    } else if (a + 1 < argc && !strcmp(argv[a], "--bags")) {
      B = strtoull(argv[++a], NULL, 10);
    } else if (a + 1 < argc && !strcmp(argv[a], "--pooling")) {
      L = strtoull(argv[++a], NULL, 10);
    } else if (a + 1 < argc && !strcmp(argv[a], "--reps")) {
      reps = atoi(argv[++a]);
    } else if (a + 1 < argc && !strcmp(argv[a], "--plans")) {
      plans = argv[++a];
    } else if (a + 1 < argc && !strcmp(argv[a], "--device")) {
      device = argv[++a];
    } else {
      if (rank == 0)
        fprintf(stderr, "usage: mpirun -n N bench_mpi_sets [--features F] [--rows R] [--cols C] [--bags B] "
                        "[--pooling L] [--plans auto,table,row,column,table_row] [--reps K] [--quick] "
                        "[--device SPEC]\n");
      MPI_Finalize();
      return 2;
    }
  }
  if (reps < 1) reps = 1;
  if (!F || !R || !C || !B || !L || R < (size_t)size) {
    if (rank == 0) fprintf(stderr, "bench_mpi_sets: --features, --rows (at least the ranks), --cols, --bags and --pooling must be positive\n");
    MPI_Finalize();
    return 2;
  }
  TRY(clembed_context_create(device, &ctx));
  if (rank == 0)
    printf("bench_mpi_sets: %d ranks, %s, %zu tables of %zu x %zu F32, %zu bags of %zu ids a feature a rank, "
           "%d repetitions\n", size, clembed_context_device_name(ctx), F, R, C, B, L, reps);
  static const char *const names[5] = {"row", "table", "column", "table_row", "auto"};
  /* a warm-up of the first plan, not printed: the first run in a process pays for first touches that later
   * ones do not, which would favour the plans measured after it */
  quiet = 1;
  run_plan(strstr(plans, "auto") ? CLEMBED_SHARD_AUTO : CLEMBED_SHARD_TABLE, F, R, C, B, L, 1);
  quiet = 0;
  result r[5] = {{0}};
  int ran[5] = {0};
  for (int k = 0; k < 5; k++) {
    int kk = k == 0 ? 4 : k - 1; /* auto first */
    char want[32];
    snprintf(want, sizeof want, ",%s,", names[kk]);
    char have[256];
    snprintf(have, sizeof have, ",%s,", plans);
    if (!strstr(have, want)) continue;
    r[kk] = run_plan((clembed_shard_kind)kk, F, R, C, B, L, reps);
    ran[kk] = 1;
  }
  if (rank == 0 && ran[4]) {
    double best_f = 0, best_s = 0;
    int bf = -1, bs = -1;
    for (int k = 0; k < 4; k++) {
      if (!ran[k]) continue;
      if (bf < 0 || r[k].fwd < best_f) best_f = r[k].fwd, bf = k;
      if (r[k].ok && (bs < 0 || r[k].step < best_s)) best_s = r[k].step, bs = k;
    }
    if (bf >= 0)
      printf("\nplanner: forward %.3f ms, the fastest forced plan (%s) %.3f ms: planner / best = %.3f\n",
             1e3 * r[4].fwd, names[bf], 1e3 * best_f, r[4].fwd / best_f);
    if (bs >= 0)
      printf("planner: step %.3f ms, the fastest forced plan with the same optimizer (%s) %.3f ms: planner / best = "
             "%.3f\n", 1e3 * r[4].step, names[bs], 1e3 * best_s, r[4].step / best_s);
  }
  clembed_context_destroy(ctx);
  MPI_Finalize();
  return 0;
}
