#include "layers/recurrent.h"

#include <cmath>

#include "layers/init.h"

namespace hg::nn {

namespace {

// Every parameter U(-1/sqrt(hidden), 1/sqrt(hidden)), PyTorch's reset_parameters of RNNBase and RNNCellBase.
Tensor uniform_parameter(Module& module, const std::string& name, Shape shape, int64_t hidden) {
  const double bound = 1.0 / std::sqrt(double(hidden));
  Tensor t = module.register_parameter(name, empty(std::move(shape)));
  init::uniform_(t, -bound, bound);
  return t;
}

RnnCell rnn_nonlinearity(const char* type, const std::string& nonlinearity) {
  HG_CHECK(nonlinearity == "tanh" || nonlinearity == "relu", "[", type, "] unknown nonlinearity \"", nonlinearity,
           "\", expected \"tanh\" or \"relu\"");
  return nonlinearity == "tanh" ? RnnCell::RnnTanh : RnnCell::RnnRelu;
}

void check_sizes(const char* type, int64_t input_size, int64_t hidden_size) {
  HG_CHECK(input_size > 0 && hidden_size > 0, "[", type, "] expected input_size > 0 and hidden_size > 0, got ",
           input_size, " and ", hidden_size);
}

}  // namespace

// ---- RNNBase ----------------------------------------------------------------------------------

RNNBase::RNNBase(RnnCell cell_, const char* type, int64_t input_size_, int64_t hidden_size_, int64_t num_layers_,
                 bool bias_, bool batch_first_, double dropout_, bool bidirectional_)
    : cell(cell_),
      input_size(input_size_),
      hidden_size(hidden_size_),
      num_layers(num_layers_),
      bias(bias_),
      batch_first(batch_first_),
      dropout(dropout_),
      bidirectional(bidirectional_),
      type_(type) {
  check_sizes(type, input_size, hidden_size);
  HG_CHECK(num_layers >= 1, "[", type, "] expected num_layers >= 1, got ", num_layers);
  HG_CHECK(dropout >= 0.0 && dropout <= 1.0, "[", type, "] expected dropout in [0, 1], got ", dropout);
  const int64_t gates = kernels::rnn_gates(cell) * hidden_size;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    const int64_t layer_input = layer == 0 ? input_size : hidden_size * directions();
    for (int64_t direction = 0; direction < directions(); ++direction) {
      const std::string suffix = "_l" + std::to_string(layer) + (direction == 1 ? "_reverse" : "");
      LayerWeights w;
      w.w_ih = uniform_parameter(*this, "weight_ih" + suffix, {gates, layer_input}, hidden_size);
      w.w_hh = uniform_parameter(*this, "weight_hh" + suffix, {gates, hidden_size}, hidden_size);
      if (bias) {
        w.b_ih = uniform_parameter(*this, "bias_ih" + suffix, {gates}, hidden_size);
        w.b_hh = uniform_parameter(*this, "bias_hh" + suffix, {gates}, hidden_size);
      }
      all_weights.push_back(w);
    }
  }
}

std::string RNNBase::extra_repr() const {
  std::string s = detail::concat(input_size, ", ", hidden_size);
  if (num_layers != 1) s += detail::concat(", num_layers=", num_layers);
  if (!bias) s += ", bias=False";
  if (batch_first) s += ", batch_first=True";
  if (dropout != 0.0) s += ", dropout=" + repr_float(dropout);
  if (bidirectional) s += ", bidirectional=True";
  return s;
}

Tensor RNNBase::checked_state(const Tensor& state, const char* what, int64_t batch, bool batched) const {
  if (!state.defined()) return state;
  const int64_t layers = num_layers * directions();
  const Shape expected = batched ? Shape{layers, batch, hidden_size} : Shape{layers, hidden_size};
  HG_CHECK(state.shape() == expected, "[", type_, "] expected ", what, " of shape ", shape_str(expected),
           " (num_layers * num_directions, ", batched ? "batch, " : "", "hidden_size), got ", state.describe());
  return batched ? state : state.unsqueeze(1);
}

RNNOutput RNNBase::run(const Tensor& input, const Tensor& h0, const Tensor& c0) {
  HG_CHECK(input.defined() && (input.dim() == 3 || input.dim() == 2) && input.size(-1) == input_size, "[", type_,
           "] expected input ", batch_first ? "[N, T, " : "[T, N, ", input_size, "] or unbatched [T, ", input_size,
           "], got ", input.defined() ? input.describe() : std::string("an undefined tensor"));
  const bool batched = input.dim() == 3;
  Tensor x = !batched ? input.unsqueeze(1) : batch_first ? input.transpose(0, 1) : input;  // [T, N, input_size]
  const int64_t batch = x.size(1), layers = num_layers * directions();
  const Tensor h_init = checked_state(h0, "h0", batch, batched), c_init = checked_state(c0, "c0", batch, batched);
  std::vector<Tensor> h_n, c_n;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    std::vector<Tensor> outputs;
    for (int64_t direction = 0; direction < directions(); ++direction) {
      const int64_t k = layer * directions() + direction;
      const LayerWeights& w = all_weights[size_t(k)];
      const Tensor projected = linear(x, w.w_ih, w.b_ih);  // [T, N, G H]: one GEMM over the sequence
      const Recurrence r =
          recurrence(cell, projected, w.w_hh, w.b_hh, h_init.defined() ? h_init.select(0, k) : Tensor(),
                     c_init.defined() ? c_init.select(0, k) : Tensor(), direction == 1);
      outputs.push_back(r.output);
      h_n.push_back(r.h_n);
      if (r.c_n.defined()) c_n.push_back(r.c_n);
    }
    x = outputs.size() == 2 ? cat(outputs, 2) : outputs[0];
    if (dropout > 0.0 && is_training() && layer + 1 < num_layers)  // p = 1 drops everything (PyTorch allows it)
      x = dropout < 1.0 ? hg::dropout(x, dropout) : zeros_like(x);
  }
  RNNOutput out{x, stack(h_n, 0), c_n.empty() ? Tensor() : stack(c_n, 0)};
  HG_CHECK(out.h_n.size(0) == layers, "[", type_, "] internal: ", out.h_n.size(0), " states for ", layers, " layers");
  if (!batched) {
    out.output = out.output.squeeze(1);
    out.h_n = out.h_n.squeeze(1);
    if (out.c_n.defined()) out.c_n = out.c_n.squeeze(1);
  } else if (batch_first) {
    out.output = out.output.transpose(0, 1);
  }
  return out;
}

RNN::RNN(const RNNOptions& o)
    : RNNBase(rnn_nonlinearity("RNN", o.nonlinearity()), "RNN", o.input_size(), o.hidden_size(), o.num_layers(),
              o.bias(), o.batch_first(), o.dropout(), o.bidirectional()),
      options(o) {}

RNNOutput RNN::forward(const Tensor& input, const Tensor& h0) {
  ModuleScope scope(*this);
  return run(input, h0, Tensor());
}

LSTM::LSTM(const LSTMOptions& o)
    : RNNBase(RnnCell::Lstm, "LSTM", o.input_size(), o.hidden_size(), o.num_layers(), o.bias(), o.batch_first(),
              o.dropout(), o.bidirectional()),
      options(o) {}

RNNOutput LSTM::forward(const Tensor& input, const Tensor& h0, const Tensor& c0) {
  ModuleScope scope(*this);
  HG_CHECK(h0.defined() == c0.defined(), "[LSTM] expected h0 and c0 together (or neither), got only ",
           h0.defined() ? "h0" : "c0");
  return run(input, h0, c0);
}

GRU::GRU(const GRUOptions& o)
    : RNNBase(RnnCell::Gru, "GRU", o.input_size(), o.hidden_size(), o.num_layers(), o.bias(), o.batch_first(),
              o.dropout(), o.bidirectional()),
      options(o) {}

RNNOutput GRU::forward(const Tensor& input, const Tensor& h0) {
  ModuleScope scope(*this);
  return run(input, h0, Tensor());
}

// ---- cells ------------------------------------------------------------------------------------

RNNCellBase::RNNCellBase(RnnCell cell_, const char* type, int64_t input_size_, int64_t hidden_size_, bool bias_)
    : cell(cell_), input_size(input_size_), hidden_size(hidden_size_), bias(bias_), type_(type) {
  check_sizes(type, input_size, hidden_size);
  const int64_t gates = kernels::rnn_gates(cell) * hidden_size;
  weight_ih = uniform_parameter(*this, "weight_ih", {gates, input_size}, hidden_size);
  weight_hh = uniform_parameter(*this, "weight_hh", {gates, hidden_size}, hidden_size);
  if (bias) {
    bias_ih = uniform_parameter(*this, "bias_ih", {gates}, hidden_size);
    bias_hh = uniform_parameter(*this, "bias_hh", {gates}, hidden_size);
  }
}

std::string RNNCellBase::extra_repr() const {
  std::string s = detail::concat(input_size, ", ", hidden_size);
  if (!bias) s += ", bias=False";
  if (cell == RnnCell::RnnRelu) s += ", nonlinearity=relu";
  return s;
}

Recurrence RNNCellBase::step(const Tensor& input, const Tensor& hx, const Tensor& cx) {
  HG_CHECK(input.defined() && (input.dim() == 2 || input.dim() == 1) && input.size(-1) == input_size, "[", type_,
           "] expected input [N, ", input_size, "] or unbatched [", input_size, "], got ",
           input.defined() ? input.describe() : std::string("an undefined tensor"));
  const bool batched = input.dim() == 2;
  const Tensor x = batched ? input : input.unsqueeze(0);
  const Shape state_shape = batched ? Shape{x.size(0), hidden_size} : Shape{hidden_size};
  for (const auto& [state, what] : {std::pair{&hx, "hx"}, std::pair{&cx, "cx"}})
    HG_CHECK(!state->defined() || state->shape() == state_shape, "[", type_, "] expected ", what, " of shape ",
             shape_str(state_shape), " (the input is ", input.describe(), "), got ", state->describe());
  const auto as_batch = [&](const Tensor& t) { return !t.defined() || batched ? t : t.unsqueeze(0); };
  const Tensor projected = linear(x, weight_ih, bias_ih).unsqueeze(0);  // [1, N, G H]
  Recurrence r = recurrence(cell, projected, weight_hh, bias_hh, as_batch(hx), as_batch(cx));
  if (!batched) {
    r.h_n = r.h_n.squeeze(0);
    if (r.c_n.defined()) r.c_n = r.c_n.squeeze(0);
  }
  return r;
}

RNNCell::RNNCell(int64_t input_size_, int64_t hidden_size_, bool bias_, const std::string& nonlinearity)
    : RNNCellBase(rnn_nonlinearity("RNNCell", nonlinearity), "RNNCell", input_size_, hidden_size_, bias_) {}

Tensor RNNCell::forward(const Tensor& input, const Tensor& hx) {
  ModuleScope scope(*this);
  return step(input, hx, Tensor()).h_n;
}

LSTMCell::LSTMCell(int64_t input_size_, int64_t hidden_size_, bool bias_)
    : RNNCellBase(RnnCell::Lstm, "LSTMCell", input_size_, hidden_size_, bias_) {}

LSTMState LSTMCell::forward(const Tensor& input, const Tensor& hx, const Tensor& cx) {
  ModuleScope scope(*this);
  HG_CHECK(hx.defined() == cx.defined(), "[LSTMCell] expected hx and cx together (or neither), got only ",
           hx.defined() ? "hx" : "cx");
  const Recurrence r = step(input, hx, cx);
  return {r.h_n, r.c_n};
}

GRUCell::GRUCell(int64_t input_size_, int64_t hidden_size_, bool bias_)
    : RNNCellBase(RnnCell::Gru, "GRUCell", input_size_, hidden_size_, bias_) {}

Tensor GRUCell::forward(const Tensor& input, const Tensor& hx) {
  ModuleScope scope(*this);
  return step(input, hx, Tensor()).h_n;
}

}  // namespace hg::nn
