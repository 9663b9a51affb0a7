#pragma once
// Parameter initialisers under PyTorch's names (torch.nn.init), in place, drawn from the default
// generator; each runs under NoGradGuard, so it may rewrite a parameter. The fans of a weight
// [out, in, k...] are PyTorch's: fan_in = in * prod(k), fan_out = out * prod(k) (rank >= 2).
#include <string>
#include <utility>

#include "engine/tensor.h"

namespace hg::nn::init {

// ---- plain distributions ----
void normal_(const Tensor& t, double mean, double std);
void uniform_(const Tensor& t, double low, double high);
void constant_(const Tensor& t, double value);
inline void zeros_(const Tensor& t) { constant_(t, 0.0); }
inline void ones_(const Tensor& t) { constant_(t, 1.0); }
// N(mean, std) conditioned on [a, b] (inverse-CDF sampling, as PyTorch's; a < b).
void trunc_normal_(const Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0);

// ---- scaled by the fans (PyTorch's torch.nn.init) ----
enum class FanMode { fan_in, fan_out };
// {fan_in, fan_out} of t (rank >= 2, else an error naming the shape).
std::pair<int64_t, int64_t> fans(const Tensor& t);
// The recommended gain of a nonlinearity: "linear", "conv1d", "conv2d", "conv_transpose2d", "sigmoid"
// -> 1; "tanh" -> 5/3; "relu" -> sqrt(2); "leaky_relu" -> sqrt(2 / (1 + param^2)) (param: the negative
// slope, 0.01 when negative: PyTorch's None); "selu" -> 3/4. Another name is an error listing these.
double calculate_gain(const std::string& nonlinearity, double param = -1.0);
// U(-b, b), b = gain sqrt(6 / (fan_in + fan_out)); and N(0, gain^2 2 / (fan_in + fan_out)).
void xavier_uniform_(const Tensor& t, double gain = 1.0);
void xavier_normal_(const Tensor& t, double gain = 1.0);
// std = calculate_gain(nonlinearity, a) / sqrt(fan): U(-sqrt(3) std, sqrt(3) std), or N(0, std^2).
void kaiming_uniform_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                      const std::string& nonlinearity = "leaky_relu");
void kaiming_normal_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                     const std::string& nonlinearity = "leaky_relu");
// A (semi-)orthogonal matrix times gain: t seen as [rows = size(0), cols = numel / rows] has orthonormal
// rows (rows <= cols) or columns. The Q of a QR of a normal draw, signs fixed by R's diagonal (PyTorch's
// method), computed in double on the host.
void orthogonal_(const Tensor& t, double gain = 1.0);

}  // namespace hg::nn::init
