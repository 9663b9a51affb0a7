// The child of test_checkpoint_crash: writes training checkpoints into DIR (CheckpointDirectory,
// keep 2) as fast as it can until it is killed, printing "saved <step>" after each. Each checkpoint
// holds a small model, its AdamW state, the step counter and a 4 MiB "marker" tensor whose every
// element is the step -- so a torn or mixed file shows as a marker that disagrees with the counter.
// Usage: checkpoint_writer_child DIR
#include <cstdio>
#include <string>

#include "layers/nn.h"
#include "optim/optim.h"
#include "train/checkpoint.h"
#include "train/checkpoint_directory.h"

using namespace hg;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: checkpoint_writer_child DIR\n");
    return 2;
  }
  manual_seed(3);
  nn::Linear model(32, 32);
  optim::AdamW optimizer(model.parameters(), optim::AdamWOptions().lr(1e-3));
  int64_t step = 0;
  Tensor marker = zeros({1 << 20});
  train::TrainingState state;
  state.model(model).optimizer(optimizer).counter("step", step).extra("marker", marker);
  const train::CheckpointDirectory directory(argv[1], 2);
  for (step = 1;; ++step) {
    marker = full({1 << 20}, double(step));
    directory.save(state, step);
    std::printf("saved %lld\n", (long long)step);
    std::fflush(stdout);
  }
}
