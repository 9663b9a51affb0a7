#include "samples/gpt_datasets.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include "data/sampler.h"
#include "samples/text_cuts.h"

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

namespace {

std::vector<std::string> split_paths(const std::string& paths) {
  std::vector<std::string> files;
  for (size_t start = 0; start <= paths.size();) {
    const size_t comma = std::min(paths.find(',', start), paths.size());
    files.push_back(paths.substr(start, comma - start));
    start = comma + 1;
  }
  return files;
}

// Every shard of one --data list must share the first one's vocabulary (one tokenizer wrote them).
void check_same_vocab(const std::string& first, uint64_t first_vocab, const std::string& path, uint64_t vocab) {
  HG_INPUT_CHECK(vocab == first_vocab, "[token data] token shard \"", path, "\" has a vocabulary of ", vocab,
                 " ids, but \"", first, "\" has ", first_vocab,
                 "; expected every shard of --data to come from the same tokenizer");
}

}  // namespace

TokenData load_token_data(const std::string& paths, int64_t context) {
  TokenData data;
  const std::vector<std::string> files = split_paths(paths);
  for (const std::string& path : files) {
    data::TokenSpan whole_file;
    if (data::is_token_shard(path)) {
      auto shard = std::make_shared<const data::TokenShard>(path);
      if (data.train.empty())
        data.vocab_size = shard->vocab_size();
      else
        check_same_vocab(files.front(), data.vocab_size, path, shard->vocab_size());
      shard->check_tokens();
      data.description += (data.description.empty() ? "" : ", ") + path + ": " + std::to_string(shard->size()) + " " +
                          data::token_dtype_name(shard->dtype()) + " tokens";
      whole_file = data::whole(shard);
    } else {
      HG_INPUT_CHECK(
          files.size() == 1, "[token data] --data \"", path,
          "\" is not a token shard; a comma-separated list must hold only shards (prepare_data writes them)");
      std::ifstream file(path, std::ios::binary);
      HG_INPUT_CHECK(file.good(), "[token data] cannot read --data file \"", path, "\": ", std::strerror(errno));
      auto bytes = std::make_shared<std::vector<uint32_t>>();
      for (auto it = std::istreambuf_iterator<char>(file); it != std::istreambuf_iterator<char>(); ++it)
        bytes->push_back((unsigned char)*it);
      data.description = path + ": " + std::to_string(bytes->size()) + " bytes";
      data.vocab_size = 256;
      whole_file = data::whole(std::shared_ptr<const std::vector<uint32_t>>(bytes));
    }
    const int64_t split = whole_file.size() * 9 / 10;
    HG_INPUT_CHECK(whole_file.size() - split > context + 1, "[token data] --data file \"", path, "\" has ",
                   whole_file.size(), " tokens; expected at least ", 10 * (context + 2), " for a context of ", context,
                   " (10% is held out for validation)");
    data::TokenSpan train = whole_file, validation = whole_file;
    train.end = split;
    validation.begin = split;
    data.train.push_back(train);
    data.validation.push_back(validation);
  }
  return data;
}

uint64_t token_data_vocab(const std::string& paths) {
  const std::vector<std::string> files = split_paths(paths);
  uint64_t vocab = 0;
  for (const std::string& path : files) {
    if (!data::is_token_shard(path)) return 256;  // a text file, read as bytes (load_token_data refuses mixed lists)
    const data::TokenShard shard(path);
    if (&path == &files.front())
      vocab = shard.vocab_size();
    else
      check_same_vocab(files.front(), vocab, path, shard.vocab_size());
  }
  return vocab;
}

int64_t fresh_model_vocab(uint64_t data_vocab, std::optional<int64_t> requested, const std::string& data) {
  constexpr uint64_t kLargest = uint64_t(1) << 20;  // train_gpt's bound on --vocab
  HG_CHECK(data_vocab >= 1 && data_vocab <= kLargest, "[train_gpt] --data ", data, " has a vocabulary of ", data_vocab,
           " ids (its shards' header); expected 1 to ", kLargest);
  HG_CHECK(!requested || uint64_t(*requested) == data_vocab, "[train_gpt] --vocab ", requested.value_or(0),
           " does not match the vocabulary of --data ", data, " (", data_vocab,
           " ids, from its shards' header); expected --vocab ", data_vocab, " or no --vocab");
  return int64_t(data_vocab);
}

void check_model_vocab(int64_t model_vocab, uint64_t data_vocab, const std::string& model, const std::string& data) {
  HG_CHECK(model_vocab >= 0 && uint64_t(model_vocab) >= data_vocab, "[train_gpt] the model of --load ", model, " has ",
           model_vocab, " token ids, fewer than the ", data_vocab, " of --data ", data,
           "; expected a model whose vocabulary covers the data's");
}

void check_tokenizer_vocab(uint64_t tokenizer_vocab, uint64_t data_vocab, const std::string& path,
                           const std::string& data) {
  HG_INPUT_CHECK(tokenizer_vocab == data_vocab, "[token data] --tokenizer ", path, " has a vocabulary of ",
                 tokenizer_vocab, " ids, but --data ", data, " has ", data_vocab,
                 " (its shards' header); expected the tokenizer that prepare_data wrote the shards with");
}

void check_tokenizer_ids(const TokenData& data, const std::function<std::string(std::span<const uint32_t>)>& decode,
                         const std::function<std::vector<uint32_t>(std::string_view)>& encode,
                         const std::vector<std::string>& special_tokens, const std::string& path,
                         const std::string& data_paths, int64_t probe) {
  if (data.train.empty()) return;
  const data::TokenSpan& span = data.train.front();
  std::vector<uint32_t> ids(size_t(std::min(probe, span.size())));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = span.at(int64_t(i));
  auto refuse = [&](const std::string& what) {
    HG_INPUT_FAIL("[token data] --tokenizer ", path, " does not encode the text of --data ", data_paths,
                  " to its ids (", what, "); expected the tokenizer that prepare_data wrote the shards with");
  };
  // Each token's text, and where it starts in the decoded text (decode concatenates them).
  std::vector<size_t> starts(ids.size() + 1, 0);
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string piece;
    try {
      piece = decode(std::span<const uint32_t>(&ids[i], 1));
    } catch (const Error&) {
      refuse("it cannot decode id " + std::to_string(ids[i]) + ", token " + std::to_string(i));
    }
    text += piece;
    starts[i + 1] = text.size();
  }
  const TextCuts cuts(special_tokens);
  // The first token boundary after the span's start that is a safe cut, then the last safe cut after it.
  size_t first = 0;
  while (first + 1 < ids.size() && !cuts.is_cut(text, starts[first + 1])) ++first;
  if (++first >= ids.size()) return;
  const size_t begin = starts[first];
  const size_t end = begin + cuts.last_cut(std::string_view(text).substr(begin));
  if (end <= begin) return;
  // With the tokenizer that wrote the ids, every safe cut is a token boundary.
  const auto last = std::lower_bound(starts.begin(), starts.end(), end);
  if (last == starts.end() || *last != end)
    refuse("its safe cut at byte " + std::to_string(end) + " of the decoded text falls inside a token");
  const std::vector<uint32_t> again = encode(std::string_view(text).substr(begin, end - begin));
  const std::span<const uint32_t> stored(ids.data() + first, size_t(last - starts.begin()) - first);
  const auto [a, b] = std::mismatch(stored.begin(), stored.end(), again.begin(), again.end());
  if (a != stored.end() || b != again.end())
    refuse("token " + std::to_string(first + size_t(a - stored.begin())) + " of " +
           (span.shard ? span.shard->path() : data_paths) + " is " +
           (a != stored.end() ? std::to_string(*a) : "past the end") + ", the tokenizer encodes it as " +
           (b != again.end() ? std::to_string(*b) : "nothing"));
}

TokenBytes TokenBytes::byte_level() { return TokenBytes(std::vector<uint32_t>(256, 1)); }

int64_t TokenBytes::bytes(std::span<const int64_t> ids) const {
  int64_t total = 0;
  for (const int64_t id : ids) {
    if (id < 0) continue;  // ignored by the loss (-100)
    HG_CHECK(uint64_t(id) < lengths_.size(), "[bits per byte] token id ", id, " is outside the tokenizer's ",
             lengths_.size(), " ids");
    total += lengths_[size_t(id)];
  }
  return total;
}

double bits_per_byte(double mean_loss, int64_t tokens, int64_t bytes) {
  HG_CHECK(tokens >= 0 && bytes > 0, "[bits per byte] needs a positive byte count, got ", bytes, " bytes for ", tokens,
           " tokens");
  return mean_loss * double(tokens) / (std::log(2.0) * double(bytes));
}

UnigramBaseline unigram_baseline(const TokenData& data, const TokenBytes* bytes) {
  std::vector<int64_t> counts(size_t(data.vocab_size), 1);  // add-one smoothing
  int64_t total = int64_t(data.vocab_size);
  for (const data::TokenSpan& span : data.train)
    for (int64_t i = 0; i < span.size(); ++i) ++counts[span.at(i)], ++total;
  UnigramBaseline out;
  int64_t byte_count = 0;
  for (const data::TokenSpan& span : data.validation)
    for (int64_t i = 0; i < span.size(); ++i) {
      const int64_t id = span.at(i);
      out.loss -= std::log(double(counts[size_t(id)]) / double(total));
      ++out.tokens;
      if (bytes) byte_count += bytes->bytes(std::span<const int64_t>(&id, 1));
    }
  out.loss /= double(std::max<int64_t>(out.tokens, 1));
  if (bytes) out.bytes = byte_count;
  return out;
}

ValidationSet validation_set(const TokenData& tokens, int64_t context, int64_t batch, int batches,
                             const TokenBytes* bytes) {
  const data::TokenWindowDataset windows(tokens.validation, context, 1);
  std::mt19937_64 rng(99);
  std::uniform_int_distribution<int64_t> pick(0, windows.size() - 1);
  ValidationSet out;
  int64_t byte_count = 0;
  for (int i = 0; i < batches; ++i) {
    Tensor ids = empty({batch, context}, i64), targets = empty({batch, context}, i64);
    for (int64_t r = 0; r < batch; ++r)
      windows.get(pick(rng), {ids.data<int64_t>() + r * context, targets.data<int64_t>() + r * context});
    const std::span<const int64_t> scored(targets.data<int64_t>(), size_t(batch * context));
    out.tokens += std::count_if(scored.begin(), scored.end(), [](int64_t t) { return t >= 0; });
    if (bytes) byte_count += bytes->bytes(scored);
    out.batches.emplace_back(ids, targets);
  }
  if (bytes) out.bytes = byte_count;
  return out;
}

}  // namespace hg::samples
