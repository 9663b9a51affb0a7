#pragma once
// Activation recompute (PyTorch's torch.utils.checkpoint, "activation checkpointing"; here
// "checkpoint" means saved training state only): trade compute for memory.
//
//   y = recompute(fn, inputs)
//
// Forward: runs fn(inputs) without recording the graph, so none of the activations inside fn are
// kept; only the inputs are saved (through the saved-tensor hooks, as SavedRole::recompute_input,
// so activation offload can move them to host memory). Backward: restores the Philox generator's
// (seed, offset) to what it was when the forward ran -- dropout draws the very same masks -- reruns
// fn with the graph on over the saved inputs, back-propagates the incoming gradient through that
// graph (parameter gradients accumulate into the parameters' grad() as they would without
// recompute) and returns the gradients of the inputs. The generator's state is put back
// afterwards, so a backward never changes what later forwards draw.
//
// CONVENTION
//   - fn must be a function of its inputs and of parameters only (no other tensor that requires grad
//     from outside: its gradient would be lost), and deterministic given the generator state.
//   - Nests: a recompute inside fn runs plainly during the outer forward (grad mode is off) and is
//     itself a recompute region when the outer region is recomputed.
//   - With grad mode off it is just fn(inputs). With grad mode on the output requires grad even when
//     no input does, as fn may use parameters.
//   - Memory: the inputs are kept; during backward one region's activations exist at a time.
//   - Works for every dtype and device: it only composes ops.
#include <functional>
#include <vector>

#include "engine/tensor.h"

namespace hg {

using RecomputeFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

Tensor recompute(const RecomputeFn& fn, const std::vector<Tensor>& inputs);
// One input.
Tensor recompute(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input);

}  // namespace hg
