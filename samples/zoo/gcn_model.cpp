#include "samples/zoo/gcn_model.h"

#include <cmath>

namespace hg::samples::zoo {

NormalizedEdges normalized_edges(const std::vector<int64_t>& src, const std::vector<int64_t>& dst, int64_t nodes) {
  HG_CHECK(src.size() == dst.size(), "[gcn] ", src.size(), " edge sources and ", dst.size(), " destinations");
  std::vector<int64_t> s(src), d(dst);
  for (int64_t i = 0; i < nodes; ++i) s.push_back(i), d.push_back(i);  // the self loops of A + I
  std::vector<double> degree(size_t(nodes), 0.0);
  for (int64_t node : d) {
    HG_CHECK(node >= 0 && node < nodes, "[gcn] edge to node ", node, " of ", nodes);
    degree[size_t(node)] += 1.0;
  }
  std::vector<double> weight(s.size());
  for (size_t e = 0; e < s.size(); ++e) {
    HG_CHECK(s[e] >= 0 && s[e] < nodes, "[gcn] edge from node ", s[e], " of ", nodes);
    weight[e] = 1.0 / std::sqrt(degree[size_t(s[e])] * degree[size_t(d[e])]);
  }
  const int64_t edges = int64_t(s.size());
  return {from_vector(s, {edges}), from_vector(d, {edges}), from_vector(weight, {edges, 1})};
}

GCNConv::GCNConv(int64_t in_features, int64_t out_features) {
  lin = register_module("lin", std::make_shared<nn::Linear>(in_features, out_features, false));
  nn::init::xavier_uniform_(lin->weight);
  bias = register_parameter("bias", zeros({out_features}));
}

Tensor GCNConv::forward(const Tensor& x, const NormalizedEdges& edges) {
  const Tensor h = (*lin)(x);
  const Tensor messages = index_select(h, 0, edges.src) * edges.weight.to(h.dtype());
  return index_add(zeros_like(h), 0, edges.dst, messages) + bias;
}

GCN::GCN(int64_t features, int64_t classes, int64_t width) {
  const int64_t w = width > 0 ? width : 32;
  conv1 = register_module("conv1", std::make_shared<GCNConv>(features, w));
  conv2 = register_module("conv2", std::make_shared<GCNConv>(w, classes));
}

Tensor GCN::forward(const Tensor& x, const NormalizedEdges& edges) {
  return conv2->forward(relu(conv1->forward(x, edges)), edges);
}

}  // namespace hg::samples::zoo
