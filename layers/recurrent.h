#pragma once
// The recurrent layers, PyTorch's nn.RNN / LSTM / GRU and nn.RNNCell / LSTMCell / GRUCell: their
// constructor arguments, gate order (LSTM i, f, g, o; GRU r, z, n), parameter names (weight_ih_l0,
// weight_hh_l0, bias_ih_l0, bias_hh_l0, ..._reverse; the cells' weight_ih, weight_hh, bias_ih, bias_hh)
// and initialisation (every parameter U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))).
//
// Built on the recurrence op (engine/ops.h): per layer and direction, the input projection is one GEMM
// over the whole sequence, and each time step is one GEMM plus one fused pointwise gate kernel, forward
// and backward. A cell is one step of it. Dropout (training only) acts on each layer's output but the
// last, as PyTorch's. proj_size (LSTM projections) is not offered.
//
// Shapes, with D = 2 when bidirectional (else 1), L = num_layers, H = hidden_size:
//   input   [T, N, input_size]  ([N, T, input_size] when batch_first; unbatched: [T, input_size])
//   h0, c0  [D L, N, H]          (unbatched: [D L, H]; undefined: zeros)
//   output  [T, N, D H]          (batch_first: [N, T, D H]): the last layer's h_t, both directions side by side
//   h_n, c_n [D L, N, H]          each layer and direction's state after its last step
#include <string>
#include <vector>

#include "engine/ops.h"
#include "kernels/options.h"
#include "layers/module.h"

namespace hg::nn {

// The options every recurrent layer takes: RNNOptions(10, 20).num_layers(2).bidirectional(true).
#define HG_RECURRENT_OPTIONS(Options)                                                                      \
  Options(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {} \
  HG_OPTION(Options, int64_t, input_size, 0);                                                              \
  HG_OPTION(Options, int64_t, hidden_size, 0);                                                             \
  HG_OPTION(Options, int64_t, num_layers, 1);                                                              \
  HG_OPTION(Options, bool, bias, true);                                                                    \
  HG_OPTION(Options, bool, batch_first, false);                                                            \
  HG_OPTION(Options, double, dropout, 0.0);                                                                \
  HG_OPTION(Options, bool, bidirectional, false)

// RNN's activation: "tanh" (the default) or "relu".
struct RNNOptions {
  HG_RECURRENT_OPTIONS(RNNOptions);
  HG_OPTION(RNNOptions, std::string, nonlinearity, "tanh");
};
struct LSTMOptions {
  HG_RECURRENT_OPTIONS(LSTMOptions);
};
struct GRUOptions {
  HG_RECURRENT_OPTIONS(GRUOptions);
};

// What a multi-layer recurrent forward returns; c_n is undefined but for the LSTM.
struct RNNOutput {
  Tensor output;
  Tensor h_n;
  Tensor c_n;
};

// What RNN, LSTM and GRU share (PyTorch's RNNBase): the parameters of every layer and direction, the
// checks and the forward over the layers.
class RNNBase : public Module {
 public:
  std::string extra_repr() const override;

  // One layer and direction's parameters (b_ih / b_hh undefined without bias).
  struct LayerWeights {
    Tensor w_ih, w_hh, b_ih, b_hh;
  };
  // Index layer * D + direction, in PyTorch's registration order.
  std::vector<LayerWeights> all_weights;
  const RnnCell cell;
  const int64_t input_size, hidden_size, num_layers;
  const bool bias, batch_first;
  const double dropout;
  const bool bidirectional;

 protected:
  // `type`: the class name, for messages.
  RNNBase(RnnCell cell, const char* type, int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias,
          bool batch_first, double dropout, bool bidirectional);
  RNNOutput run(const Tensor& input, const Tensor& h0, const Tensor& c0);

 private:
  int64_t directions() const { return bidirectional ? 2 : 1; }
  // The initial state [D L, N, H] checked against the input ("h0" or "c0"): batched or not as the input.
  Tensor checked_state(const Tensor& state, const char* what, int64_t batch, bool batched) const;
  const char* type_;
};

class RNN : public RNNBase {
 public:
  explicit RNN(const RNNOptions& options);
  RNN(int64_t input_size, int64_t hidden_size) : RNN(RNNOptions(input_size, hidden_size)) {}
  // output and h_n (c_n undefined).
  RNNOutput forward(const Tensor& input, const Tensor& h0 = Tensor());
  const RNNOptions options;
};

class LSTM : public RNNBase {
 public:
  explicit LSTM(const LSTMOptions& options);
  LSTM(int64_t input_size, int64_t hidden_size) : LSTM(LSTMOptions(input_size, hidden_size)) {}
  // h0 and c0 are given together or not at all (PyTorch's (h_0, c_0) tuple).
  RNNOutput forward(const Tensor& input, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor());
  const LSTMOptions options;
};

class GRU : public RNNBase {
 public:
  explicit GRU(const GRUOptions& options);
  GRU(int64_t input_size, int64_t hidden_size) : GRU(GRUOptions(input_size, hidden_size)) {}
  RNNOutput forward(const Tensor& input, const Tensor& h0 = Tensor());
  const GRUOptions options;
};

// ---- cells: one time step ---------------------------------------------------------------------
// input [N, input_size] or unbatched [input_size]; hx (and cx) [N, H] or [H], undefined: zeros.

// What the cells share (PyTorch's RNNCellBase): weight_ih [G H, input], weight_hh [G H, H], bias_ih,
// bias_hh [G H].
class RNNCellBase : public Module {
 public:
  std::string extra_repr() const override;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
  const RnnCell cell;
  const int64_t input_size, hidden_size;
  const bool bias;

 protected:
  RNNCellBase(RnnCell cell, const char* type, int64_t input_size, int64_t hidden_size, bool bias);
  // h' (and c' for the LSTM cell) from one step.
  Recurrence step(const Tensor& input, const Tensor& hx, const Tensor& cx);

 private:
  const char* type_;
};

class RNNCell : public RNNCellBase {
 public:
  // nonlinearity "tanh" or "relu".
  RNNCell(int64_t input_size, int64_t hidden_size, bool bias = true, const std::string& nonlinearity = "tanh");
  Tensor forward(const Tensor& input, const Tensor& hx = Tensor());
};

struct LSTMState {
  Tensor h;
  Tensor c;
};

class LSTMCell : public RNNCellBase {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  // hx and cx are given together or not at all.
  LSTMState forward(const Tensor& input, const Tensor& hx = Tensor(), const Tensor& cx = Tensor());
};

class GRUCell : public RNNCellBase {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  Tensor forward(const Tensor& input, const Tensor& hx = Tensor());
};

}  // namespace hg::nn
