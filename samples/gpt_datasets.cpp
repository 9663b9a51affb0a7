#include "samples/gpt_datasets.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include "data/sampler.h"

namespace hg::samples {

AdditionDataset::AdditionDataset(const AdditionTask& task, int64_t size, uint64_t seed) : task_(task), size_(size) {
  HG_CHECK(size >= 1, "[AdditionDataset] size must be >= 1, got ", size);
  int64_t limit = 1;
  for (int i = 0; i < task.digits(); ++i) limit *= 10;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> operand(0, limit - 1);
  pairs_.reserve(size_t(size));
  for (int64_t i = 0; i < size; ++i) {
    int64_t a, b;
    do {
      a = operand(rng);
      b = operand(rng);
    } while (task.is_held_out(a, b));
    pairs_.emplace_back(int32_t(a), int32_t(b));
  }
}

std::vector<data::Field> AdditionDataset::fields() const {
  const int64_t L = task_.problem_length() - 1;
  return {{"ids", i64, {L}}, {"targets", i64, {L}}};
}

std::pair<int64_t, int64_t> AdditionDataset::pair(int64_t index) const {
  HG_CHECK(index >= 0 && index < size_, "[AdditionDataset] index ", index, " is outside [0, ", size_, ")");
  return {pairs_[size_t(index)].first, pairs_[size_t(index)].second};
}

int32_t AdditionDataset::difficulty(int64_t index) const {
  const auto [a, b] = pair(index);
  int32_t digits = 1;
  for (int64_t x = std::max(a, b); x >= 10; x /= 10) ++digits;
  return digits;
}

std::vector<int32_t> AdditionDataset::difficulties() const {
  std::vector<int32_t> out(static_cast<size_t>(size_));
  for (int64_t i = 0; i < size_; ++i) out[size_t(i)] = difficulty(i);
  return out;
}

void AdditionDataset::get(int64_t index, const std::vector<void*>& out) const {
  const auto [a, b] = pair(index);
  const std::string text = task_.problem(a, b);
  const int64_t L = task_.problem_length() - 1, P = task_.prompt_length();
  int64_t* ids = static_cast<int64_t*>(out[0]);
  int64_t* targets = static_cast<int64_t*>(out[1]);
  for (int64_t t = 0; t < L; ++t) {
    ids[t] = (unsigned char)text[size_t(t)];
    // Position t predicts byte t + 1; only the answer bytes (after '=') are scored.
    targets[t] = t + 1 >= P ? (unsigned char)text[size_t(t + 1)] : -100;
  }
}

std::vector<int64_t> TokenData::prompt(int64_t n) const {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < std::min(n, train.front().size()); ++i) out.push_back(train.front().at(i));
  return out;
}

TokenData load_token_data(const std::string& paths, int64_t context) {
  TokenData data;
  std::vector<std::string> files;
  for (size_t start = 0; start <= paths.size();) {
    const size_t comma = std::min(paths.find(',', start), paths.size());
    files.push_back(paths.substr(start, comma - start));
    start = comma + 1;
  }
  for (const std::string& path : files) {
    data::TokenSpan whole_file;
    if (data::is_token_shard(path)) {
      auto shard = std::make_shared<const data::TokenShard>(path);
      HG_CHECK(shard->vocab_size() <= 256, "[train_gpt] token shard \"", path, "\" has a vocabulary of ",
               shard->vocab_size(), " ids; this byte-level model has 256 (write it with prepare_data)");
      shard->check_tokens();
      data.description += (data.description.empty() ? "" : ", ") + path + ": " + std::to_string(shard->size()) + " " +
                          data::token_dtype_name(shard->dtype()) + " tokens";
      whole_file = data::whole(shard);
    } else {
      HG_CHECK(files.size() == 1, "[train_gpt] --data \"", path,
               "\" is not a token shard; a comma-separated list must hold only shards (prepare_data writes them)");
      std::ifstream file(path, std::ios::binary);
      HG_CHECK(file.good(), "[train_gpt] cannot read --data file \"", path, "\": ", std::strerror(errno));
      auto bytes = std::make_shared<std::vector<uint32_t>>();
      for (auto it = std::istreambuf_iterator<char>(file); it != std::istreambuf_iterator<char>(); ++it)
        bytes->push_back((unsigned char)*it);
      data.description = path + ": " + std::to_string(bytes->size()) + " bytes";
      whole_file = data::whole(std::shared_ptr<const std::vector<uint32_t>>(bytes));
    }
    const int64_t split = whole_file.size() * 9 / 10;
    HG_CHECK(whole_file.size() - split > context + 1, "[train_gpt] --data file \"", path, "\" has ", whole_file.size(),
             " tokens; expected at least ", 10 * (context + 2), " for a context of ", context,
             " (10% is held out for validation)");
    data::TokenSpan train = whole_file, validation = whole_file;
    train.end = split;
    validation.begin = split;
    data.train.push_back(train);
    data.validation.push_back(validation);
  }
  return data;
}

std::vector<std::pair<Tensor, Tensor>> validation_batches(const TokenData& tokens, int64_t context, int64_t batch,
                                                          int batches) {
  const data::TokenWindowDataset windows(tokens.validation, context, 1);
  std::mt19937_64 rng(99);
  std::uniform_int_distribution<int64_t> pick(0, windows.size() - 1);
  std::vector<std::pair<Tensor, Tensor>> out;
  for (int i = 0; i < batches; ++i) {
    Tensor ids = empty({batch, context}, i64), targets = empty({batch, context}, i64);
    for (int64_t r = 0; r < batch; ++r)
      windows.get(pick(rng), {ids.data<int64_t>() + r * context, targets.data<int64_t>() + r * context});
    out.emplace_back(ids, targets);
  }
  return out;
}

}  // namespace hg::samples
