// matmul: C = A B over the last two dimensions, batch dimensions broadcast NumPy-style.
// Transposed views are passed to the GEMM as transposes (no copy); only layouts that are neither
// row- nor column-major in their last two dimensions are made contiguous. A batched A times a 2-D B
// (a Linear layer) runs as one GEMM with the batch folded into the rows.
// Backward: dA = dC B^T, dB = A^T dC, each summed over the batch dimensions it was broadcast along.
#include "engine/ops.h"
#include "engine/ops/op_support.h"

namespace hg {

namespace {

// How the last two dimensions of a tensor are laid out for the GEMM.
struct MatrixLayout {
  bool usable = false;
  bool transposed = false;  // stored column-major: element [r, c] at c * ld + r
  int64_t ld = 1;
};

MatrixLayout matrix_layout(const Tensor& t) {
  const int64_t rows = t.shape()[size_t(t.dim() - 2)], cols = t.shape()[size_t(t.dim() - 1)];
  const int64_t row_stride = t.strides()[size_t(t.dim() - 2)], col_stride = t.strides()[size_t(t.dim() - 1)];
  if ((col_stride == 1 || cols == 1) && (rows == 1 || row_stride >= cols))
    return {true, false, std::max<int64_t>(rows == 1 ? cols : row_stride, 1)};
  if ((row_stride == 1 || rows == 1) && (cols == 1 || col_stride >= rows))
    return {true, true, std::max<int64_t>(cols == 1 ? rows : col_stride, 1)};
  return {};
}

Tensor with_usable_layout(const Tensor& t) { return matrix_layout(t).usable ? t : t.contiguous(); }

// a [..., m, k] @ b [..., k, n], both of rank >= 2; no autograd.
Tensor matmul_kernel(const Tensor& a_in, const Tensor& b_in) {
  const int64_t m = a_in.size(-2), k = a_in.size(-1), n = b_in.size(-1);
  HG_CHECK(b_in.size(-2) == k, "[matmul] inner dimensions differ: a is ", a_in.describe(), ", b is ", b_in.describe(),
           "; expected a's last dimension (", k, ") to equal b's second-to-last (", b_in.size(-2), ")");
  const Shape a_batch(a_in.shape().begin(), a_in.shape().end() - 2);
  const Shape b_batch(b_in.shape().begin(), b_in.shape().end() - 2);
  const Shape batch = broadcast_shapes(a_batch, b_batch, "matmul");
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor out = ops::empty_as(out_shape, a_in);
  const int64_t batch_count = shape_numel(batch);
  if (out.numel() == 0) return out;

  // A Linear layer: batched rows of a contiguous A times one B.
  if (b_in.dim() == 2 && a_in.is_contiguous()) {
    const Tensor b = with_usable_layout(b_in);
    const MatrixLayout lb = matrix_layout(b);
    HG_KERNEL(a_in.device(), gemm, false, lb.transposed, batch_count * m, n, k, 1.0, a_in.data_ptr(), k, b.data_ptr(),
              lb.ld, 0.0, out.data_ptr(), n, a_in.dtype());
    return out;
  }

  Shape a_shape = batch, b_shape = batch;
  a_shape.insert(a_shape.end(), {m, k});
  b_shape.insert(b_shape.end(), {k, n});
  const Tensor a = with_usable_layout(a_in).expand(a_shape);
  const Tensor b = with_usable_layout(b_in).expand(b_shape);
  const MatrixLayout la = matrix_layout(a), lb = matrix_layout(b);
  const size_t esize = a.element_size();
  const int batch_rank = int(batch.size());
  std::vector<int64_t> index(size_t(batch_rank), 0);
  for (int64_t i = 0; i < batch_count; ++i) {
    int64_t a_off = 0, b_off = 0;
    for (int d = 0; d < batch_rank; ++d) {
      a_off += index[size_t(d)] * a.strides()[size_t(d)];
      b_off += index[size_t(d)] * b.strides()[size_t(d)];
    }
    HG_KERNEL(a.device(), gemm, la.transposed, lb.transposed, m, n, k, 1.0,
              static_cast<const char*>(a.data_ptr()) + a_off * esize, la.ld,
              static_cast<const char*>(b.data_ptr()) + b_off * esize, lb.ld, 0.0,
              static_cast<char*>(out.data_ptr()) + i * m * n * esize, n, a.dtype());
    for (int d = batch_rank - 1; d >= 0; --d) {
      if (++index[size_t(d)] < batch[size_t(d)]) break;
      index[size_t(d)] = 0;
    }
  }
  return out;
}

Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  Tensor out = matmul_kernel(a, b);
  if (!should_record({&a, &b})) return out;
  const SavedTensor saved_a(a), saved_b(b);
  record_op("matmul", {a, b}, out, [saved_a, saved_b](const Tensor& g, const NeedsGrad& needs) {
    const Tensor sa = saved_a.unpack(), sb = saved_b.unpack();
    Tensor ga, gb;
    if (needs[0]) ga = sum_to(matmul_kernel(g, sb.transpose(-1, -2)), sa.shape());
    if (needs[1]) {
      if (sb.dim() == 2 && sa.dim() > 2 && sa.is_contiguous()) {
        // Fold the batch into one GEMM: dB = A2^T dC2 with A2 = A as [rows, k].
        gb = matmul_kernel(sa.reshape({-1, sa.size(-1)}).t(), g.contiguous().reshape({-1, g.size(-1)}));
      } else {
        gb = sum_to(matmul_kernel(sa.transpose(-1, -2), g), sb.shape());
      }
    }
    return std::vector<Tensor>{ga, gb};
  });
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  ops::check_floating(a, "matmul", "a");
  ops::check_floating(b, "matmul", "b");
  ops::check_same({&a, &b}, {"a", "b"}, "matmul");
  ops::check_backend(a, "matmul");
  HG_CHECK(a.dim() >= 1 && b.dim() >= 1, "[matmul] expected operands of rank >= 1, got a ", a.describe(), " and b ",
           b.describe());
  // NumPy rules for 1-D operands: a vector is a row on the left and a column on the right, and the
  // added dimension is removed from the result.
  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  Tensor out = matmul_nd(a2, b2);
  if (b.dim() == 1) out = out.squeeze(-1);
  if (a.dim() == 1) out = out.squeeze(-2 + (b.dim() == 1 ? 1 : 0));
  return out;
}

}  // namespace hg
