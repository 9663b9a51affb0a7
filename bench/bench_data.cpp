// bench_data: the data pipeline, one JSON object per line.
//   loader_throughput  batches/s and tokens/s of a DataLoader drained by an idle consumer, over
//                      windows of a memory-mapped token shard (T 256, B 32) and over train_gpt's
//                      addition problems (B 64), for 0, 1 and 2 workers; ratio against 0 workers
//                      (batches built on the consumer thread) measured in the same process (best of
//                      three interleaved rounds).
//   data_wait          train_gpt's default training step (GPT L2 H4 C128, batch 64 of 3-digit
//                      addition, AdamW, clipping) fed by the loader: the fraction of step time
//                      next() spent waiting for a batch, for 0, 1 and 2 workers; once with the
//                      problems as they are (microseconds per batch) and once with 50 us of CPU
//                      work per example (standing in for decoding or augmentation: 3.2 ms a batch).
// Usage: bench_data [--quick] [--device cpu|cuda]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>

#include "bench_args.h"
#include "data/data_loader.h"
#include "data/token_shard.h"
#include "engine/cuda/cuda_context.h"
#include "engine/random.h"
#include "json_line.h"
#include "timing.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "samples/gpt_datasets.h"

using namespace hg;
using hg::bench::Clock;
using hg::bench::seconds_since;

namespace {

Device g_device = kCPU;


// Drains `batches` batches (after 3 warmup batches) and reports batches/s.
double drain(const std::shared_ptr<data::Dataset>& dataset, int64_t batch, int workers, int batches) {
  data::DataLoader loader(dataset,
                          data::DataLoaderOptions().batch_size(batch).seed(1).workers(workers).device(g_device));
  for (int i = 0; i < 3; ++i) loader.next();
  if (g_device.is_cuda()) cuda::synchronize(g_device.index);
  const auto start = Clock::now();
  for (int i = 0; i < batches; ++i) loader.next();
  if (g_device.is_cuda()) cuda::synchronize(g_device.index);
  return batches / seconds_since(start);
}

void throughput(const std::string& name, const std::shared_ptr<data::Dataset>& dataset, int64_t batch,
                int64_t tokens_per_example, int batches) {
  // Three rounds over the worker counts, best of each: the first touches of the mmap and of the
  // allocator's cache, and the machine's other load, fall on whichever runs first otherwise.
  double best[3] = {0, 0, 0};
  for (int round = 0; round < 3; ++round)
    for (int workers : {0, 1, 2}) best[workers] = std::max(best[workers], drain(dataset, batch, workers, batches));
  const double baseline = best[0];
  for (int workers : {0, 1, 2}) {
    const double per_second = best[workers];
    bench::JsonLine("loader_throughput")
        .add("dataset", name)
        .add("device", g_device.str())
        .add("workers", workers)
        .add("batch", (long long)batch)
        .add("batches_per_s", per_second)
        .add("tokens_per_s", per_second * double(batch * tokens_per_example))
        .add("vs_0_workers", per_second / baseline)
        .print();
  }
}

// A dataset whose examples cost `micros` of CPU work each (hashing, not sleeping) on top of `inner`.
class CostlyDataset final : public data::Dataset {
 public:
  CostlyDataset(std::shared_ptr<data::Dataset> inner, double micros) : inner_(std::move(inner)), micros_(micros) {}
  int64_t size() const override { return inner_->size(); }
  std::vector<data::Field> fields() const override { return inner_->fields(); }
  void get(int64_t index, const std::vector<void*>& out) const override {
    const auto start = Clock::now();
    uint64_t x = uint64_t(index);
    while (std::chrono::duration<double, std::micro>(Clock::now() - start).count() < micros_)
      for (int i = 0; i < 64; ++i) x = data::mix64(x);
    sink_.fetch_xor(x, std::memory_order_relaxed);
    inner_->get(index, out);
  }

 private:
  std::shared_ptr<data::Dataset> inner_;
  double micros_;
  mutable std::atomic<uint64_t> sink_{0};
};

void data_wait(int steps, double micros_per_example) {
  const samples::AdditionTask task(3);
  std::shared_ptr<data::Dataset> dataset = std::make_shared<samples::AdditionDataset>(task, int64_t(1) << 20, 1337);
  if (micros_per_example > 0) dataset = std::make_shared<CostlyDataset>(dataset, micros_per_example);
  for (int workers : {0, 1, 2}) {
    manual_seed(1337);
    const auto config = nn::GPTConfig().vocab_size(256).context(16).n_layer(2).n_head(4).n_embd(128);
    nn::GPT model(config);
    model.to(g_device);
    model.train();
    optim::AdamW optimizer(model.parameters(),
                           optim::AdamWOptions().lr(2e-3).weight_decay(0.1).decay_only_matrices(true));
    data::DataLoader loader(
        dataset, data::DataLoaderOptions().batch_size(64).seed(1337).drop_last(true).workers(workers).device(g_device));
    auto step = [&] {
      const data::Batch batch = loader.next();
      const Tensor loss = model.loss(batch[0], batch[1]);
      loss.backward();
      optim::clip_grad_norm(model.parameters(), 1.0);
      optimizer.step();
      optimizer.zero_grad();
      (void)loss.item();  // the host reads the loss every step, as train_gpt does
    };
    for (int i = 0; i < 5; ++i) step();
    const double wait_before = loader.wait_seconds();
    const auto start = Clock::now();
    for (int i = 0; i < steps; ++i) step();
    const double total = seconds_since(start), wait = loader.wait_seconds() - wait_before;
    bench::JsonLine("data_wait")
        .add("loop", "train_gpt default: GPT L2 H4 C128, batch 64, 3-digit addition")
        .add("example_cost_us", micros_per_example)
        .add("device", g_device.str())
        .add("workers", workers)
        .add("steps", steps)
        .add("ms_per_step", 1e3 * total / steps)
        .add("wait_ms_per_step", 1e3 * wait / steps)
        .add("wait_fraction", wait / total)
        .print();
  }
}

}  // namespace

constexpr const char* kUsage =
    "usage: bench_data [--quick] [--device cpu|cuda]\n"
    "The data pipeline: DataLoader throughput for 0, 1 and 2 workers, and the share of train_gpt's step\n"
    "spent waiting for data. Prints JSON lines to stdout (\"loader_throughput\", \"data_wait\").\n"
    "  --quick            fewer batches and steps (smoke runs)\n"
    "  --device cpu|cuda  where the training step runs (default cpu)\n"
    "  -h, --help         this text\n";

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (hg::bench::is_help(argv[i])) hg::bench::exit_with_usage(kUsage);
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      g_device = Device::parse(argv[++i]);
    } else {
      hg::bench::exit_unknown_argument("bench_data", argv[i], kUsage);
    }
  }
  try {
    // A shard of 4M pseudo-random byte tokens, memory-mapped as training would read it.
    const std::string path = "/tmp/bench_data_" + std::to_string(::getpid()) + ".bin";
    std::vector<uint32_t> tokens(size_t(1) << 22);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint32_t(data::mix64(i) & 255);
    data::write_token_shard(path, tokens, data::TokenDType::u16, 256);
    auto shard = std::make_shared<const data::TokenShard>(path);
    std::filesystem::remove(path);  // the mapping keeps the data
    throughput("token_shard T256", std::make_shared<data::TokenWindowDataset>(std::vector{data::whole(shard)}, 256, 1),
               32, 256, quick ? 100 : 1000);
    const samples::AdditionTask task(3);
    throughput("addition 3-digit", std::make_shared<samples::AdditionDataset>(task, int64_t(1) << 20, 1337), 64, 12,
               quick ? 100 : 1000);
    data_wait(quick ? 30 : 200, 0);
    data_wait(quick ? 30 : 200, 50);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_data: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
