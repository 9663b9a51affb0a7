#pragma once
// The input layout of the fuzz_gpt_load target, shared with make_fuzz_seeds: the bytes are either a
// model.safetensors file alone, or -- when they start with "CFG" and a u16 little-endian length L --
// the L bytes after that header as the config.json beside the file, and the rest as the file. (A
// safetensors file starts with its u64 header length, so real files never read as the second form
// unless a mutation makes them: then they become config-bearing inputs, which is what is wanted.)
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace hg::fuzz {

struct GptLoadInput {
  bool has_config = false;
  std::string config;    // config.json's bytes (when has_config)
  const uint8_t* model;  // model.safetensors's bytes
  size_t model_size;
};

inline GptLoadInput split_gpt_load_input(const uint8_t* data, size_t size) {
  if (size >= 5 && data[0] == 'C' && data[1] == 'F' && data[2] == 'G') {
    const size_t length = std::min<size_t>(size - 5, size_t(data[3]) | size_t(data[4]) << 8);
    return {true, std::string(reinterpret_cast<const char*>(data + 5), length), data + 5 + length, size - 5 - length};
  }
  return {false, {}, data, size};
}

inline std::vector<char> join_gpt_load_input(const std::string& config, const std::vector<char>& model) {
  std::string bytes = "CFG";
  bytes += char(config.size() & 0xff);
  bytes += char((config.size() >> 8) & 0xff);
  bytes += config;
  bytes.append(model.data(), model.size());
  return std::vector<char>(bytes.begin(), bytes.end());
}

}  // namespace hg::fuzz
