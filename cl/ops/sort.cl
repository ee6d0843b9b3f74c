/* sort.cl: one pass of a stable LSD radix sort of (key, idx) pairs, SORT_RADIX_BITS
 * bits a pass (src/ops/sort.c runs the passes). One work-item per chunk of
 * consecutive entries, so equal keys keep their order. Build options: KEY64 (0:
 * uint keys, 1: ulong keys), SORT_RADIX_BITS. */

#if KEY64
#define KEY_T ulong
#else
#define KEY_T uint
#endif

/* Entries [g*chunk, min((g+1)*chunk, n)) form chunk g. hist is digit-major:
 * hist[d * nchunks + g] = entries of chunk g whose digit is d, so its exclusive
 * prefix sum is, for each (d, g), where chunk g's first d-entry goes. */
#ifndef SORT_RADIX_BITS
#define SORT_RADIX_BITS 8
#endif
#define CE_RADIX (1u << SORT_RADIX_BITS)

__kernel void ce_sort_hist(__global const KEY_T *keys, ulong n, ulong chunk, uint nchunks, uint shift,
                          __global uint *hist) {
  uint g = get_global_id(0);
  if (g >= nchunks) return;
  /* The work-item owns column g of hist: no races, no private array. */
  for (uint d = 0; d < CE_RADIX; d++) hist[(ulong)d * nchunks + g] = 0;
  ulong lo = (ulong)g * chunk, hi = min(lo + chunk, n);
  for (ulong i = lo; i < hi; i++) hist[(ulong)((uint)(keys[i] >> shift) & (CE_RADIX - 1)) * nchunks + g]++;
}

/* Exclusive prefix sum of hist[0, m) in place; one work-group of at most 256. */
__kernel void ce_sort_scan(__global uint *hist, uint m) {
  __local uint part[256];
  uint l = get_local_id(0), L = get_local_size(0);
  if (get_group_id(0) != 0 || L > 256) return;
  uint per = (m + L - 1) / L, lo = min(l * per, m), hi = min(lo + per, m);
  uint s = 0;
  for (uint i = lo; i < hi; i++) s += hist[i];
  part[l] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (l == 0) {
    uint acc = 0;
    for (uint k = 0; k < L; k++) {
      uint t = part[k];
      part[k] = acc;
      acc += t;
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  uint acc = part[l];
  for (uint i = lo; i < hi; i++) {
    uint t = hist[i];
    hist[i] = acc;
    acc += t;
  }
}

/* Chunk g writes its entries, in order, after those of smaller digits and of
 * the same digit in earlier chunks: a stable scatter. */
__kernel void ce_sort_scatter(__global const KEY_T *keys, __global const uint *idx, ulong n, ulong chunk,
                             uint nchunks, uint shift, __global uint *hist, __global KEY_T *keys_out,
                             __global uint *idx_out) {
  uint g = get_global_id(0);
  if (g >= nchunks) return;
  ulong lo = (ulong)g * chunk, hi = min(lo + chunk, n);
  for (ulong i = lo; i < hi; i++) {
    KEY_T k = keys[i];
    ulong h = (ulong)((uint)(k >> shift) & (CE_RADIX - 1)) * nchunks + g; /* column g is this item's */
    uint p = hist[h];
    hist[h] = p + 1;
    if (p < n) {
      keys_out[p] = k;
      idx_out[p] = idx[i];
    }
  }
}

