#pragma once
// Every element of a list of tensors (any device, a floating dtype), in order, as one float vector: what the
// training tests compare bit for bit between two runs.
#include <vector>

#include "engine/tensor.h"

namespace hg::testing {

inline std::vector<float> flat_values(const std::vector<Tensor>& tensors) {
  std::vector<float> out;
  for (const Tensor& t : tensors) {
    const std::vector<float> v = t.to(kCPU).to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

}  // namespace hg::testing
