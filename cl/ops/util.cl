/* util.cl: small helper kernels. */

/* Zero-fills n uint words (matrix creation: a kernel rather than
 * clEnqueueFillBuffer, so that every implementation, Oclgrind's included, sees
 * the buffer as written). */
__kernel void ce_zero(__global uint *dst, ulong n) {
  ulong i = get_global_id(0);
  if (i < n) dst[i] = 0u;
}
