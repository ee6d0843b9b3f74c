/* pieces.cl: a matrix whose rows lie in several buffers (include/clembed.h's
 * split matrices), as a kernel takes it. A kernel's matrix argument is a
 * pointer m and the offset mo of its row 0 (elements, or values of a block
 * type), rows ld apart: m + mo + r * ld. Built with -DCE_PIECES_m=K (K = 1 ..
 * 8; src/runtime/launch.c's ce_pieces_plan) m stands for a launch's window of
 * a split matrix: its rows [m_f0, m_end), in the K buffers m, m_1, .., m_{K-1};
 * piece j holds the rows from m_fj on (m_f0 for m itself), the first of them at
 * element m_oj (mo for m). A split matrix whose pieces do not all fit in one
 * launch is taken by several launches, one per window, each once.
 *   CE_PIECE_PARAMS(T, m)  the extra parameters, after m's offset parameter;
 *   CE_PIECE_PASS(m)       the same, passed on to a helper;
 *   CE_AT(m, r)            the buffer that holds row r (r: a ulong of the window);
 *   CE_OFF(m, mo, ld, r)   the element of row r's column 0 in that buffer;
 *   CE_OWNS(m, r)          whether row r is in this launch's window;
 *   CE_FIRST(m)            whether the window is the first (work that touches no
 *                          row of m is done there, once);
 *   CE_LO(m), CE_HI(m)     the window's first row, and the row after its last.
 * Without -DCE_PIECES_m (0) they are m, mo + r * ld, 1, 1, 0 and ULONG_MAX: a kernel on
 * one buffer compiles to what it was. Every kernel file gives each matrix
 * argument its #ifndef CE_PIECES_m 0 default. */

#define CE_PIECE_PARAMS(T, m) CE_XCAT(CE_PP_, CE_PIECES_##m)(T, m)
#define CE_PIECE_PASS(m) CE_XCAT(CE_PA_, CE_PIECES_##m)(m)
#define CE_AT(m, r) CE_XCAT(CE_PT_, CE_PIECES_##m)(m, r)
#define CE_OFF(m, mo, ld, r) CE_XCAT(CE_PO_, CE_PIECES_##m)(m, mo, ld, r)
#define CE_OWNS(m, r) CE_XCAT(CE_PW_, CE_PIECES_##m)(m, r)
#define CE_FIRST(m) CE_XCAT(CE_PF_, CE_PIECES_##m)(m)
#define CE_LO(m) CE_XCAT(CE_PL_, CE_PIECES_##m)(m)
#define CE_HI(m) CE_XCAT(CE_PH_, CE_PIECES_##m)(m)

/* one buffer */
#define CE_PP_0(T, m)
#define CE_PA_0(m)
#define CE_PT_0(m, r) (m)
#define CE_PO_0(m, mo, ld, r) ((mo) + (r) * (ld))
#define CE_PW_0(m, r) 1
#define CE_PF_0(m) 1
#define CE_PL_0(m) 0UL
#define CE_PH_0(m) ULONG_MAX
/* K pieces: the window, then pieces 1 .. K-1 (the last piece whose first row is at most r holds r) */
#define CE_PP_1(T, m) , ulong m##_f0, ulong m##_end
#define CE_PA_1(m) , m##_f0, m##_end
#define CE_PT_1(m, r) (m)
#define CE_PO_1(m, mo, ld, r) ((mo) + ((r) - m##_f0) * (ld))
#define CE_PP_2(T, m) CE_PP_1(T, m), __global T *m##_1, ulong m##_f1, ulong m##_o1
#define CE_PA_2(m) CE_PA_1(m), m##_1, m##_f1, m##_o1
#define CE_PT_2(m, r) ((r) >= m##_f1 ? m##_1 : CE_PT_1(m, r))
#define CE_PO_2(m, mo, ld, r) ((r) >= m##_f1 ? m##_o1 + ((r) - m##_f1) * (ld) : CE_PO_1(m, mo, ld, r))
#define CE_PP_3(T, m) CE_PP_2(T, m), __global T *m##_2, ulong m##_f2, ulong m##_o2
#define CE_PA_3(m) CE_PA_2(m), m##_2, m##_f2, m##_o2
#define CE_PT_3(m, r) ((r) >= m##_f2 ? m##_2 : CE_PT_2(m, r))
#define CE_PO_3(m, mo, ld, r) ((r) >= m##_f2 ? m##_o2 + ((r) - m##_f2) * (ld) : CE_PO_2(m, mo, ld, r))
#define CE_PP_4(T, m) CE_PP_3(T, m), __global T *m##_3, ulong m##_f3, ulong m##_o3
#define CE_PA_4(m) CE_PA_3(m), m##_3, m##_f3, m##_o3
#define CE_PT_4(m, r) ((r) >= m##_f3 ? m##_3 : CE_PT_3(m, r))
#define CE_PO_4(m, mo, ld, r) ((r) >= m##_f3 ? m##_o3 + ((r) - m##_f3) * (ld) : CE_PO_3(m, mo, ld, r))
#define CE_PP_5(T, m) CE_PP_4(T, m), __global T *m##_4, ulong m##_f4, ulong m##_o4
#define CE_PA_5(m) CE_PA_4(m), m##_4, m##_f4, m##_o4
#define CE_PT_5(m, r) ((r) >= m##_f4 ? m##_4 : CE_PT_4(m, r))
#define CE_PO_5(m, mo, ld, r) ((r) >= m##_f4 ? m##_o4 + ((r) - m##_f4) * (ld) : CE_PO_4(m, mo, ld, r))
#define CE_PP_6(T, m) CE_PP_5(T, m), __global T *m##_5, ulong m##_f5, ulong m##_o5
#define CE_PA_6(m) CE_PA_5(m), m##_5, m##_f5, m##_o5
#define CE_PT_6(m, r) ((r) >= m##_f5 ? m##_5 : CE_PT_5(m, r))
#define CE_PO_6(m, mo, ld, r) ((r) >= m##_f5 ? m##_o5 + ((r) - m##_f5) * (ld) : CE_PO_5(m, mo, ld, r))
#define CE_PP_7(T, m) CE_PP_6(T, m), __global T *m##_6, ulong m##_f6, ulong m##_o6
#define CE_PA_7(m) CE_PA_6(m), m##_6, m##_f6, m##_o6
#define CE_PT_7(m, r) ((r) >= m##_f6 ? m##_6 : CE_PT_6(m, r))
#define CE_PO_7(m, mo, ld, r) ((r) >= m##_f6 ? m##_o6 + ((r) - m##_f6) * (ld) : CE_PO_6(m, mo, ld, r))
#define CE_PP_8(T, m) CE_PP_7(T, m), __global T *m##_7, ulong m##_f7, ulong m##_o7
#define CE_PA_8(m) CE_PA_7(m), m##_7, m##_f7, m##_o7
#define CE_PT_8(m, r) ((r) >= m##_f7 ? m##_7 : CE_PT_7(m, r))
#define CE_PO_8(m, mo, ld, r) ((r) >= m##_f7 ? m##_o7 + ((r) - m##_f7) * (ld) : CE_PO_7(m, mo, ld, r))
#define CE_PW_1(m, r) ((r) >= m##_f0 && (r) < m##_end)
#define CE_PF_1(m) (m##_f0 == 0)
#define CE_PL_1(m) (m##_f0)
#define CE_PH_1(m) (m##_end)
#define CE_PW_2(m, r) ((r) >= m##_f0 && (r) < m##_end)
#define CE_PF_2(m) (m##_f0 == 0)
#define CE_PL_2(m) (m##_f0)
#define CE_PH_2(m) (m##_end)
#define CE_PW_3(m, r) ((r) >= m##_f0 && (r) < m##_end)
#define CE_PF_3(m) (m##_f0 == 0)
#define CE_PL_3(m) (m##_f0)
#define CE_PH_3(m) (m##_end)
#define CE_PW_4(m, r) ((r) >= m##_f0 && (r) < m##_end)
#define CE_PF_4(m) (m##_f0 == 0)
#define CE_PL_4(m) (m##_f0)
#define CE_PH_4(m) (m##_end)
#define CE_PW_5(m, r) ((r) >= m##_f0 && (r) < m##_end)
#define CE_PF_5(m) (m##_f0 == 0)
#define CE_PL_5(m) (m##_f0)
#define CE_PH_5(m) (m##_end)
#define CE_PW_6(m, r) ((r) >= m##_f0 && (r) < m##_end)
#define CE_PF_6(m) (m##_f0 == 0)
#define CE_PL_6(m) (m##_f0)
#define CE_PH_6(m) (m##_end)
#define CE_PW_7(m, r) ((r) >= m##_f0 && (r) < m##_end)
#define CE_PF_7(m) (m##_f0 == 0)
#define CE_PL_7(m) (m##_f0)
#define CE_PH_7(m) (m##_end)
#define CE_PW_8(m, r) ((r) >= m##_f0 && (r) < m##_end)
#define CE_PF_8(m) (m##_f0 == 0)
#define CE_PL_8(m) (m##_f0)
#define CE_PH_8(m) (m##_end)
