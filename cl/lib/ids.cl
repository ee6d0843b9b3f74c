/* ids.cl: token ids and positions. The index policies, and the one resolver
 * of a token's table row and of its position that every kernel uses (reporting
 * bad ones into the operation's error slot). */

#define CE_POLICY_CHECK 0
#define CE_POLICY_CLAMP 1
#define CE_POLICY_ZERO 2
#define CE_POLICY_WRAP 3

/* The table row for `id` under `policy`, or -1 for a zero row. *bad is set when
 * the id must be reported (CHECK, and WRAP beyond -rows). */
inline long ce_resolve(long id, ulong rows, int policy, long padding, int *bad) {
  long r = (long)rows;
  *bad = 0;
  if (policy == CE_POLICY_WRAP && id < 0 && id >= -r) id += r;
  if (id < 0 || id >= r) {
    if (policy == CE_POLICY_CLAMP && r > 0) {
      id = id < 0 ? 0 : r - 1;
    } else {
      *bad = policy != CE_POLICY_ZERO;
      return -1;
    }
  }
  return id == padding ? -1 : id;
}

/* The start of sequence b: sequence_offsets[b] when given, else pos_offset
 * (signed: a start past 2^63 - 1 is negative, a bad position). */
inline long ce_sequence_first(ulong b, ulong pos_offset, __global const int *so32, __global const long *so64,
                              ulong so_off, int so64f, int has_so) {
  return has_so ? ce_load_id(so32, so64, so64f, so_off + b) : (long)pos_offset;
}

/* Token i's table row under the policy, or -1 for a zero row; a bad id is
 * reported when `report` (the work-item that speaks for the token). */
inline long ce_token_row(__global const int *ids32, __global const long *ids64, int id64, ulong id_off, ulong i,
                         ulong rows, int policy, long padding, __global uint *err, uint slot, int report) {
  int bad;
  long id = ce_load_id(ids32, ids64, id64, id_off + i);
  long row = ce_resolve(id, rows, policy, padding, &bad);
  if (bad && report) ce_report(err, slot, 0, i, id);
  return row;
}

/* Pruning (include/clembed.h, "Pruned tables"): token i's table row through
 * remap (rm_rows I32 or I64 entries). The id is resolved under the policy
 * against rm_rows (padding an id of the unpruned table), then remap[id] is its
 * row: -1 gives CE_PRUNED (no row, but MEAN counts it); an entry that is
 * neither -1 nor a row below `rows` is reported as the token's bad id under
 * every policy and gives -1, as a bad id does. */
#define CE_PRUNED (-2L)
inline long ce_token_row_rm(__global const int *ids32, __global const long *ids64, int id64, ulong id_off, ulong i,
                            ulong rows, int policy, long padding, __global uint *err, uint slot, int report,
                            __global const int *rm32, __global const long *rm64, ulong rm_off, int rm64f,
                            ulong rm_rows) {
  int bad;
  long id = ce_load_id(ids32, ids64, id64, id_off + i);
  long v = ce_resolve(id, rm_rows, policy, padding, &bad);
  if (v >= 0) {
    long r = ce_load_id(rm32, rm64, rm64f, rm_off + (ulong)v);
    if (r == -1) return CE_PRUNED;
    if (r >= 0 && (ulong)r < rows) return r;
    bad = 1;
  }
  if (bad && report) ce_report(err, slot, 0, i, id);
  return -1;
}

/* Token i's position p = first_b + (i - b * seq_len), b = i / seq_len (seq_len
 * 0: one sequence). *ok is 0 for a bad one (a negative start; with `bounded`,
 * a position at or past p_rows, without it (the sinusoid) one at or past
 * 2^32), which is reported when `report`. */
inline ulong ce_token_position(ulong i, ulong seq_len, ulong pos_offset, __global const int *so32,
                               __global const long *so64, ulong so_off, int so64f, int has_so, int bounded,
                               ulong p_rows, __global uint *err, uint slot, int report, int *ok) {
  /* not i % seq_len beside i / seq_len: Oclgrind cannot check the freeze LLVM emits for the pair */
  ulong b = seq_len ? i / seq_len : 0, j = i - b * seq_len;
  long first = ce_sequence_first(b, pos_offset, so32, so64, so_off, so64f, has_so);
  ulong p = (ulong)first + j;
  *ok = first >= 0 && (bounded ? p < p_rows : p < ((ulong)1 << 32));
  if (!*ok && report) ce_report(err, slot, 1, i, first);
  return p;
}
