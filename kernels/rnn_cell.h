#pragma once
// The recurrent cell kinds of the rnn_cell kernels (kernels/kernels.h) and the recurrence op, with their
// sizes: G gates per hidden unit (PyTorch's order: LSTM i, f, g, o; GRU r, z, n) and S values per unit that
// the forward saves for the backward. The per-unit math: kernels/rnn_cell_math.h.
#include <cstdint>

#include "kernels/error.h"
#include "kernels/host_device.h"

namespace hg::kernels {

enum class RnnCell : uint8_t { RnnTanh, RnnRelu, Lstm, Gru };

// Gates per hidden unit (the G of the [batch, G * hidden] projections) and saved values per unit.
HG_HOST_DEVICE constexpr int rnn_gates(RnnCell cell) {
  return cell == RnnCell::Lstm ? 4 : cell == RnnCell::Gru ? 3 : 1;
}
HG_HOST_DEVICE constexpr int rnn_saved(RnnCell cell) { return cell == RnnCell::Lstm || cell == RnnCell::Gru ? 4 : 0; }
inline const char* rnn_cell_name(RnnCell cell) {
  constexpr const char* kNames[] = {"rnn_tanh", "rnn_relu", "lstm", "gru"};
  return kNames[int(cell)];
}

// Calls body.template operator()<kCell>() for the run-time cell (the kernels' dispatch).
template <class F>
void with_rnn_cell(RnnCell cell, F&& body) {
  switch (cell) {
    case RnnCell::RnnTanh:
      return body.template operator()<RnnCell::RnnTanh>();
    case RnnCell::RnnRelu:
      return body.template operator()<RnnCell::RnnRelu>();
    case RnnCell::Lstm:
      return body.template operator()<RnnCell::Lstm>();
    case RnnCell::Gru:
      return body.template operator()<RnnCell::Gru>();
  }
  HG_CHECK(false, "[rnn_cell] unknown cell kind ", int(cell));
}

}  // namespace hg::kernels
