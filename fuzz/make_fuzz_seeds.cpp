// Writes the fuzz targets' seed corpora into <dir>/<target>/: valid files from the library's own
// writers (so the fuzzer starts from inputs that reach deep into each reader) and a few small
// malformed variants of each. Deterministic: the same files every run. Usage: make_fuzz_seeds DIR
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/token_shard.h"
#include "engine/safetensors.h"
#include "fuzz/checkpoint_directory_input.h"
#include "fuzz/fuzz_checkpoint_rig.h"
#include "fuzz/gpt_load_seeds.h"
#include "train/checkpoint.h"

using namespace hg;
namespace fs = std::filesystem;

namespace {

std::vector<char> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

void write_text(const fs::path& path, const std::string& text) { write_bytes(path, {text.begin(), text.end()}); }

// `valid` cut short and with its header length field damaged, beside it.
void malformed_variants(const fs::path& valid) {
  std::vector<char> bytes = read_bytes(valid);
  write_bytes(valid.string() + ".truncated", {bytes.begin(), bytes.begin() + std::ptrdiff_t(bytes.size() / 2)});
  bytes[1] = char(bytes[1] ^ 0x40);
  write_bytes(valid.string() + ".bad_length", bytes);
}

// Keeps `written` (which save() wrote with per-tensor CRC32Cs) as "<stem>_crc32c.safetensors" and
// rewrites `written` without them, as files from before checksums or other writers are: the fuzzer
// then reaches every check after the checksums from those, and the checksum keys' parsing from these.
void checksummed_twin(const fs::path& written) {
  fs::path twin = written;
  twin.replace_filename(written.stem().string() + "_crc32c.safetensors");
  fs::copy_file(written, twin, fs::copy_options::overwrite_existing);
  const safetensors::File file = safetensors::load(twin.string());
  safetensors::NamedTensors copies;
  for (const auto& [name, t] : file.tensors) copies.emplace_back(name, t.clone());
  safetensors::save(written.string(), copies, file.metadata, safetensors::SaveOptions{false});
}

// A safetensors file written by hand: `header` JSON and `data` bytes.
void raw_safetensors(const fs::path& path, const std::string& header, size_t data_bytes) {
  std::vector<char> bytes(8 + header.size() + data_bytes, 0);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((n >> (8 * i)) & 0xff);
  std::copy(header.begin(), header.end(), bytes.begin() + 8);
  for (size_t i = 0; i < data_bytes; ++i) bytes[8 + header.size() + i] = char(i * 37 + 11);
  write_bytes(path, bytes);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_seeds DIR (writes DIR/<target>/ seed files)\n");
    return 2;
  }
  const fs::path root = argv[1];
  for (const char* t : {"fuzz_safetensors", "fuzz_token_shard", "fuzz_checkpoint", "fuzz_cli", "fuzz_checkpoint_directory"})
    fs::create_directories(root / t);

  // safetensors: every dtype, a zero-size tensor, metadata; an unpadded header; malformed ones.
  const fs::path st = root / "fuzz_safetensors";
  safetensors::save((st / "dtypes.safetensors").string(),
                    {{"f32", from_vector(std::vector<float>{1.5f, -2, 3}, {3})},
                     {"f64", from_vector(std::vector<double>{0.25, 7}, {1, 2})},
                     {"f16", from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}).to(DType::f16)},
                     {"bf16", from_vector(std::vector<float>{-1, 0.5f}, {2}).to(DType::bf16)},
                     {"i32", from_vector(std::vector<int32_t>{7, -8}, {2})},
                     {"i64", from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 1, 3})},
                     {"empty", empty({0, 3}, DType::f32)}},
                    {{"format", "pt"}, {"note", "seed"}});
  checksummed_twin(st / "dtypes.safetensors");
  malformed_variants(st / "dtypes.safetensors");
  raw_safetensors(st / "unpadded.safetensors",
                  "{\"b\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[4,10]},"
                  "\"a\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]}}",
                  10);
  raw_safetensors(st / "duplicate_key.safetensors",
                  "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                  "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                  4);
  raw_safetensors(st / "overlap.safetensors",
                  "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},\"__metadata__\":{\"k\":\"v\"}}",
                  8);

  // token shards: u16 and u32, an empty one; a token past the vocabulary; malformed ones.
  const fs::path ts = root / "fuzz_token_shard";
  std::vector<uint32_t> tokens;
  for (uint32_t i = 0; i < 40; ++i) tokens.push_back((i * 7 + 3) % 256);
  data::write_token_shard((ts / "u16.bin").string(), tokens, data::TokenDType::u16, 256);
  data::write_token_shard((ts / "u32.bin").string(), tokens, data::TokenDType::u32, 70000);
  data::write_token_shard((ts / "empty.bin").string(), {}, data::TokenDType::u16, 1);
  malformed_variants(ts / "u16.bin");
  std::vector<char> out_of_vocab = read_bytes(ts / "u16.bin");
  out_of_vocab[32] = char(0xff);
  out_of_vocab[33] = char(0xff);
  write_bytes(ts / "token_past_vocab.bin", out_of_vocab);

  // checkpoints: the rig's own state (loads), another seed's (loads, other values), one of another
  // architecture (refused), a model-only file (refused), malformed ones.
  const fs::path ck = root / "fuzz_checkpoint";
  {
    fuzz::CheckpointRig rig(5);
    train::save_checkpoint((ck / "valid.safetensors").string(), rig.state, 1);
    checksummed_twin(ck / "valid.safetensors");
    malformed_variants(ck / "valid.safetensors");
    rig.model->save((ck / "model_only.safetensors").string());
    checksummed_twin(ck / "model_only.safetensors");
  }
  {
    fuzz::CheckpointRig other(9);
    train::save_checkpoint((ck / "other_seed.safetensors").string(), other.state, 4);
    checksummed_twin(ck / "other_seed.safetensors");
  }
  {
    // Same registration, wider model: another architecture.
    manual_seed(3);
    const auto config = nn::GPTConfig().vocab_size(8).context(4).n_layer(1).n_head(2).n_embd(6);
    nn::GPT wide(config);
    train::TrainingState state;
    state.model(wide);
    train::save_checkpoint((ck / "wide_model.safetensors").string(), state, 2);
    checksummed_twin(ck / "wide_model.safetensors");
  }

  // checkpoint directories, packed (fuzz/checkpoint_directory_input.h): three intact file entries (with
  // checksums), the newest with a flipped bit (resume falls back), every one damaged, a sharded entry
  // for a local optimizer (refused), temporaries and a stray file beside an entry.
  const fs::path cd = root / "fuzz_checkpoint_directory";
  {
    fuzz::CheckpointRig rig(5);
    const fs::path scratch = fs::temp_directory_path() / ("make_fuzz_seeds_" + std::to_string(::getpid()));
    fs::create_directories(scratch);
    std::vector<std::string> entries;
    for (int64_t step = 1; step <= 3; ++step) {
      train::save_checkpoint((scratch / ("entry" + std::to_string(step))).string(), rig.state.run_config("{\"seed\": 5}"), step);
      std::vector<char> bytes = read_bytes(scratch / ("entry" + std::to_string(step)));
      entries.emplace_back(bytes.begin(), bytes.end());
    }
    fs::remove_all(scratch);
    const auto flipped = [](std::string bytes, size_t from_end) {
      bytes[bytes.size() - from_end] ^= 0x10;
      return bytes;
    };
    const auto write_packed = [&](const char* name, const std::vector<std::pair<size_t, std::string>>& records) {
      std::string out;
      for (const auto& [slot, content] : records) out += fuzz::pack_record(slot, content);
      write_text(cd / name, out);
    };
    write_packed("three_entries", {{0, entries[0]}, {1, entries[1]}, {2, entries[2]}});
    write_packed("newest_damaged", {{0, entries[0]}, {1, entries[1]}, {2, flipped(entries[2], 9)}});
    write_packed("all_damaged", {{1, flipped(entries[1], 1)}, {2, flipped(entries[2], 100)}});
    write_packed("sharded_entry", {{3, entries[2]}, {4, entries[0]}});
    write_packed("temporaries", {{0, entries[0]}, {8, entries[2]}, {9, entries[1]}, {10, entries[1]}, {11, "x"}});
  }

  // command lines, one argument per line.
  const fs::path cl = root / "fuzz_cli";
  write_text(cl / "defaults", "");
  write_text(cl / "sizes", "--layers\n4\n--heads=2\n--dim\n64\n--context=32\n--batch\n8");
  write_text(cl / "precision", "--precision\nfp16\n--loss-scale=static:1024\n--grad-accum\n2");
  write_text(cl / "batch_tokens", "--batch-tokens=4096\n--batch\n16\n--context\n32");
  write_text(cl / "device", "--device=cuda:1\n--resume\n--no-resume");
  write_text(cl / "bad", "--layers\n-1\n--lr=nan\n--unknown\nx");
  write_text(cl / "help", "--dropout=0.5\n--seed=7\n--help");
  write_text(cl / "print_config", "--lr\n0.25\n--print-config");
  // run config files (an input starting with '{').
  write_text(cl / "config.json", "{\"layers\": 4, \"lr\": 0.5, \"dropout\": 0.1, \"precision\": \"bf16\",\n"
                                  " \"loss-scale\": \"static:1024\", \"resume\": true, \"device\": \"cuda:0\"}");
  write_text(cl / "config_bad.json", "{\"layers\": \"4\", \"grad_accum\": 2, \"lr\": 1e999,\n \"seed\": -1, }");
  // --resume's restore: fixed keys equal to those given (the path as another name), then one changed.
  write_text(cl / "config_resume.json", "{\"layers\": 2, \"load\": \"./fuzz.safetensors\", \"heads\": 8, \"lr\": 9}");
  write_text(cl / "config_resume_changed.json", "{\"layers\": 3, \"dim\": 64, \"precision\": \"fp16\"}");
  write_text(cl / "config_non_ascii.json", "{\"device\": \"c\\u00e9\\ud83d\\ude00u\", \"load\": \"" +
                                               std::string(70, 'x') + "\\u00e9\"}");
  // GPT::load: native and GPT-2 layouts, with and without config.json (fuzz/gpt_load_seeds.h).
  fs::create_directories(root / "fuzz_gpt_load");
  fuzz::write_gpt_load_seeds(root / "fuzz_gpt_load");
  std::printf("seed corpora written under %s\n", root.c_str());
  return 0;
}
