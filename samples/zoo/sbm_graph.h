#pragma once
// gcn's data: a graph drawn from a stochastic block model (Holland et al. 1983). Nodes belong to one of K
// communities; an edge joins two nodes of one community with probability degree_in / (n / K) and of two
// communities with probability degree_out / (n - n / K), so a node has about degree_in + degree_out
// neighbours, most in its own community. Each node's features are its community's centre (a random unit
// vector times `signal`) plus N(0, 1) noise per feature: too noisy to classify a node alone, and clear
// once it is averaged with its neighbours -- what a graph network is for.
//
// Every draw comes from a splitmix64 stream of the seed (no std:: distribution, whose algorithms differ
// between standard libraries), so a seed gives the same graph everywhere.
#include <cstdint>
#include <vector>

namespace hg::samples::zoo {

struct SbmOptions {
  int64_t nodes = 2000, communities = 5, features = 16;
  double degree_in = 8.0, degree_out = 2.0, signal = 1.0;
  uint64_t seed = 1;
};

struct Graph {
  int64_t nodes = 0, communities = 0, features = 0;
  std::vector<int64_t> labels;    // [nodes]: the community of each node, node i in community i % K
  std::vector<float> x;           // [nodes, features]
  std::vector<int64_t> src, dst;  // [edges]: both directions of every undirected edge, no self loops
};

// An hg::Error when nodes < 2 * communities, communities < 2, features < 1, or a probability leaves [0, 1].
Graph make_sbm_graph(const SbmOptions& options);

// The semi-supervised split of Kipf & Welling's benchmarks (Planetoid): `per_class` labelled training nodes
// of each community, then `validation` nodes, the rest for test; chosen by a seeded permutation.
struct NodeSplits {
  std::vector<int64_t> train, validation, test;
};
NodeSplits split_nodes(const Graph& graph, int64_t per_class, int64_t validation, uint64_t seed);

// The share of each node's neighbours in its own community (edge homophily), for the log.
double edge_homophily(const Graph& graph);

}  // namespace hg::samples::zoo
