/* report.cl: the device side of deferred errors. A checked operation reports
 * the first bad id and the first bad position into its slot of the error
 * record; on devices without 64-bit atomics ce_record_error fetches their
 * values afterwards. CE_SLOT_UINTS comes from the host (src/runtime/runtime.h). */

#if CE_ATOM64
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
#endif

#define CE_NONE 0xFFFFFFFFu /* a clean slot word (the host resets slots to all 0xFF bytes) */
#ifndef CE_SLOT_UINTS
#define CE_SLOT_UINTS 12 /* given by the host with every build */
#endif

/* Records token i as the first bad one of its kind (0 id, 1 position; 2 a bag
 * too long for the device's loop limit, i its index), with `value` (the id,
 * the start of the token's sequence, the bag's length).
 * With 64-bit atomics (CE_ATOM64, from cl_khr_int64_base_atomics) the slot holds
 * two minima per kind, (i << 32 | low word of value) and (i << 32 | high word),
 * so the first token and its value land together and no second kernel is
 * needed. Without, only the token index is kept here (kind 2's at word 6) and
 * ce_record_error (ce_bag_record for bags) fetches the value after the
 * operation. */
inline void ce_report(__global uint *err, uint slot, int kind, ulong i, long value) {
  ulong key = min(i, (ulong)0xFFFFFFFEu);
#if CE_ATOM64
  __global ulong *s = (__global ulong *)(err + slot * CE_SLOT_UINTS) + 2 * kind;
  atom_min(&s[0], (key << 32) | (ulong)(uint)value);
  atom_min(&s[1], (key << 32) | ((ulong)value >> 32));
#else
  atomic_min(&err[slot * CE_SLOT_UINTS + (kind < 2 ? kind : 6)], (uint)key);
#endif
}

/* After an operation: stores the value of the first bad id and the sequence
 * start of the first bad position next to their token indices. One work-item. */
__kernel void ce_record_error(__global uint *err, uint slot, __global const int *ids32,
                              __global const long *ids64, ulong id_off, int id64, __global const int *so32,
                              __global const long *so64, ulong so_off, int so64f, int has_so, ulong seq_len) {
  if (get_global_id(0) != 0) return;
  __global uint *s = err + slot * CE_SLOT_UINTS;
  uint bi = s[0], bp = s[1];
  if (bi != CE_NONE) {
    long v = ce_load_id(ids32, ids64, id64, id_off + bi);
    s[2] = (uint)v;
    s[3] = (uint)((ulong)v >> 32);
  }
  if (bp != CE_NONE && has_so) {
    ulong b = seq_len ? (ulong)bp / seq_len : 0;
    long f = ce_load_id(so32, so64, so64f, so_off + b);
    s[4] = (uint)f;
    s[5] = (uint)((ulong)f >> 32);
  }
}

