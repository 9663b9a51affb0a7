// Checksums against silent corruption: CRC32C (engine/crc32c.h) on known answers and the two
// implementations against each other; safetensors files refuse a flipped bit in any tensor, naming
// the tensor and the file, and files without checksums still load (engine/safetensors.h CHECKSUMS);
// a checkpoint directory resumes from the newest intact entry (train/checkpoint_directory.h).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/crc32c.h"
#include "engine/random.h"
#include "engine/safetensors.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "support/check_error.h"
#include "support/temp_dir.h"
#include "train/checkpoint.h"
#include "train/checkpoint_directory.h"

using namespace hg;

namespace {

std::vector<unsigned char> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> out(n);
  for (unsigned char& b : out) b = static_cast<unsigned char>(rng());
  return out;
}

std::vector<unsigned char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(bytes.data()),
                                                                std::streamsize(bytes.size()));
}

// Flips bit `bit` of the byte at `offset` of `path`, in place.
void flip_bit(const std::string& path, size_t offset, int bit) {
  std::vector<unsigned char> bytes = read_file(path);
  REQUIRE(offset < bytes.size());
  bytes[offset] ^= static_cast<unsigned char>(1u << bit);
  write_file(path, bytes);
}

uint64_t header_length(const std::string& path) {
  const std::vector<unsigned char> bytes = read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return n;
}

// The file offset of the first byte of every tensor saved() by save() (which writes them in order,
// back to back, after the header), and its length.
struct Span {
  std::string name;
  size_t begin, size;
};
std::vector<Span> tensor_spans(const std::string& path, const safetensors::NamedTensors& saved) {
  std::vector<Span> spans;
  size_t offset = 8 + size_t(header_length(path));
  for (const auto& [name, t] : saved) {
    const size_t size = size_t(t.numel()) * t.element_size();
    spans.push_back({name, offset, size});
    offset += size;
  }
  return spans;
}

}  // namespace

TEST_CASE("CRC32C known answers, both implementations") {
  const std::string digits = "123456789";
  const std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF);
  std::vector<unsigned char> ramp(32);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<unsigned char>(i);
  for (auto crc : {&crc32c, &crc32c_portable, &crc32c_hardware}) {
    CHECK(crc(digits.data(), digits.size(), 0) == 0xE3069283u);
    CHECK(crc(nullptr, 0, 0) == 0u);
    // RFC 3720 (iSCSI), appendix B.4
    CHECK(crc(zeros.data(), zeros.size(), 0) == 0x8A9136AAu);
    CHECK(crc(ones.data(), ones.size(), 0) == 0x62A8AB43u);
    CHECK(crc(ramp.data(), ramp.size(), 0) == 0x46DD794Eu);
    // continuation: crc(a || b) == crc(b, crc(a))
    CHECK(crc(digits.data() + 4, 5, crc(digits.data(), 4, 0)) == 0xE3069283u);
  }
  MESSAGE("crc32c runs on: ", std::string(crc32c_implementation()));
}

TEST_CASE("CRC32C: the hardware lanes agree with the table on every length and alignment") {
  // Without SSE4.2 the "hardware" path is the table itself: comparing them would test nothing.
  const bool hardware = std::string(crc32c_implementation()) != "table";
  if (!hardware) MESSAGE("no SSE4.2 on this CPU: the lane comparison is skipped (only the bit-flip half runs)");
  // Lengths around the three-lane block (3 x 4096 bytes) and its multiples, from odd offsets.
  const std::vector<unsigned char> data = random_bytes(5 * 12288 + 64, 17);
  for (size_t size : {size_t(1), size_t(7), size_t(8), size_t(9), size_t(4095), size_t(12287), size_t(12288),
                      size_t(12289), size_t(12288 + 4096), size_t(2 * 12288 + 5), size_t(5 * 12288)})
    for (size_t offset : hardware ? std::vector<size_t>{0, 1, 3, 8} : std::vector<size_t>{}) {
      INFO("size ", size, " offset ", offset);
      const uint32_t table = crc32c_portable(data.data() + offset, size, 0x1234u);
      CHECK(crc32c_hardware(data.data() + offset, size, 0x1234u) == table);
      CHECK(crc32c(data.data() + offset, size, 0x1234u) == table);
    }
  // Every single-bit flip of a buffer changes its CRC (a CRC catches all 1-bit errors).
  std::vector<unsigned char> buffer = random_bytes(12288 + 100, 3);
  const uint32_t clean = crc32c(buffer.data(), buffer.size());
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t at = size_t(rng() % buffer.size());
    const int bit = int(rng() % 8);
    buffer[at] ^= static_cast<unsigned char>(1u << bit);
    CHECK(crc32c(buffer.data(), buffer.size()) != clean);
    buffer[at] ^= static_cast<unsigned char>(1u << bit);
  }
  CHECK(crc32c(buffer.data(), buffer.size()) == clean);
}

TEST_CASE("a flipped bit in any tensor of a saved file is refused with the tensor's name and the file") {
  test::TempDir dir;
  const std::string path = (dir.path / "model.safetensors").string();
  manual_seed(11);
  const safetensors::NamedTensors saved = {
      {"wte.weight", randn({16, 8})},
      {"h.0.attn.c_attn.weight", randn({8, 24}).to(DType::f16)},
      {"h.0.ln_1.bias", randn({8}).to(DType::bf16)},
      {"steps", from_vector(std::vector<int64_t>{3, 5, 7}, {3})},
      {"scale", randn({5}).to(DType::f64)},
      {"position", from_vector(std::vector<int32_t>{1, 2}, {2})},
  };
  safetensors::save(path, saved, {{"format", "test"}});
  {
    const safetensors::File file = safetensors::load(path);
    CHECK(file.checksummed);
    CHECK(file.metadata == safetensors::Metadata{{"format", "test"}});  // the checksum keys are taken out
    REQUIRE(file.tensors.size() == saved.size());
  }
  const std::vector<unsigned char> pristine = read_file(path);
  std::mt19937_64 rng(23);
  for (const Span& span : tensor_spans(path, saved)) {
    for (size_t at : {span.begin, span.begin + span.size - 1, span.begin + size_t(rng() % span.size)}) {
      write_file(path, pristine);
      flip_bit(path, at, int(rng() % 8));
      INFO("tensor ", span.name, " byte ", at);
      const std::string tensor = "tensor '" + span.name + "': checksum mismatch";
      CHECK_ERROR(safetensors::load(path), "model.safetensors", tensor.c_str(), "the file is damaged");
      // The header alone is still well formed: a metadata-only read does not look at the bytes.
      CHECK_NOTHROW(safetensors::load(path, safetensors::Verify::structure_only));
    }
  }
  write_file(path, pristine);
  CHECK_NOTHROW(safetensors::load(path));
}

TEST_CASE("files without checksums load, and malformed checksum keys are refused") {
  test::TempDir dir;
  const std::string path = (dir.path / "plain.safetensors").string();
  const Tensor weight = randn({4, 4});
  safetensors::save(path, {{"w", weight}}, {{"note", "x"}}, safetensors::SaveOptions{false});
  const safetensors::File file = safetensors::load(path);
  CHECK_FALSE(file.checksummed);
  CHECK(file.metadata == safetensors::Metadata{{"note", "x"}});
  REQUIRE(file.find("w") != nullptr);
  CHECK(std::memcmp(file.find("w")->data_ptr(), weight.data_ptr(), 64) == 0);

  // A file written by hand as another writer would (unpadded header, no metadata).
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += header;
  bytes += std::string("\0\0\x80\x3f\0\0\0\x40", 8);  // 1.0f, 2.0f
  const safetensors::File foreign = safetensors::load(dir.write("foreign.safetensors", bytes));
  CHECK_FALSE(foreign.checksummed);
  CHECK(foreign.find("a")->data<float>()[1] == 2.0f);

  const Tensor t = zeros({2});
  const auto with_metadata = [&](const safetensors::Metadata& metadata) {
    const std::string file = (dir.path / "m.safetensors").string();
    safetensors::save(file, {{"t", t}, {"u", t}}, {}, safetensors::SaveOptions{false});
    // Rewrite the header with the metadata given (the tensors' bytes stay where they are).
    std::string text = R"({"__metadata__":{)";
    bool first = true;
    for (const auto& [k, v] : metadata) text += (first ? "" : ",") + ("\"" + k + "\":\"" + v + "\""), first = false;
    text += R"(},"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"u":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
    std::string out(8, '\0');
    const uint64_t len = text.size();
    std::memcpy(out.data(), &len, 8);
    out += text + std::string(16, '\0');
    return dir.write("m.safetensors", out);
  };
  const std::string zero_crc = [&] {
    char s[9];
    std::snprintf(s, sizeof s, "%08x", crc32c(std::string(8, '\0').data(), 8));
    return std::string(s);
  }();
  CHECK_NOTHROW(safetensors::load(with_metadata({{"halfgrad.crc32c.t", zero_crc}, {"halfgrad.crc32c.u", zero_crc}})));
  CHECK_ERROR(safetensors::load(with_metadata({{"halfgrad.crc32c.t", zero_crc}})), "tensor 'u': has no checksum");
  CHECK_ERROR(safetensors::load(with_metadata({{"halfgrad.crc32c.t", "XYZ"}, {"halfgrad.crc32c.u", zero_crc}})),
              "'halfgrad.crc32c.t' is 'XYZ'", "8 lowercase hex digits");
  CHECK_ERROR(safetensors::load(with_metadata({{"halfgrad.crc32c.t", zero_crc},
                                               {"halfgrad.crc32c.u", zero_crc},
                                               {"halfgrad.crc32c.v", zero_crc}})),
              "'halfgrad.crc32c.v' is the checksum of a tensor the file does not hold");
  CHECK_ERROR(safetensors::save((dir.path / "r.safetensors").string(), {{"t", t}}, {{"halfgrad.crc32c.t", "0"}}),
              "reserves for checksums");
}

namespace {

// A tiny training state: a GPT, AdamW with state, a step counter.
struct Run {
  std::shared_ptr<nn::GPT> model;
  std::unique_ptr<optim::AdamW> optimizer;
  int64_t step = 0;
  train::TrainingState state;
  explicit Run(uint64_t seed) {
    manual_seed(seed);
    model = std::make_shared<nn::GPT>(nn::GPTConfig().vocab_size(16).context(8).n_layer(1).n_head(2).n_embd(16));
    optimizer = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions().lr(1e-2));
    state.model(*model).optimizer(*optimizer).counter("step", step);
  }
  void train_step() {
    std::vector<int64_t> tokens(2 * 9);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int64_t((i * 7 + size_t(step) * 3) % 16);
    const Tensor batch = from_vector(tokens, {2, 9});
    model->loss(batch.narrow(1, 0, 8).contiguous(), batch.narrow(1, 1, 8).contiguous()).backward();
    optimizer->step();
    optimizer->zero_grad();
    ++step;
  }
  std::vector<float> weights() const {
    const Tensor w = model->parameters()[0].contiguous();
    return std::vector<float>(w.data<float>(), w.data<float>() + w.numel());
  }
};

}  // namespace

TEST_CASE("a checkpoint directory resumes from the newest intact entry and refuses when none is") {
  test::TempDir dir;
  const std::string ckpt = (dir.path / "ckpt").string();
  Run run(5);
  train::CheckpointDirectory directory(ckpt, 5);
  std::vector<float> weights_at_2;
  for (int s = 1; s <= 3; ++s) {
    run.train_step();
    directory.save(run.state.run_config("{\"step\": " + std::to_string(s) + "}"), run.step);
    if (s == 2) weights_at_2 = run.weights();
  }
  const std::vector<train::CheckpointDirectory::Entry> entries = directory.list();
  REQUIRE(entries.size() == 3);
  for (const auto& e : entries) CHECK_FALSE(train::CheckpointDirectory::damage(e).has_value());

  // A flipped bit in the newest entry's model weights: skipped, with the tensor named.
  const std::string newest = entries[2].path;
  const safetensors::File file = safetensors::load(newest);
  const Tensor& first = file.tensors.front().second;
  const std::string first_name = file.tensors.front().first;
  flip_bit(newest, 8 + size_t(header_length(newest)) + 3, 5);  // a byte of the first tensor
  const std::optional<std::string> why = train::CheckpointDirectory::damage(entries[2]);
  REQUIRE(why.has_value());
  CHECK(why->find("tensor '" + first_name + "': checksum mismatch") != std::string::npos);
  CHECK(why->find(newest) != std::string::npos);
  (void)first;

  Run fresh(99);
  std::vector<train::CheckpointDirectory::Damaged> damaged;
  const std::optional<std::string> chosen = directory.latest_intact_for(fresh.state, &damaged);
  REQUIRE(chosen.has_value());
  CHECK(*chosen == entries[1].path);
  REQUIRE(damaged.size() == 1);
  CHECK(damaged[0].entry.path == newest);
  CHECK(damaged[0].reason == *why);
  // Moved aside, out of the listing, kept for a look.
  CHECK(damaged[0].moved_to == newest + ".damaged");
  CHECK(std::filesystem::exists(newest + ".damaged"));
  CHECK_FALSE(std::filesystem::exists(newest));
  CHECK(directory.list().size() == 2);
  CHECK(directory.load(*chosen, fresh.state) == 2);
  CHECK(fresh.step == 2);
  CHECK(fresh.weights() == weights_at_2);

  // The run config a resume restores is the intact entry's.
  const auto stored = train::read_run_config(ckpt);
  REQUIRE(stored.has_value());
  CHECK(stored->entry == entries[1].path);
  CHECK(stored->json == "{\"step\": 2}");

  // Cut the middle entry short and damage the oldest's last byte: nothing left to resume from.
  std::filesystem::resize_file(entries[1].path, std::filesystem::file_size(entries[1].path) - 1);
  flip_bit(entries[0].path, std::filesystem::file_size(entries[0].path) - 1, 0);
  Run untouched(7);
  const std::vector<float> before = untouched.weights();
  CHECK_ERROR(directory.latest_intact_for(untouched.state, nullptr), "every checkpoint in", "is damaged",
              "step_0000000002", "step_0000000001", "checksum mismatch", "truncated");
  CHECK(std::filesystem::exists(entries[1].path));  // nothing intact: nothing moved
  CHECK_ERROR(train::read_run_config(ckpt), "every checkpoint in", "is damaged");
  CHECK(untouched.weights() == before);
}

TEST_CASE("a sharded (directory) entry is damaged when any of its files is") {
  test::TempDir dir;
  const std::filesystem::path entry = dir.path / "step_0000000007";
  std::filesystem::create_directories(entry);
  const std::string state = (entry / "state.safetensors").string();
  const std::string shard1 = (entry / "optimizer.rank1-of-2.safetensors").string();
  safetensors::save(state, {{"model.w", randn({32})}});
  safetensors::save((entry / "optimizer.rank0-of-2.safetensors").string(), {{"m", randn({16})}, {"v", randn({16})}});
  safetensors::save(shard1, {{"m", randn({16})}, {"v", randn({16})}});
  dir.write("step_0000000007/notes.txt", "not a tensor file: ignored");
  const train::CheckpointDirectory::Entry sharded{7, entry.string(), true};
  CHECK_FALSE(train::CheckpointDirectory::damage(sharded).has_value());
  // The second tensor ('v', 64 bytes at the end) of rank 1's shard.
  flip_bit(shard1, std::filesystem::file_size(shard1) - 10, 2);
  const std::optional<std::string> why = train::CheckpointDirectory::damage(sharded);
  REQUIRE(why.has_value());
  CHECK(why->find("optimizer.rank1-of-2.safetensors") != std::string::npos);
  CHECK(why->find("tensor 'v': checksum mismatch") != std::string::npos);
  // A shard cut short is damage too.
  safetensors::save(shard1, {{"m", randn({16})}, {"v", randn({16})}});
  CHECK_FALSE(train::CheckpointDirectory::damage(sharded).has_value());
  std::filesystem::resize_file(state, 20);
  const std::optional<std::string> cut = train::CheckpointDirectory::damage(sharded);
  REQUIRE(cut.has_value());
  CHECK(cut->find("state.safetensors") != std::string::npos);
}

TEST_CASE("pruning after a fallback keeps an intact entry: damaged entries are moved aside, the new one stays") {
  test::TempDir dir;
  const std::string ckpt = (dir.path / "ckpt").string();
  Run run(11);
  {
    train::CheckpointDirectory writer(ckpt, 5);
    for (int64_t s : {4, 8, 12}) {
      run.train_step();
      writer.save(run.state, s);
    }
  }
  std::vector<train::CheckpointDirectory::Entry> entries = train::CheckpointDirectory(ckpt, 5).list();
  REQUIRE(entries.size() == 3);
  flip_bit(entries[1].path, std::filesystem::file_size(entries[1].path) - 5, 1);  // step 8
  flip_bit(entries[2].path, std::filesystem::file_size(entries[2].path) - 5, 3);  // step 12
  // Resumed with keep 1: falls back to 4, trains, saves step 8.
  train::CheckpointDirectory directory(ckpt, 1);
  Run resumed(12);
  std::vector<train::CheckpointDirectory::Damaged> damaged;
  const std::optional<std::string> chosen = directory.latest_intact_for(resumed.state, &damaged);
  REQUIRE(chosen.has_value());
  CHECK(*chosen == entries[0].path);
  REQUIRE(damaged.size() == 2);
  CHECK(directory.load(*chosen, resumed.state) == 4);
  resumed.train_step();
  const std::string written = directory.save(resumed.state, 8);
  const std::vector<train::CheckpointDirectory::Entry> left = directory.list();
  REQUIRE(left.size() == 1);
  CHECK(left[0].path == written);
  CHECK(left[0].step == 8);
  CHECK_FALSE(train::CheckpointDirectory::damage(left[0]).has_value());
  CHECK(std::filesystem::exists(entries[1].path + ".damaged"));  // the damaged step 8, kept aside
  CHECK(std::filesystem::exists(entries[2].path + ".damaged"));
  // A second fallback onto the same step name does not overwrite the first one kept aside.
  flip_bit(written, std::filesystem::file_size(written) - 5, 1);
  resumed.train_step();
  train::CheckpointDirectory(ckpt, 5).save(resumed.state, 4);
  damaged.clear();
  Run again(13);
  REQUIRE(directory.latest_intact_for(again.state, &damaged) == entries[0].path);
  REQUIRE(damaged.size() == 1);
  CHECK(damaged[0].moved_to == entries[1].path + ".damaged.2");

  // The entry just written is never pruned, even when newer entries outnumber keep_last.
  const std::string other = (dir.path / "other").string();
  train::CheckpointDirectory two(other, 5);
  two.save(run.state, 4);
  two.save(run.state, 12);
  train::CheckpointDirectory one(other, 1);
  const std::string eight = one.save(run.state, 8);
  const std::vector<train::CheckpointDirectory::Entry> kept = one.list();
  REQUIRE(kept.size() == 2);
  CHECK(kept[0].path == eight);
  CHECK(kept[1].step == 12);
}

TEST_CASE("a sharded entry missing state.safetensors or a shard of its set is damaged") {
  test::TempDir dir;
  const std::filesystem::path entry = dir.path / "step_0000000009";
  std::filesystem::create_directories(entry);
  const std::string state = (entry / "state.safetensors").string();
  safetensors::save(state, {{"model.w", randn({8})}});
  for (int r : {0, 1, 2}) safetensors::save((entry / ("optimizer.rank" + std::to_string(r) + "-of-3.safetensors")).string(), {{"m", randn({4})}});
  const train::CheckpointDirectory::Entry sharded{9, entry.string(), true};
  CHECK_FALSE(train::CheckpointDirectory::damage(sharded).has_value());
  std::filesystem::remove(entry / "optimizer.rank1-of-3.safetensors");
  std::optional<std::string> why = train::CheckpointDirectory::damage(sharded);
  REQUIRE(why.has_value());
  CHECK(why->find("lacks optimizer.rank1-of-3.safetensors") != std::string::npos);
  safetensors::save((entry / "optimizer.rank1-of-2.safetensors").string(), {{"m", randn({4})}});
  why = train::CheckpointDirectory::damage(sharded);
  REQUIRE(why.has_value());
  CHECK(why->find("expected one set") != std::string::npos);
  std::filesystem::remove(entry / "optimizer.rank1-of-2.safetensors");
  safetensors::save((entry / "optimizer.rank1-of-3.safetensors").string(), {{"m", randn({4})}});
  CHECK_FALSE(train::CheckpointDirectory::damage(sharded).has_value());
  std::filesystem::remove(state);
  why = train::CheckpointDirectory::damage(sharded);
  REQUIRE(why.has_value());
  CHECK(why->find("no state.safetensors") != std::string::npos);
  for (int r : {0, 1, 2}) std::filesystem::remove(entry / ("optimizer.rank" + std::to_string(r) + "-of-3.safetensors"));
  safetensors::save(state, {{"model.w", randn({8})}});
  why = train::CheckpointDirectory::damage(sharded);
  REQUIRE(why.has_value());
  CHECK(why->find("no optimizer shards") != std::string::npos);
}

TEST_CASE("a file of an entry that cannot be opened (EMFILE) is refused, not taken for damage") {
  test::TempDir dir;
  const std::string path = (dir.path / "step_0000000003.safetensors").string();
  safetensors::save(path, {{"model.w", randn({8})}});
  const train::CheckpointDirectory::Entry entry{3, path, false};
  REQUIRE_FALSE(train::CheckpointDirectory::damage(entry).has_value());
  // No file descriptor left: the lowest free one is at the soft limit.
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  const int probe = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(probe >= 0);
  ::close(probe);
  rlimit tight = saved;
  tight.rlim_cur = rlim_t(probe);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &tight) == 0);
  std::string message = "(no error)";
  bool damaged = false;
  try {
    damaged = train::CheckpointDirectory::damage(entry).has_value();
  } catch (const Error& e) {
    message = e.what();
  }
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &saved) == 0);
  CHECK_FALSE(damaged);
  CHECK(message.find("cannot open '" + path + "'") != std::string::npos);
  CHECK(message.find(std::strerror(EMFILE)) != std::string::npos);
  CHECK(message.find("not damage") != std::string::npos);
}

namespace {
// Rewrites the first occurrence of `from` in the file's header with `to` (same length).
void patch_header(const std::string& path, const std::string& from, const std::string& to) {
  REQUIRE(from.size() == to.size());
  std::vector<unsigned char> bytes = read_file(path);
  const std::string text(bytes.begin() + 8, bytes.begin() + 8 + std::ptrdiff_t(header_length(path)));
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  std::memcpy(bytes.data() + 8 + at, to.data(), to.size());
  write_file(path, bytes);
}
}  // namespace

TEST_CASE("a flipped bit in a metadata value (a step, a ZeRO range) or a checksum key's name is refused") {
  test::TempDir dir;
  Run run(21);
  run.train_step();
  const std::string ckpt = (dir.path / "ckpt.safetensors").string();
  train::save_checkpoint(ckpt, run.state, 12);
  const safetensors::File file = safetensors::load(ckpt, safetensors::Verify::structure_only);
  CHECK(file.header_checksummed);
  CHECK(file.checksummed);
  Run fresh(22);
  // "step":"12" -> "13": '2' (0x32) and '3' (0x33) differ in one bit.
  const std::string flipped = (dir.path / "flipped.safetensors").string();
  std::filesystem::copy_file(ckpt, flipped);
  patch_header(flipped, "\"step\":\"12\"", "\"step\":\"13\"");
  CHECK_ERROR(train::load_checkpoint(flipped, fresh.state), "flipped.safetensors", "header checksum mismatch", "metadata value");
  CHECK_ERROR(safetensors::load(flipped, safetensors::Verify::structure_only), "header checksum mismatch");
  CHECK_ERROR(train::checkpoint_run_config(flipped), "header checksum mismatch");
  // A ZeRO shard's range "1024:512" -> "1025:512" (one bit): the moments would land on other parameters.
  const std::string shard = (dir.path / "optimizer.rank0-of-2.safetensors").string();
  safetensors::save(shard, {{"exp_avg", randn({512})}}, {{"ranges", "1024:512"}, {"step", "3"}});
  CHECK_NOTHROW(safetensors::load(shard));
  patch_header(shard, "1024:512", "1025:512");
  CHECK_ERROR(safetensors::load(shard), "optimizer.rank0-of-2.safetensors", "header checksum mismatch");
  // A bit flipped in the header checksum key's prefix ("crc32c" -> "crc32b"): the key becomes plain
  // metadata, and a version-2 checkpoint without its header checksum is refused.
  const std::string unkeyed = (dir.path / "unkeyed.safetensors").string();
  std::filesystem::copy_file(ckpt, unkeyed);
  patch_header(unkeyed, "halfgrad.crc32c.__metadata__", "halfgrad.crc32b.__metadata__");
  CHECK_FALSE(safetensors::load(unkeyed).header_checksummed);
  CHECK_ERROR(train::load_checkpoint(unkeyed, fresh.state), "without its checksums", "the header is damaged");
  // The original still loads.
  CHECK(train::load_checkpoint(ckpt, fresh.state) == 12);
}

TEST_CASE("a resume falls back past an entry whose header checksum key lost a bit (crc32c -> crc32b)") {
  // load() takes the misspelt key for plain metadata and passes; the readers refuse a version-2 file
  // without its checksums, so damage() must call it damaged too, or the resume would stop there.
  test::TempDir dir;
  const std::string ckpt = (dir.path / "ckpt").string();
  Run run(31);
  train::CheckpointDirectory directory(ckpt, 5);
  for (int s = 1; s <= 2; ++s) {
    run.train_step();
    directory.save(run.state.run_config("{\"step\": " + std::to_string(s) + "}"), run.step);
  }
  const std::vector<train::CheckpointDirectory::Entry> entries = directory.list();
  REQUIRE(entries.size() == 2);
  const std::string newest = entries[1].path;
  patch_header(newest, "halfgrad.crc32c.__metadata__", "halfgrad.crc32b.__metadata__");
  CHECK_NOTHROW(safetensors::load(newest));  // the rule is the reader's, not load()'s
  const std::optional<std::string> why = train::CheckpointDirectory::damage(entries[1]);
  REQUIRE(why.has_value());
  CHECK(why->find(newest) != std::string::npos);
  CHECK(why->find("without its checksums") != std::string::npos);
  CHECK(why->find("the header is damaged") != std::string::npos);
  CHECK_FALSE(train::CheckpointDirectory::damage(entries[0]).has_value());

  Run fresh(32);
  std::vector<train::CheckpointDirectory::Damaged> damaged;
  const std::optional<std::string> chosen = directory.latest_intact_for(fresh.state, &damaged);
  REQUIRE(chosen.has_value());
  CHECK(*chosen == entries[0].path);
  REQUIRE(damaged.size() == 1);
  CHECK(damaged[0].entry.path == newest);
  CHECK(directory.load(*chosen, fresh.state) == 1);
  const auto stored = train::read_run_config(ckpt);
  REQUIRE(stored.has_value());
  CHECK(stored->entry == entries[0].path);
  CHECK(stored->json == "{\"step\": 1}");
}
