// Resampling of the trailing spatial dimensions: interpolate (nearest, nearest-exact, linear,
// bilinear) and adaptive average pooling, all as separable linear maps applied by one kernel
// (kernels/kernels.h: resample2d; kernels/resample_axis.h).
//
// Each op builds, on the host, one sparse table per spatial axis -- output position i reads input
// positions index[t] with weights weight[t], offset[i] <= t < offset[i + 1] -- with PyTorch's source
// index rules, uploads it to x's device and runs the kernel over the [H, W] planes. A 1-D op is the
// same with an identity height axis. The backward pass is the same kernel with the transposed tables
// (input position h gathers the outputs that read it), so it is a gather too: deterministic, no atomics.
#include <cmath>
#include <memory>

#include "engine/ops.h"
#include "engine/ops/op_support.h"
#include "kernels/resample_tables.h"

namespace hg {
namespace {

using kernels::ResampleTable;

// A table on the kernel's device (the tensors keep the arrays alive while `axis` points at them).
struct DeviceAxis {
  Tensor offset, index, weight;
  kernels::ResampleAxis axis;

  DeviceAxis(const ResampleTable& t, const Device& device)
      : offset(from_vector(t.offset, {int64_t(t.offset.size())}, i64, device)),
        index(from_vector(t.index, {int64_t(t.index.size())}, i64, device)),
        weight(from_vector(t.weight, {int64_t(t.weight.size())}, f64, device)) {
    axis.in = t.in, axis.out = t.out;
    axis.offset = static_cast<const int64_t*>(offset.data_ptr());
    axis.index = t.index.empty() ? nullptr : static_cast<const int64_t*>(index.data_ptr());
    axis.weight = t.weight.empty() ? nullptr : static_cast<const double*>(weight.data_ptr());
  }
};

using Tables = std::shared_ptr<const std::pair<ResampleTable, ResampleTable>>;  // (height, width)

Tables make_tables(ResampleTable h, ResampleTable w) {
  return std::make_shared<const std::pair<ResampleTable, ResampleTable>>(std::move(h), std::move(w));
}

// y [leading..., out spatial] from x [leading..., in spatial]: x's last `spatial` (1 or 2) dimensions
// mapped by the tables (a 1-D op has the identity height axis). Records the transposed map as backward.
// `op` names a string literal. The tables are copied to x's device on each call (six small copies).
Tensor resample(const char* op, const Tensor& x, int spatial, const Tables& tables) {
  const ResampleTable &h = tables->first, &w = tables->second;
  Shape out_shape = x.shape();
  if (spatial == 2) out_shape[size_t(x.dim() - 2)] = h.out;
  out_shape[size_t(x.dim() - 1)] = w.out;
  const Tensor xc = x.contiguous();
  Tensor y = ops::empty_as(out_shape, xc);
  const int64_t planes = y.numel() == 0 ? 0 : y.numel() / (h.out * w.out);
  if (planes > 0) {
    const DeviceAxis dh(h, x.device()), dw(w, x.device());
    HG_KERNEL(x.device(), resample2d, xc.data_ptr(), y.data_ptr(), planes, dh.axis, dw.axis, x.dtype());
  }
  if (should_record({&x})) {
    record_op(op, {x}, y, [op, spatial, tables](const Tensor& grad, const NeedsGrad&) {
      const Tables back = make_tables(kernels::transposed(tables->first), kernels::transposed(tables->second));
      return std::vector<Tensor>{resample(op, grad, spatial, back)};
    });
  }
  return y;
}

// x floating, of min_dim..max_dim dimensions, its last `spatial` ones not empty.
void check_input(const char* op, const Tensor& x, int min_dim, int max_dim, int spatial, const char* layout) {
  ops::check_floating(x, op, "x");
  ops::check_backend(x, op);
  HG_CHECK(x.dim() >= min_dim && x.dim() <= max_dim, "[", op, "] x ", x.describe(), " must be ", layout);
  for (int d = x.dim() - spatial; d < x.dim(); ++d)
    HG_CHECK(x.size(d) > 0, "[", op, "] x ", x.describe(), " has an empty spatial dimension ", d,
             "; expected a positive size");
}

}  // namespace

const char* interpolate_mode_name(InterpolateMode mode) {
  switch (mode) {
    case InterpolateMode::Nearest:
      return "nearest";
    case InterpolateMode::NearestExact:
      return "nearest-exact";
    case InterpolateMode::Linear:
      return "linear";
    case InterpolateMode::Bilinear:
      return "bilinear";
  }
  return "?";
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2d output_size) {
  const char* op = "adaptive_avg_pool2d";
  check_input(op, x, 3, 4, 2, "3-D [C, H, W] or 4-D [N, C, H, W]");
  HG_CHECK(output_size[0] > 0 && output_size[1] > 0, "[", op, "] output_size (", output_size[0], ", ", output_size[1],
           ") must be positive");
  return resample(op, x, 2,
                  make_tables(kernels::adaptive_avg_table(x.size(-2), output_size[0]),
                              kernels::adaptive_avg_table(x.size(-1), output_size[1])));
}

Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size) {
  const char* op = "adaptive_avg_pool1d";
  check_input(op, x, 2, 3, 1, "2-D [C, L] or 3-D [N, C, L]");
  HG_CHECK(output_size > 0, "[", op, "] output_size ", output_size, " must be positive");
  return resample(op, x, 1,
                  make_tables(kernels::identity_table(1), kernels::adaptive_avg_table(x.size(-1), output_size)));
}

Tensor interpolate(const Tensor& x, const InterpolateOptions& options) {
  const char* op = "interpolate";
  const InterpolateMode mode = options.mode;
  const bool linear = mode == InterpolateMode::Linear || mode == InterpolateMode::Bilinear;
  ops::check_defined(x, op, "x");
  HG_CHECK((mode == InterpolateMode::Linear && x.dim() == 3) || (mode == InterpolateMode::Bilinear && x.dim() == 4) ||
               (!linear && (x.dim() == 3 || x.dim() == 4)),
           "[", op, "] mode ", interpolate_mode_name(mode), " takes x ",
           mode == InterpolateMode::Linear     ? "3-D [N, C, L]"
           : mode == InterpolateMode::Bilinear ? "4-D [N, C, H, W]"
                                               : "3-D [N, C, L] or 4-D [N, C, H, W]",
           ", got ", x.describe());
  const int spatial = x.dim() - 2;
  check_input(op, x, 3, 4, spatial, "3-D [N, C, L] or 4-D [N, C, H, W]");
  HG_CHECK(linear || !options.align_corners, "[", op, "] align_corners is only for the linear modes, not ",
           interpolate_mode_name(mode));
  HG_CHECK(options.size.empty() != options.scale_factor.empty(), "[", op,
           "] expected exactly one of size and scale_factor, got ", options.size.size(), " sizes and ",
           options.scale_factor.size(), " scale factors");
  const size_t given = options.size.empty() ? options.scale_factor.size() : options.size.size();
  HG_CHECK(given == size_t(spatial), "[", op, "] x ", x.describe(), " has ", spatial, " spatial dimension",
           spatial == 1 ? "" : "s", "; got ", given, options.size.empty() ? " scale factors" : " sizes");
  std::vector<ResampleTable> axes;
  for (int k = 0; k < spatial; ++k) {
    const int64_t in = x.size(x.dim() - spatial + k);
    std::optional<double> factor;
    int64_t out;
    if (options.size.empty()) {
      factor = options.scale_factor[size_t(k)];
      HG_CHECK(std::isfinite(*factor) && *factor > 0 && double(in) * *factor < 0x1p52, "[", op, "] scale_factor ",
               *factor, " must be positive, and give an output size below 2^52 for the input size ", in);
      out = int64_t(std::floor(double(in) * *factor));
    } else {
      out = options.size[size_t(k)];
    }
    HG_CHECK(out > 0, "[", op, "] the output size along dimension ", x.dim() - spatial + k, " is ", out,
             "; expected a positive size");
    axes.push_back(linear ? kernels::linear_table(in, out, factor, options.align_corners.value_or(false))
                          : kernels::nearest_table(in, out, factor, mode == InterpolateMode::NearestExact));
  }
  auto tables = spatial == 2 ? make_tables(axes[0], axes[1]) : make_tables(kernels::identity_table(1), axes[0]);
  return resample(op, x, spatial, tables);
}

}  // namespace hg
