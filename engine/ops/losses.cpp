// The standard losses of torch.nn.functional beyond the fused cross_entropy (engine/ops/loss.cpp). The
// pointwise ones (mse, l1, smooth_l1, huber, binary_cross_entropy, kl_div) run fused kernels
// (kernels/pointwise_loss.h: one pass forward, one per wanted gradient backward, one graph node); the
// others are composed from engine ops, so that their gradients are those ops' backwards. The math of each
// is stated at its declaration in engine/ops.h. Where PyTorch's backward is not the derivative of its
// forward (binary_cross_entropy clamps its logs at -100 but differentiates the unclamped form), the
// kernel computes PyTorch's backward. docs/ops.md lists what differs from PyTorch.
#include <cmath>
#include <string>

#include "engine/ops.h"
#include "engine/ops/op_support.h"
#include "kernels/pointwise_loss.h"

namespace hg {

const char* reduction_name(Reduction reduction) {
  switch (reduction) {
    case Reduction::None: return "none";
    case Reduction::Mean: return "mean";
    case Reduction::Sum: return "sum";
    case Reduction::BatchMean: return "batchmean";
  }
  return "?";
}

namespace {

Tensor reduce_loss(const Tensor& loss, Reduction reduction, const char* op) {
  switch (reduction) {
    case Reduction::None: return loss;
    case Reduction::Mean: return mean(loss);
    case Reduction::Sum: return sum(loss);
    case Reduction::BatchMean: break;
  }
  HG_FAIL("[", op, "] reduction 'batchmean' is kl_div's only; expected none, mean or sum");
}

// input and target: defined, floating, one dtype and device, one shape.
void check_pair(const Tensor& input, const Tensor& target, const char* op) {
  ops::check_floating(input, op, "input");
  ops::check_floating(target, op, "target");
  ops::check_same({&input, &target}, {"input", "target"}, op);
  HG_CHECK(input.shape() == target.shape(), "[", op, "] input ", input.describe(), " and target ", target.describe(),
           " differ in shape; expected equal shapes (broadcast the target explicitly if you mean it)");
}

void check_optional_like(const Tensor& t, const Tensor& input, const char* op, const char* what) {
  if (!t.defined()) return;
  ops::check_floating(t, op, what);
  ops::check_same({&input, &t}, {"input", what}, op);
}

// The class-index form of nll, flattened: log-probabilities [M, C], targets [M].
struct NllParts {
  Tensor loss;    // [M]: -weight[t_i] logp[i, t_i], 0 where ignored
  Tensor weight;  // [M]: weight[t_i] (1 without weights), 0 where ignored
  Tensor valid;   // [M] bool: target != ignore_index
  Shape shape;    // the targets' shape (Reduction::None)
};

// The position of the first target that is neither in [0, classes) nor ignore_index, -1 if none, and
// whether any target is ignore_index: one scan of CPU targets on the host, in place of the tensor ops
// (and the host read) the check takes on a device.
struct TargetScan {
  int64_t first_bad = -1;
  bool any_ignored = false;
};

template <class I>
TargetScan scan_targets(const I* t, int64_t n, int64_t classes, int64_t ignore_index) {
  TargetScan scan;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = int64_t(t[i]);
    if (v == ignore_index) {
      scan.any_ignored = true;
    } else if ((v < 0 || v >= classes) && scan.first_bad < 0) {
      scan.first_bad = i;
    }
  }
  return scan;
}

// Moves the class dimension (1, or 0 for a [C] input) last and flattens: [M, C]; targets [M].
// Checks the shapes and the target range (CPU targets: one host scan; on a device: a host read of one
// bool).
NllParts nll_parts(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                   const char* op) {
  ops::check_floating(input, op, "input");
  ops::check_index(target, op, "target");
  HG_CHECK(target.device() == input.device(), "[", op, "] input ", input.describe(), " and target ",
           target.describe(), " are on different devices");
  HG_CHECK(input.dim() >= 1, "[", op, "] input ", input.describe(), " has no class dimension; expected [C], [N, C] "
           "or [N, C, d1, ...]");
  const int class_dim = input.dim() == 1 ? 0 : 1;
  const int64_t classes = input.size(class_dim);
  Shape expected = input.shape();
  expected.erase(expected.begin() + class_dim);
  HG_CHECK(target.shape() == expected, "[", op, "] target ", target.describe(), " does not match input ",
           input.describe(), "; expected target of shape ", shape_str(expected));
  HG_CHECK(classes > 0, "[", op, "] input ", input.describe(), " has no classes");
  if (weight.defined()) {
    check_optional_like(weight, input, op, "weight");
    HG_CHECK(weight.shape() == Shape{classes}, "[", op, "] weight ", weight.describe(), "; expected one per class, [",
             classes, "]");
  }
  Tensor logp = input;
  if (input.dim() == 1) {
    logp = input.unsqueeze(0);
  } else if (input.dim() > 2) {
    std::vector<int> dims{0};
    for (int d = 2; d < input.dim(); ++d) dims.push_back(d);
    dims.push_back(1);
    logp = input.permute(dims);
  }
  logp = logp.reshape({-1, classes});
  const Tensor t = target.reshape({-1, 1});
  auto fail_at = [&](size_t first) {
    const std::vector<int64_t> ids = t.to_vector<int64_t>();
    HG_FAIL("[", op, "] target ", ids[first], " at element ", first, " is out of range; expected 0 <= target < ",
            classes, " (or ignore_index = ", ignore_index, ")");
  };
  const bool host_scan = t.device().is_cpu();  // i64 or i32: check_index above
  if (host_scan) {
    const Tensor flat = t.contiguous();
    const TargetScan scan =
        flat.dtype() == i64
            ? scan_targets(static_cast<const int64_t*>(flat.data_ptr()), flat.numel(), classes, ignore_index)
            : scan_targets(static_cast<const int32_t*>(flat.data_ptr()), flat.numel(), classes, ignore_index);
    if (scan.first_bad >= 0) fail_at(size_t(scan.first_bad));
    if (!scan.any_ignored) {  // every element counts: no masks, one gather
      NllParts parts;
      parts.valid = full({flat.numel()}, 1.0, b8);
      const Tensor picked = gather(logp, 1, flat).view({-1});
      parts.weight = weight.defined() ? index_select(weight, 0, flat.view({-1})) : ones_like(picked);
      parts.loss = weight.defined() ? -(picked * parts.weight) : -picked;
      parts.shape = target.shape();
      return parts;
    }
  }
  const Tensor valid = ne(t, double(ignore_index));
  if (!host_scan) {
    const Tensor out_of_range = valid & (lt(t, 0.0) | ge(t, double(classes)));
    if (any(out_of_range).item() != 0) {
      const std::vector<double> bad = cast(out_of_range, f64).to_vector<double>();
      size_t first = 0;
      while (first < bad.size() && bad[first] == 0) ++first;
      fail_at(first);
    }
  }
  NllParts parts;
  parts.valid = valid.view({-1});
  // One gather of the M target log-probabilities (its backward scatters M values), not a pass over the
  // [M, C] input; an ignored element gathers class 0 and is zeroed.
  const Tensor safe = where(valid, t, 0.0);
  const Tensor picked = where(parts.valid, gather(logp, 1, safe).view({-1}), 0.0);
  parts.weight = weight.defined() ? where(parts.valid, index_select(weight, 0, safe.view({-1})), 0.0)
                                  : cast(parts.valid, input.dtype());
  parts.loss = weight.defined() ? -(picked * parts.weight) : -picked;
  parts.shape = target.shape();
  return parts;
}

// The reduction of the nll form: Mean divides by the summed weights of the counted elements.
Tensor reduce_nll(const Tensor& loss, const NllParts& parts, Reduction reduction, const char* op) {
  if (reduction == Reduction::None) return loss.reshape(parts.shape);
  if (reduction == Reduction::Mean) return sum(loss) / sum(parts.weight);
  return reduce_loss(loss, reduction, op);
}

// The class weights shaped to multiply an input with classes in dimension class_dim.
Tensor class_weights_view(const Tensor& weight, const Tensor& input, int class_dim) {
  Shape shape(size_t(input.dim()), 1);
  shape[size_t(class_dim)] = weight.numel();
  return weight.view(shape);
}

// The loss reduced, with the per-element loss scale f(x, t) of kernels/pointwise_loss.h: a reduced
// loss in one kernel (pointwise_loss_sum), the values of Reduction::None in another; one node whose
// backward is one kernel pass per wanted gradient (the reduced loss's gradient read from device memory,
// its 1 / n folded into the scale).
Tensor pointwise_loss(kernels::PointwiseLoss kind, double delta, double scale, const Tensor& input,
                      const Tensor& target, Reduction reduction, const char* op) {
  check_pair(input, target, op);
  ops::check_backend(input, op);
  const Tensor x = input.detach().contiguous(), t = target.detach().contiguous();
  Tensor out;
  if ((reduction == Reduction::Mean || reduction == Reduction::Sum) && x.numel() > 0) {
    out = ops::empty_as({}, x);
    const double sum_scale = reduction == Reduction::Mean ? scale / double(x.numel()) : scale;
    HG_KERNEL(x.device(), pointwise_loss_sum, kind, delta, sum_scale, x.data_ptr(), t.data_ptr(), out.data_ptr(),
              x.numel(), x.dtype());
  } else {  // Reduction::None, an empty input (its mean is NaN, as PyTorch's), or a refused reduction
    Tensor values = ops::empty_as(x.shape(), x);
    HG_KERNEL(x.device(), pointwise_loss_forward, kind, delta, scale, x.data_ptr(), t.data_ptr(), values.data_ptr(),
              x.numel(), x.dtype());
    NoGradGuard no_grad;
    out = reduce_loss(values, reduction, op);
  }
  if (should_record({&input, &target})) {
    const SavedTensor saved_x(input), saved_t(target);
    const double grad_scale = reduction == Reduction::Mean ? scale / double(x.numel()) : scale;
    record_op(op, {input, target}, out, [=](const Tensor& g, const NeedsGrad& needs) {
      const Tensor xv = saved_x.unpack().contiguous(), tv = saved_t.unpack().contiguous();
      HG_CHECK(g.dtype() == xv.dtype() && g.device() == xv.device(), "[", op, "] the gradient of the loss is ",
               g.describe(), "; expected ", dtype_name(xv.dtype()), " on ", xv.device().str(), " like the loss");
      const bool per_element = reduction == Reduction::None;
      const Tensor gv = per_element ? g.contiguous() : g.reshape({1}).contiguous();
      Tensor dx = needs[0] ? ops::empty_as(xv.shape(), xv) : Tensor();
      Tensor dt = needs[1] ? ops::empty_as(tv.shape(), tv) : Tensor();
      if (xv.numel() > 0)
        HG_KERNEL(xv.device(), pointwise_loss_backward, kind, delta, grad_scale, xv.data_ptr(), tv.data_ptr(),
                  gv.data_ptr(), per_element, dx.defined() ? dx.data_ptr() : nullptr,
                  dt.defined() ? dt.data_ptr() : nullptr, xv.numel(), xv.dtype());
      return std::vector<Tensor>{dx, dt};
    });
  }
  return out;
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return pointwise_loss(kernels::PointwiseLoss::Squared, 0.0, 1.0, input, target, reduction, "mse_loss");
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return pointwise_loss(kernels::PointwiseLoss::Absolute, 0.0, 1.0, input, target, reduction, "l1_loss");
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  HG_CHECK(beta >= 0, "[smooth_l1_loss] beta = ", beta, "; expected beta >= 0");
  if (beta == 0) return l1_loss(input, target, reduction);
  // smooth_l1 with beta is Huber's function with delta = beta, over beta.
  return pointwise_loss(kernels::PointwiseLoss::Huber, beta, 1.0 / beta, input, target, reduction, "smooth_l1_loss");
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  HG_CHECK(delta > 0, "[huber_loss] delta = ", delta, "; expected delta > 0");
  return pointwise_loss(kernels::PointwiseLoss::Huber, delta, 1.0, input, target, reduction, "huber_loss");
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction) {
  check_pair(input, target, "binary_cross_entropy");
  check_optional_like(weight, input, "binary_cross_entropy", "weight");
  const Tensor inside = logical_and(ge(input, 0.0), le(input, 1.0));
  HG_CHECK(all(inside).item() != 0, "[binary_cross_entropy] input ", input.describe(),
           " has elements outside [0, 1] (or NaN); expected probabilities (for logits use "
           "binary_cross_entropy_with_logits)");
  // PyTorch's backward is not the derivative of its clamped forward: the kernel's is PyTorch's
  // (kernels/pointwise_loss.h).
  const kernels::PointwiseLoss kind = kernels::PointwiseLoss::BinaryCrossEntropy;
  if (!weight.defined()) return pointwise_loss(kind, 0.0, 1.0, input, target, reduction, "binary_cross_entropy");
  return reduce_loss(pointwise_loss(kind, 0.0, 1.0, input, target, Reduction::None, "binary_cross_entropy") * weight,
                     reduction, "binary_cross_entropy");
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight,
                                        const Tensor& pos_weight, Reduction reduction) {
  const char* op = "binary_cross_entropy_with_logits";
  check_pair(input, target, op);
  check_optional_like(weight, input, op, "weight");
  check_optional_like(pos_weight, input, op, "pos_weight");
  const Tensor log_weight = pos_weight.defined() ? (pos_weight - 1.0) * target + 1.0 : Tensor();
  const Tensor lsig = log_sigmoid(input);
  Tensor loss = (1.0 - target) * input - (log_weight.defined() ? log_weight * lsig : lsig);
  if (weight.defined()) loss = loss * weight;
  return reduce_loss(loss, reduction, op);
}

Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                Reduction reduction) {
  const NllParts parts = nll_parts(input, target, weight, ignore_index, "nll_loss");
  return reduce_nll(parts.loss, parts, reduction, "nll_loss");
}

Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options) {
  const char* op = "cross_entropy";
  ops::check_floating(input, op, "input");
  ops::check_defined(target, op, "target");
  const double eps = options.label_smoothing;
  HG_CHECK(eps >= 0 && eps <= 1, "[cross_entropy] label_smoothing = ", eps, "; expected 0 <= label_smoothing <= 1");
  const bool index_targets = is_integral(target.dtype());
  if (index_targets && !options.weight.defined() && eps == 0 && options.reduction == Reduction::Mean &&
      input.dim() <= 2)
    return cross_entropy(input, target, options.ignore_index);  // the fused kernels

  HG_CHECK(input.dim() >= 1, "[cross_entropy] input ", input.describe(), " has no class dimension");
  const int class_dim = input.dim() == 1 ? 0 : 1;
  const int64_t classes = input.size(class_dim);
  const Tensor logp = log_softmax(input, class_dim);
  if (index_targets) {
    const NllParts parts = nll_parts(logp, target, options.weight, options.ignore_index, op);
    const Tensor nll = reduce_nll(parts.loss, parts, options.reduction, op);
    if (eps == 0) return nll;
    // The uniform part: -sum_c w_c logp[i, c] over the counted elements, reduced like the nll part.
    const Tensor flat = logp.dim() == 1 ? logp.unsqueeze(0) : logp;
    std::vector<int> dims{0};
    for (int d = 2; d < flat.dim(); ++d) dims.push_back(d);
    dims.push_back(1);
    const Tensor rows = (flat.dim() > 2 ? flat.permute(dims) : flat).reshape({-1, classes});
    const Tensor weighted = options.weight.defined() ? rows * options.weight.view({1, classes}) : rows;
    const Tensor smooth = where(parts.valid, -sum(weighted, {1}), 0.0);
    return (1.0 - eps) * nll + (eps / double(classes)) * reduce_nll(smooth, parts, options.reduction, op);
  }
  // Class probabilities: -sum_c w_c ((1 - eps) p_c + eps / C) logp_c per element; Mean divides by the
  // number of elements (N d1 ...), not by weights.
  check_pair(input, target, op);
  if (options.weight.defined()) {
    check_optional_like(options.weight, input, op, "weight");
    HG_CHECK(options.weight.shape() == Shape{classes}, "[cross_entropy] weight ", options.weight.describe(),
             "; expected one per class, [", classes, "]");
  }
  const Tensor p = eps > 0 ? (1.0 - eps) * target + eps / double(classes) : target;
  const Tensor terms = options.weight.defined() ? logp * p * class_weights_view(options.weight, input, class_dim)
                                                : logp * p;
  const Tensor per_element = -sum(terms, {class_dim});
  return reduce_loss(per_element, options.reduction, op);
}

Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target) {
  // Per element xlogy(t, t) - t x (0 log 0 = 0), or e^t (t - x) for a log target: kernels/pointwise_loss.h.
  const kernels::PointwiseLoss kind =
      log_target ? kernels::PointwiseLoss::KlDivLogTarget : kernels::PointwiseLoss::KlDiv;
  if (reduction == Reduction::BatchMean) {
    HG_CHECK(input.dim() >= 1, "[kl_div] reduction 'batchmean' needs a batch dimension; input is ", input.describe());
    return pointwise_loss(kind, 0.0, 1.0 / double(input.size(0)), input, target, Reduction::Sum, "kl_div");
  }
  return pointwise_loss(kind, 0.0, 1.0, input, target, reduction, "kl_div");
}

Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int dim, double eps) {
  ops::check_floating(x1, "cosine_similarity", "x1");
  ops::check_floating(x2, "cosine_similarity", "x2");
  ops::check_same({&x1, &x2}, {"x1", "x2"}, "cosine_similarity");
  const Shape shape = broadcast_shapes(x1.shape(), x2.shape(), "cosine_similarity");
  const int d = normalize_dim(dim, int(shape.size()), "cosine_similarity");
  const Tensor a = x1.expand(shape), b = x2.expand(shape);
  const Tensor na = clamp_min(sqrt(sum(a * a, {d}, true)), eps), nb = clamp_min(sqrt(sum(b * b, {d}, true)), eps);
  return sum((a / na) * (b / nb), {d});
}

Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p, double eps) {
  ops::check_floating(x1, "pairwise_distance", "x1");
  ops::check_floating(x2, "pairwise_distance", "x2");
  ops::check_same({&x1, &x2}, {"x1", "x2"}, "pairwise_distance");
  HG_CHECK(p > 0, "[pairwise_distance] p = ", p, "; expected p > 0 (or infinity)");
  const Tensor d = x1 - x2 + eps;
  if (std::isinf(p)) return max(abs(d), -1).first;
  if (p == 2.0) return sqrt(sum(d * d, {-1}));
  if (p == 1.0) return sum(abs(d), {-1});
  return pow(sum(pow(abs(d), p), {-1}), 1.0 / p);
}

Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative, double margin,
                           double p, double eps, bool swap, Reduction reduction) {
  const Tensor d_pos = pairwise_distance(anchor, positive, p, eps);
  Tensor d_neg = pairwise_distance(anchor, negative, p, eps);
  if (swap) d_neg = minimum(d_neg, pairwise_distance(positive, negative, p, eps));
  return reduce_loss(clamp_min(margin + d_pos - d_neg, 0.0), reduction, "triplet_margin_loss");
}

}  // namespace hg
