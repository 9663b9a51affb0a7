// CapturedStep (train/captured_step.h): warm-up, capture and replay of a training step.
#include "train/captured_step.h"

#include "engine/autograd.h"
#include "engine/cuda/cuda_context.h"
#include "engine/cuda/cuda_graph.h"
#include "engine/profiler/profiler.h"
#include "engine/random.h"

namespace hg::train {
namespace {
constexpr const char* kWho = "[Trainer] cuda_graph:";
}

CapturedStep::CapturedStep(const Device& device, int64_t first_step, int64_t warmup)
    : device_(device), first_step_(first_step), warmup_(warmup), graph_(std::make_unique<cuda::Graph>()) {}

CapturedStep::~CapturedStep() = default;

void CapturedStep::run(int64_t step, const std::vector<data::Batch>& batches, const Body& body) {
  if (step - first_step_ < warmup_) {
    body(batches, /*eager=*/true);
    return;
  }
  NoGradGuard no_grad;
  if (!graph_->captured()) {
    profiler::ScopedRange capture_range("capture", profiler::Category::other);
    inputs_.clear();
    for (const data::Batch& batch : batches) {
      data::Batch copy = batch;
      for (Tensor& t : copy.tensors) t = t.clone();
      inputs_.push_back(std::move(copy));
    }
    const GeneratorState before = default_generator().state();
    graph_->capture(cuda::compute_stream(device_.index), [&] {
      GradModeGuard grad_mode(true);  // the step's forward records its graph for backward
      body(inputs_, /*eager=*/false);
    });
    HG_CHECK(default_generator().state() == before, kWho,
             " the step draws random numbers (dropout): every replay of the captured step would draw "
             "the same ones; expected a step without random ops (e.g. dropout 0)");
  } else {
    copy_inputs(batches);
  }
  profiler::ScopedRange replay_range("replay", profiler::Category::other);
  graph_->replay();
}

void CapturedStep::copy_inputs(const std::vector<data::Batch>& batches) {
  HG_CHECK(batches.size() == inputs_.size(), kWho, " the step has ", batches.size(),
           " micro-batches; the captured step has ", inputs_.size());
  for (size_t m = 0; m < batches.size(); ++m) {
    const data::Batch& batch = batches[m];
    data::Batch& into = inputs_[m];
    HG_CHECK(batch.tensors.size() == into.tensors.size(), kWho, " micro-batch ", m, " has ", batch.tensors.size(),
             " fields; the captured step has ", into.tensors.size());
    for (size_t i = 0; i < batch.tensors.size(); ++i) {
      HG_CHECK(batch[i].shape() == into[i].shape() && batch[i].dtype() == into[i].dtype(), kWho, " field ", i,
               " of micro-batch ", m, " is ", batch[i].describe(), "; the captured step was recorded for ",
               into[i].describe(),
               " (a CUDA graph replays fixed shapes: make every batch the same size, e.g. drop_last)");
      into.tensors[i].copy_(batch[i]);
    }
  }
}

}  // namespace hg::train
