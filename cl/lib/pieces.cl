/* pieces.cl: a matrix whose rows lie in several buffers (include/clembed.h's
 * split matrices), as a kernel takes it. A kernel's matrix argument is a
 * pointer m and the offset mo of its row 0 (elements, or values of a block
 * type), rows ld apart: m + mo + r * ld. Built with -DCE_PIECES_m=K (K = 2 ..
 * 8; src/runtime/launch.c's ce_pieces_plan and ce_pieces_option) m stands for
 * a split matrix in the K buffers m, m_1, .., m_{K-1}: piece j holds the rows
 * from m_fj on (0 for m itself), the first of them at element mo for m, and
 * for piece j >= 1 at m_oj + m_fj * ld: m_oj is the element its row 0 would
 * have, a ulong that wraps (launch.c's set_piece_args), so that row r is at
 * m_oj + r * ld.
 * With -DCE_PIECES_m=8+K (K = 1 .. 8) m stands for a launch's window of a split
 * matrix whose pieces do not all fit in one launch: its rows [m_f0, m_end) in
 * K buffers (m's first row is m_f0), each window taken by one launch. The
 * parameters are the same either way (m_f0 and m_end first).
 *   CE_PIECE_PARAMS(T, m)  the extra parameters, after m's offset parameter;
 *   CE_PIECE_PASS(m)       the same, passed on to a helper;
 *   CE_AT(m, r)            the buffer that holds row r (r: a ulong of the window);
 *   CE_OFF(m, mo, ld, r)   the element of row r's column 0 in that buffer;
 *   CE_OWNS(m, r)          whether row r is in this launch's window;
 *   CE_FIRST(m)            whether the window is the first (work that touches no
 *                          row of m is done there, once);
 *   CE_LO(m), CE_HI(m)     the window's first row, and the row after its last.
 * Without -DCE_PIECES_m (0) they are m, mo + r * ld, 1, 1, 0 and ULONG_MAX: a
 * kernel on one buffer compiles to what it was, and with all the pieces in one
 * launch the window tests are 1 as well. The matrix arguments' names that take
 * pieces get their default of 0 here, once for every kernel file. */

/* the kernels' matrix arguments that take pieces (one buffer unless the host says) */
#ifndef CE_PIECES_table
#define CE_PIECES_table 0
#endif
#ifndef CE_PIECES_ptab
#define CE_PIECES_ptab 0
#endif
#ifndef CE_PIECES_stab
#define CE_PIECES_stab 0
#endif
#ifndef CE_PIECES_out
#define CE_PIECES_out 0
#endif
#ifndef CE_PIECES_grad
#define CE_PIECES_grad 0
#endif
#ifndef CE_PIECES_tab
#define CE_PIECES_tab 0
#endif
#ifndef CE_PIECES_s1
#define CE_PIECES_s1 0
#endif
#ifndef CE_PIECES_s2
#define CE_PIECES_s2 0
#endif
#ifndef CE_PIECES_pg
#define CE_PIECES_pg 0
#endif
#ifndef CE_PIECES_gt
#define CE_PIECES_gt 0
#endif
#ifndef CE_PIECES_x
#define CE_PIECES_x 0
#endif

#define CE_PIECE_PARAMS(T, m) CE_XCAT(CE_PP_, CE_PIECES_##m)(T, m)
#define CE_PIECE_PASS(m) CE_XCAT(CE_PA_, CE_PIECES_##m)(m)
#define CE_AT(m, r) CE_XCAT(CE_PT_, CE_PIECES_##m)(m, r)
#define CE_OFF(m, mo, ld, r) (CE_XCAT(CE_PB_, CE_PIECES_##m)(m, mo, ld, r) + (r) * (ld))
#define CE_ROWP(T, m, mo, ld, r) CE_XCAT(CE_PR_, CE_PIECES_##m)(T, m, mo, ld, r)
#define CE_OWNS(m, r) CE_XCAT(CE_PW_, CE_PIECES_##m)(m, r)
#define CE_FIRST(m) CE_XCAT(CE_PF_, CE_PIECES_##m)(m)
#define CE_LO(m) CE_XCAT(CE_PL_, CE_PIECES_##m)(m)
#define CE_HI(m) CE_XCAT(CE_PH_, CE_PIECES_##m)(m)

/* CE_ROWP(T, m, mo, ld, r): the pointer to row r's column 0 where offsets
 * count elements of T (not the block types), CE_AT and CE_OFF in one without
 * a branch: the address row 0 would have in row r's piece is that of piece
 * 0 plus, for each later piece whose first row is at most r, the step from
 * the piece before it; the pieces' first rows are compared with r at once,
 * as a vector (a chain of compares of a random row, which compilers make
 * into branches, costs a misprediction for most rows). */
#define CE_PR_0(T, m, mo, ld, r) ((m) + (mo) + (r) * (ld))
#define CE_PA0(T, m, mo, ld) ((ulong)(m) + ((mo) - m##_f0 * (ld)) * sizeof(T))
#define CE_PAJ(T, m, j) ((ulong)m##_##j + m##_o##j * sizeof(T))
#define CE_PRV(T, a0, fv, dv, ld, r) \
  ((__global T *)(ce_piece_sum((a0), (fv), (dv), (r)) + (r) * (ld) * sizeof(T)))
#define CE_PR_2(T, m, mo, ld, r) \
  CE_PRV(T, CE_PA0(T, m, mo, ld), (ulong8)(m##_f1, ULONG_MAX, ULONG_MAX, ULONG_MAX, ULONG_MAX, ULONG_MAX, ULONG_MAX, ULONG_MAX), \
         (ulong8)(CE_PAJ(T, m, 1) - CE_PA0(T, m, mo, ld), 0, 0, 0, 0, 0, 0, 0), ld, r)
#define CE_PR_3(T, m, mo, ld, r) \
  CE_PRV(T, CE_PA0(T, m, mo, ld), (ulong8)(m##_f1, m##_f2, ULONG_MAX, ULONG_MAX, ULONG_MAX, ULONG_MAX, ULONG_MAX, ULONG_MAX), \
         (ulong8)(CE_PAJ(T, m, 1) - CE_PA0(T, m, mo, ld), CE_PAJ(T, m, 2) - CE_PAJ(T, m, 1), 0, 0, 0, 0, 0, 0), ld, r)
#define CE_PR_4(T, m, mo, ld, r) \
  CE_PRV(T, CE_PA0(T, m, mo, ld), (ulong8)(m##_f1, m##_f2, m##_f3, ULONG_MAX, ULONG_MAX, ULONG_MAX, ULONG_MAX, ULONG_MAX), \
         (ulong8)(CE_PAJ(T, m, 1) - CE_PA0(T, m, mo, ld), CE_PAJ(T, m, 2) - CE_PAJ(T, m, 1), CE_PAJ(T, m, 3) - CE_PAJ(T, m, 2), 0, 0, 0, 0, 0), ld, r)
#define CE_PR_5(T, m, mo, ld, r) \
  CE_PRV(T, CE_PA0(T, m, mo, ld), (ulong8)(m##_f1, m##_f2, m##_f3, m##_f4, ULONG_MAX, ULONG_MAX, ULONG_MAX, ULONG_MAX), \
         (ulong8)(CE_PAJ(T, m, 1) - CE_PA0(T, m, mo, ld), CE_PAJ(T, m, 2) - CE_PAJ(T, m, 1), CE_PAJ(T, m, 3) - CE_PAJ(T, m, 2), CE_PAJ(T, m, 4) - CE_PAJ(T, m, 3), 0, 0, 0, 0), ld, r)
#define CE_PR_6(T, m, mo, ld, r) \
  CE_PRV(T, CE_PA0(T, m, mo, ld), (ulong8)(m##_f1, m##_f2, m##_f3, m##_f4, m##_f5, ULONG_MAX, ULONG_MAX, ULONG_MAX), \
         (ulong8)(CE_PAJ(T, m, 1) - CE_PA0(T, m, mo, ld), CE_PAJ(T, m, 2) - CE_PAJ(T, m, 1), CE_PAJ(T, m, 3) - CE_PAJ(T, m, 2), CE_PAJ(T, m, 4) - CE_PAJ(T, m, 3), CE_PAJ(T, m, 5) - CE_PAJ(T, m, 4), 0, 0, 0), ld, r)
#define CE_PR_7(T, m, mo, ld, r) \
  CE_PRV(T, CE_PA0(T, m, mo, ld), (ulong8)(m##_f1, m##_f2, m##_f3, m##_f4, m##_f5, m##_f6, ULONG_MAX, ULONG_MAX), \
         (ulong8)(CE_PAJ(T, m, 1) - CE_PA0(T, m, mo, ld), CE_PAJ(T, m, 2) - CE_PAJ(T, m, 1), CE_PAJ(T, m, 3) - CE_PAJ(T, m, 2), CE_PAJ(T, m, 4) - CE_PAJ(T, m, 3), CE_PAJ(T, m, 5) - CE_PAJ(T, m, 4), CE_PAJ(T, m, 6) - CE_PAJ(T, m, 5), 0, 0), ld, r)
#define CE_PR_8(T, m, mo, ld, r) \
  CE_PRV(T, CE_PA0(T, m, mo, ld), (ulong8)(m##_f1, m##_f2, m##_f3, m##_f4, m##_f5, m##_f6, m##_f7, ULONG_MAX), \
         (ulong8)(CE_PAJ(T, m, 1) - CE_PA0(T, m, mo, ld), CE_PAJ(T, m, 2) - CE_PAJ(T, m, 1), CE_PAJ(T, m, 3) - CE_PAJ(T, m, 2), CE_PAJ(T, m, 4) - CE_PAJ(T, m, 3), CE_PAJ(T, m, 5) - CE_PAJ(T, m, 4), CE_PAJ(T, m, 6) - CE_PAJ(T, m, 5), CE_PAJ(T, m, 7) - CE_PAJ(T, m, 6), 0), ld, r)
#define CE_PR_1(T, m, mo, ld, r) ((__global T *)(CE_PA0(T, m, mo, ld) + (r) * (ld) * sizeof(T)))
#define CE_PR_9(T, m, mo, ld, r) CE_PR_1(T, m, mo, ld, r)
#define CE_PR_10(T, m, mo, ld, r) CE_PR_2(T, m, mo, ld, r)
#define CE_PR_11(T, m, mo, ld, r) CE_PR_3(T, m, mo, ld, r)
#define CE_PR_12(T, m, mo, ld, r) CE_PR_4(T, m, mo, ld, r)
#define CE_PR_13(T, m, mo, ld, r) CE_PR_5(T, m, mo, ld, r)
#define CE_PR_14(T, m, mo, ld, r) CE_PR_6(T, m, mo, ld, r)
#define CE_PR_15(T, m, mo, ld, r) CE_PR_7(T, m, mo, ld, r)
#define CE_PR_16(T, m, mo, ld, r) CE_PR_8(T, m, mo, ld, r)
/* a0 plus the steps dv of the lanes whose first row fv is at most r */
CE_INLINE ulong ce_piece_sum(ulong a0, ulong8 fv, ulong8 dv, ulong r) {
  const ulong8 d = dv & as_ulong8((ulong8)(r) >= fv);
  const ulong4 h = d.lo + d.hi;
  const ulong2 q = h.lo + h.hi;
  return a0 + q.lo + q.hi;
}
/* The piece of row r is the last whose first row is at most r: CE_PT_K gives
 * its buffer, CE_PB_K the element its row 0 would have (m_oj; mo - m_f0 * ld
 * for m), so a row costs one chain of compares (the same in both, once after
 * common subexpressions) and one multiply-add. */
/* one buffer */
#define CE_PP_0(T, m)
#define CE_PA_0(m)
#define CE_PT_0(m, r) (m)
#define CE_PB_0(m, mo, ld, r) (mo)
#define CE_PW_0(m, r) 1
#define CE_PF_0(m) 1
#define CE_PL_0(m) 0UL
#define CE_PH_0(m) ULONG_MAX
/* K pieces: the window (m_f0, m_end), then pieces 1 .. K-1 */
#define CE_PP_1(T, m) , ulong m##_f0, ulong m##_end
#define CE_PA_1(m) , m##_f0, m##_end
#define CE_PT_1(m, r) (m)
#define CE_PB_1(m, mo, ld, r) ((mo) - m##_f0 * (ld))
#define CE_PP_2(T, m) CE_PP_1(T, m), __global T *m##_1, ulong m##_f1, ulong m##_o1
#define CE_PA_2(m) CE_PA_1(m), m##_1, m##_f1, m##_o1
#define CE_PT_2(m, r) ((r) >= m##_f1 ? m##_1 : CE_PT_1(m, r))
#define CE_PB_2(m, mo, ld, r) ((r) >= m##_f1 ? m##_o1 : CE_PB_1(m, mo, ld, r))
#define CE_PP_3(T, m) CE_PP_2(T, m), __global T *m##_2, ulong m##_f2, ulong m##_o2
#define CE_PA_3(m) CE_PA_2(m), m##_2, m##_f2, m##_o2
#define CE_PT_3(m, r) ((r) >= m##_f2 ? m##_2 : CE_PT_2(m, r))
#define CE_PB_3(m, mo, ld, r) ((r) >= m##_f2 ? m##_o2 : CE_PB_2(m, mo, ld, r))
#define CE_PP_4(T, m) CE_PP_3(T, m), __global T *m##_3, ulong m##_f3, ulong m##_o3
#define CE_PA_4(m) CE_PA_3(m), m##_3, m##_f3, m##_o3
#define CE_PT_4(m, r) ((r) >= m##_f3 ? m##_3 : CE_PT_3(m, r))
#define CE_PB_4(m, mo, ld, r) ((r) >= m##_f3 ? m##_o3 : CE_PB_3(m, mo, ld, r))
#define CE_PP_5(T, m) CE_PP_4(T, m), __global T *m##_4, ulong m##_f4, ulong m##_o4
#define CE_PA_5(m) CE_PA_4(m), m##_4, m##_f4, m##_o4
#define CE_PT_5(m, r) ((r) >= m##_f4 ? m##_4 : CE_PT_4(m, r))
#define CE_PB_5(m, mo, ld, r) ((r) >= m##_f4 ? m##_o4 : CE_PB_4(m, mo, ld, r))
#define CE_PP_6(T, m) CE_PP_5(T, m), __global T *m##_5, ulong m##_f5, ulong m##_o5
#define CE_PA_6(m) CE_PA_5(m), m##_5, m##_f5, m##_o5
#define CE_PT_6(m, r) ((r) >= m##_f5 ? m##_5 : CE_PT_5(m, r))
#define CE_PB_6(m, mo, ld, r) ((r) >= m##_f5 ? m##_o5 : CE_PB_5(m, mo, ld, r))
#define CE_PP_7(T, m) CE_PP_6(T, m), __global T *m##_6, ulong m##_f6, ulong m##_o6
#define CE_PA_7(m) CE_PA_6(m), m##_6, m##_f6, m##_o6
#define CE_PT_7(m, r) ((r) >= m##_f6 ? m##_6 : CE_PT_6(m, r))
#define CE_PB_7(m, mo, ld, r) ((r) >= m##_f6 ? m##_o6 : CE_PB_6(m, mo, ld, r))
#define CE_PP_8(T, m) CE_PP_7(T, m), __global T *m##_7, ulong m##_f7, ulong m##_o7
#define CE_PA_8(m) CE_PA_7(m), m##_7, m##_f7, m##_o7
#define CE_PT_8(m, r) ((r) >= m##_f7 ? m##_7 : CE_PT_7(m, r))
#define CE_PB_8(m, mo, ld, r) ((r) >= m##_f7 ? m##_o7 : CE_PB_7(m, mo, ld, r))
/* all the pieces in one launch (K = 2 .. 8): the window is every row, from 0 */
#define CE_PW_2(m, r) 1
#define CE_PF_2(m) 1
#define CE_PL_2(m) 0UL
#define CE_PH_2(m) ULONG_MAX
#define CE_PW_3(m, r) 1
#define CE_PF_3(m) 1
#define CE_PL_3(m) 0UL
#define CE_PH_3(m) ULONG_MAX
#define CE_PW_4(m, r) 1
#define CE_PF_4(m) 1
#define CE_PL_4(m) 0UL
#define CE_PH_4(m) ULONG_MAX
#define CE_PW_5(m, r) 1
#define CE_PF_5(m) 1
#define CE_PL_5(m) 0UL
#define CE_PH_5(m) ULONG_MAX
#define CE_PW_6(m, r) 1
#define CE_PF_6(m) 1
#define CE_PL_6(m) 0UL
#define CE_PH_6(m) ULONG_MAX
#define CE_PW_7(m, r) 1
#define CE_PF_7(m) 1
#define CE_PL_7(m) 0UL
#define CE_PH_7(m) ULONG_MAX
#define CE_PW_8(m, r) 1
#define CE_PF_8(m) 1
#define CE_PL_8(m) 0UL
#define CE_PH_8(m) ULONG_MAX
/* a window of K pieces (8 + K): the same parameters, and the window's tests */
#define CE_PP_9(T, m) CE_PP_1(T, m)
#define CE_PA_9(m) CE_PA_1(m)
#define CE_PT_9(m, r) CE_PT_1(m, r)
#define CE_PB_9(m, mo, ld, r) CE_PB_1(m, mo, ld, r)
#define CE_PW_9(m, r) ((r) >= m##_f0 && (r) < m##_end)
#define CE_PF_9(m) (m##_f0 == 0)
#define CE_PL_9(m) (m##_f0)
#define CE_PH_9(m) (m##_end)
#define CE_PP_10(T, m) CE_PP_2(T, m)
#define CE_PA_10(m) CE_PA_2(m)
#define CE_PT_10(m, r) CE_PT_2(m, r)
#define CE_PB_10(m, mo, ld, r) CE_PB_2(m, mo, ld, r)
#define CE_PW_10(m, r) ((r) >= m##_f0 && (r) < m##_end)
#define CE_PF_10(m) (m##_f0 == 0)
#define CE_PL_10(m) (m##_f0)
#define CE_PH_10(m) (m##_end)
#define CE_PP_11(T, m) CE_PP_3(T, m)
#define CE_PA_11(m) CE_PA_3(m)
#define CE_PT_11(m, r) CE_PT_3(m, r)
#define CE_PB_11(m, mo, ld, r) CE_PB_3(m, mo, ld, r)
#define CE_PW_11(m, r) ((r) >= m##_f0 && (r) < m##_end)
#define CE_PF_11(m) (m##_f0 == 0)
#define CE_PL_11(m) (m##_f0)
#define CE_PH_11(m) (m##_end)
#define CE_PP_12(T, m) CE_PP_4(T, m)
#define CE_PA_12(m) CE_PA_4(m)
#define CE_PT_12(m, r) CE_PT_4(m, r)
#define CE_PB_12(m, mo, ld, r) CE_PB_4(m, mo, ld, r)
#define CE_PW_12(m, r) ((r) >= m##_f0 && (r) < m##_end)
#define CE_PF_12(m) (m##_f0 == 0)
#define CE_PL_12(m) (m##_f0)
#define CE_PH_12(m) (m##_end)
#define CE_PP_13(T, m) CE_PP_5(T, m)
#define CE_PA_13(m) CE_PA_5(m)
#define CE_PT_13(m, r) CE_PT_5(m, r)
#define CE_PB_13(m, mo, ld, r) CE_PB_5(m, mo, ld, r)
#define CE_PW_13(m, r) ((r) >= m##_f0 && (r) < m##_end)
#define CE_PF_13(m) (m##_f0 == 0)
#define CE_PL_13(m) (m##_f0)
#define CE_PH_13(m) (m##_end)
#define CE_PP_14(T, m) CE_PP_6(T, m)
#define CE_PA_14(m) CE_PA_6(m)
#define CE_PT_14(m, r) CE_PT_6(m, r)
#define CE_PB_14(m, mo, ld, r) CE_PB_6(m, mo, ld, r)
#define CE_PW_14(m, r) ((r) >= m##_f0 && (r) < m##_end)
#define CE_PF_14(m) (m##_f0 == 0)
#define CE_PL_14(m) (m##_f0)
#define CE_PH_14(m) (m##_end)
#define CE_PP_15(T, m) CE_PP_7(T, m)
#define CE_PA_15(m) CE_PA_7(m)
#define CE_PT_15(m, r) CE_PT_7(m, r)
#define CE_PB_15(m, mo, ld, r) CE_PB_7(m, mo, ld, r)
#define CE_PW_15(m, r) ((r) >= m##_f0 && (r) < m##_end)
#define CE_PF_15(m) (m##_f0 == 0)
#define CE_PL_15(m) (m##_f0)
#define CE_PH_15(m) (m##_end)
#define CE_PP_16(T, m) CE_PP_8(T, m)
#define CE_PA_16(m) CE_PA_8(m)
#define CE_PT_16(m, r) CE_PT_8(m, r)
#define CE_PB_16(m, mo, ld, r) CE_PB_8(m, mo, ld, r)
#define CE_PW_16(m, r) ((r) >= m##_f0 && (r) < m##_end)
#define CE_PF_16(m) (m##_f0 == 0)
#define CE_PL_16(m) (m##_f0)
#define CE_PH_16(m) (m##_end)
