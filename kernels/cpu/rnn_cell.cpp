// rnn_cell_forward / rnn_cell_backward on the CPU: one time step of an RNN, LSTM or GRU layer, the
// pointwise part (math: kernels/kernels.h and kernels/rnn_cell_math.h).
//
// Strategy: one batch row per OpenMP iteration (rows split statically; elements are independent, so the
// result does not depend on the thread count). Within a row, one loop over the hidden units per cell kind
// (the kind is a template parameter), reading each gate's contiguous slice: the loop vectorises, with
// the exponential through libmvec (simd_math.h vexp). Half rows are widened to fp32 scratch first and
// the results rounded once on the way out.
#include <algorithm>
#include <array>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/simd_math.h"
#include "kernels/dispatch.h"
#include "kernels/error.h"
#include "kernels/kernels.h"
#include "kernels/rnn_cell_math.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kParallelMinElements = int64_t(1) << 14;

struct VectorExp {
  template <class A>
  A operator()(A x) const {
    return vexp(x);
  }
};

// A thread's view of rows in A: f32 / f64 rows are used in place; half rows go through fp32 scratch,
// one buffer per slot. A null input reads as zeros.
template <class T>
class RowIo {
 public:
  using A = acc_t<T>;
  static constexpr bool kInPlace = std::is_same_v<T, A>;

  const A* read(const void* base, int64_t offset, int64_t n, int slot) {
    if (base == nullptr) return zeros(n);
    const T* p = static_cast<const T*>(base) + offset;
    if constexpr (kInPlace) {
      return p;
    } else {
      A* buffer = scratch(slot, n);
      to_float(p, buffer, n);
      return buffer;
    }
  }
  // Where to compute an output row; commit() stores it (a no-op in place). Null stays null.
  A* target(void* base, int64_t offset, int64_t n, int slot) {
    if (base == nullptr) return nullptr;
    if constexpr (kInPlace) {
      return static_cast<T*>(base) + offset;
    } else {
      return scratch(slot, n);
    }
  }
  void commit(const A* values, void* base, int64_t offset, int64_t n) {
    if constexpr (!kInPlace) {
      if (base != nullptr) from_float(values, static_cast<T*>(base) + offset, n);
    }
  }

 private:
  A* scratch(int slot, int64_t n) {
    std::vector<A>& b = buffers_[size_t(slot)];
    if (b.size() < size_t(n)) b.resize(size_t(n));
    return b.data();
  }
  const A* zeros(int64_t n) {
    if (zeros_.size() < size_t(n)) zeros_.assign(size_t(n), A(0));
    return zeros_.data();
  }
  std::array<std::vector<A>, 12> buffers_;
  std::vector<A> zeros_;
};

// ---- forward ----------------------------------------------------------------------------------

template <RnnCell kCell, class A>
void forward_row(const A* x, const A* hp, const A* b, const A* h_prev, const A* c_prev, A* h, A* c, A* saved,
                 int64_t n) {
  const VectorExp exp;
  if constexpr (kCell == RnnCell::RnnTanh || kCell == RnnCell::RnnRelu) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) h[j] = rnn_unit_forward(kCell, x[j] + hp[j] + b[j], exp);
  } else if constexpr (kCell == RnnCell::Lstm) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const LstmUnit<A> u = lstm_unit_forward(x[j] + hp[j] + b[j], x[n + j] + hp[n + j] + b[n + j],
                                              x[2 * n + j] + hp[2 * n + j] + b[2 * n + j],
                                              x[3 * n + j] + hp[3 * n + j] + b[3 * n + j], c_prev[j], exp);
      saved[j] = u.i, saved[n + j] = u.f, saved[2 * n + j] = u.g, saved[3 * n + j] = u.o;
      c[j] = u.c, h[j] = u.h;
    }
  } else {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const A hn = hp[2 * n + j] + b[2 * n + j];
      const GruUnit<A> u =
          gru_unit_forward(x[j], x[n + j], x[2 * n + j], hp[j] + b[j], hp[n + j] + b[n + j], hn, h_prev[j], exp);
      saved[j] = u.r, saved[n + j] = u.z, saved[2 * n + j] = u.n, saved[3 * n + j] = hn;
      h[j] = u.h;
    }
  }
}

template <RnnCell kCell, class T>
void forward_rows(const void* x, const void* hp, const void* bias, const void* h_prev, const void* c_prev, void* h,
                  void* c, void* saved, int64_t batch, int64_t hidden) {
  using A = acc_t<T>;
  constexpr int kG = rnn_gates(kCell), kS = rnn_saved(kCell);
  const int64_t gh = kG * hidden, sh = kS * hidden;
  std::vector<A> b(size_t(gh), A(0));
  if (bias != nullptr)
    for (int64_t k = 0; k < gh; ++k) b[size_t(k)] = A(static_cast<const T*>(bias)[k]);
#pragma omp parallel if (batch * gh >= kParallelMinElements)
  {
    RowIo<T> io;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < batch; ++r) {
      const A* xr = io.read(x, r * gh, gh, 0);
      const A* hpr = io.read(hp, r * gh, gh, 1);
      const A* hr_prev = kCell == RnnCell::Gru ? io.read(h_prev, r * hidden, hidden, 2) : nullptr;
      const A* cr_prev = kCell == RnnCell::Lstm ? io.read(c_prev, r * hidden, hidden, 3) : nullptr;
      A* hr = io.target(h, r * hidden, hidden, 4);
      A* cr = kCell == RnnCell::Lstm ? io.target(c, r * hidden, hidden, 5) : nullptr;
      A* sr = kS > 0 ? io.target(saved, r * sh, sh, 6) : nullptr;
      forward_row<kCell>(xr, hpr, b.data(), hr_prev, cr_prev, hr, cr, sr, hidden);
      io.commit(hr, h, r * hidden, hidden);
      if (cr != nullptr) io.commit(cr, c, r * hidden, hidden);
      if (sr != nullptr) io.commit(sr, saved, r * sh, sh);
    }
  }
}

// ---- backward ---------------------------------------------------------------------------------

// dh_next and dy are added here (dh); the outputs as kernels.h states.
template <RnnCell kCell, class A>
void backward_row(const A* saved, const A* h, const A* c, const A* h_prev, const A* c_prev, const A* dh_next,
                  const A* dy, const A* dc, A* dx, A* dhp, A* dc_prev, A* dh_prev, int64_t n) {
  const VectorExp exp;
  if constexpr (kCell == RnnCell::RnnTanh || kCell == RnnCell::RnnRelu) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) dx[j] = rnn_unit_backward(kCell, h[j], dh_next[j] + dy[j]);
  } else if constexpr (kCell == RnnCell::Lstm) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const LstmUnitGrad<A> d = lstm_unit_backward(saved[j], saved[n + j], saved[2 * n + j], saved[3 * n + j], c[j],
                                                   c_prev[j], dh_next[j] + dy[j], dc[j], exp);
      dx[j] = d.di, dx[n + j] = d.df, dx[2 * n + j] = d.dg, dx[3 * n + j] = d.d_o;
      dc_prev[j] = d.dc_prev;
    }
  } else {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const GruUnitGrad<A> d =
          gru_unit_backward(saved[j], saved[n + j], saved[2 * n + j], saved[3 * n + j], h_prev[j], dh_next[j] + dy[j]);
      dx[j] = d.dr, dx[n + j] = d.dz, dx[2 * n + j] = d.dn;
      dhp[j] = d.dr, dhp[n + j] = d.dz, dhp[2 * n + j] = d.dhn;
      dh_prev[j] = d.dh_prev;
    }
  }
}

template <RnnCell kCell, class T>
void backward_rows(const void* saved, const void* h, const void* c, const void* h_prev, const void* c_prev,
                   const void* dh_next, const void* dy, const void* dc, void* dx, void* dhp, void* dc_prev,
                   void* dh_prev, int64_t batch, int64_t hidden) {
  using A = acc_t<T>;
  constexpr int kG = rnn_gates(kCell), kS = rnn_saved(kCell);
  constexpr bool kLstm = kCell == RnnCell::Lstm, kGru = kCell == RnnCell::Gru;
  const int64_t gh = kG * hidden, sh = kS * hidden;
#pragma omp parallel if (batch * gh >= kParallelMinElements)
  {
    RowIo<T> io;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < batch; ++r) {
      const int64_t u = r * hidden;
      const A* sr = kS > 0 ? io.read(saved, r * sh, sh, 0) : nullptr;
      const A* hr = kS == 0 ? io.read(h, u, hidden, 1) : nullptr;
      const A* cr = kLstm ? io.read(c, u, hidden, 2) : nullptr;
      const A* hr_prev = kGru ? io.read(h_prev, u, hidden, 3) : nullptr;
      const A* cr_prev = kLstm ? io.read(c_prev, u, hidden, 4) : nullptr;
      const A* dh_nextr = io.read(dh_next, u, hidden, 5);
      const A* dyr = io.read(dy, u, hidden, 6);
      const A* dcr = kLstm ? io.read(dc, u, hidden, 7) : nullptr;
      A* dxr = io.target(dx, r * gh, gh, 8);
      A* dhpr = kGru ? io.target(dhp, r * gh, gh, 9) : nullptr;
      A* dc_prevr = kLstm ? io.target(dc_prev, u, hidden, 10) : nullptr;
      A* dh_prevr = kGru ? io.target(dh_prev, u, hidden, 11) : nullptr;
      backward_row<kCell>(sr, hr, cr, hr_prev, cr_prev, dh_nextr, dyr, dcr, dxr, dhpr, dc_prevr, dh_prevr, hidden);
      io.commit(dxr, dx, r * gh, gh);
      if (dhpr != nullptr) io.commit(dhpr, dhp, r * gh, gh);
      if (dc_prevr != nullptr) io.commit(dc_prevr, dc_prev, u, hidden);
      if (dh_prevr != nullptr) io.commit(dh_prevr, dh_prev, u, hidden);
    }
  }
}

void check_cell_buffers(const char* op, RnnCell cell, int64_t batch, int64_t hidden,
                        std::initializer_list<std::pair<const void*, const char*>> required) {
  HG_CHECK(batch >= 0 && hidden >= 0, "[", op, "] batch = ", batch, ", hidden = ", hidden, ", expected both >= 0");
  for (const auto& [p, name] : required)
    HG_CHECK(p != nullptr || batch * hidden == 0, "[", op, "] the ", rnn_cell_name(cell), " cell needs ", name,
             ", got a null pointer");
}

}  // namespace

void rnn_cell_forward(RnnCell cell, const void* x, const void* hp, const void* bias, const void* h_prev,
                      const void* c_prev, void* h, void* c, void* saved, int64_t batch, int64_t hidden, DType dtype) {
  const bool lstm = cell == RnnCell::Lstm, gru = cell == RnnCell::Gru;
  check_cell_buffers("rnn_cell_forward", cell, batch, hidden,
                     {{x, "x"},
                      {hp, "hp"},
                      {h, "h"},
                      {gru ? h_prev : h, "h_prev"},
                      {lstm ? c_prev : h, "c_prev"},
                      {lstm ? c : h, "c"},
                      {rnn_saved(cell) > 0 ? saved : h, "saved"}});
  if (batch == 0 || hidden == 0) return;
  dispatch_floating(dtype, "rnn_cell_forward", [&]<class T>() {
    with_rnn_cell(cell, [&]<RnnCell kCell>() {
      forward_rows<kCell, T>(x, hp, bias, h_prev, c_prev, h, c, saved, batch, hidden);
    });
  });
}

void rnn_cell_backward(RnnCell cell, const void* saved, const void* h, const void* c, const void* h_prev,
                       const void* c_prev, const void* dh_next, const void* dy, const void* dc, void* dx, void* dhp,
                       void* dc_prev, void* dh_prev, int64_t batch, int64_t hidden, DType dtype) {
  const bool lstm = cell == RnnCell::Lstm, gru = cell == RnnCell::Gru, plain = !lstm && !gru;
  check_cell_buffers("rnn_cell_backward", cell, batch, hidden,
                     {{dh_next, "dh_next"},
                      {dx, "dx"},
                      {plain ? h : dx, "h"},
                      {plain ? dx : saved, "saved"},
                      {lstm ? c : dx, "c"},
                      {lstm ? c_prev : dx, "c_prev"},
                      {lstm ? dc_prev : dx, "dc_prev"},
                      {gru ? h_prev : dx, "h_prev"},
                      {gru ? dhp : dx, "dhp"},
                      {gru ? dh_prev : dx, "dh_prev"}});
  if (batch == 0 || hidden == 0) return;
  dispatch_floating(dtype, "rnn_cell_backward", [&]<class T>() {
    with_rnn_cell(cell, [&]<RnnCell kCell>() {
      backward_rows<kCell, T>(saved, h, c, h_prev, c_prev, dh_next, dy, dc, dx, dhp, dc_prev, dh_prev, batch, hidden);
    });
  });
}

}  // namespace hg::kernels::cpu
