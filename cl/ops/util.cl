/* util.cl: small helper kernels. */

/* Zero-fills n uint words (matrix creation: a kernel rather than
 * clEnqueueFillBuffer, so that every implementation, Oclgrind's included, sees
 * the buffer as written). */
__kernel void ce_zero(__global uint *dst, ulong n) {
  ulong i = get_global_id(0);
  if (i < n) dst[i] = 0u;
}

/* Matrices in more buffers than a launch takes (src/ops/gather.c).
 *
 * ce_gather: the rows a call's ids take, gathered in id order. A launch per
 * piece of the table (src, holding rows [first, first + nrows), row r at byte
 * src_off + (r - first) * src_ld) copies the bytes of each id j's row, under
 * the call's policy and padding, to row j of dst (row_bytes apart, the bytes
 * as they lie: any dtype). The first piece's launch (`head`) also writes
 * idx[j] = j for an id that takes a row and -1 for one left out, and reports
 * the bad ids as the operation would. */
__kernel void ce_gather(__global const int *ids32, __global const long *ids64, ulong id_off, int id64, ulong n,
                        ulong rows, int policy, long padding, __global uint *err, uint slot, int report, int head,
                        __global const uchar *src, ulong src_off, ulong src_ld, ulong first, ulong nrows,
                        __global uchar *dst, ulong row_bytes, __global long *idx) {
  ulong j = get_global_id(0);
  if (j >= n) return;
  long r = ce_token_row(ids32, ids64, id64, id_off, j, rows, policy, padding, err, slot, head && report);
  if (head) idx[j] = r >= 0 ? (long)j : -1;
  if (r < 0 || (ulong)r < first || (ulong)r - first >= nrows) return;
  __global const uchar *s = src + src_off + ((ulong)r - first) * src_ld;
  __global uchar *d = dst + j * row_bytes;
  for (ulong b = 0; b < row_bytes; b++) d[b] = s[b];
}

/* ce_copy_rows: `rows` rows of row_bytes from src (byte src_off, src_ld
 * apart) to dst (byte dst_off, dst_ld apart), a work-item per row: a piece of
 * a split matrix into (or out of) its joined copy. With `words` every offset,
 * stride and length is a multiple of 4 and the row goes as 32-bit words. */
__kernel void ce_copy_rows(__global const uchar *src, ulong src_off, ulong src_ld, __global uchar *dst,
                           ulong dst_off, ulong dst_ld, ulong row_bytes, ulong rows, int words) {
  ulong r = get_global_id(0);
  if (r >= rows) return;
  __global const uchar *s = src + src_off + r * src_ld;
  __global uchar *d = dst + dst_off + r * dst_ld;
  if (words) {
    __global const uint *sw = (__global const uint *)s;
    __global uint *dw = (__global uint *)d;
    for (ulong b = 0; b < row_bytes / 4; b++) dw[b] = sw[b];
  } else {
    for (ulong b = 0; b < row_bytes; b++) d[b] = s[b];
  }
}
