// zoo --model gcn: a graph convolutional network classifies the nodes of a generated stochastic-block-model
// graph from 20 labelled nodes per community (samples/zoo/sbm_graph.h, gcn_model.h). Every step propagates
// over the whole graph; the loss reads the batch's labelled nodes.
#include "samples/zoo/gcn.h"

#include <algorithm>
#include <cstdio>

#include "samples/zoo/gcn_model.h"
#include "samples/zoo/sbm_graph.h"
#include "samples/zoo/zoo_training.h"
#include "train/precision.h"

namespace hg::samples::zoo {

namespace {

constexpr int64_t kLabelledPerClass = 20;  // Planetoid's semi-supervised setting

// The labelled training nodes: "node" i64 [] (an index into the graph) and its "label" i64 [].
class LabelledNodes : public data::Dataset {
 public:
  LabelledNodes(std::vector<int64_t> nodes, const std::vector<int64_t>& labels) : nodes_(std::move(nodes)) {
    for (int64_t node : nodes_) labels_.push_back(labels[size_t(node)]);
  }
  int64_t size() const override { return int64_t(nodes_.size()); }
  std::vector<data::Field> fields() const override { return {{"node", DType::i64, {}}, {"label", DType::i64, {}}}; }
  void get(int64_t index, const std::vector<void*>& out) const override {
    *static_cast<int64_t*>(out[0]) = nodes_[size_t(index)];
    *static_cast<int64_t*>(out[1]) = labels_[size_t(index)];
  }

 private:
  std::vector<int64_t> nodes_, labels_;
};

// The share of `nodes` whose largest logit is their community.
double accuracy(const Tensor& logits, const std::vector<int64_t>& nodes, const std::vector<int64_t>& labels) {
  const std::vector<int64_t> predicted = max(logits, 1).second.to(kCPU).to_vector<int64_t>();
  int64_t right = 0;
  for (int64_t node : nodes) right += predicted[size_t(node)] == labels[size_t(node)];
  return nodes.empty() ? 0.0 : double(right) / double(nodes.size());
}

}  // namespace

int train_gcn(const ZooConfig& c) {
  const RunSetup run = start_run(c);
  const Device& device = run.device;
  const DType dtype = run.dtype;

  const Graph graph = app::or_usage_error(
      kProgram, "--nodes", [&] { return make_sbm_graph(SbmOptions{.nodes = c.nodes, .seed = uint64_t(c.seed)}); });
  const NodeSplits splits = app::or_usage_error(
      kProgram, "--nodes " + std::to_string(c.nodes) + ", --validation " + std::to_string(c.validation),
      [&] { return split_nodes(graph, kLabelledPerClass, c.validation, uint64_t(c.seed) + 1); });
  const auto train_set = std::make_shared<LabelledNodes>(splits.train, graph.labels);
  check_batch_fits(c, train_set->size(), "labelled nodes");
  const Tensor features = from_vector(graph.x, {graph.nodes, graph.features});
  const NormalizedEdges cpu_edges = normalized_edges(graph.src, graph.dst, graph.nodes);
  const NormalizedEdges edges{cpu_edges.src.to(device), cpu_edges.dst.to(device),
                              cpu_edges.weight.to(dtype).to(device)};
  const Tensor x = features.to(device).to(dtype);

  const auto model = std::make_shared<GCN>(graph.features, graph.communities, c.width);
  const std::unique_ptr<optim::LocalOptimizer> optimizer = prepare_model(*model, c, run);
  data::DataLoader loader(train_set, loader_options(c, run.threads.workers, device));
  const int64_t per_epoch = loader.batches_per_epoch(), steps = planned_steps(c, per_epoch);
  BatchRecorder recorder(c.save_batches, {"node", "label"});
  recorder.add("features", features);
  recorder.add("edge_src", cpu_edges.src);
  recorder.add("edge_dst", cpu_edges.dst);
  recorder.add("labels", from_vector(graph.labels, {graph.nodes}));
  recorder.add("train_nodes", from_vector(splits.train, {int64_t(splits.train.size())}));
  recorder.add("validation_nodes", from_vector(splits.validation, {int64_t(splits.validation.size())}));
  recorder.add("test_nodes", from_vector(splits.test, {int64_t(splits.test.size())}));
  train::Trainer trainer(
      *model, *optimizer, loader,
      [&](const data::Batch& b) {
        recorder.record(b);
        return cross_entropy(index_select(model->forward(x, edges), 0, b[0]), b[1]);
      },
      trainer_options(c, steps, per_epoch, "val_accuracy", train::StopMode::max));
  set_schedule(trainer, c, steps);
  set_loss_scale(trainer, run);
  trainer.evaluator([&] {
    const double share = accuracy(model->forward(x, edges), splits.validation, graph.labels);
    return train::Evaluation{share,
                             share_text("validation", "accuracy", share, int64_t(splits.validation.size()), "nodes")};
  });

  std::printf(
      "zoo gcn: a %lld-node stochastic block model graph, %lld communities, %zu edges (%.0f%% within a community), "
      "%lld features | %zu labelled nodes (%lld steps of %lld), %zu validation, %zu test | on %s in %s | %.1fk "
      "parameters | %s lr %g wd %g | %s\n",
      (long long)graph.nodes, (long long)graph.communities, graph.src.size() / 2, 100.0 * edge_homophily(graph),
      (long long)graph.features, splits.train.size(), (long long)steps, (long long)c.batch, splits.validation.size(),
      splits.test.size(), device.str().c_str(), train::precision_name(dtype), double(model->parameter_count()) / 1e3,
      c.optimizer.c_str(), c.lr, c.weight_decay, run.threads.describe().c_str());
  trainer.fit();

  NoGradGuard no_grad;
  model->eval();
  const Tensor logits = model->forward(x, edges);
  std::printf("%s\n", share_text("test", "accuracy", accuracy(logits, splits.test, graph.labels),
                                 int64_t(splits.test.size()), "nodes")
                          .c_str());
  if (!c.save.empty()) trainer.save_model(c.save);
  recorder.save();
  return 0;
}

}  // namespace hg::samples::zoo
