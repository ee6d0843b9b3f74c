/* Host-side angle preparation (exact angles on a float32 device) and the RoPE
 * frequencies with their scalings, in double. Plain C: no context, no OpenCL. */
#ifndef CLEMBED_OPS_FREQ_H
#define CLEMBED_OPS_FREQ_H

#include "clembed.h"

#include <stddef.h>

/* A frequency w (radians per position) as the device's exact-angle code wants
 * it (cl/lib/angle.cl): 8 floats, A1..A4 for frac(2^16 * w / 2pi) and B1..B4
 * for frac(w / 2pi), both in turns. A1, A2, A3 (B1..B3) are the three leading
 * 7-bit digits of the fraction (multiples of 2^-7, 2^-14, 2^-21, below 1), so
 * that h*A_i + l*B_i is exact in float for 16-bit integers h and l; A4 (B4) is
 * the rest, |A4| <= 2^-22, rounded to float (within 2^-46). w / 2pi is formed
 * in double-double from the double w (its exact value), so the pieces are
 * within 2^-46 of the exact fractions. */
#define CE_ANGLE_PIECES 8
void ce_angle_pieces(double w, float out[CE_ANGLE_PIECES]);

/* Checks r for rotary dimension R (already resolved from rotary_dim/head_dim)
 * and fills w[0 .. R/2-1] and *attention. Returns NULL, or a message naming the
 * bad field (a static string). */
const char *ce_rope_frequencies(const clembed_rope *r, size_t R, double *w, double *attention);

/* The rotary dimension R of r (rotary_dim, or head_dim when 0), or 0 with a
 * message in *why when the sizes are bad. */
size_t ce_rope_rotary_dim(const clembed_rope *r, const char **why);

#endif
