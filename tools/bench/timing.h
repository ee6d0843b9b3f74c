/* The clock and the median the benchmarks share (bench.c, bench_mpi.c), and
 * the lower quartile (bench.c's paired timing, for the tuner). */
#ifndef CLEMBED_BENCH_TIMING_H
#define CLEMBED_BENCH_TIMING_H

#include <stdlib.h>
#include <time.h>

/* Seconds on the monotonic clock. */
static inline double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of v[0 .. n) (sorts v). */
static inline double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The lower quartile of v[0 .. n) (sorts v): the value (n - 1) / 4 places
 * from the smallest, which at least three of four values reach. */
static inline double lower_quartile(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[(n - 1) / 4];
}

#endif
