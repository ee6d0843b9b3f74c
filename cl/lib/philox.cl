/* philox.cl: the counter-based Philox4x32-10 generator (table initialisation),
 * the dropout mask the forward applies and the backward replays, and the
 * random words of the optimizers' stochastic rounding. */

/* Philox4x32-10 (Salmon et al., Random123): counter ctr, key key. */
inline uint4 ce_philox(uint2 key, uint4 ctr) {
  for (int r = 0; r < 10; r++) {
    if (r) key += (uint2)(0x9E3779B9u, 0xBB67AE85u);
    uint hi0 = mul_hi(0xD2511F53u, ctr.x), lo0 = 0xD2511F53u * ctr.x;
    uint hi1 = mul_hi(0xCD9E8D57u, ctr.z), lo1 = 0xCD9E8D57u * ctr.z;
    ctr = (uint4)(hi1 ^ ctr.y ^ key.x, lo1, hi0 ^ ctr.w ^ key.y, lo0);
  }
  return ctr;
}

/* The words for element e with seed (lo, hi). */
inline uint4 ce_philox_element(uint seed_lo, uint seed_hi, ulong e) {
  return ce_philox((uint2)(seed_lo, seed_hi), (uint4)((uint)e, (uint)(e >> 32), 0u, 0u));
}

/* u(x) = (x >> 8) * 2^-24 in [0, 1). */
inline float ce_unit(uint x) { return (float)(x >> 8) * 0x1p-24f; }

/* The dropout mask on element e (row i, column c: e = i*cols + c), as the
 * forward applies it and the backward replays it on the gradient: kept
 * elements are multiplied by keep, dropped ones become exactly 0. */
inline float ce_mask1(float g, ulong e, float dropout, float keep, uint seed_lo, uint seed_hi) {
  return ce_unit(ce_philox_element(seed_lo, seed_hi, e).x) >= dropout ? g * keep : 0.0f;
}

/* Stochastic rounding (clembed_optimizer's stochastic_rounding; include/clembed.h
 * defines the bits): the key of step `step` under seed (lo, hi) is the words
 * (x0, x1) of Philox4x32-10 with key (seed lo, seed hi) and counter (step lo,
 * step hi, CE_SR_TAG, 0); the random word of table element (row, col) is x0 of
 * Philox4x32-10 with that key and counter (col lo, col hi, row lo, row hi). */
#define CE_SR_TAG 0x53524E44u /* "SRND" */
inline uint2 ce_sr_key(uint seed_lo, uint seed_hi, ulong step) {
  return ce_philox((uint2)(seed_lo, seed_hi), (uint4)((uint)step, (uint)(step >> 32), CE_SR_TAG, 0u)).s01;
}
inline uint ce_sr_word(uint2 k, ulong row, ulong col) {
  return ce_philox(k, (uint4)((uint)col, (uint)(col >> 32), (uint)row, (uint)(row >> 32))).x;
}

#ifdef VEC
/* x0 of Philox4x32-10 with key (k0, k1) and counter (c0, c1, c2, c3), lane-wise
 * (ce_philox(...).x of each lane's counter). */
CE_INLINE UV ce_philox_x0v(uint k0, uint k1, UV c0, UV c1, UV c2, UV c3) {
  for (int r = 0; r < 10; r++) {
    if (r) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    UV hi0 = mul_hi((UV)(0xD2511F53u), c0), lo0 = (UV)(0xD2511F53u) * c0;
    UV hi1 = mul_hi((UV)(0xCD9E8D57u), c2), lo1 = (UV)(0xCD9E8D57u) * c2;
    UV n0 = hi1 ^ c1 ^ (UV)(k0), n2 = hi0 ^ c3 ^ (UV)(k1);
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return c0;
}

/* x0 of Philox(seed, e0 + lane) for each lane: ce_philox_element(...).x, lane-wise. */
inline UV ce_philox_xv(uint seed_lo, uint seed_hi, ulong e0) {
  ULV e = (ULV)(e0) + CE_LANES;
  return ce_philox_x0v(seed_lo, seed_hi, convert_UV(e), convert_UV(e >> 32), (UV)(0u), (UV)(0u));
}

/* ce_sr_word of columns col0 + lane of row `row`, lane-wise. */
CE_INLINE UV ce_sr_wordv(uint2 k, ulong row, ulong col0) {
  ULV c = (ULV)(col0) + CE_LANES;
  return ce_philox_x0v(k.x, k.y, convert_UV(c), convert_UV(c >> 32), (UV)((uint)row), (UV)((uint)(row >> 32)));
}

/* The dropout mask on element e (row i, column c: e = i*cols + c), as the
 * forward applies it and the backward replays it on the gradient: kept
 * elements are multiplied by keep, dropped ones become exactly 0. */
inline FV ce_maskv(FV g, ulong e0, float dropout, float keep, uint seed_lo, uint seed_hi) {
  FV u = convert_FV(ce_philox_xv(seed_lo, seed_hi, e0) >> 8) * 0x1p-24f;
  return select((FV)(0.0f), g * keep, u >= (FV)(dropout));
}

#endif /* VEC */

/* Philox4x32-10 of the 16 counters q0 .. q0 + 15: ce_philox lane by lane
 * (mul_hi as the top half of the 64-bit product: the same bits). */
inline void ce_philox16(uint seed_lo, uint seed_hi, ulong q0, uint16 *x0, uint16 *x1, uint16 *x2, uint16 *x3) {
  ulong16 q = (ulong16)(q0) + (ulong16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  uint16 c0 = convert_uint16(q), c1 = convert_uint16(q >> 32), c2 = (uint16)(0u), c3 = (uint16)(0u);
  uint k0 = seed_lo, k1 = seed_hi;
  for (int r = 0; r < 10; r++) {
    if (r) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    ulong16 p0 = convert_ulong16(c0) * (ulong16)(0xD2511F53u), p1 = convert_ulong16(c2) * (ulong16)(0xCD9E8D57u);
    uint16 n0 = convert_uint16(p1 >> 32) ^ c1 ^ (uint16)(k0), n2 = convert_uint16(p0 >> 32) ^ c3 ^ (uint16)(k1);
    c1 = convert_uint16(p1);
    c3 = convert_uint16(p0);
    c0 = n0;
    c2 = n2;
  }
  *x0 = c0;
  *x1 = c1;
  *x2 = c2;
  *x3 = c3;
}
