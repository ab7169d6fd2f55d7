// The LSTM gate equations of the cpu backend's recurrent kernel (rnn.cpp) on AVX-512 and AVX2
// (rnn_gates.cpp), also called by the unit tests (tests/unit/test_cpu_rnn.cpp).
#pragma once

#include <cstdint>

namespace ferry::cpu {

/// One batch row of one LSTM step, ONNX gate order i, o, f, c: from x (the row's X * W^T, [4H]) and
/// g (H(t-1) * R^T + Wb + Rb, [4H]) updates c ([H], in place) and writes h ([H]). pi / po / pf are
/// the peepholes ([H] each; read only by the peephole variant), clip the gate-input clip (read only
/// by the clip variant), input_forget couples f = 1 - i. No two spans overlap.
using LstmGatesFn = void (*)(int64_t H, const float* x, const float* g, const float* pi, const float* po,
                             const float* pf, float clip, bool input_forget, float* c, float* h);

/// The AVX-512 variant for nodes with / without peepholes and clip; null where the CPU has no
/// AVX-512F or FERRY_RNN_AVX512_GATES=0 (the kernel then runs its compiler-vectorized loop).
LstmGatesFn lstm_gates_avx512(bool peepholes, bool clip);
/// The AVX2 + FMA variant (the same operations on 8 lanes: the same bits as the AVX-512 one); null where
/// the CPU lacks AVX2 or FMA or FERRY_RNN_AVX512_GATES=0. The kernel takes it where the AVX-512 one is null.
LstmGatesFn lstm_gates_avx2(bool peepholes, bool clip);

}  // namespace ferry::cpu
