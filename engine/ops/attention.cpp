// Causal scaled-dot-product attention, composed from engine ops:
//   S = q k^T / sqrt(D),  P = softmax(S masked causally),  O = P v
// with q [.., Tq, D], k and v [.., Tk, D]. Query row i attends to keys j <= i + (Tk - Tq), so a
// query block at the end of a longer key sequence (a KV cache) sees its whole past. The backward
// is that of the composed ops (matmul and the masked softmax). A fused kernel that never stores
// P is a later optimisation, tested against this composed form.
#include <cmath>

#include "engine/ops.h"
#include "engine/ops/op_support.h"
#include "engine/ops/softmax_internal.h"

namespace hg {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const char* name = "scaled_dot_product_attention";
  ops::check_floating(q, name, "q");
  ops::check_same({&q, &k, &v}, {"q", "k", "v"}, name);
  HG_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), "[", name,
           "] expected q, k, v of equal rank >= 2, got q ", q.describe(), ", k ", k.describe(), ", v ", v.describe());
  const int64_t tq = q.size(-2), tk = k.size(-2), d = q.size(-1);
  HG_CHECK(k.size(-1) == d && v.size(-2) == tk, "[", name, "] expected k [.., Tk, ", d, "] and v [.., Tk, Dv], got q ",
           q.describe(), ", k ", k.describe(), ", v ", v.describe());
  HG_CHECK(!causal || tk >= tq, "[", name, "] causal attention needs at least as many keys as queries, got Tq = ", tq,
           " and Tk = ", tk);
  const Tensor scores = matmul(q, k.transpose(-1, -2)) * (1.0 / std::sqrt(double(d)));
  const Tensor probabilities = ops::softmax_last_dim(scores, false, causal ? tq : 0);
  return matmul(probabilities, v);
}

}  // namespace hg
