#pragma once
// The pointwise math of one time step of a recurrent layer, per hidden unit, shared by the CPU and CUDA
// rnn_cell kernels (kernels/kernels.h states the whole kernel and kernels/rnn_cell.h the cell kinds;
// kernels/cpu/rnn_cell.cpp, kernels/cuda/rnn_cell.cu). Gate order and formulas are PyTorch's (torch.nn.RNN / LSTM /
// GRU):
//
//   RnnTanh, RnnRelu (1 gate):  h = act(a),  a = x + hp + b
//   Lstm (4 gates i, f, g, o):  i, f, o = sigmoid(a_i, a_f, a_o),  g = tanh(a_g),  a_k = x_k + hp_k + b_k
//                               c = f c_prev + i g,  h = o tanh(c)
//   Gru  (3 gates r, z, n):     r = sigmoid(x_r + hp_r + b_r),  z = sigmoid(x_z + hp_z + b_z)
//                               n = tanh(x_n + r (hp_n + b_n)),  h = (1 - z) n + z h_prev
//
// x is the step's input projection (x W_ih^T + b_ih), hp = h_prev W_hh^T and b = b_hh. What the backward
// reads back ("saved", rnn_saved(cell) values per unit): Lstm i, f, g, o; Gru r, z, n, hp_n + b_n; nothing for
// the plain RNN (its derivative comes from h). The exponential is a parameter: the CPU passes a
// vectorisable one (kernels/cpu/simd_math.h vexp), CUDA the device's.
#include <cmath>

#include "kernels/host_device.h"
#include "kernels/rnn_cell.h"

namespace hg::kernels {

// sigmoid and tanh through one exponential of a non-positive argument (no overflow):
// tanh(a) = sign(a) (1 - e) / (1 + e) with e = exp(-2 |a|).
template <class A, class Exp>
HG_HOST_DEVICE inline A gate_sigmoid(A a, Exp exp) {
  return A(1) / (A(1) + exp(-a));
}
template <class A, class Exp>
HG_HOST_DEVICE inline A gate_tanh(A a, Exp exp) {
  const A e = exp(A(-2) * std::fabs(a));
  return std::copysign((A(1) - e) / (A(1) + e), a);
}

// ---- forward, one unit ------------------------------------------------------------------------

template <class A, class Exp>
HG_HOST_DEVICE inline A rnn_unit_forward(RnnCell cell, A a, Exp exp) {
  if (cell == RnnCell::RnnRelu) return a > A(0) ? a : A(0);
  return gate_tanh(a, exp);
}

// The results are small structs returned by value (no arrays: GCC vectorises the CPU loops over them).
template <class A>
struct LstmUnit {  // the activated gates, the new state and output
  A i, f, g, o, c, h;
};
template <class A, class Exp>
HG_HOST_DEVICE inline LstmUnit<A> lstm_unit_forward(A ai, A af, A ag, A ao, A c_prev, Exp exp) {
  const A i = gate_sigmoid(ai, exp), f = gate_sigmoid(af, exp), g = gate_tanh(ag, exp), o = gate_sigmoid(ao, exp);
  const A c = f * c_prev + i * g;
  return {i, f, g, o, c, o * gate_tanh(c, exp)};
}

// x_* the input projection's gates, h_* the hidden projection's with b_hh (hn = hp_n + b_n).
template <class A>
struct GruUnit {
  A r, z, n, h;
};
template <class A, class Exp>
HG_HOST_DEVICE inline GruUnit<A> gru_unit_forward(A xr, A xz, A xn, A hr, A hz, A hn, A h_prev, Exp exp) {
  const A r = gate_sigmoid(xr + hr, exp), z = gate_sigmoid(xz + hz, exp);
  const A n = gate_tanh(xn + r * hn, exp);
  return {r, z, n, (A(1) - z) * n + z * h_prev};
}

// ---- backward, one unit -----------------------------------------------------------------------
// dh: the whole gradient reaching h (the output's and the next step's).

// d a (the pre-activation's gradient) from h.
template <class A>
HG_HOST_DEVICE inline A rnn_unit_backward(RnnCell cell, A h, A dh) {
  if (cell == RnnCell::RnnRelu) return h > A(0) ? dh : A(0);
  return dh * (A(1) - h * h);
}

// In: saved i, f, g, o, the state c and c_prev, dh and dc (the gradient reaching c from the next step).
// Out: the pre-activation gradients and dc_prev.
template <class A>
struct LstmUnitGrad {
  A di, df, dg, d_o, dc_prev;
};
template <class A, class Exp>
HG_HOST_DEVICE inline LstmUnitGrad<A> lstm_unit_backward(A i, A f, A g, A o, A c, A c_prev, A dh, A dc, Exp exp) {
  const A tc = gate_tanh(c, exp);
  const A dc_total = dc + dh * o * (A(1) - tc * tc);
  return {dc_total * g * i * (A(1) - i), dc_total * c_prev * f * (A(1) - f), dc_total * i * (A(1) - g * g),
          dh * tc * o * (A(1) - o), dc_total * f};
}

// In: saved r, z, n, hn (= hp_n + b_n), h_prev, dh. Out: dx_r, dx_z, dx_n (the input projection's
// gradient), dhp_n (the hidden projection's n gradient; its r and z gradients equal dx_r, dx_z) and
// dh_prev's direct part dh z (the rest flows through hp).
template <class A>
struct GruUnitGrad {
  A dr, dz, dn, dhn, dh_prev;
};
template <class A>
HG_HOST_DEVICE inline GruUnitGrad<A> gru_unit_backward(A r, A z, A n, A hn, A h_prev, A dh) {
  const A dn = dh * (A(1) - z) * (A(1) - n * n);
  return {dn * hn * r * (A(1) - r), dh * (h_prev - n) * z * (A(1) - z), dn, dn * r, dh * z};
}

}  // namespace hg::kernels
