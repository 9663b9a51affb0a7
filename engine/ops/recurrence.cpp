// recurrence: one recurrent layer (RNN, LSTM, GRU), one direction, over a whole sequence, as one autograd
// node (semantics: engine/ops.h; the step's math: kernels/kernels.h rnn_cell_forward / rnn_cell_backward).
//
// Forward, per step t (reverse: t = T-1 .. 0): hp = h_prev W_hh^T (the gemm kernel, into one [B, G H]
// buffer reused by every step), then rnn_cell_forward writes h_t into the output, c_t into the cell-state
// sequence and the step's saved activations. No tensor is created per step.
// Saved for backward: the output (h_t for every t, read as h_prev of the next step), the cell states
// (Lstm), the saved activations, h0 / c0 and W_hh. The input projections are not kept.
// Backward, per step in reverse order: rnn_cell_backward turns dh (from the next step, plus the output's
// gradient at t) into the pre-activation gradients (dx_t, written straight into d x_proj) and, for the
// LSTM, dc_prev; then dh_prev = dhp_t W_hh (GRU: plus its direct part dh z) by one GEMM. After the loop
// dW_hh = sum_t dhp_t^T h_prev_t as one GEMM over the T - 1 steps whose h_prev is in the output, plus one
// for h0, and db_hh = the column sums of dhp.
#include <utility>

#include "engine/ops.h"
#include "engine/ops/op_support.h"

namespace hg {

namespace {

// The address of element `offset` of t's storage view (t contiguous).
void* element(const Tensor& t, int64_t offset) {
  return static_cast<char*>(t.data_ptr()) + offset * int64_t(t.element_size());
}
const void* optional_element(const Tensor& t, int64_t offset) { return t.defined() ? element(t, offset) : nullptr; }

struct Sizes {
  int64_t steps, batch, hidden, gates, saved;
  int64_t gh() const { return gates * hidden; }
  // The step processed s-th (s = 0, 1, ...) and the one before it.
  int64_t step(int64_t s, bool reverse) const { return reverse ? steps - 1 - s : s; }
};

void check_inputs(RnnCell cell, const Tensor& x_proj, const Tensor& w_hh, const Tensor& b_hh, const Tensor& h0,
                  const Tensor& c0) {
  const char* name = "recurrence";
  ops::check_floating(x_proj, name, "x_proj");
  ops::check_backend(x_proj, name);
  HG_CHECK(w_hh.defined() && w_hh.dim() == 2, "[", name, "] expected w_hh [G * hidden, hidden], got ",
           w_hh.defined() ? w_hh.describe() : std::string("an undefined tensor"));
  const int64_t hidden = w_hh.size(1), gh = kernels::rnn_gates(cell) * hidden;
  const char* cell_name = kernels::rnn_cell_name(cell);
  HG_CHECK(w_hh.size(0) == gh && hidden > 0, "[", name, "] the ", cell_name, " cell has ", kernels::rnn_gates(cell),
           " gates: expected w_hh [", kernels::rnn_gates(cell), " * hidden, hidden] with hidden > 0, got ",
           w_hh.describe());
  HG_CHECK(x_proj.dim() == 3 && x_proj.size(2) == gh && x_proj.size(0) > 0, "[", name, "] expected x_proj [T, B, ", gh,
           "] with T > 0 (w_hh is ", w_hh.describe(), "), got ", x_proj.describe());
  const int64_t batch = x_proj.size(1);
  ops::check_same({&x_proj, &w_hh}, {"x_proj", "w_hh"}, name);
  if (b_hh.defined()) {
    ops::check_same({&x_proj, &b_hh}, {"x_proj", "b_hh"}, name);
    HG_CHECK(b_hh.shape() == Shape{gh}, "[", name, "] expected b_hh [", gh, "], got ", b_hh.describe());
  }
  HG_CHECK(!c0.defined() || cell == RnnCell::Lstm, "[", name,
           "] c0 is given, but only the lstm cell has a cell state (", cell_name, " does not)");
  for (const auto& [state, state_name] : {std::pair{&h0, "h0"}, std::pair{&c0, "c0"}}) {
    if (!state->defined()) continue;
    ops::check_same({&x_proj, state}, {"x_proj", state_name}, name);
    HG_CHECK(state->shape() == Shape({batch, hidden}), "[", name, "] expected ", state_name, " [", batch, ", ", hidden,
             "] (batch, hidden), got ", state->describe());
  }
}

}  // namespace

Recurrence recurrence(RnnCell cell, const Tensor& x_proj, const Tensor& w_hh, const Tensor& b_hh, const Tensor& h0,
                      const Tensor& c0, bool reverse) {
  check_inputs(cell, x_proj, w_hh, b_hh, h0, c0);
  const bool lstm = cell == RnnCell::Lstm, gru = cell == RnnCell::Gru;
  const Sizes n{x_proj.size(0), x_proj.size(1), w_hh.size(1), kernels::rnn_gates(cell), kernels::rnn_saved(cell)};
  const Device device = x_proj.device();
  const DType dtype = x_proj.dtype();
  const Tensor x = x_proj.contiguous(), w = w_hh.contiguous();
  const Tensor b = b_hh.defined() ? b_hh.contiguous() : Tensor();
  const Tensor h_init = h0.defined() ? h0.contiguous() : zeros({n.batch, n.hidden}, dtype, device);
  const Tensor c_init = !lstm ? Tensor() : c0.defined() ? c0.contiguous() : zeros({n.batch, n.hidden}, dtype, device);
  Tensor out = empty({n.steps, n.batch, n.hidden}, dtype, device);
  const Tensor cs = lstm ? empty({n.steps, n.batch, n.hidden}, dtype, device) : Tensor();
  const Tensor saved = n.saved > 0 ? empty({n.steps, n.batch, n.saved * n.hidden}, dtype, device) : Tensor();
  const Tensor hp = empty({n.batch, n.gh()}, dtype, device);
  const int64_t bh = n.batch * n.hidden;
  for (int64_t s = 0; s < n.steps; ++s) {
    const int64_t t = n.step(s, reverse), prev = reverse ? t + 1 : t - 1;
    const void* h_prev = s == 0 ? h_init.data_ptr() : element(out, prev * bh);
    const void* c_prev = !lstm ? nullptr : s == 0 ? c_init.data_ptr() : element(cs, prev * bh);
    HG_KERNEL(device, gemm, false, true, n.batch, n.gh(), n.hidden, 1.0, h_prev, n.hidden, w.data_ptr(), n.hidden, 0.0,
              hp.data_ptr(), n.gh(), dtype);
    HG_KERNEL(device, rnn_cell_forward, cell, element(x, t * n.batch * n.gh()), hp.data_ptr(),
              b.defined() ? b.data_ptr() : nullptr, h_prev, c_prev, element(out, t * bh),
              lstm ? element(cs, t * bh) : nullptr,
              n.saved > 0 ? element(saved, t * n.batch * n.saved * n.hidden) : nullptr, n.batch, n.hidden, dtype);
  }
  const int64_t last = n.step(n.steps - 1, reverse);
  Recurrence r{out, out.select(0, last).clone(), lstm ? cs.select(0, last).clone() : Tensor()};
  if (!should_record({&x_proj, &w_hh, &b_hh, &h0, &c0})) return r;

  const SavedTensor saved_out(out), saved_cs(cs), saved_acts(saved), saved_h0(h_init), saved_c0(c_init), saved_w(w);
  std::vector<Tensor*> outputs{&r.output, &r.h_n};
  if (lstm) outputs.push_back(&r.c_n);
  record_op_multi(
      "recurrence", {x_proj, w_hh, b_hh, h0, c0}, outputs,
      [saved_out, saved_cs, saved_acts, saved_h0, saved_c0, saved_w, n, bh, cell, reverse, lstm, gru, device, dtype](
          const std::vector<Tensor>& grads, const NeedsGrad& needs) {
        const Tensor h_seq = saved_out.unpack(), c_seq = saved_cs.unpack(), acts = saved_acts.unpack();
        const Tensor h_first = saved_h0.unpack(), c_first = saved_c0.unpack(), weight = saved_w.unpack();
        const auto state_grad = [&](size_t k) {  // the gradient reaching h_n / c_n, or zeros (a fresh buffer)
          return k < grads.size() && grads[k].defined() ? grads[k].to(dtype).contiguous().clone()
                                                        : zeros({n.batch, n.hidden}, dtype, device);
        };
        const Tensor dy = grads[0].defined() ? grads[0].to(dtype).contiguous() : Tensor();
        const Tensor dx = empty({n.steps, n.batch, n.gh()}, dtype, device);
        const Tensor dhp = gru ? empty({n.steps, n.batch, n.gh()}, dtype, device) : dx;
        Tensor dh = state_grad(1), dh_prev = empty({n.batch, n.hidden}, dtype, device);
        Tensor dc = lstm ? state_grad(2) : Tensor(), dc_prev = lstm ? empty_like(dc) : Tensor();
        for (int64_t s = n.steps - 1; s >= 0; --s) {
          const int64_t t = n.step(s, reverse), prev = reverse ? t + 1 : t - 1;
          const void* h_prev = s == 0 ? h_first.data_ptr() : element(h_seq, prev * bh);
          const void* c_prev = !lstm ? nullptr : s == 0 ? c_first.data_ptr() : element(c_seq, prev * bh);
          HG_KERNEL(device, rnn_cell_backward, cell, optional_element(acts, t * n.batch * n.saved * n.hidden),
                    element(h_seq, t * bh), optional_element(c_seq, t * bh), h_prev, c_prev, dh.data_ptr(),
                    optional_element(dy, t * bh), lstm ? dc.data_ptr() : nullptr, element(dx, t * n.batch * n.gh()),
                    gru ? element(dhp, t * n.batch * n.gh()) : nullptr, lstm ? dc_prev.data_ptr() : nullptr,
                    gru ? dh_prev.data_ptr() : nullptr, n.batch, n.hidden, dtype);
          if (s > 0 || needs[3]) {  // dh_prev (+)= dhp_t W_hh
            HG_KERNEL(device, gemm, false, false, n.batch, n.hidden, n.gh(), 1.0, element(dhp, t * n.batch * n.gh()),
                      n.gh(), weight.data_ptr(), n.hidden, gru ? 1.0 : 0.0, dh_prev.data_ptr(), n.hidden, dtype);
          }
          std::swap(dh, dh_prev);
          if (lstm) std::swap(dc, dc_prev);
        }
        Tensor dw, db;
        if (needs[1]) {  // dW_hh = sum_t dhp_t^T h_prev_t: the steps whose h_prev is an output, then h0's step
          dw = empty({n.gh(), n.hidden}, dtype, device);
          const int64_t rows = (n.steps - 1) * n.batch, first = reverse ? 0 : 1, h0_step = reverse ? n.steps - 1 : 0;
          if (rows > 0) {
            HG_KERNEL(device, gemm, true, false, n.gh(), n.hidden, rows, 1.0, element(dhp, first * n.batch * n.gh()),
                      n.gh(), element(h_seq, (reverse ? 1 : 0) * bh), n.hidden, 0.0, dw.data_ptr(), n.hidden, dtype);
          }
          HG_KERNEL(device, gemm, true, false, n.gh(), n.hidden, n.batch, 1.0, element(dhp, h0_step * n.batch * n.gh()),
                    n.gh(), h_first.data_ptr(), n.hidden, rows > 0 ? 1.0 : 0.0, dw.data_ptr(), n.hidden, dtype);
        }
        if (needs[2]) {
          NoGradGuard no_grad;
          db = sum(dhp.reshape({n.steps * n.batch, n.gh()}), {0});
        }
        return std::vector<Tensor>{needs[0] ? dx : Tensor(), dw, db, needs[3] ? dh : Tensor(),
                                   needs[4] && lstm ? dc : Tensor()};
      });
  return r;
}

}  // namespace hg
