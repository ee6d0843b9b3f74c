/* clembed tune: finds the device's kernel shapes on the device itself and
 * writes them as the device's entry of the user's tuning database
 * (docs/tuning.md).
 *
 * The parameters are searched by operation (a group: the bench rows it is
 * timed on, the parameters its kernels take and a few whole shapes): first
 * each whole shape (several parameters set together), then one parameter at a
 * time, each with the others at the best found so far, from the built-in entries
 * (tuning/devices.conf; the user's own file is not read while tuning). A
 * candidate is a context made from the same queue with CLEMBED_TUNE set to
 * the candidate's settings, so it shares the bench's matrices. Each candidate
 * is first run on every row of its group at a smaller size (the same shapes,
 * V and n divided by 64) from fresh states, beside the built-in entries'
 * context: a candidate whose results differ in a single bit, that fails, or
 * whose first run there (mostly its kernels' build) takes over
 * MAX_FIRST_RUN_SECONDS, is rejected; a row the device refuses at the model
 * size (CLEMBED_ERR_UNSUPPORTED) is left out of its group. Then it is timed against the best so far at the bench's model
 * sizes, alternately round by round with the bench's reference copy (bench.c's
 * measure): one round on the group's first row (under half the best's speed:
 * rejected at once; at FIRST_ROUND_KEEP times it or more, one round on each
 * row, and if every row keeps that lead those rounds decide), then every row:
 * it is kept when its speed over the best, the
 * geometric mean of the rows' median per-round ratios, is at least 1.03 and no
 * row is below 0.98. The atomic backward, whose sums' order is the device's,
 * is not among the rows. At the end every row of the groups is timed once
 * more, default against tuned, and the entry (the settings that differ from
 * the built-in ones) is written to the user's tuning file, replacing the
 * device's earlier entry, through a temporary file renamed over it. */
#define _DEFAULT_SOURCE
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "timing.h"

/* ------------------------------------------------------------- the search space */

/* One parameter and the values tried (the built-in value is always among
 * those compared: it is the starting point). */
typedef struct param {
  const char *name;
  unsigned long long values[8];
} param;

/* A setting of a preset: a whole shape, several parameters at once. */
typedef struct preset_value {
  const char *name;
  unsigned long long value;
} preset_value;

typedef struct group {
  const char *name;
  const char *rows[5];    /* bench rows (a prefix of their names) */
  param params[9];
  /* shapes tried whole before the search, each from the best so far: a shape
   * whose parameters only pay together, which one parameter at a time does
   * not reach */
  preset_value presets[3][6];
} group;

#define V(...) {__VA_ARGS__}
static const group groups[] = {
    {"lookup",
     {"lookup f32 (1 GiB table", "lookup bf16 table, bf16 out", "lookup q8_0 table, f32 out",
      "lookup f32 (recommendation"},
     {{"embed_rows", V(0, 1, 2, 4, 8, 16)}, {"embed_vec", V(4, 8, 16)}, {"embed_local", V(0, 4, 8, 16, 32)},
      {"embed_next", V(0, 1)}, {"embed_stream", V(0, 1)}},
     {/* a token per work-item, narrow vectors, groups of a SIMD unit's 8 lanes */
      {{"embed_rows", 1}, {"embed_vec", 4}, {"embed_local", 8}, {"embed_stream", 0}},
      /* the column shapes: consecutive work-items on consecutive columns */
      {{"embed_rows", 0}}}},
    {"embed",
     {"embed sqrt + sinusoid (1 GiB", "embed + learned positions (1 GiB"},
     {{"embed_strided_rows", V(1, 2, 4, 8, 16)}, {"embed_strided_prefetch_bytes", V(0, 1024, 2048, 4096)},
      {"embed_strided_ahead", V(1, 2, 4, 8)}}, {{{0}}}},
    {"bert",
     {"embed + segments + LayerNorm", "embed_backward, every gradient"},
     {{"norm_rows", V(0, 1, 2, 4)}, {"norm_strided_rows", V(1, 2, 4, 8, 16)}, {"norm_group_rows", V(1, 2, 4, 8, 16)},
      {"norm_next", V(0, 1)}, {"norm_side_cols", V(0, 2048, 4608, 9216)}, {"norm_sums", V(0, 1)}}, {{{0}}}},
    {"positional", {"positional table"}, {{"positional_rowwise", V(0, 1)}, {"positional_vec", V(4, 8, 16)}}, {{{0}}}},
    {"rope", {"rope cache f32", "rope apply f32"}, {{"rope_rowwise", V(0, 1)}, {"rope_pairs", V(1, 2, 4, 8)}}, {{{0}}}},
    {"init", {"init normal f32", "init uniform f32"}, {{"init_wide", V(0, 1)}}, {{{0}}}},
    {"backward",
     {"backward (accumulate, deterministic), 1 GiB", "backward (accumulate, deterministic), recommendation",
      "optimizer ADAGRAD, 1 GiB", "optimizer ROWWISE_ADAGRAD, recommendation",
      /* 16,384 ids: a row that a device with a loop limit runs (llvmpipe refuses the others' folds) */
      "backward (accumulate, deterministic), Llama 3"},
     {{"cpu_shapes", V(0, 1)}, {"fold_vec", V(4, 8, 16)}, {"fold_tile", V(1, 2, 4, 8)}, {"fold_split", V(1, 16, 64, 256)},
      {"fold_group", V(1, 2, 4, 8)}, {"fold_ahead", V(0, 2, 4, 8)}, {"fold_ahead_bytes", V(0, 512, 1024, 4096)},
      {"step_ahead", V(0, 1)}, {"sort_chunk", V(64, 1024, 4096, 16384)}}, {{{0}}}},
    {"bags",
     {"bag sum f32", "bag sum q8_0", "bags: 26 features", "bag step ROWWISE_ADAGRAD"},
     {{"bag_vec", V(4, 8, 16)}, {"bag_tile", V(1, 2, 4, 8, 16)}, {"bag_rows", V(1, 2, 4, 8, 16)},
      {"bag_rows_features", V(1, 2, 4, 8)}, {"bag_ahead", V(0, 8, 16, 32, 64)}, {"bag_plain", V(0, 1)},
      {"bag_by_feature", V(0, 1)}, {"bag_local", V(0, 4, 8, 16, 32)}, {"bag_cols", V(0, 1)}},
     {/* a bag per work-item, narrow vectors a row at a time, groups of 8 */
      {{"bag_vec", 4}, {"bag_tile", 1}, {"bag_rows", 1}, {"bag_rows_features", 1}, {"bag_local", 8}}}},
};
#define NGROUPS (sizeof groups / sizeof groups[0])
#define MAXSET 64
#define SHRINK 64
#define KEEP_SPEEDUP 1.03
#define KEEP_WORST 0.98
#define FIRST_ROUND_KEEP 3.0 /* a lead that one round on each row settles */
#define SUMMARY_ROW_SECONDS 60.0 /* a summary row's rounds, about */
#define MAX_FIRST_RUN_SECONDS 120 /* a shape whose kernels take longer to build makes every user wait that long once */

/* Settings: name=value pairs (names are the params' own strings). */
typedef struct settings {
  const char *name[MAXSET];
  unsigned long long value[MAXSET];
  int n;
} settings;

static void settings_set(settings *s, const char *name, unsigned long long v) {
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->name[i], name)) {
      s->value[i] = v;
      return;
    }
  if (s->n < MAXSET) {
    s->name[s->n] = name;
    s->value[s->n++] = v;
  }
}

static void settings_string(const settings *s, char *buf, size_t cap) {
  size_t o = 0;
  buf[0] = 0;
  for (int i = 0; i < s->n && o < cap; i++)
    o += (size_t)snprintf(buf + o, cap - o, "%s%s=%llu", i ? "," : "", s->name[i], s->value[i]);
}

/* ------------------------------------------------------------- contexts */

static double t_start;
static double elapsed(void) { return now() - t_start; }

/* A context on queue q with CLEMBED_TUNE = s (none for an empty s); NULL with
 * the message in err. */
static clembed_context *make_context(cl_command_queue q, const settings *s, char *err, size_t errlen) {
  char tune[2048];
  settings_string(s, tune, sizeof tune);
  if (tune[0]) setenv("CLEMBED_TUNE", tune, 1);
  else unsetenv("CLEMBED_TUNE");
  clembed_context *c = NULL;
  clembed_status st = clembed_context_create_from_queue(q, &c);
  unsetenv("CLEMBED_TUNE");
  if (st != CLEMBED_OK) snprintf(err, errlen, "%s", clembed_last_error_message());
  return st == CLEMBED_OK ? c : NULL;
}

/* The value of parameter `name` that a context with settings s runs with
 * (ULLONG_MAX where none can be made). */
static unsigned long long current_value(cl_command_queue q, const settings *s, const char *name) {
  char err[256];
  unsigned long long v = ULLONG_MAX;
  clembed_context *c = make_context(q, s, err, sizeof err);
  uint64_t got = 0;
  if (c && clembed_tuning_value(c, name, &got) == CLEMBED_OK) v = got;
  clembed_context_destroy(c);
  return v;
}

/* ------------------------------------------------------------- the rows */

typedef struct grow {
  size_t k;            /* bench row */
  bench_run *full;     /* its state at the model size, on the default context */
  unsigned char *want; /* the default's results at the small size */
  size_t nwant;
} grow;

static long row_index(const char *prefix) {
  for (size_t k = 0; k < bench_row_count(); k++)
    if (!strncmp(bench_row_name(k), prefix, strlen(prefix))) return (long)k;
  return -1;
}

/* Row k at the small size on ctx, run once from its fresh state: its results. */
static int small_result(clembed_context *ctx, size_t k, unsigned char **bytes, size_t *n, char *err, size_t errlen) {
  clembed_status st;
  *bytes = NULL;
  *n = 0;
  bench_run *b = bench_run_open(ctx, k, SHRINK, &st);
  if (b) st = bench_run_once(b);
  if (b && st == CLEMBED_OK) st = bench_run_result(b, bytes, n);
  if (st != CLEMBED_OK) snprintf(err, errlen, "%s: %s", clembed_status_string(st), clembed_context_message(ctx));
  bench_run_close(b);
  return st == CLEMBED_OK ? 0 : -1;
}

/* ------------------------------------------------------------- the entry */

/* The device's identity for the entry's match lines. */
typedef struct ident {
  char platform[256], device[256], driver[128];
} ident;

static void identify(clembed_context *ctx, ident *id) {
  cl_device_id dev = NULL;
  cl_platform_id plat = NULL;
  memset(id, 0, sizeof *id);
  clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof id->device - 1, id->device, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL);
  clGetDeviceInfo(dev, CL_DRIVER_VERSION, sizeof id->driver - 1, id->driver, NULL);
  clGetPlatformInfo(plat, CL_PLATFORM_NAME, sizeof id->platform - 1, id->platform, NULL);
  /* names go into one line each: no line breaks, no ']' (the heading's end), no '#' (a comment) */
  char *fields[3] = {id->platform, id->device, id->driver};
  for (int f = 0; f < 3; f++)
    for (char *p = fields[f]; *p; p++)
      if (*p == '\n' || *p == '\r' || *p == ']' || *p == '#') *p = ' ';
}

/* Reads the file (NULL and 0 when it does not exist; -1 on another error). */
static int read_all(const char *path, char **text, size_t *len) {
  *text = NULL;
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return errno == ENOENT ? 0 : -1;
  size_t cap = 4096;
  char *t = malloc(cap + 1);
  size_t n = 0, got;
  while (t && (got = fread(t + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      char *more = realloc(t, cap * 2 + 1);
      if (!more) {
        free(t);
        t = NULL;
        break;
      }
      t = more;
      cap *= 2;
    }
  }
  int bad = !t || ferror(f);
  fclose(f);
  if (bad) {
    free(t);
    return -1;
  }
  t[n] = 0;
  *text = t;
  *len = n;
  return 0;
}

/* mkdir -p of path's directory. */
static int make_dirs(const char *path) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) return 0;
  *slash = 0;
  for (char *p = dir + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(dir, 0755) && errno != EEXIST) return -1;
      *p = '/';
    }
  return mkdir(dir, 0755) && errno != EEXIST ? -1 : 0;
}

/* Writes the file with the device's entry (heading `[device NAME]`) replaced
 * by `entry`: the other entries as they were, through a temporary file renamed
 * over the old one. 0, or -1 with err. */
static int write_entry(const char *path, const char *name, const char *entry, char *err, size_t errlen) {
  char *old = NULL;
  size_t len = 0;
  if (read_all(path, &old, &len)) {
    snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    return -1;
  }
  char heading[400];
  snprintf(heading, sizeof heading, "[device %s]", name);
  if (make_dirs(path)) {
    snprintf(err, errlen, "cannot make the directory of %s: %s", path, strerror(errno));
    free(old);
    return -1;
  }
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    snprintf(err, errlen, "cannot write %.900s: %s", tmp, strerror(errno));
    free(old);
    return -1;
  }
  /* the old lines, less the device's entry (from its heading, and the comment
   * lines just before it, to the next heading) */
  int skipping = 0;
  char *held = malloc(len + 1); /* comment lines held back until the next line says whether they precede the entry */
  size_t heldn = 0;
  if (!held) {
    snprintf(err, errlen, "out of memory writing %s", path);
    fclose(f);
    unlink(tmp);
    free(old);
    return -1;
  }
  for (size_t at = 0; old && at < len;) {
    size_t end = at;
    while (end < len && old[end] != '\n') end++;
    size_t n = end - at + (end < len);
    const char *line = old + at;
    at = end + 1;
    const char *p = line;
    while (p < line + n && (*p == ' ' || *p == '\t')) p++;
    if (*p == '[') {
      skipping = !strncmp(p, heading, strlen(heading));
      if (!skipping && heldn) fwrite(held, 1, heldn, f);
      heldn = 0;
      if (!skipping) fwrite(line, 1, n, f);
      continue;
    }
    if (skipping) continue;
    if (*p == '#') { /* a comment: held until we know what follows */
      memcpy(held + heldn, line, n);
      heldn += n;
      continue;
    }
    if (heldn) fwrite(held, 1, heldn, f);
    heldn = 0;
    fwrite(line, 1, n, f);
  }
  if (heldn) fwrite(held, 1, heldn, f);
  free(held);
  if (old && len && old[len - 1] != '\n') fputc('\n', f);
  fputs(entry, f);
  free(old);
  int bad = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path)) {
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------- main */

static void usage(FILE *f) {
  fprintf(f,
          "usage: clembed tune [--device SPEC] [--only GROUPS] [--budget SECONDS] [--reps N]\n"
          "                    [--output FILE] [--dry-run] [--list]\n"
          "  Finds this device's kernel shapes on the device itself and writes them as its\n"
          "  entry of your tuning file, which every context on the device then reads\n"
          "  (docs/tuning.md). Operation by operation (a group: its bench rows, at the sizes\n"
          "  models have, and its kernels' parameters), a few whole shapes are tried, then\n"
          "  each parameter's values, each with the others at the best found so far,\n"
          "  starting from the built-in entries.\n"
          "  A candidate whose results differ from the built-in shapes' in a single bit (at\n"
          "  a 64th of the rows' sizes), or whose kernels take over 2 minutes to build, is\n"
          "  rejected; one that is at least 1.03x faster over\n"
          "  its group's rows (the median of per-round paired ratios, no row below 0.98) is\n"
          "  kept. A summary, default against tuned and each against the device's copy,\n"
          "  ends the run. The rows' memory is that of `clembed bench`'s (up to 8 GiB).\n"
          "  --device SPEC    the device (as `clembed devices` lists them)\n"
          "  --only GROUPS    the groups to tune, comma-separated (--list names them;\n"
          "                   default: every group)\n"
          "  --budget SECONDS the run's time (default 900): each group searches within an\n"
          "                   equal share of what is left of 92 %% of it (a group done\n"
          "                   early leaves its time to the later ones), gets its summary,\n"
          "                   and the entry follows\n"
          "  --reps N         timed rounds per candidate and row (default 5; the summary 9,\n"
          "                   fewer where a row's 9 would take over a minute)\n"
          "  --output FILE    the tuning file to write (default: CLEMBED_TUNING_FILE, else\n"
          "                   $XDG_CACHE_HOME/clembed/tuning.conf, else\n"
          "                   ~/.cache/clembed/tuning.conf)\n"
          "  --dry-run        print the entry, write nothing\n"
          "  --list           print the groups, their rows and parameters, and exit\n");
}

static int list_groups(void) {
  for (size_t g = 0; g < NGROUPS; g++) {
    printf("%s\n  rows:", groups[g].name);
    for (int r = 0; r < 5 && groups[g].rows[r]; r++) printf(" \"%s...\"", groups[g].rows[r]);
    printf("\n  parameters:");
    for (int p = 0; p < 9 && groups[g].params[p].name; p++) printf(" %s", groups[g].params[p].name);
    for (int x = 0; x < 3 && groups[g].presets[x][0].name; x++) {
      printf("\n  shape:");
      for (int i = 0; i < 6 && groups[g].presets[x][i].name; i++)
        printf("%s%s=%llu", i ? "," : " ", groups[g].presets[x][i].name, groups[g].presets[x][i].value);
    }
    printf("\n");
  }
  return 0;
}

static int wanted_group(const char *only, const char *name) {
  if (!only) return 1;
  size_t n = strlen(name);
  for (const char *p = only; *p;) {
    size_t len = strcspn(p, ",");
    if (len == n && !strncmp(p, name, n)) return 1;
    p += len + (p[len] == ',');
  }
  return 0;
}

static double geomean(const double *x, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += log(x[i]);
  return n ? exp(s / n) : 1.0;
}

/* Runs candidate `cand` of group G (printed as `label`) against `best`: the
 * same bits at the small size, then paired timing; kept into *best when it is
 * at least KEEP_SPEEDUP faster over the rows with none below KEEP_WORST. */
static void try_candidate(cl_command_queue q, const group *G, const grow *rows, int nr, bench_ref *ref, int reps,
                          settings *best, const settings *cand, const char *label) {
  char err[1024] = "";
  printf("[%5.0fs] %s: %s ...", elapsed(), G->name, label);
  fflush(stdout);
  clembed_context *c = make_context(q, cand, err, sizeof err);
  clembed_context *b = c ? make_context(q, best, err, sizeof err) : NULL;
  int ok = c && b;
  const double first_run = now();
  /* the same bits at the small size */
  for (int r = 0; ok && r < nr; r++) {
    unsigned char *got = NULL;
    size_t n = 0;
    if (small_result(c, rows[r].k, &got, &n, err, sizeof err)) {
      ok = 0;
    } else if (n != rows[r].nwant || memcmp(got, rows[r].want, n)) {
      size_t diff = 0;
      for (size_t i = 0; i < n && i < rows[r].nwant; i++) diff += got[i] != rows[r].want[i];
      snprintf(err, sizeof err, "%s: %zu of %zu result bytes differ from the built-in shapes'",
               bench_row_name(rows[r].k), diff, rows[r].nwant);
      ok = 0;
    }
    free(got);
  }
  /* the small runs are mostly the kernels' first build */
  if (ok && now() - first_run > MAX_FIRST_RUN_SECONDS) {
    snprintf(err, sizeof err, "its first run (the kernels' build) took %.0f s, over %d s", now() - first_run,
             MAX_FIRST_RUN_SECONDS);
    ok = 0;
  }
  double speed[5], worst = 1e9;
  /* a first round on the first row: a candidate at less than half the best's
   * speed goes at once; one at FIRST_ROUND_KEEP times it goes on to a first
   * round on each row, and one that keeps that lead on every row is judged by
   * those rounds (where the best so far takes minutes a round, its timed
   * rounds would spend the group's budget on one candidate) */
  int decided = 0;
  for (int r = 0; ok && r < nr; r++) {
    bench_run *rb = bench_run_alias(rows[r].full, b), *rc_ = bench_run_alias(rows[r].full, c);
    bench_timing t;
    if (!rb || !rc_ || bench_time(rb, rc_, ref, 1, &t, err, sizeof err)) {
      ok = 0;
    } else if (t.alt_speedup < 0.5) {
      snprintf(err, sizeof err, "%.3fx on %s in a first round", t.alt_speedup, bench_row_name(rows[r].k));
      ok = 0;
    }
    bench_run_close(rb);
    bench_run_close(rc_);
    if (!ok || t.alt_speedup < FIRST_ROUND_KEEP) break;
    speed[r] = t.alt_speedup;
    if (speed[r] < worst) worst = speed[r];
    decided = r == nr - 1;
  }
  if (decided) printf(" (a first round on each row)");
  else worst = 1e9;
  for (int r = 0; ok && !decided && r < nr; r++) {
    bench_run *rb = bench_run_alias(rows[r].full, b), *rc_ = bench_run_alias(rows[r].full, c);
    bench_timing t;
    if (!rb || !rc_ || bench_time(rb, rc_, ref, reps, &t, err, sizeof err)) ok = 0;
    else speed[r] = t.alt_speedup;
    if (ok && speed[r] < worst) worst = speed[r];
    bench_run_close(rb);
    bench_run_close(rc_);
  }
  if (!ok) {
    printf(" rejected: %s\n", err[0] ? err : "failed");
  } else {
    double gm = geomean(speed, nr);
    int keep = gm >= KEEP_SPEEDUP && worst >= KEEP_WORST;
    printf(" same bits, %.3fx (worst row %.3fx)%s\n", gm, worst, keep ? ": kept" : "");
    if (keep) *best = *cand;
  }
  fflush(stdout);
  clembed_context_destroy(c);
  clembed_context_destroy(b);
}

/* A summary row's paired rounds: 9 (or --reps if more), fewer where one
 * round of the row takes long (the row's rounds within SUMMARY_ROW_SECONDS, at
 * least one: the built-in fold on llvmpipe takes over a minute a run); the
 * count in *rounds. */
static int summary_time(bench_run *b, bench_run *alt, bench_ref *ref, int reps, bench_timing *tm, int *rounds,
                        char *err, size_t errlen) {
  int n = reps < 9 ? 9 : reps;
  if (bench_time(b, alt, ref, 1, tm, err, errlen)) return 1;
  const double round_s = (tm->ms + (alt ? tm->alt_ms : 0.0)) / 1000.0;
  if (round_s * n > SUMMARY_ROW_SECONDS) n = (int)(SUMMARY_ROW_SECONDS / round_s);
  *rounds = n < 1 ? 1 : n;
  return *rounds > 1 ? bench_time(b, alt, ref, *rounds, tm, err, errlen) : 0;
}

/* " (N rounds)" where a summary row took fewer than the run's (reps, at least 9) */
static const char *rounds_note(int rounds, int reps, char *buf, size_t cap) {
  buf[0] = 0;
  if (rounds < (reps < 9 ? 9 : reps)) snprintf(buf, cap, " (%d round%s)", rounds, rounds == 1 ? "" : "s");
  return buf;
}

/* Whether group G's share of the budget (to group_end) is spent: said once,
 * when it first is. */
static int share_spent(const group *G, double group_end, int *spent) {
  if (!*spent && elapsed() > group_end) {
    *spent = 1;
    printf("[%5.0fs] %s: the group's share of the budget is spent: its search stops here\n", elapsed(), G->name);
  }
  return *spent;
}

int tune_main(int argc, char **argv) {
  const char *device = NULL, *only = NULL, *output = NULL;
  double budget = 900;
  int reps = 5, dry = 0;
  for (int i = 1; i < argc; i++) {
    char *end = NULL;
    if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--output") && i + 1 < argc) output = argv[++i];
    else if (!strcmp(argv[i], "--dry-run")) dry = 1;
    else if (!strcmp(argv[i], "--list")) return list_groups();
    else if (!strcmp(argv[i], "--budget") && i + 1 < argc) {
      budget = strtod(argv[++i], &end);
      if (*end || !(budget > 0) || budget > 1e7) {
        fprintf(stderr, "clembed tune: --budget: '%s' is not a number of seconds above 0\n", argv[i]);
        return 1;
      }
    } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 1 || v > 1000) {
        fprintf(stderr, "clembed tune: --reps: '%s' is not a count in [1, 1000]\n", argv[i]);
        return 1;
      }
      reps = (int)v;
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "clembed tune: unknown or incomplete option '%s'\n", argv[i]);
      usage(stderr);
      return 1;
    }
  }
  if (only) {
    for (const char *p = only; *p;) {
      size_t len = strcspn(p, ",");
      int known = 0;
      for (size_t g = 0; g < NGROUPS; g++) known |= strlen(groups[g].name) == len && !strncmp(p, groups[g].name, len);
      if (!known) {
        fprintf(stderr, "clembed tune: --only: '%.*s' is not a group (clembed tune --list names them)\n", (int)len, p);
        return 1;
      }
      p += len + (p[len] == ',');
    }
  }
  char path[1024] = "";
  if (output) {
    snprintf(path, sizeof path, "%s", output);
  } else if (!dry && clembed_tuning_file(path, sizeof path) != CLEMBED_OK) {
    fprintf(stderr, "clembed tune: no tuning file to write (CLEMBED_TUNING_FILE is empty or \"none\", or there is no "
                    "HOME): pass --output FILE, or --dry-run\n");
    return 1;
  }
  /* the built-in entries alone are the start, and every context here reads no user file */
  setenv("CLEMBED_TUNING_FILE", "none", 1);
  unsetenv("CLEMBED_TUNING");
  if (getenv("CLEMBED_TUNE")) {
    fprintf(stderr, "clembed tune: CLEMBED_TUNE is set; the tuner starts from the built-in entries (unset it)\n");
    return 1;
  }
  t_start = now();
  /* the search ends early enough for the last group's summary and the entry within the budget */
  const double search_end = budget * 0.92;
  char err[1024] = "";
  clembed_context *def = NULL;
  clembed_status st = clembed_context_create(device, &def);
  if (st != CLEMBED_OK) {
    fprintf(stderr, "clembed tune: %s: %s\n", clembed_status_string(st), clembed_last_error_message());
    return 2;
  }
  cl_command_queue q = clembed_context_queue(def);
  ident id;
  identify(def, &id);
  printf("clembed tune on %s (driver %s)\nstarting from: %s\nbudget %.0f s, %d rounds per candidate and row\n",
         clembed_context_device_name(def), id.driver, clembed_context_tuning(def), budget, reps);
  fflush(stdout);
  bench_ref *ref = bench_ref_open(def, reps < 9 ? 9 : reps, err, sizeof err);
  if (!ref) {
    fprintf(stderr, "clembed tune: the reference copy: %s\n", err);
    clembed_context_destroy(def);
    return 2;
  }
  settings best; /* the whole entry: every group's kept settings */
  memset(&best, 0, sizeof best);
  int rc = 0, out_of_time = 0, left = 0;
  for (size_t g = 0; g < NGROUPS; g++) left += wanted_group(only, groups[g].name);
  for (size_t g = 0; g < NGROUPS && !rc; g++) {
    const group *G = &groups[g];
    if (!wanted_group(only, G->name)) continue;
    /* each group searches within an equal share of what is left (a group
     * done early leaves its time to the later ones) */
    const double group_end = elapsed() + (search_end - elapsed()) / (left > 0 ? left : 1);
    left--;
    int group_spent = 0;
    if (out_of_time || elapsed() > search_end) {
      out_of_time = 1;
      printf("summary %-10s not tuned: the budget was spent before it (the built-in shapes)\n", G->name);
      continue;
    }
    grow rows[5];
    int nr = 0;
    memset(rows, 0, sizeof rows);
    for (int r = 0; r < 5 && G->rows[r]; r++) {
      long k = row_index(G->rows[r]);
      if (k < 0) continue;
      rows[nr].k = (size_t)k;
      st = CLEMBED_OK;
      if (small_result(def, (size_t)k, &rows[nr].want, &rows[nr].nwant, err, sizeof err) ||
          !(rows[nr].full = bench_run_open(def, (size_t)k, 1, &st)) ||
          (st = bench_run_once(rows[nr].full)) != CLEMBED_OK) {
        if (st == CLEMBED_ERR_UNSUPPORTED) { /* a row the device refuses at the model size: left out */
          printf("summary %-10s %-56.56s not on this device: %s\n", G->name, bench_row_name((size_t)k),
                 clembed_context_message(def));
          bench_run_close(rows[nr].full);
          free(rows[nr].want);
          memset(&rows[nr], 0, sizeof rows[nr]);
          err[0] = 0;
          continue;
        }
        if (!err[0]) snprintf(err, sizeof err, "%s: %s", clembed_status_string(st), clembed_context_message(def));
        fprintf(stderr, "clembed tune: %s: the built-in shapes: %s\n", bench_row_name((size_t)k), err);
        rc = 2;
      }
      nr++;
      if (rc) break;
    }
    if (!rc && nr == 0) {
      printf("summary %-10s not tuned: none of its rows runs on this device\n", G->name);
      continue;
    }
    for (int x = 0; !rc && !group_spent && x < 3 && G->presets[x][0].name; x++) {
      if (share_spent(G, group_end, &group_spent)) break;
      settings cand = best;
      char label[400] = "shape";
      size_t lo = strlen(label);
      int differs = 0;
      for (int i = 0; i < 6 && G->presets[x][i].name; i++) {
        const preset_value *pv = &G->presets[x][i];
        differs |= current_value(q, &best, pv->name) != pv->value;
        settings_set(&cand, pv->name, pv->value);
        lo += (size_t)snprintf(label + lo, lo < sizeof label ? sizeof label - lo : 0, "%s%s=%llu", i ? "," : " ",
                               pv->name, pv->value);
      }
      if (differs) try_candidate(q, G, rows, nr, ref, reps, &best, &cand, label);
    }
    for (int p = 0; !rc && !group_spent && p < 9 && G->params[p].name; p++) {
      const param *P = &G->params[p];
      /* the value the parameter had when its search began: once another is kept, that one has lost to it
       * with every other parameter as now, so it is not tried again */
      const unsigned long long start = current_value(q, &best, P->name);
      for (int v = 0; v < 8 && !group_spent; v++) {
        if (v > 0 && P->values[v] == 0) break; /* the list's end (a value of 0 only comes first) */
        if (share_spent(G, group_end, &group_spent)) break;
        if (current_value(q, &best, P->name) == P->values[v] || P->values[v] == start) continue; /* measured */
        settings cand = best;
        settings_set(&cand, P->name, P->values[v]);
        char label[160];
        snprintf(label, sizeof label, "%s=%llu", P->name, P->values[v]);
        try_candidate(q, G, rows, nr, ref, reps, &best, &cand, label);
      }
    }
    /* the group's summary: the built-in shapes against the tuned, each against the copy (the
     * built-in ones alone where the group kept nothing) */
    int changed = 0;
    for (int i = 0; i < best.n; i++)
      for (int p = 0; p < 9 && G->params[p].name; p++) changed |= !strcmp(best.name[i], G->params[p].name);
    if (!rc && !changed) {
      for (int r = 0; r < nr; r++) {
        bench_timing tm;
        int rounds = 0;
        char note[32];
        if (!summary_time(rows[r].full, NULL, ref, reps, &tm, &rounds, err, sizeof err))
          printf("summary %-10s %-56.56s default %8.2f ms (%.2f of copy)  tuned: the same%s\n", G->name,
                 bench_row_name(rows[r].k), tm.ms, tm.ratio, rounds_note(rounds, reps, note, sizeof note));
        else
          printf("summary %-10s %-56.56s not timed: %s\n", G->name, bench_row_name(rows[r].k), err);
      }
    } else if (!rc) {
      clembed_context *t = make_context(q, &best, err, sizeof err);
      for (int r = 0; t && r < nr; r++) {
        bench_run *rt = bench_run_alias(rows[r].full, t);
        bench_timing tm;
        int rounds = 0;
        char note[32];
        if (rt && !summary_time(rows[r].full, rt, ref, reps, &tm, &rounds, err, sizeof err))
          printf("summary %-10s %-56.56s default %8.2f ms (%.2f of copy)  tuned %8.2f ms (%.2f of copy)  "
                 "tuned/default %.2fx%s\n",
                 G->name, bench_row_name(rows[r].k), tm.ms, tm.ratio, tm.alt_ms, tm.ratio * tm.alt_speedup,
                 tm.alt_speedup, rounds_note(rounds, reps, note, sizeof note));
        else
          printf("summary %-10s %-56.56s not timed: %s\n", G->name, bench_row_name(rows[r].k), err);
        bench_run_close(rt);
      }
      if (!t) printf("summary %-10s no context with the tuned settings: %s\n", G->name, err);
      clembed_context_destroy(t);
      fflush(stdout);
    }
    for (int r = 0; r < nr; r++) {
      bench_run_close(rows[r].full);
      free(rows[r].want);
    }
  }
  if (!rc) {
    char when[64], entry[8192], list[2048];
    time_t now_t = time(NULL);
    struct tm tmv;
    gmtime_r(&now_t, &tmv);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tmv);
    size_t o = (size_t)snprintf(entry, sizeof entry,
                                "# clembed tune, %s, driver %s%s%s\n[device %s]\nmatch.platform = %s\n"
                                "match.device = %s\ntuned = 1\n",
                                when, id.driver, only ? ", groups " : "", only ? only : "", id.device, id.platform,
                                id.device);
    settings none;
    memset(&none, 0, sizeof none);
    settings diff = none; /* the kept settings whose values are not the built-in ones */
    for (int i = 0; i < best.n; i++)
      if (current_value(q, &none, best.name[i]) != best.value[i]) settings_set(&diff, best.name[i], best.value[i]);
    best = diff;
    for (int i = 0; i < best.n && o < sizeof entry; i++)
      o += (size_t)snprintf(entry + o, sizeof entry - o, "%s = %llu\n", best.name[i], best.value[i]);
    settings_string(&best, list, sizeof list);
    printf("tuned settings: %s\n", best.n ? list : "(none: the built-in shapes were the fastest found)");
    if (dry) {
      printf("the entry (--dry-run, not written):\n%s", entry);
    } else if (write_entry(path, id.device, entry, err, sizeof err)) {
      fprintf(stderr, "clembed tune: %s\n", err);
      rc = 1;
    } else {
      printf("written to %s (every context on this device reads it; `clembed devices` shows it)\n", path);
    }
  }
  bench_ref_close(ref);
  clembed_context_destroy(def);
  return rc;
}
