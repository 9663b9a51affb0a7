#include "samples/zoo/sbm_graph.h"

#include <cmath>

#include "data/sampler.h"
#include "kernels/error.h"

namespace hg::samples::zoo {

namespace {

// Uniform doubles in [0, 1) and standard normals from a splitmix64 stream.
class Stream {
 public:
  explicit Stream(uint64_t seed) : state_(seed) {}
  double uniform() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return double(data::mix64(state_) >> 11) * 0x1.0p-53;
  }
  double normal() {  // Box-Muller
    const double u = 1.0 - uniform(), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }

 private:
  uint64_t state_;
};

}  // namespace

Graph make_sbm_graph(const SbmOptions& o) {
  HG_INPUT_CHECK(o.communities >= 2 && o.nodes >= 2 * o.communities && o.features >= 1, "[sbm graph] ", o.nodes,
                 " nodes, ", o.communities, " communities, ", o.features,
                 " features; expected at least 2 communities, 2 nodes per community and 1 feature");
  const double per_community = double(o.nodes) / double(o.communities);
  const double p_in = o.degree_in / per_community, p_out = o.degree_out / (double(o.nodes) - per_community);
  HG_INPUT_CHECK(p_in >= 0 && p_in <= 1 && p_out >= 0 && p_out <= 1, "[sbm graph] edge probabilities ", p_in,
                 " (within) and ", p_out, " (between); expected both in [0, 1]");
  Graph g{o.nodes,
          o.communities,
          o.features,
          std::vector<int64_t>(size_t(o.nodes)),
          std::vector<float>(size_t(o.nodes * o.features)),
          {},
          {}};
  Stream stream(data::mix64(o.seed ^ 0x5b3c0ffee));
  for (int64_t i = 0; i < o.nodes; ++i) g.labels[size_t(i)] = i % o.communities;
  // The communities' centres: random directions of length `signal`.
  std::vector<double> centres(size_t(o.communities * o.features));
  for (int64_t k = 0; k < o.communities; ++k) {
    double norm = 0.0;
    for (int64_t f = 0; f < o.features; ++f) {
      const double v = stream.normal();
      centres[size_t(k * o.features + f)] = v;
      norm += v * v;
    }
    for (int64_t f = 0; f < o.features; ++f) centres[size_t(k * o.features + f)] *= o.signal / std::sqrt(norm);
  }
  for (int64_t i = 0; i < o.nodes; ++i)
    for (int64_t f = 0; f < o.features; ++f)
      g.x[size_t(i * o.features + f)] = float(centres[size_t(g.labels[size_t(i)] * o.features + f)] + stream.normal());
  for (int64_t i = 0; i < o.nodes; ++i)
    for (int64_t j = i + 1; j < o.nodes; ++j)
      if (stream.uniform() < (g.labels[size_t(i)] == g.labels[size_t(j)] ? p_in : p_out)) {
        g.src.insert(g.src.end(), {i, j});
        g.dst.insert(g.dst.end(), {j, i});
      }
  return g;
}

NodeSplits split_nodes(const Graph& g, int64_t per_class, int64_t validation, uint64_t seed) {
  HG_INPUT_CHECK(per_class >= 1 && validation >= 1 && per_class * g.communities + validation < g.nodes, "[sbm graph] ",
                 per_class, " training nodes per class and ", validation, " validation nodes of ", g.nodes,
                 "; expected both >= 1 and some nodes left for test");
  NodeSplits s;
  std::vector<int64_t> taken(size_t(g.communities), 0);
  for (int64_t node : data::seeded_permutation(g.nodes, seed)) {
    int64_t& count = taken[size_t(g.labels[size_t(node)])];
    if (count < per_class) {
      s.train.push_back(node);
      ++count;
    } else if (int64_t(s.validation.size()) < validation) {
      s.validation.push_back(node);
    } else {
      s.test.push_back(node);
    }
  }
  return s;
}

double edge_homophily(const Graph& g) {
  int64_t same = 0;
  for (size_t e = 0; e < g.src.size(); ++e) same += g.labels[size_t(g.src[e])] == g.labels[size_t(g.dst[e])];
  return g.src.empty() ? 0.0 : double(same) / double(g.src.size());
}

}  // namespace hg::samples::zoo
