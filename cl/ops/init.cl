/* init.cl: Philox4x32-10 table initialisation (cl/lib/philox.cl). Element (r, c) uses counter
 * e = r*cols + c only, so every device and work size gives the same numbers.
 * Build option: OUT_DT. */

#define OUT_T CE_XCAT(CE_STORE_, OUT_DT)
#define store_out CE_XCAT(ce_store_, OUT_DT)

__kernel void ce_init_uniform(__global OUT_T *out, ulong o_off, ulong o_ld, ulong rows, ulong cols, float low,
                              float high, uint seed_lo, uint seed_hi) {
  ulong c = get_global_id(0), r = get_global_id(1);
  if (c >= cols || r >= rows) return;
  uint4 x = ce_philox_element(seed_lo, seed_hi, r * cols + c);
  /* low + (high - low) * u evaluated at half scale and doubled: the same bits
   * (scaling by 2 is exact), and no overflow when high - low exceeds the float range */
  float hl = 0.5f * low;
  store_out(out, o_off + r * o_ld + c, 2.0f * (hl + (0.5f * high - hl) * ce_unit(x.x)));
}

__kernel void ce_init_normal(__global OUT_T *out, ulong o_off, ulong o_ld, ulong rows, ulong cols, float mean,
                             float stddev, uint seed_lo, uint seed_hi) {
  ulong c = get_global_id(0), r = get_global_id(1);
  if (c >= cols || r >= rows) return;
  uint4 x = ce_philox_element(seed_lo, seed_hi, r * cols + c);
  float radius = sqrt(-2.0f * log(1.0f - ce_unit(x.x))); /* 1 - u is in (0, 1] */
  float z = radius * cospi(2.0f * ce_unit(x.y));
  store_out(out, o_off + r * o_ld + c, mean + stddev * z);
}
