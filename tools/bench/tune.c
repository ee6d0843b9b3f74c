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
 * whose first run there (mostly its kernels' build) takes over build_limit
 * (--build-limit; one still building then is stopped: the search runs in a
 * worker process, see "the journal"), is rejected; a row the device refuses at the model
 * size (CLEMBED_ERR_UNSUPPORTED) is left out of its group. Then it is timed against the best so far at the bench's model
 * sizes, alternately round by round with the bench's reference copy (bench.c's
 * measure): one round on the group's first row (under half the best's speed:
 * rejected at once; at FIRST_ROUND_KEEP times it or more, one round on each
 * row, and if every row keeps that lead those rounds decide), then every row:
 * it is kept when its speed over the best, the
 * geometric mean of the rows' median per-round ratios, is at least 1.03, no
 * row is below 0.98, and the same mean of the rows' lower quartiles is above 1
 * (faster in most rounds: a lead within the rounds' spread is noise; the
 * quartile is the round (n - 1) / 4 from the slowest of n, so with one round
 * it is the median, with 2 - 4 the slowest, with 5 the second slowest). A
 * parameter that only shapes prefetch hints is not searched on a device that
 * takes none (prefetch = 0). The atomic backward, whose sums' order is the
 * device's, is not among the rows. At the end every row of the groups is
 * timed once more, default against tuned, and the entry (the settings that
 * differ from the built-in ones) is written to the user's tuning file,
 * replacing the device's earlier entry, through a temporary file renamed over
 * it. */
#define _GNU_SOURCE /* pipe2, open_memstream */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "json.h"
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
     {{"embed_rows", V(0, 1, 2, 4, 8, 16)}, {"embed_rows_bytes", V(0, 4096, 8192, 16384, 32768)},
      {"embed_vec", V(4, 8, 16)}, {"embed_local", V(0, 4, 8, 16, 32)},
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
     {{"norm_rows", V(0, 1, 2, 4)}, {"norm_strided_rows", V(1, 2, 4, 8, 16)},
      {"norm_bwd_strided_rows", V(1, 2, 4, 8, 16)}, {"norm_group_rows", V(1, 2, 4, 8, 16)},
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
     /* (Q4_K: a super-block dtype, whose bags another bag_vec slowed where the others' gained) */
     {"bag sum f32", "bag sum q8_0", "bag sum q4_k", "bags: 26 features", "bag step ROWWISE_ADAGRAD"},
     {{"bag_vec", V(4, 8, 16)}, {"bag_tile", V(1, 2, 4, 8, 16)}, {"bag_rows", V(1, 2, 4, 8, 16)},
      {"bag_rows_features", V(1, 2, 4, 8)}, {"bag_ahead", V(0, 8, 16, 32, 64)}, {"bag_plain", V(0, 1)},
      {"bag_by_feature", V(0, 1)}, {"bag_local", V(0, 4, 8, 16, 32)}, {"bag_cols", V(0, 1)}},
     {/* a bag per work-item, narrow vectors a row at a time, groups of 8 */
      {{"bag_vec", 4}, {"bag_tile", 1}, {"bag_rows", 1}, {"bag_rows_features", 1}, {"bag_local", 8}}}},
};
#define NGROUPS (sizeof groups / sizeof groups[0])

/* The parameters that only shape prefetch hints: they change no kernel where
 * the device takes none (prefetch = 0), and are not searched there. */
static int hint_only(const char *name) {
  static const char *const hints[] = {"embed_next", "embed_strided_prefetch_bytes", "embed_strided_ahead",
                                      "norm_next",  "fold_ahead",                   "fold_ahead_bytes",
                                      "step_ahead", "bag_ahead"};
  for (size_t i = 0; i < sizeof hints / sizeof hints[0]; i++)
    if (!strcmp(name, hints[i])) return 1;
  return 0;
}
#define MAXSET 64
#define SHRINK 64
#define KEEP_SPEEDUP 1.03
#define KEEP_WORST 0.98
#define KEEP_LOW 1.0 /* the rows' lower quartiles of per-round speeds (geometric mean) above this */
#define FIRST_ROUND_KEEP 3.0 /* a lead that one round on each row settles */
#define SUMMARY_ROW_SECONDS 60.0 /* a summary row's rounds, about */
/* a shape whose kernels take longer to build makes every user wait that long once (--build-limit) */
static double build_limit = 120;
#define MAX_RESTARTS 64 /* new workers after rejected candidates, at most */
#define SHARE_GRACE 30.0 /* a candidate still running this long after its group's share ends is stopped */

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
static FILE *say; /* the progress and the summary: stdout, or stderr with --json */
static int want_json;
static double elapsed(void) { return now() - t_start; }

/* ------------------------------------------------------------- the journal */

/* The search runs in a worker process, which tells this one (the supervisor)
 * through a pipe as each group starts ('G', with the end of its share of the
 * budget) and ends ('S'), and as each candidate starts ('F', with the settings
 * then best), ends its first run ('B') and is decided ('D', with the settings
 * then best), and with the lines of --json ('I' the device, 'R' a summary
 * row, 'E' the entry). Neither a build nor a kernel can be stopped from inside
 * (clBuildProgram returns when it is done, and llvmpipe builds some shapes for
 * minutes), and a driver may crash on a shape: a candidate whose first run
 * goes on past the build limit, or whose run goes on SHARE_GRACE past its
 * group's share, is stopped (the worker killed), and one in whose run the
 * worker dies is rejected too; the search then goes on in a new worker, forked
 * from the supervisor with the journal so far, which walks the same search
 * taking the journal's decisions where it has them. */
typedef struct jentry {
  char kind;
  char *group, *label, *best;
  double end; /* 'G': the end of the group's share */
  char *info; /* for --json: a JSON object ('I' the device, 'D' the candidate's outcome, 'R' a summary row,
               * 'E' the entry) */
} jentry;
static jentry *journal;
static int njournal, jcap;
static int journal_fd = -1; /* the worker's end of the pipe (-1 in the supervisor) */

static int journal_add(char kind, const char *group, const char *label, const char *best, double end,
                       const char *info) {
  if (njournal == jcap) {
    int cap = jcap ? 2 * jcap : 64;
    jentry *more = realloc(journal, (size_t)cap * sizeof *more);
    if (!more) return -1;
    journal = more;
    jcap = cap;
  }
  jentry *j = &journal[njournal];
  j->kind = kind;
  j->group = strdup(group);
  j->label = strdup(label);
  j->best = strdup(best);
  j->end = end;
  j->info = strdup(info);
  if (!j->group || !j->label || !j->best || !j->info) {
    free(j->group);
    free(j->label);
    free(j->best);
    free(j->info);
    return -1;
  }
  njournal++;
  return 0;
}

static void journal_free(void) {
  for (int i = 0; i < njournal; i++) {
    free(journal[i].group);
    free(journal[i].label);
    free(journal[i].best);
    free(journal[i].info);
  }
  free(journal);
  journal = NULL;
  njournal = jcap = 0;
}

/* The journal's last entry of this kind, group and (where not NULL) label. */
static const jentry *journal_find(char kind, const char *group, const char *label) {
  for (int i = njournal - 1; i >= 0; i--)
    if (journal[i].kind == kind && !strcmp(journal[i].group, group) && (!label || !strcmp(journal[i].label, label)))
      return &journal[i];
  return NULL;
}

/* The worker tells the supervisor (a line: kind, group, label, settings, end,
 * info; tab-separated, none of them holds a tab or a line break: info is JSON,
 * whose strings escape them). */
static void journal_send(char kind, const char *group, const char *label, const settings *best, double end,
                         const char *info) {
  if (journal_fd < 0) return;
  char set[2048];
  set[0] = 0;
  if (best) settings_string(best, set, sizeof set);
  size_t cap = strlen(group) + (label ? strlen(label) : 0) + strlen(set) + (info ? strlen(info) : 0) + 64;
  char *line = malloc(cap);
  if (!line) return;
  int n = snprintf(line, cap, "%c\t%s\t%s\t%s\t%.6f\t%s\n", kind, group, label ? label : "", set, end,
                   info ? info : "");
  for (const char *p = line; n > 0;) {
    ssize_t w = write(journal_fd, p, (size_t)n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    p += w;
    n -= (int)w;
  }
  free(line);
}

/* A line the worker sent, into the supervisor's journal. */
static int journal_parse(char *line) {
  char *f[6] = {0};
  int n = 0;
  for (char *p = line; n < 6; n++) {
    f[n] = p;
    p = strchr(p, '\t');
    if (!p) {
      n++;
      break;
    }
    *p++ = 0;
  }
  if (n != 6 || strlen(f[0]) != 1) return -1;
  return journal_add(f[0][0], f[1], f[2], f[3], strtod(f[4], NULL), f[5]);
}

/* The static name of parameter `name` (its first len characters), or NULL. */
static const char *param_name(const char *name, size_t len) {
  for (size_t g = 0; g < NGROUPS; g++) {
    for (int p = 0; p < 9 && groups[g].params[p].name; p++)
      if (strlen(groups[g].params[p].name) == len && !strncmp(groups[g].params[p].name, name, len))
        return groups[g].params[p].name;
    for (int x = 0; x < 3; x++)
      for (int i = 0; i < 6 && groups[g].presets[x][i].name; i++)
        if (strlen(groups[g].presets[x][i].name) == len && !strncmp(groups[g].presets[x][i].name, name, len))
          return groups[g].presets[x][i].name;
  }
  return NULL;
}

/* Settings from settings_string's "name=value,..." (the tuner's own names). */
static void settings_parse(const char *s, settings *out) {
  memset(out, 0, sizeof *out);
  for (const char *p = s; *p;) {
    size_t len = strcspn(p, ","), eq = strcspn(p, "=");
    const char *name = eq < len ? param_name(p, eq) : NULL;
    if (name) settings_set(out, name, strtoull(p + eq + 1, NULL, 10));
    p += len + (p[len] == ',');
  }
}

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
  double once; /* seconds of its first run at the model size */
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
  /* and UTF-8 (the JSON file's strings) */
  for (int f = 0; f < 3; f++) ce_utf8_clean(fields[f]);
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

/* Whether the library reads the tuning file at path: a context made on q with
 * it as the user's file says it was read. 1, or 0 with the context's message
 * in why. */
static int library_reads(cl_command_queue q, const char *path, char *why, size_t cap) {
  clembed_context *c = NULL;
  setenv("CLEMBED_TUNING_FILE", path, 1);
  clembed_status st = clembed_context_create_from_queue(q, &c);
  setenv("CLEMBED_TUNING_FILE", "none", 1); /* the tuner's contexts read no user file */
  int ok = st == CLEMBED_OK && !strstr(clembed_context_tuning(c), "; not read: ");
  if (!ok) snprintf(why, cap, "%s", st == CLEMBED_OK ? clembed_context_message(c) : clembed_last_error_message());
  clembed_context_destroy(c);
  return ok;
}

/* Closes the temporary file f (at tmp), written to replace path; where the
 * library reads it, renames it over path. 0, or -1 with err and the temporary
 * file removed (path as it was). */
static int commit_file(FILE *f, const char *tmp, const char *path, cl_command_queue q, char *err, size_t errlen) {
  char why[1024];
  int bad = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
  bad |= fclose(f) != 0;
  if (bad) {
    snprintf(err, errlen, "cannot write %.900s: %s", tmp, strerror(errno));
    unlink(tmp);
    return -1;
  }
  if (!library_reads(q, tmp, why, sizeof why)) {
    snprintf(err, errlen, "the new tuning file would not be read (%.600s); nothing was written to %.300s", why, path);
    unlink(tmp);
    return -1;
  }
  if (rename(tmp, path)) {
    snprintf(err, errlen, "cannot write %.900s: %s", path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}

/* Writes the file with the device's entry (heading `[device NAME]`) replaced
 * by `entry`: the other entries as they were, through a temporary file renamed
 * over the old one. 0, or -1 with err. */
static int write_entry(cl_command_queue q, const char *path, const char *name, const char *entry, char *err,
                       size_t errlen) {
  char *old = NULL;
  size_t len = 0;
  if (read_all(path, &old, &len)) {
    snprintf(err, errlen, "cannot read %.900s: %s", path, strerror(errno));
    return -1;
  }
  char heading[400];
  snprintf(heading, sizeof heading, "[device %s]", name);
  if (make_dirs(path)) {
    snprintf(err, errlen, "cannot make the directory of %.900s: %s", path, strerror(errno));
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
    snprintf(err, errlen, "out of memory writing %.900s", path);
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
  return commit_file(f, tmp, path, q, err, errlen);
}

/* Whether the file at path is in the built-in file's format: it exists and
 * its first character that is not a space is not '{' (JSON's). */
static int file_is_conf(const char *path) {
  char *text = NULL;
  size_t len = 0, at = 0;
  if (read_all(path, &text, &len) || !text) return 0;
  while (at < len && (text[at] == ' ' || text[at] == '\t' || text[at] == '\r' || text[at] == '\n')) at++;
  int conf = at < len && text[at] != '{';
  free(text);
  return conf;
}

/* The device's entry as the JSON tuning file holds it (docs/tuning.md), into buf. */
static void json_entry(char *buf, size_t cap, const char *comment, const ident *id, const settings *s) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  buf[0] = 0;
  if (!f) return;
  fputs("{\n  \"device\": ", f);
  ce_json_write_string(f, id->device);
  fputs(",\n  \"comment\": ", f);
  ce_json_write_string(f, comment);
  fputs(",\n  \"match\": {\"platform\": ", f);
  ce_json_write_string(f, id->platform);
  fputs(", \"device\": ", f);
  ce_json_write_string(f, id->device);
  fputs("},\n  \"tuned\": 1,\n  \"parameters\": {", f);
  for (int i = 0; i < s->n; i++) fprintf(f, "%s\"%s\": %llu", i ? ", " : "", s->name[i], s->value[i]);
  fputs("}\n}\n", f);
  if (fclose(f) == 0 && text) snprintf(buf, cap, "%s", text);
  free(text);
}

/* Writes the JSON tuning file at path with the device's entry (its "device"
 * `name`) replaced by `entry` (json_entry's), the other entries as they
 * were, through a temporary file renamed over the old one. A file that is not
 * a tuning file in JSON is left as it is. 0, or -1 with err. */
static int write_json_entry(cl_command_queue q, const char *path, const char *name, const char *entry, char *err,
                            size_t errlen) {
  char *old = NULL, jerr[300];
  size_t len = 0;
  ce_json root, ent;
  memset(&root, 0, sizeof root);
  memset(&ent, 0, sizeof ent);
  if (read_all(path, &old, &len)) {
    snprintf(err, errlen, "cannot read %.900s: %s", path, strerror(errno));
    return -1;
  }
  size_t at = 0;
  while (old && at < len && (old[at] == ' ' || old[at] == '\t' || old[at] == '\r' || old[at] == '\n')) at++;
  const ce_json *ents = NULL;
  if (old && at < len) {
    if (ce_json_parse(old, len, &root, jerr, sizeof jerr)) {
      snprintf(err, errlen, "%.600s is not JSON (%.300s): mend or remove it; nothing was written", path, jerr);
      free(old);
      return -1;
    }
    ents = ce_json_get(&root, "entries");
    if (root.type != CE_JOBJECT || !ents || ents->type != CE_JARRAY) {
      snprintf(err, errlen, "%.700s is not a tuning file (a JSON object with an \"entries\" array): mend or remove it; "
               "nothing was written", path);
      ce_json_free(&root);
      free(old);
      return -1;
    }
  }
  free(old);
  if (ce_json_parse(entry, strlen(entry), &ent, jerr, sizeof jerr)) {
    snprintf(err, errlen, "the entry is not JSON (%s)", jerr);
    ce_json_free(&root);
    return -1;
  }
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = NULL;
  if (make_dirs(path) || !(f = fopen(tmp, "wb"))) {
    snprintf(err, errlen, "cannot write %.900s: %s", tmp, strerror(errno));
    ce_json_free(&root);
    ce_json_free(&ent);
    return -1;
  }
  fputs("{\n  \"clembed_tuning\": 1,\n  \"entries\": [", f);
  int n = 0;
  for (size_t i = 0; ents && i < ents->n; i++) {
    const ce_json *dev = ce_json_get(&ents->items[i], "device");
    if (dev && dev->type == CE_JSTRING && !strcmp(dev->text, name)) continue; /* the device's earlier entry */
    fputs(n++ ? ",\n    " : "\n    ", f);
    ce_json_write(f, &ents->items[i], 2);
  }
  fputs(n ? ",\n    " : "\n    ", f);
  ce_json_write(f, &ent, 2);
  fputs("\n  ]\n}\n", f);
  ce_json_free(&root);
  ce_json_free(&ent);
  return commit_file(f, tmp, path, q, err, errlen);
}

/* ------------------------------------------------------------- main */

static void usage(FILE *f) {
  fprintf(f,
          "usage: clembed tune [--device SPEC] [--only GROUPS] [--budget SECONDS] [--reps N]\n"
          "                    [--build-limit SECONDS] [--out FILE] [--json] [--dry-run] [--list]\n"
          "  Finds this device's kernel shapes on the device itself and writes them as its\n"
          "  entry of your tuning file, which every context on the device then reads\n"
          "  (docs/tuning.md). Operation by operation (a group: its bench rows, at the sizes\n"
          "  models have, and its kernels' parameters), a few whole shapes are tried, then\n"
          "  each parameter's values, each with the others at the best found so far,\n"
          "  starting from the built-in entries.\n"
          "  A candidate whose results differ from the built-in shapes' in a single bit (at\n"
          "  a 64th of the rows' sizes), or whose first run there (mostly its kernels' build)\n"
          "  takes over the build limit, is rejected; one that is at least 1.03x faster over\n"
          "  its group's rows (the geometric mean of the rows' medians of per-round paired\n"
          "  ratios, no row below 0.98) and faster in most rounds (the same mean of the\n"
          "  rows' lower quartiles above 1: with 5 rounds, the second slowest) is kept.\n"
          "  A parameter that only shapes prefetch hints is not searched on a device that\n"
          "  takes none (said at the start). A summary, default against tuned and each\n"
          "  against the device's copy, ends the run. The rows' memory is that of\n"
          "  `clembed bench`'s (up to 8 GiB).\n"
          "  --device SPEC    the device (as `clembed devices` lists them)\n"
          "  --only GROUPS    the groups to tune, comma-separated (--list names them;\n"
          "                   default: every group)\n"
          "  --budget SECONDS the run's time (default 900): each group has an equal share\n"
          "                   of what is left of 92 %% of it (a group done early leaves\n"
          "                   its time to the later ones), its summary included; a\n"
          "                   candidate still running 30 s past its group's share is\n"
          "                   stopped and rejected; the entry follows\n"
          "  --reps N         timed rounds per candidate and row (default 5; the summary 9,\n"
          "                   fewer where a row's 9 would take over a minute)\n"
          "  --build-limit SECONDS\n"
          "                   a candidate's first run, mostly its kernels' build (default\n"
          "                   120): one still running then is stopped and rejected (the\n"
          "                   search runs in a process of its own and goes on in a new\n"
          "                   one; so it does past a candidate whose run ends the process,\n"
          "                   as a driver's crash)\n"
          "  --out FILE       the tuning file to write (--output is the same; default:\n"
          "                   CLEMBED_TUNING_FILE, else\n"
          "                   $XDG_CACHE_HOME/clembed/tuning.json, else\n"
          "                   ~/.cache/clembed/tuning.json; written as JSON, or in the\n"
          "                   built-in file's format where the file is in that)\n"
          "  --json           the progress and the summary go to stderr, and the run to\n"
          "                   stdout as one JSON object: the device, every candidate's\n"
          "                   outcome, the summary rows, the settings, the entry and the\n"
          "                   file written (docs/tuning.md)\n"
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

/* v as a JSON number (4 decimals), or null where it is not finite. */
static const char *jnum(double v, char *buf, size_t cap) {
  if (isfinite(v)) snprintf(buf, cap, "%.4f", v);
  else snprintf(buf, cap, "null");
  return buf;
}

static double geomean(const double *x, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += log(x[i]);
  return n ? exp(s / n) : 1.0;
}

/* Row `row` of the best's context b against the candidate's c, in `rounds`
 * paired rounds into *t; 0 on success (else err says why, where it can). */
static int time_row(const grow *row, clembed_context *b, clembed_context *c, bench_ref *ref, int rounds,
                    bench_timing *t, char *err, size_t errlen) {
  bench_run *rb = bench_run_alias(row->full, b), *rc = bench_run_alias(row->full, c);
  int bad = !rb || !rc || bench_time(rb, rc, ref, rounds, t, err, errlen);
  bench_run_close(rb);
  bench_run_close(rc);
  return bad;
}

/* Runs candidate `cand` of group G (printed as `label`) against `best`: the
 * same bits at the small size, then paired timing; kept into *best when it is
 * at least KEEP_SPEEDUP faster over the rows with none below KEEP_WORST. */
static void try_candidate(cl_command_queue q, const group *G, const grow *rows, int nr, bench_ref *ref, int reps,
                          settings *best, const settings *cand, const char *label, char *info, size_t icap) {
  char err[1024] = "";
  fprintf(say, "[%5.0fs] %s: %s ...", elapsed(), G->name, label);
  fflush(say);
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
  journal_send('B', G->name, label, NULL, 0, NULL);
  if (ok && now() - first_run > build_limit) {
    snprintf(err, sizeof err, "its first run (mostly its kernels' build) took %.2f s, over %g s", now() - first_run,
             build_limit);
    ok = 0;
  }
  double speed[5], low[5], worst = 1e9;
  /* a first round on the first row: a candidate at less than half the best's
   * speed goes at once; one at FIRST_ROUND_KEEP times it goes on to a first
   * round on each row, and one that keeps that lead on every row is judged by
   * those rounds (where the best so far takes minutes a round, its timed
   * rounds would spend the group's budget on one candidate) */
  int decided = 0;
  for (int r = 0; ok && r < nr; r++) {
    bench_timing t;
    if (time_row(&rows[r], b, c, ref, 1, &t, err, sizeof err)) {
      ok = 0;
    } else if (t.alt_speedup < 0.5) {
      snprintf(err, sizeof err, "%.3fx on %s in a first round", t.alt_speedup, bench_row_name(rows[r].k));
      ok = 0;
    }
    if (!ok || t.alt_speedup < FIRST_ROUND_KEEP) break;
    speed[r] = low[r] = t.alt_speedup;
    if (speed[r] < worst) worst = speed[r];
    decided = r == nr - 1;
  }
  if (decided) fprintf(say, " (a first round on each row)");
  else worst = 1e9;
  for (int r = 0; ok && !decided && r < nr; r++) {
    bench_timing t;
    if (time_row(&rows[r], b, c, ref, reps, &t, err, sizeof err)) {
      ok = 0;
    } else {
      speed[r] = t.alt_speedup;
      low[r] = t.alt_low;
      if (speed[r] < worst) worst = speed[r];
    }
  }
  char jg[64], jl[512], je[2048];
  bench_json_text(G->name, jg, sizeof jg);
  bench_json_text(label, jl, sizeof jl);
  if (!ok) {
    fprintf(say, " rejected: %s\n", err[0] ? err : "failed");
    snprintf(info, icap, "{\"group\": \"%s\", \"candidate\": \"%s\", \"outcome\": \"rejected\", \"reason\": \"%s\"}", jg,
             jl, bench_json_text(err[0] ? err : "failed", je, sizeof je));
  } else {
    /* the lower quartiles: a lead the rounds' spread accounts for (one faster in
     * only half its rounds, as two runs of the same kernels can be) is not kept */
    double gm = geomean(speed, nr), gl = geomean(low, nr);
    int keep = gm >= KEEP_SPEEDUP && worst >= KEEP_WORST && gl > KEEP_LOW;
    fprintf(say, " same bits, %.3fx (worst row %.3fx, lower quartile %.3fx)%s\n", gm, worst, gl,
            keep ? ": kept" : "");
    char n1[32], n2[32], n3[32];
    snprintf(info, icap,
             "{\"group\": \"%s\", \"candidate\": \"%s\", \"outcome\": \"%s\", \"speedup\": %s, \"worst_row\": %s, "
             "\"lower_quartile\": %s, \"first_rounds_only\": %s}",
             jg, jl, keep ? "kept" : "not kept", jnum(gm, n1, sizeof n1), jnum(worst, n2, sizeof n2),
             jnum(gl, n3, sizeof n3), decided ? "true" : "false");
    if (keep) *best = *cand;
  }
  fflush(say);
  clembed_context_destroy(c);
  clembed_context_destroy(b);
}

/* A summary row's paired rounds: 9 (or --reps if more), fewer where one
 * round of the row takes long (the row's rounds within SUMMARY_ROW_SECONDS, at
 * least one: the built-in fold on llvmpipe takes over a minute a run); the
 * count in *rounds. A first round measures the row (and warms it); where more
 * follow, their medians are the figures and it is not counted among them. */
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
    fprintf(say, "[%5.0fs] %s: the group's share of the budget (less its summary's time) is spent: its search stops here\n",
            elapsed(), G->name);
  }
  return *spent;
}

/* A summary line, for --json: a row's (row NULL: the group's) times (tm NULL:
 * none; tuned: the tuned settings' too), the rounds, a note (NULL: none). */
static void summary_json(const group *G, const char *row, const bench_timing *tm, int tuned, int rounds,
                         const char *note) {
  char info[4096], jg[64], jr[256], jn[2048];
  size_t o = (size_t)snprintf(info, sizeof info, "{\"group\": \"%s\", \"row\": ", bench_json_text(G->name, jg, sizeof jg));
  if (row)
    o += (size_t)snprintf(info + o, sizeof info - o, "\"%s\"", bench_json_text(row, jr, sizeof jr));
  else
    o += (size_t)snprintf(info + o, sizeof info - o, "null");
  char n1[32], n2[32], n3[32];
  if (tm && o < sizeof info)
    o += (size_t)snprintf(info + o, sizeof info - o, ", \"default_ms\": %s, \"default_of_copy\": %s",
                          jnum(tm->ms, n1, sizeof n1), jnum(tm->ratio, n2, sizeof n2));
  if (tm && tuned && o < sizeof info)
    o += (size_t)snprintf(info + o, sizeof info - o, ", \"tuned_ms\": %s, \"tuned_of_copy\": %s, \"tuned_over_default\": %s",
                          jnum(tm->alt_ms, n1, sizeof n1), jnum(tm->ratio * tm->alt_speedup, n2, sizeof n2),
                          jnum(tm->alt_speedup, n3, sizeof n3));
  else if (tm && o < sizeof info)
    o += (size_t)snprintf(info + o, sizeof info - o, ", \"tuned_ms\": null");
  if (tm && o < sizeof info) o += (size_t)snprintf(info + o, sizeof info - o, ", \"rounds\": %d", rounds);
  if (note && o < sizeof info)
    o += (size_t)snprintf(info + o, sizeof info - o, ", \"note\": \"%s\"", bench_json_text(note, jn, sizeof jn));
  if (o < sizeof info) snprintf(info + o, sizeof info - o, "}");
  journal_send('R', G->name, NULL, NULL, 0, info);
}

/* The run's options. */
typedef struct tune_opts {
  const char *device, *only;
  char path[1024];
  double budget;
  int reps, dry;
} tune_opts;

/* Candidate `cand` of group G (printed as `label`): the journal's decision
 * where an earlier worker made one, else tried (the supervisor told as it
 * goes). 1 where the group's search stops: its share of the budget is spent,
 * or (`done`: an earlier worker finished the group) the earlier search
 * stopped before this candidate. */
static int consider(cl_command_queue q, const group *G, int done, const grow *rows, int nr, bench_ref *ref, int reps,
                    settings *best, const settings *cand, const char *label, double group_end, int *spent) {
  const jentry *d = journal_find('D', G->name, label);
  if (d) {
    settings_parse(d->best, best);
    return 0;
  }
  if (done) return *spent = 1;
  if (share_spent(G, group_end, spent)) return 1;
  char info[4096];
  journal_send('F', G->name, label, best, 0, NULL);
  try_candidate(q, G, rows, nr, ref, reps, best, cand, label, info, sizeof info);
  journal_send('D', G->name, label, best, 0, info);
  return 0;
}

/* The search, the summaries and the entry (the worker process; `restarts`:
 * the workers before it). */
static int tune_work(const tune_opts *opt, int restarts) {
  const double search_end = opt->budget * 0.92; /* the search ends early enough for the last summary and the entry */
  const int reps = opt->reps;
  char err[1024] = "";
  clembed_context *def = NULL;
  clembed_status st = clembed_context_create(opt->device, &def);
  if (st != CLEMBED_OK) {
    fprintf(stderr, "clembed tune: %s: %s\n", clembed_status_string(st), clembed_last_error_message());
    return 2;
  }
  cl_command_queue q = clembed_context_queue(def);
  ident id;
  identify(def, &id);
  /* the parameters that only shape prefetch hints change no kernel where the device takes none (prefetch
   * 0): not searched there (a value that cannot be read: searched) */
  uint64_t prefetch = 1;
  const int hints = clembed_tuning_value(def, "prefetch", &prefetch) != CLEMBED_OK || prefetch != 0;
  char skipped[512] = "", jskipped[600] = "";
  for (size_t g = 0, o = 0, jo = 0; !hints && g < NGROUPS; g++)
    for (int p = 0; wanted_group(opt->only, groups[g].name) && p < 9 && groups[g].params[p].name; p++)
      if (hint_only(groups[g].params[p].name) && o < sizeof skipped && jo < sizeof jskipped) {
        o += (size_t)snprintf(skipped + o, sizeof skipped - o, "%s%s", o ? ", " : "", groups[g].params[p].name);
        jo += (size_t)snprintf(jskipped + jo, sizeof jskipped - jo, "%s\"%s\"", jo ? ", " : "",
                               groups[g].params[p].name);
      }
  if (restarts)
    fprintf(say, "[%5.0fs] the search goes on in a new process (%d so far), from the decisions made before\n", elapsed(),
           restarts);
  else
    fprintf(say, "clembed tune on %s (driver %s)\nstarting from: %s\nbudget %g s, %d rounds per candidate and row\n",
            clembed_context_device_name(def), id.driver, clembed_context_tuning(def), opt->budget, reps);
  if (!restarts && skipped[0])
    fprintf(say, "not searched: %s (they shape prefetch hints, which this device does not take)\n", skipped);
  if (!restarts) {
    char info[4096], jp[600], jd[600], jv[300], jt[2200];
    snprintf(info, sizeof info,
             "\"platform\": \"%s\", \"device\": \"%s\", \"driver\": \"%s\", \"starting_from\": \"%s\", "
             "\"budget_s\": %g, \"reps\": %d, \"build_limit_s\": %g, \"not_searched\": [%s]",
             bench_json_text(id.platform, jp, sizeof jp), bench_json_text(id.device, jd, sizeof jd),
             bench_json_text(id.driver, jv, sizeof jv), bench_json_text(clembed_context_tuning(def), jt, sizeof jt),
             opt->budget, reps, build_limit, jskipped);
    journal_send('I', "", NULL, NULL, 0, info);
  }
  fflush(say);
  /* a file the entry cannot go into is said before the search, not after it */
  struct stat out_st;
  char why[1024];
  if (!restarts && !opt->dry && opt->path[0] && stat(opt->path, &out_st) == 0 &&
      !library_reads(q, opt->path, why, sizeof why)) {
    fprintf(stderr, "clembed tune: %.300s is not a tuning file that clembed reads (%.600s): mend or remove it, or "
            "--out another file; nothing was searched\n", opt->path, why);
    clembed_context_destroy(def);
    return 1;
  }
  bench_ref *ref = bench_ref_open(def, reps < 9 ? 9 : reps, err, sizeof err);
  if (!ref) {
    fprintf(stderr, "clembed tune: the reference copy: %s\n", err);
    clembed_context_destroy(def);
    return 2;
  }
  settings best; /* the whole entry: every group's kept settings */
  memset(&best, 0, sizeof best);
  int rc = 0, out_of_time = 0, left = 0;
  for (size_t g = 0; g < NGROUPS; g++) left += wanted_group(opt->only, groups[g].name);
  for (size_t g = 0; g < NGROUPS && !rc; g++) {
    const group *G = &groups[g];
    if (!wanted_group(opt->only, G->name)) continue;
    /* each group searches within an equal share of what is left (a group
     * done early leaves its time to the later ones); a group an earlier
     * worker started keeps its share, one it finished is walked through the
     * journal's decisions only */
    const jentry *gj = journal_find('G', G->name, NULL);
    const int done = journal_find('S', G->name, NULL) != NULL;
    const double group_end = gj ? gj->end : elapsed() + (search_end - elapsed()) / (left > 0 ? left : 1);
    left--;
    int group_spent = 0;
    if (!gj) journal_send('G', G->name, NULL, NULL, group_end, NULL);
    if (!gj && (out_of_time || elapsed() > search_end)) {
      out_of_time = 1;
      fprintf(say, "summary %-10s not tuned: the budget was spent before it (the built-in shapes)\n", G->name);
      summary_json(G, NULL, NULL, 0, 0, "not tuned: the budget was spent before it (the built-in shapes)");
      journal_send('S', G->name, NULL, NULL, 0, NULL);
      continue;
    }
    grow rows[5];
    int nr = 0;
    memset(rows, 0, sizeof rows);
    for (int r = 0; !done && r < 5 && G->rows[r]; r++) {
      long k = row_index(G->rows[r]);
      if (k < 0) continue;
      rows[nr].k = (size_t)k;
      st = CLEMBED_OK;
      int bad = small_result(def, (size_t)k, &rows[nr].want, &rows[nr].nwant, err, sizeof err) ||
                !(rows[nr].full = bench_run_open(def, (size_t)k, 1, &st));
      const double t0 = now();
      if (!bad) bad = (st = bench_run_once(rows[nr].full)) != CLEMBED_OK;
      rows[nr].once = now() - t0;
      if (bad) {
        if (st == CLEMBED_ERR_UNSUPPORTED) { /* a row the device refuses at the model size: left out */
          if (!gj) {
            char note[1200];
            snprintf(note, sizeof note, "not on this device: %s", clembed_context_message(def));
            fprintf(say, "summary %-10s %-56.56s %s\n", G->name, bench_row_name((size_t)k), note);
            summary_json(G, bench_row_name((size_t)k), NULL, 0, 0, note);
          }
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
    if (!rc && !done && nr == 0) {
      fprintf(say, "summary %-10s not tuned: none of its rows runs on this device\n", G->name);
      summary_json(G, NULL, NULL, 0, 0, "not tuned: none of its rows runs on this device");
      journal_send('S', G->name, NULL, NULL, 0, NULL);
      continue;
    }
    /* the search stops early enough for the group's summary within its share: each row's rounds
     * (summary_time's count), a round about the row twice (built-in and tuned) and the copy */
    double summary_s = 0;
    for (int r = 0; r < nr; r++) {
      const double round_s = 2.5 * rows[r].once;
      int n = reps < 9 ? 9 : reps;
      if (round_s * n > SUMMARY_ROW_SECONDS) n = round_s > 0 ? (int)(SUMMARY_ROW_SECONDS / round_s) : n;
      summary_s += (n < 1 ? 1 : n) * round_s;
    }
    const double search_stop = group_end - summary_s;
    for (int x = 0; !rc && !group_spent && x < 3 && G->presets[x][0].name; x++) {
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
      if (differs)
        consider(q, G, done, rows, nr, ref, reps, &best, &cand, label, search_stop, &group_spent);
    }
    for (int p = 0; !rc && !group_spent && p < 9 && G->params[p].name; p++) {
      const param *P = &G->params[p];
      if (!hints && hint_only(P->name)) continue;
      /* the value the parameter had when its search began: once another is kept, that one has lost to it
       * with every other parameter as now, so it is not tried again */
      const unsigned long long start = current_value(q, &best, P->name);
      for (int v = 0; v < 8 && !group_spent; v++) {
        if (v > 0 && P->values[v] == 0) break; /* the list's end (a value of 0 only comes first) */
        if (current_value(q, &best, P->name) == P->values[v] || P->values[v] == start) continue; /* measured */
        settings cand = best;
        settings_set(&cand, P->name, P->values[v]);
        char label[160];
        snprintf(label, sizeof label, "%s=%llu", P->name, P->values[v]);
        consider(q, G, done, rows, nr, ref, reps, &best, &cand, label, search_stop, &group_spent);
      }
    }
    if (done) continue; /* its summary was printed */
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
        if (!summary_time(rows[r].full, NULL, ref, reps, &tm, &rounds, err, sizeof err)) {
          fprintf(say, "summary %-10s %-56.56s default %8.2f ms (%.2f of copy)  tuned: the same%s\n", G->name,
                  bench_row_name(rows[r].k), tm.ms, tm.ratio, rounds_note(rounds, reps, note, sizeof note));
          summary_json(G, bench_row_name(rows[r].k), &tm, 0, rounds, "tuned: the same");
        } else {
          fprintf(say, "summary %-10s %-56.56s not timed: %s\n", G->name, bench_row_name(rows[r].k), err);
          summary_json(G, bench_row_name(rows[r].k), NULL, 0, 0, err);
        }
      }
    } else if (!rc) {
      clembed_context *t = make_context(q, &best, err, sizeof err);
      for (int r = 0; t && r < nr; r++) {
        bench_run *rt = bench_run_alias(rows[r].full, t);
        bench_timing tm;
        int rounds = 0;
        char note[32];
        if (rt && !summary_time(rows[r].full, rt, ref, reps, &tm, &rounds, err, sizeof err)) {
          fprintf(say, "summary %-10s %-56.56s default %8.2f ms (%.2f of copy)  tuned %8.2f ms (%.2f of copy)  "
                  "tuned/default %.2fx%s\n",
                  G->name, bench_row_name(rows[r].k), tm.ms, tm.ratio, tm.alt_ms, tm.ratio * tm.alt_speedup,
                  tm.alt_speedup, rounds_note(rounds, reps, note, sizeof note));
          summary_json(G, bench_row_name(rows[r].k), &tm, 1, rounds, NULL);
        } else {
          fprintf(say, "summary %-10s %-56.56s not timed: %s\n", G->name, bench_row_name(rows[r].k), err);
          summary_json(G, bench_row_name(rows[r].k), NULL, 0, 0, err);
        }
        bench_run_close(rt);
      }
      if (!t) {
        fprintf(say, "summary %-10s no context with the tuned settings: %s\n", G->name, err);
        summary_json(G, NULL, NULL, 0, 0, err);
      }
      clembed_context_destroy(t);
      fflush(say);
    }
    for (int r = 0; r < nr; r++) {
      bench_run_close(rows[r].full);
      free(rows[r].want);
    }
    if (!rc) journal_send('S', G->name, NULL, NULL, 0, NULL);
  }
  if (!rc) {
    char when[64], entry[8192], list[2048];
    time_t now_t = time(NULL);
    struct tm tmv;
    gmtime_r(&now_t, &tmv);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tmv);
    char comment[400];
    snprintf(comment, sizeof comment, "clembed tune, %s, driver %s%s%s", when, id.driver,
             opt->only ? ", groups " : "", opt->only ? opt->only : "");
    settings none;
    memset(&none, 0, sizeof none);
    settings diff = none; /* the kept settings whose values are not the built-in ones */
    for (int i = 0; i < best.n; i++)
      if (current_value(q, &none, best.name[i]) != best.value[i]) settings_set(&diff, best.name[i], best.value[i]);
    best = diff;
    /* the entry in the file's format: JSON, or the built-in file's where the file is in that; a file
     * the library does not read (damaged, or not a tuning file) is not written over */
    const int conf = opt->path[0] && file_is_conf(opt->path);
    struct stat fst;
    const int had_file = opt->path[0] && stat(opt->path, &fst) == 0;
    int unread = !opt->dry && had_file && !library_reads(q, opt->path, why, sizeof why);
    if (conf) {
      size_t o = (size_t)snprintf(entry, sizeof entry, "# %s\n[device %s]\nmatch.platform = %s\nmatch.device = %s\n"
                                  "tuned = 1\n", comment, id.device, id.platform, id.device);
      for (int i = 0; i < best.n && o < sizeof entry; i++)
        o += (size_t)snprintf(entry + o, sizeof entry - o, "%s = %llu\n", best.name[i], best.value[i]);
    } else {
      json_entry(entry, sizeof entry, comment, &id, &best);
    }
    settings_string(&best, list, sizeof list);
    fprintf(say, "tuned settings: %s\n", best.n ? list : "(none: the built-in shapes were the fastest found)");
    if (opt->dry) {
      fprintf(say, "the entry (--dry-run, not written):\n%s", entry);
    } else if (unread) {
      fprintf(stderr, "clembed tune: %.300s is not a tuning file that clembed reads (%.600s): mend or remove it; "
              "nothing was written\n", opt->path, why);
      fprintf(say, "the entry (not written):\n%s", entry);
      rc = 1;
    } else if (conf ? write_entry(q, opt->path, id.device, entry, err, sizeof err)
                    : write_json_entry(q, opt->path, id.device, entry, err, sizeof err)) {
      fprintf(stderr, "clembed tune: %s\n", err);
      fprintf(say, "the entry (not written):\n%s", entry);
      rc = 1;
    } else {
      fprintf(say, "written to %s (every context on this device reads it; `clembed devices` shows it)\n", opt->path);
      /* a new tuning.json beside an earlier release's tuning.conf, which contexts read until then */
      size_t pl = strlen(opt->path);
      char old_conf[1024];
      struct stat cst;
      if (!had_file && pl > 12 && pl < sizeof old_conf && !strcmp(opt->path + pl - 12, "/tuning.json")) {
        memcpy(old_conf, opt->path, pl - 5);
        memcpy(old_conf + pl - 5, ".conf", 6);
        if (stat(old_conf, &cst) == 0)
          fprintf(say, "note: %s, an earlier release's tuning file beside it, is no longer read: copy into the new "
                  "file any entry of its own\n", old_conf);
      }
    }
    /* for --json: the settings, the entry, where it went */
    char info[16384], je[12288], jw[2100];
    size_t io = (size_t)snprintf(info, sizeof info, "\"settings\": {");
    for (int i = 0; i < best.n && io < sizeof info; i++)
      io += (size_t)snprintf(info + io, sizeof info - io, "%s\"%s\": %llu", i ? ", " : "", best.name[i], best.value[i]);
    if (io < sizeof info)
      io += (size_t)snprintf(info + io, sizeof info - io, "}, \"entry\": \"%s\", \"written\": ",
                             bench_json_text(entry, je, sizeof je));
    if (io < sizeof info && (rc || opt->dry))
      snprintf(info + io, sizeof info - io, "null");
    else if (io < sizeof info)
      snprintf(info + io, sizeof info - io, "\"%s\"", bench_json_text(opt->path, jw, sizeof jw));
    journal_send('E', "", NULL, NULL, 0, info);
  }
  bench_ref_close(ref);
  clembed_context_destroy(def);
  return rc;
}

static void describe_exit(int status, char *buf, size_t cap) {
  if (WIFSIGNALED(status))
    snprintf(buf, cap, "killed by signal %d, %s", WTERMSIG(status), strsignal(WTERMSIG(status)));
  else if (WIFEXITED(status))
    snprintf(buf, cap, "exit %d", WEXITSTATUS(status));
  else
    snprintf(buf, cap, "status %d", status);
}

/* --json: the run as one JSON object on stdout, from the journal (the
 * workers' lines): what the run got to (no device, settings or entry where it
 * ended before them), and its exit status. */
static void print_json(int restarts, int rc) {
  const jentry *head = journal_find('I', "", NULL), *end = journal_find('E', "", NULL);
  printf("{%s%s\"exit_status\": %d, \"restarts\": %d, \"candidates\": [", head ? head->info : "", head ? ", " : "", rc,
         restarts);
  int first = 1;
  for (int i = 0; i < njournal; i++)
    if (journal[i].kind == 'D' && journal[i].info[0]) {
      printf("%s%s", first ? "" : ", ", journal[i].info);
      first = 0;
    }
  printf("], \"summary\": [");
  first = 1;
  for (int i = 0; i < njournal; i++)
    if (journal[i].kind == 'R') {
      printf("%s%s", first ? "" : ", ", journal[i].info);
      first = 0;
    }
  printf("], %s}\n", end ? end->info : "\"settings\": null, \"entry\": null, \"written\": null");
  fflush(stdout);
}

/* Runs the search in worker processes (the journal above): each forked from
 * here with the journal so far, so a candidate stopped or fatal to its worker
 * is rejected and the next worker goes on from the decisions made. The last
 * worker's exit status. */
static int supervise(const tune_opts *o) {
  int rc = 2, restarts = 0;
  double share_end = -1; /* the end of the share of the group under way (its 'G'), -1 between groups */
  for (;; restarts++) {
    if (restarts > MAX_RESTARTS) {
      fprintf(stderr, "clembed tune: the search was stopped and went on in a new process %d times: the run ends "
              "(nothing written)\n", MAX_RESTARTS);
      break;
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC)) { /* a program the driver starts holds no end of it */
      fprintf(stderr, "clembed tune: pipe: %s\n", strerror(errno));
      break;
    }
    fflush(say);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "clembed tune: fork: %s\n", strerror(errno));
      close(fds[0]);
      close(fds[1]);
      break;
    }
    if (pid == 0) {
      close(fds[0]);
      journal_fd = fds[1];
      int wrc = tune_work(o, restarts);
      fflush(say);
      fflush(stderr);
      _exit(wrc);
    }
    close(fds[1]);
    /* the worker's lines; the candidate under way (its 'F', not yet decided), and whether in its first run */
    size_t have = 0, cap = (size_t)1 << 16;
    char *buf = malloc(cap);
    int pending = -1, first_run = 0, killed = 0; /* killed: 1 past the build limit, 2 past the group's share */
    int stopped = -1;                             /* the candidate under way when the worker was killed */
    int oom = !buf;
    double since = 0;
    while (!oom) {
      /* the deadlines: the first run's build limit, and the end of the group's share (and SHARE_GRACE); once
       * the worker is killed, its last lines are read to the end */
      double left = 1e30;
      if (!killed && first_run) left = build_limit - (elapsed() - since);
      if (!killed && pending >= 0 && share_end >= 0 && share_end + SHARE_GRACE - elapsed() < left)
        left = share_end + SHARE_GRACE - elapsed();
      int timeout = left > 3600 ? (left > 1e29 ? -1 : 3600000) : left <= 0 ? 0 : (int)(left * 1000.0) + 1;
      struct pollfd pf = {fds[0], POLLIN, 0};
      int r = poll(&pf, 1, timeout);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) break;
      if (r == 0) {
        killed = first_run && elapsed() - since > build_limit                               ? 1
                 : pending >= 0 && share_end >= 0 && elapsed() > share_end + SHARE_GRACE ? 2
                                                                                          : 0;
        if (killed) {
          stopped = pending;
          kill(pid, SIGKILL);
        }
        continue;
      }
      if (have + 1 >= cap) { /* a line longer than the buffer: a larger one */
        char *more = realloc(buf, cap * 2);
        if (!more) {
          oom = 1;
          break;
        }
        buf = more;
        cap *= 2;
      }
      ssize_t n = read(fds[0], buf + have, cap - 1 - have);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break; /* the worker is gone */
      have += (size_t)n;
      buf[have] = 0;
      char *line = buf, *nl;
      while ((nl = strchr(line, '\n'))) {
        *nl = 0;
        if (journal_parse(line) == 0) {
          char kind = journal[njournal - 1].kind;
          if (kind == 'F') {
            pending = njournal - 1;
            first_run = 1;
            since = elapsed();
          } else if (kind == 'B') {
            first_run = 0;
          } else if (kind == 'D') {
            pending = -1;
            first_run = 0;
          } else if (kind == 'G') {
            share_end = journal[njournal - 1].end;
          } else if (kind == 'S') {
            share_end = -1;
          }
        }
        line = nl + 1;
      }
      have = (size_t)(buf + have - line);
      memmove(buf, line, have);
    }
    free(buf);
    close(fds[0]);
    int status = 0;
    if (oom) kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (oom) {
      fprintf(stderr, "clembed tune: out of memory reading the tuning process's lines\n");
      break;
    }
    /* a candidate decided as its worker was stopped (its last lines read after the kill): no candidate is at
     * fault, and the next worker goes on (one it had started since is tried again) */
    if (killed && pending != stopped) continue;
    if (pending < 0) {
      if (WIFEXITED(status)) {
        rc = WEXITSTATUS(status);
      } else {
        char how[128];
        describe_exit(status, how, sizeof how);
        fprintf(stderr, "clembed tune: the tuning process ended (%s) outside a candidate's run\n", how);
      }
      break;
    }
    /* the candidate under way is rejected: the next worker walks past it */
    const jentry *f = &journal[pending];
    char *group = strdup(f->group), *label = strdup(f->label), *set = strdup(f->best), info[2048], jg[64], jl[512];
    char why[300];
    if (killed == 1) {
      snprintf(why, sizeof why, "its first run (mostly its kernels' build) went on past %g s: stopped", build_limit);
    } else if (killed == 2) {
      snprintf(why, sizeof why, "its run went on %.0f s past the end of the group's share of the budget: stopped",
               SHARE_GRACE);
    } else {
      char how[128];
      describe_exit(status, how, sizeof how);
      snprintf(why, sizeof why, "its process ended in its run (%s)", how);
    }
    snprintf(info, sizeof info, "{\"group\": \"%s\", \"candidate\": \"%s\", \"outcome\": \"rejected\", \"reason\": \"%s\"}",
             bench_json_text(f->group, jg, sizeof jg), bench_json_text(f->label, jl, sizeof jl), why);
    fprintf(say, " rejected: %s\n", why);
    fflush(say);
    int bad = !group || !label || !set || journal_add('D', group, label, set, 0, info);
    free(group);
    free(label);
    free(set);
    if (bad) {
      fprintf(stderr, "clembed tune: out of memory\n");
      break;
    }
  }
  if (want_json) print_json(restarts, rc);
  journal_free();
  return rc;
}

/* A run that ends before its search (exit 1): the message on stderr, and with
 * --json the run's object, with the message as "error". */
static int early_exit(const char *message) {
  fprintf(stderr, "clembed tune: %s\n", message);
  if (want_json) {
    char jm[1024];
    printf("{\"exit_status\": 1, \"error\": \"%s\", \"restarts\": 0, \"candidates\": [], \"summary\": [], "
           "\"settings\": null, \"entry\": null, \"written\": null}\n",
           bench_json_text(message, jm, sizeof jm));
    fflush(stdout);
  }
  return 1;
}

int tune_main(int argc, char **argv) {
  const char *device = NULL, *only = NULL, *output = NULL;
  double budget = 900;
  int reps = 5, dry = 0;
  for (int i = 1; i < argc; i++) {
    char *end = NULL;
    if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if ((!strcmp(argv[i], "--out") || !strcmp(argv[i], "--output")) && i + 1 < argc) output = argv[++i];
    else if (!strcmp(argv[i], "--json")) want_json = 1;
    else if (!strcmp(argv[i], "--dry-run")) dry = 1;
    else if (!strcmp(argv[i], "--list")) return list_groups();
    else if (!strcmp(argv[i], "--budget") && i + 1 < argc) {
      budget = strtod(argv[++i], &end);
      if (*end || !(budget > 0) || budget > 1e7) {
        fprintf(stderr, "clembed tune: --budget: '%s' is not a number of seconds above 0\n", argv[i]);
        return 1;
      }
    } else if (!strcmp(argv[i], "--build-limit") && i + 1 < argc) {
      build_limit = strtod(argv[++i], &end);
      if (*end || !(build_limit > 0) || build_limit > 1e6) {
        fprintf(stderr, "clembed tune: --build-limit: '%s' is not a number of seconds above 0\n", argv[i]);
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
    return early_exit("no tuning file to write (CLEMBED_TUNING_FILE is empty or \"none\", or there is no HOME): pass "
                      "--out FILE, or --dry-run");
  }
  /* the built-in entries alone are the start, and every context here reads no user file */
  setenv("CLEMBED_TUNING_FILE", "none", 1);
  unsetenv("CLEMBED_TUNING");
  if (getenv("CLEMBED_TUNE")) {
    return early_exit("CLEMBED_TUNE is set; the tuner starts from the built-in entries (unset it)");
  }
  t_start = now();
  say = want_json ? stderr : stdout;
  tune_opts o = {device, only, "", budget, reps, dry};
  snprintf(o.path, sizeof o.path, "%s", path);
  return supervise(&o);
}
