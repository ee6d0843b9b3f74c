/* What the tuner (tune.c, `clembed tune`) takes from the bench (bench.c): its
 * rows at the sizes models have, run on a context of the tuner's choosing,
 * their results read back, and the bench's paired timing against the
 * device's fastest copy. */
#ifndef CLEMBED_BENCH_H
#define CLEMBED_BENCH_H

#include "clembed.h"

#include <stddef.h>

/* The bench's rows (not the split-table rows): their count and names. */
size_t bench_row_count(void);
const char *bench_row_name(size_t k);

/* Row k's state (its table, ids, output, ...) made on ctx, with V and n
 * divided by `shrink` (1: the model sizes); NULL with *st on failure. */
typedef struct bench_run bench_run;
bench_run *bench_run_open(clembed_context *ctx, size_t k, size_t shrink, clembed_status *st);
/* The same state's matrices used by another context (ctx made from the same
 * queue, so the same cl_context); closing it leaves them to `from`. */
bench_run *bench_run_alias(const bench_run *from, clembed_context *ctx);
void bench_run_close(bench_run *b);
/* Runs the row's operation once and waits. */
clembed_status bench_run_once(bench_run *b);
/* Every matrix the row's operation writes, read as stored, one after another
 * (*bytes: malloc'd, *n bytes). */
clembed_status bench_run_result(bench_run *b, unsigned char **bytes, size_t *n);

/* The device's fastest copy (bench.c's reference). */
typedef struct bench_ref bench_ref;
bench_ref *bench_ref_open(clembed_context *ctx, int reps, char *err, size_t errlen);
void bench_ref_close(bench_ref *r);

/* The bench's measurement of a row: b, the reference copy and (when not
 * NULL) alt alternately, reps rounds; medians of b's time, of b's rate over
 * the copy's, of alt's time and of alt's speed over b's (per round). 0, or -1
 * with err. */
typedef struct bench_timing {
  double ms, ratio, alt_ms, alt_speedup;
  double alt_low; /* the lower quartile of the per-round speeds whose median is alt_speedup */
} bench_timing;
int bench_time(bench_run *b, bench_run *alt, bench_ref *ref, int reps, bench_timing *t, char *err, size_t errlen);

/* s as the inside of a JSON string (quotes, backslashes and control
 * characters escaped) in buf (cap bytes, truncated); buf. */
const char *bench_json_text(const char *s, char *buf, size_t cap);

/* clembed tune (tune.c): argv[0] is "--tune". */
int tune_main(int argc, char **argv);

#endif
