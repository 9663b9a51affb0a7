#include "engine/recompute.h"

#include "engine/autograd.h"
#include "engine/random.h"
#include "engine/saved_tensor.h"

namespace hg {

namespace {

// Sets the default generator to `state` in its scope and puts back the state it found, also when
// the recomputation throws.
class GeneratorReplay {
 public:
  explicit GeneratorReplay(const GeneratorState& state) : resume_(default_generator().state()) {
    default_generator().set_state(state);
  }
  ~GeneratorReplay() { default_generator().set_state(resume_); }
  GeneratorReplay(const GeneratorReplay&) = delete;
  GeneratorReplay& operator=(const GeneratorReplay&) = delete;

 private:
  GeneratorState resume_;
};

}  // namespace

Tensor recompute(const RecomputeFn& fn, const std::vector<Tensor>& inputs) {
  HG_CHECK(fn != nullptr, "[recompute] expected a function to run, got an empty std::function");
  for (size_t i = 0; i < inputs.size(); ++i)
    HG_CHECK(inputs[i].defined(), "[recompute] input ", i, " is an undefined tensor; expected defined inputs");
  if (!grad_mode_enabled()) return fn(inputs);

  const GeneratorState rng = default_generator().state();
  std::vector<Tensor> detached;
  detached.reserve(inputs.size());
  for (const Tensor& input : inputs) detached.push_back(input.detach());
  Tensor out;
  {
    NoGradGuard no_grad;
    out = fn(detached);
  }
  HG_CHECK(out.defined(), "[recompute] the function returned an undefined tensor; expected its output");
  HG_CHECK(is_floating(out.dtype()), "[recompute] the function returned ", out.describe(),
           "; expected a floating-point output to differentiate");
  // A fresh handle: the output may be one of the detached inputs (or share its TensorImpl).
  out = out.detach();

  begin_saved_tensor_group();
  std::vector<SavedTensor> saved;
  saved.reserve(inputs.size());
  for (const Tensor& input : inputs) saved.emplace_back(input, SavedRole::recompute_input);

  record_op("recompute", inputs, out, [fn, saved, rng](const Tensor& grad, const NeedsGrad& needs) {
    std::vector<Tensor> replay;
    replay.reserve(saved.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      Tensor t = saved[i].unpack().detach();  // a leaf of the recomputed graph
      if (needs[i]) t.requires_grad_();
      replay.push_back(std::move(t));
    }
    Tensor recomputed;
    {
      GeneratorReplay same_masks(rng);
      GradModeGuard grad_on(true);
      recomputed = fn(replay);
    }
    HG_CHECK(recomputed.defined() && recomputed.shape() == grad.shape(), "[recompute] the recomputed output ",
             recomputed.defined() ? recomputed.describe() : std::string("(undefined)"),
             " differs in shape from the forward's ", shape_str(grad.shape()),
             "; expected fn to be deterministic given its inputs and the generator state");
    if (recomputed.requires_grad()) run_backward(recomputed, grad, /*retain_graph=*/false);
    std::vector<Tensor> grads(replay.size());
    for (size_t i = 0; i < replay.size(); ++i)
      if (needs[i]) grads[i] = replay[i].grad();
    return grads;
  });
  return out;
}

Tensor recompute(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input) {
  HG_CHECK(fn != nullptr, "[recompute] expected a function to run, got an empty std::function");
  return recompute([fn](const std::vector<Tensor>& in) { return fn(in[0]); }, std::vector<Tensor>{input});
}

}  // namespace hg
