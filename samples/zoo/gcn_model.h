#pragma once
// gcn's model: a two-layer graph convolutional network (Kipf & Welling 2017) with PyTorch Geometric's
// GCNConv names (lin.weight, bias), so its state dict is PyG's:
//
//   GCNConv: x' = D^-1/2 (A + I) D^-1/2 (x W^T) + b
//   GCN:     logits = conv2(relu(conv1(x)))                       hidden width w (0: 32)
//
// The propagation is message passing over the edge list: each edge (s -> d) carries row s of x W^T scaled
// by 1 / sqrt(deg(s) deg(d)) (degrees counting the self loop), and index_add sums the messages into row d.
#include <memory>
#include <vector>

#include "layers/nn.h"

namespace hg::samples::zoo {

// The edges of A + I with their normalisation: src, dst [E + n] i64 and weight [E + n, 1] f64 1/sqrt(deg deg)
// (GCNConv casts it to the features' dtype; cast it once beforehand to save that).
struct NormalizedEdges {
  Tensor src, dst, weight;
};
// From both directions of every undirected edge (no self loops; they are added), on the CPU.
NormalizedEdges normalized_edges(const std::vector<int64_t>& src, const std::vector<int64_t>& dst, int64_t nodes);

class GCNConv : public nn::Module {
 public:
  GCNConv(int64_t in_features, int64_t out_features);  // lin: glorot (xavier_uniform_), bias: zeros
  // x [n, in] -> [n, out]
  Tensor forward(const Tensor& x, const NormalizedEdges& edges);
  std::shared_ptr<nn::Linear> lin;
  Tensor bias;
};

class GCN : public nn::Module {
 public:
  GCN(int64_t features, int64_t classes, int64_t width);
  Tensor forward(const Tensor& x, const NormalizedEdges& edges);  // logits [n, classes]
  std::shared_ptr<GCNConv> conv1, conv2;
};

}  // namespace hg::samples::zoo
