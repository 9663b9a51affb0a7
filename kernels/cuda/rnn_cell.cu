// rnn_cell_forward / rnn_cell_backward: one time step of an RNN, LSTM or GRU layer, the pointwise part
// (math: kernels/kernels.h and the per-unit functions of kernels/rnn_cell_math.h, which the CPU runs too).
//
// Parallel strategy: one thread per hidden unit (row r, unit j) in a grid-stride loop over batch * hidden.
// A thread reads its unit's G gate values of x and hp (gate k at r * G * hidden + k * hidden + j) and its
// state, and writes its h, c and saved values: consecutive threads touch consecutive j in every gate
// slice, so each of the G loads and every store is coalesced. Everything is computed in acc_t (fp32 for
// the half types) and rounded once on store; elements are independent, so the result is deterministic.
// The cell kind is a template parameter (no per-element branch on it). The step's GEMM (h_prev W_hh^T)
// runs before this kernel, through cuBLASLt (engine/ops/recurrence.cpp).
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"
#include "kernels/rnn_cell_math.h"

namespace hg::kernels::cuda {
namespace {

struct DeviceExp {
  template <class A>
  HG_DEVICE A operator()(A x) const {
    return exp_acc(x);
  }
};

template <class T>
HG_DEVICE acc_t<T> load_or_zero(const T* p, int64_t i) {
  return p != nullptr ? to_acc(p[i]) : acc_t<T>(0);
}

template <class T, RnnCell kCell>
__global__ void rnn_cell_forward_kernel(const T* __restrict__ x, const T* __restrict__ hp, const T* __restrict__ bias,
                                        const T* __restrict__ h_prev, const T* __restrict__ c_prev, T* __restrict__ h,
                                        T* __restrict__ c, T* __restrict__ saved, int64_t batch, int64_t n) {
  using A = acc_t<T>;
  constexpr int kG = rnn_gates(kCell), kS = rnn_saved(kCell);
  const DeviceExp exp;
  for (int64_t u = flat_worker(); u < batch * n; u += flat_workers()) {
    const int64_t r = u / n, j = u - r * n;
    const T* xr = x + r * kG * n;
    const T* hpr = hp + r * kG * n;
    A a[kG], hh[kG];  // the input projection's and the hidden projection's (with b_hh) gate values
    HG_UNROLL
    for (int k = 0; k < kG; ++k) {
      a[k] = to_acc(xr[k * n + j]);
      hh[k] = to_acc(hpr[k * n + j]) + load_or_zero(bias, k * n + j);
    }
    T* sr = kS > 0 ? saved + r * kS * n : nullptr;
    if constexpr (kCell == RnnCell::RnnTanh || kCell == RnnCell::RnnRelu) {
      h[u] = from_acc<T>(rnn_unit_forward(kCell, a[0] + hh[0], exp));
    } else if constexpr (kCell == RnnCell::Lstm) {
      const LstmUnit<A> o =
          lstm_unit_forward(a[0] + hh[0], a[1] + hh[1], a[2] + hh[2], a[3] + hh[3], to_acc(c_prev[u]), exp);
      sr[j] = from_acc<T>(o.i);
      sr[n + j] = from_acc<T>(o.f);
      sr[2 * n + j] = from_acc<T>(o.g);
      sr[3 * n + j] = from_acc<T>(o.o);
      c[u] = from_acc<T>(o.c);
      h[u] = from_acc<T>(o.h);
    } else {
      const GruUnit<A> o = gru_unit_forward(a[0], a[1], a[2], hh[0], hh[1], hh[2], to_acc(h_prev[u]), exp);
      sr[j] = from_acc<T>(o.r);
      sr[n + j] = from_acc<T>(o.z);
      sr[2 * n + j] = from_acc<T>(o.n);
      sr[3 * n + j] = from_acc<T>(hh[2]);
      h[u] = from_acc<T>(o.h);
    }
  }
}

template <class T, RnnCell kCell>
__global__ void rnn_cell_backward_kernel(const T* __restrict__ saved, const T* __restrict__ h, const T* __restrict__ c,
                                         const T* __restrict__ h_prev, const T* __restrict__ c_prev,
                                         const T* __restrict__ dh_next, const T* __restrict__ dy,
                                         const T* __restrict__ dc, T* __restrict__ dx, T* __restrict__ dhp,
                                         T* __restrict__ dc_prev, T* __restrict__ dh_prev, int64_t batch, int64_t n) {
  using A = acc_t<T>;
  constexpr int kG = rnn_gates(kCell), kS = rnn_saved(kCell);
  const DeviceExp exp;
  for (int64_t u = flat_worker(); u < batch * n; u += flat_workers()) {
    const int64_t r = u / n, j = u - r * n;
    const A dh = to_acc(dh_next[u]) + load_or_zero(dy, u);
    T* dxr = dx + r * kG * n;
    const T* sr = kS > 0 ? saved + r * kS * n : nullptr;
    if constexpr (kCell == RnnCell::RnnTanh || kCell == RnnCell::RnnRelu) {
      dxr[j] = from_acc<T>(rnn_unit_backward(kCell, to_acc(h[u]), dh));
    } else if constexpr (kCell == RnnCell::Lstm) {
      const LstmUnitGrad<A> d =
          lstm_unit_backward(to_acc(sr[j]), to_acc(sr[n + j]), to_acc(sr[2 * n + j]), to_acc(sr[3 * n + j]),
                             to_acc(c[u]), to_acc(c_prev[u]), dh, load_or_zero(dc, u), exp);
      dxr[j] = from_acc<T>(d.di);
      dxr[n + j] = from_acc<T>(d.df);
      dxr[2 * n + j] = from_acc<T>(d.dg);
      dxr[3 * n + j] = from_acc<T>(d.d_o);
      dc_prev[u] = from_acc<T>(d.dc_prev);
    } else {
      const GruUnitGrad<A> d = gru_unit_backward(to_acc(sr[j]), to_acc(sr[n + j]), to_acc(sr[2 * n + j]),
                                                 to_acc(sr[3 * n + j]), to_acc(h_prev[u]), dh);
      T* dhpr = dhp + r * kG * n;
      dxr[j] = dhpr[j] = from_acc<T>(d.dr);
      dxr[n + j] = dhpr[n + j] = from_acc<T>(d.dz);
      dxr[2 * n + j] = from_acc<T>(d.dn);
      dhpr[2 * n + j] = from_acc<T>(d.dhn);
      dh_prev[u] = from_acc<T>(d.dh_prev);
    }
  }
}

}  // namespace

void rnn_cell_forward(RnnCell cell, const void* x, const void* hp, const void* bias, const void* h_prev,
                      const void* c_prev, void* h, void* c, void* saved, int64_t batch, int64_t hidden, DType dtype,
                      Stream stream) {
  HG_CHECK(batch >= 0 && hidden >= 0, "[rnn_cell_forward] batch = ", batch, ", hidden = ", hidden,
           ", expected both >= 0");
  if (batch == 0 || hidden == 0) return;
  dispatch_floating_cuda(dtype, "rnn_cell_forward", [&]<class T>() {
    with_rnn_cell(cell, [&]<RnnCell kCell>() {
      launch(rnn_cell_forward_kernel<T, kCell>, flat_grid(batch * hidden), dim3(kFlatThreads), 0, stream,
             static_cast<const T*>(x), static_cast<const T*>(hp), static_cast<const T*>(bias),
             static_cast<const T*>(h_prev), static_cast<const T*>(c_prev), static_cast<T*>(h), static_cast<T*>(c),
             static_cast<T*>(saved), batch, hidden);
    });
  });
}

void rnn_cell_backward(RnnCell cell, const void* saved, const void* h, const void* c, const void* h_prev,
                       const void* c_prev, const void* dh_next, const void* dy, const void* dc, void* dx, void* dhp,
                       void* dc_prev, void* dh_prev, int64_t batch, int64_t hidden, DType dtype, Stream stream) {
  HG_CHECK(batch >= 0 && hidden >= 0, "[rnn_cell_backward] batch = ", batch, ", hidden = ", hidden,
           ", expected both >= 0");
  if (batch == 0 || hidden == 0) return;
  dispatch_floating_cuda(dtype, "rnn_cell_backward", [&]<class T>() {
    with_rnn_cell(cell, [&]<RnnCell kCell>() {
      launch(rnn_cell_backward_kernel<T, kCell>, flat_grid(batch * hidden), dim3(kFlatThreads), 0, stream,
             static_cast<const T*>(saved), static_cast<const T*>(h), static_cast<const T*>(c),
             static_cast<const T*>(h_prev), static_cast<const T*>(c_prev), static_cast<const T*>(dh_next),
             static_cast<const T*>(dy), static_cast<const T*>(dc), static_cast<T*>(dx), static_cast<T*>(dhp),
             static_cast<T*>(dc_prev), static_cast<T*>(dh_prev), batch, hidden);
    });
  });
}

}  // namespace hg::kernels::cuda
