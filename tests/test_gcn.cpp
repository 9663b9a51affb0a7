// gcn's pieces (samples/zoo/sbm_graph.h, gcn_model.h): the stochastic block model's graph (symmetric, no
// self loops, its degrees and homophily near the asked ones, the same for a seed), the Planetoid split, and
// GCNConv's message passing against the dense formula D^-1/2 (A + I) D^-1/2 X W^T + b, forward and
// gradients, in float64 on fresh random graphs.
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "engine/random.h"
#include "samples/zoo/gcn_model.h"
#include "samples/zoo/sbm_graph.h"
#include "support/check_error.h"
#include "support/test_seed.h"

using namespace hg;
using namespace hg::samples::zoo;

TEST_CASE("sbm graph: symmetric, no self loops, degrees and homophily as asked, seeded") {
  const uint64_t seed = testing::fresh_seed();
  const Graph g = make_sbm_graph(SbmOptions{.nodes = 1000, .communities = 4, .features = 8, .seed = seed});
  REQUIRE(g.src.size() == g.dst.size());
  std::set<std::pair<int64_t, int64_t>> edges;
  for (size_t e = 0; e < g.src.size(); ++e) {
    REQUIRE(g.src[e] != g.dst[e]);
    edges.insert({g.src[e], g.dst[e]});
  }
  CHECK(edges.size() == g.src.size());  // no edge twice
  for (const auto& [s, d] : edges) REQUIRE(edges.count({d, s}) == 1);
  const double mean_degree = double(g.src.size()) / double(g.nodes);
  CHECK(mean_degree > 9.0);  // 8 within + 2 between expected
  CHECK(mean_degree < 11.0);
  CHECK(edge_homophily(g) > 0.75);
  CHECK(edge_homophily(g) < 0.85);
  for (int64_t i = 0; i < g.nodes; ++i) REQUIRE(g.labels[size_t(i)] == i % 4);
  const Graph again = make_sbm_graph(SbmOptions{.nodes = 1000, .communities = 4, .features = 8, .seed = seed});
  CHECK(again.src == g.src);
  CHECK(again.x == g.x);
  const Graph other = make_sbm_graph(SbmOptions{.nodes = 1000, .communities = 4, .features = 8, .seed = seed + 1});
  CHECK(other.src != g.src);
  CHECK_ERROR(make_sbm_graph(SbmOptions{.nodes = 5, .communities = 3}), "expected at least 2 communities, 2 nodes");
  CHECK_ERROR(make_sbm_graph(SbmOptions{.nodes = 20, .communities = 2, .degree_in = 50}), "expected both in [0, 1]");

  const NodeSplits s = split_nodes(g, 20, 100, seed);
  CHECK(s.train.size() == 80);
  CHECK(s.validation.size() == 100);
  CHECK(s.train.size() + s.validation.size() + s.test.size() == size_t(g.nodes));
  std::vector<int64_t> per_class(4, 0);
  for (int64_t node : s.train) ++per_class[size_t(g.labels[size_t(node)])];
  CHECK(per_class == std::vector<int64_t>{20, 20, 20, 20});
  std::set<int64_t> all(s.train.begin(), s.train.end());
  all.insert(s.validation.begin(), s.validation.end());
  all.insert(s.test.begin(), s.test.end());
  CHECK(all.size() == size_t(g.nodes));
  CHECK_ERROR(split_nodes(g, 200, 300, seed), "expected both >= 1 and some nodes left for test");
}

TEST_CASE("GCNConv's message passing equals the dense normalised adjacency, forward and gradients (f64)") {
  manual_seed(testing::fresh_seed());
  const Graph g = make_sbm_graph(SbmOptions{
      .nodes = 40, .communities = 2, .features = 5, .degree_in = 4, .degree_out = 1, .seed = testing::fresh_seed()});
  const int64_t n = g.nodes;
  // Dense A + I and D^-1/2 (A + I) D^-1/2.
  std::vector<double> a(size_t(n * n), 0.0), degree(size_t(n), 1.0);
  for (int64_t i = 0; i < n; ++i) a[size_t(i * n + i)] = 1.0;
  for (size_t e = 0; e < g.src.size(); ++e) {
    a[size_t(g.dst[e] * n + g.src[e])] = 1.0;
    degree[size_t(g.dst[e])] += 1.0;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) a[size_t(i * n + j)] /= std::sqrt(degree[size_t(i)] * degree[size_t(j)]);
  const Tensor adjacency = from_vector(a, {n, n});

  GCNConv conv(5, 3);
  conv.to(DType::f64);
  nn::init::normal_(conv.bias, 0.0, 1.0);  // zeros at construction: make it count
  const NormalizedEdges e = normalized_edges(g.src, g.dst, n);
  const NormalizedEdges& edges = e;
  const Tensor x = randn({n, 5}, DType::f64).requires_grad_(true);
  const Tensor r = randn({n, 3}, DType::f64);  // a fresh direction for the gradients

  const Tensor ours = conv.forward(x, edges);
  sum(ours * r).backward();
  const std::vector<double> dx = x.grad().to_vector<double>(), dw = conv.lin->weight.grad().to_vector<double>(),
                            db = conv.bias.grad().to_vector<double>();
  x.set_grad(Tensor());
  conv.zero_grad();
  const Tensor dense = matmul(adjacency, matmul(x, transpose(conv.lin->weight, 0, 1))) + conv.bias;
  sum(dense * r).backward();
  const auto close = [](const std::vector<double>& p, const std::vector<double>& q) {
    if (p.size() != q.size()) return false;
    for (size_t i = 0; i < p.size(); ++i)
      if (std::abs(p[i] - q[i]) > 1e-12 * (1.0 + std::abs(q[i]))) return false;
    return true;
  };
  CHECK(close(ours.to_vector<double>(), dense.to_vector<double>()));
  CHECK(close(dx, x.grad().to_vector<double>()));
  CHECK(close(dw, conv.lin->weight.grad().to_vector<double>()));
  CHECK(close(db, conv.bias.grad().to_vector<double>()));
  CHECK_ERROR(normalized_edges({0, 1}, {1}, 2), "[gcn] 2 edge sources and 1 destinations");
  CHECK_ERROR(normalized_edges({0}, {7}, 2), "[gcn] edge to node 7 of 2");
}
