// linear: y = x W^T + b, the Linear layer's op, with x [..., in], W [out, in], b [out] (optional).
// Forward is one GEMM with a bias epilogue (the bias is added before the output is stored: no
// separate broadcast-add pass). With x2 = x as [rows, in] and g2 = dy as [rows, out]:
//   dx = g2 W,   dW = g2^T x2,   db = sum over rows of g2
// each a single GEMM or reduction, transposes folded into the GEMM rather than materialised.
#include "engine/ops.h"
#include "engine/ops/op_support.h"

namespace hg {

namespace {

Tensor rows_of(const Tensor& t) { return t.contiguous().reshape({-1, t.size(-1)}); }

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const char* name = "linear";
  ops::check_floating(x, name, "x");
  ops::check_floating(weight, name, "weight");
  ops::check_same({&x, &weight}, {"x", "weight"}, name);
  ops::check_backend(x, name);
  HG_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), "[", name, "] x ", x.describe(),
           " and weight ", weight.describe(), " do not match; expected x [..., in] and weight [out, in]");
  const int64_t in = weight.size(1), out = weight.size(0);
  if (bias.defined()) {
    ops::check_same({&x, &bias}, {"x", "bias"}, name);
    HG_CHECK(bias.shape() == Shape{out}, "[", name, "] bias ", bias.describe(), " does not match weight ",
             weight.describe(), "; expected bias [", out, "]");
  }
  const Tensor x2 = rows_of(x), w = weight.contiguous();
  const int64_t rows = x2.size(0);
  Shape out_shape = x.shape();
  out_shape.back() = out;
  Tensor y = ops::empty_as(out_shape, x);
  if (bias.defined()) {
    const Tensor b = bias.contiguous();
    HG_KERNEL(x.device(), gemm_bias, false, true, rows, out, in, 1.0, x2.data_ptr(), in, w.data_ptr(), in,
              b.data_ptr(), y.data_ptr(), out, x.dtype());
  } else {
    HG_KERNEL(x.device(), gemm, false, true, rows, out, in, 1.0, x2.data_ptr(), in, w.data_ptr(), in, 0.0,
              y.data_ptr(), out, x.dtype());
  }
  if (should_record({&x, &weight, &bias})) {
    const SavedTensor sx(x2), sw(w);
    const Shape x_shape = x.shape();
    record_op(name, {x, weight, bias}, y, [sx, sw, x_shape, rows, in, out](const Tensor& g, const NeedsGrad& needs) {
      const Tensor x_rows = sx.unpack(), w_saved = sw.unpack();
      const Tensor g2 = rows_of(g);
      const Device device = g2.device();
      Tensor dx, dw, db;
      if (needs[0]) {
        dx = ops::empty_as({rows, in}, g2);
        HG_KERNEL(device, gemm, false, false, rows, in, out, 1.0, g2.data_ptr(), out, w_saved.data_ptr(), in, 0.0,
                  dx.data_ptr(), in, g2.dtype());
        dx = dx.reshape(x_shape);
      }
      if (needs[1]) {
        dw = ops::empty_as({out, in}, g2);
        HG_KERNEL(device, gemm, true, false, out, in, rows, 1.0, g2.data_ptr(), out, x_rows.data_ptr(), in, 0.0,
                  dw.data_ptr(), in, g2.dtype());
      }
      if (needs[2]) db = sum(g2, {0});
      return std::vector<Tensor>{dx, dw, db};
    });
  }
  return y;
}

}  // namespace hg
