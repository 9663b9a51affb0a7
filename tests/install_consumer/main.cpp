// Trains one Linear layer for a few steps through the installed headers and libraries; prints
// "consumer ok" when the loss fell.
#include <cstdio>

#include "engine/random.h"
#include "layers/nn.h"
#include "optim/optim.h"

int main() {
  hg::manual_seed(0);
  hg::nn::Linear layer(4, 3);
  hg::optim::AdamW optimizer(layer.parameters(), hg::optim::AdamWOptions().lr(0.1));
  const hg::Tensor x = hg::randn({8, 4});
  const hg::Tensor y = hg::from_vector(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1}, {8});
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    hg::Tensor loss = hg::cross_entropy(layer.forward(x), y);
    loss.backward();
    optimizer.step();
    optimizer.zero_grad();
    (step == 0 ? first : last) = loss.item();
  }
  std::printf("loss %.4f -> %.4f\n", first, last);
  if (!(last < first)) return 1;
  std::printf("consumer ok\n");
  return 0;
}
