#pragma once
// CapturedStep: a training step captured once into a CUDA graph and replayed (train/trainer.h CUDA
// GRAPHS). The first `warmup` steps from `first_step` run eagerly (lazy state: Adam moments, plan
// caches, workspaces, the allocator's pools); the next one is captured on the device's compute stream
// with its batches cloned into the graph's input tensors; every later step copies its batches into
// those tensors (device to device) and replays the graph: one cudaGraphLaunch per step.
// Refused with an hg::Error: a step that draws random numbers while captured (every replay would
// draw the same ones), and a batch whose fields differ in shape or dtype from the captured ones.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "data/data_loader.h"
#include "engine/device.h"

namespace hg::cuda {
class Graph;
}

namespace hg::train {

class CapturedStep {
 public:
  CapturedStep(const Device& device, int64_t first_step, int64_t warmup);
  ~CapturedStep();
  CapturedStep(const CapturedStep&) = delete;
  CapturedStep& operator=(const CapturedStep&) = delete;

  // The step over `batches`: body(batches, /*eager=*/true) during the warm-up; captured as
  // body(the graph's inputs, false) (with grad mode on) at the first step after it; replayed since.
  using Body = std::function<void(const std::vector<data::Batch>& batches, bool eager)>;
  void run(int64_t step, const std::vector<data::Batch>& batches, const Body& body);

 private:
  // Copies `batches` into the graph's inputs, checking that they have the captured shapes.
  void copy_inputs(const std::vector<data::Batch>& batches);

  Device device_;
  int64_t first_step_, warmup_;
  std::unique_ptr<cuda::Graph> graph_;
  std::vector<data::Batch> inputs_;
};

}  // namespace hg::train
