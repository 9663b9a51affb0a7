#pragma once
// The fuzz input of fuzz_checkpoint_directory: a checkpoint directory packed as records, so that one
// byte string describes the whole tree (the entry layout, which files an entry holds, their bytes):
//   record = [1 byte: slot] [4 bytes: length, little-endian] [length bytes: the file's content]
// The slot picks the file's path from kSlots (modulo its size); a length past the end takes what is
// left. A later record of the same slot replaces the earlier one. make_fuzz_seeds packs real
// directories (CheckpointDirectory::save) this way for the seed corpus.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace hg::fuzz {

// File entries, directory (sharded) entries with their state and shards, temporaries and retired
// entries (which a listing must skip), and a stray file.
inline const std::vector<std::string>& checkpoint_slots() {
  static const std::vector<std::string> slots = {
      "step_0000000001.safetensors",
      "step_0000000002.safetensors",
      "step_0000000003.safetensors",
      "step_0000000004/state.safetensors",
      "step_0000000004/optimizer.rank0-of-1.safetensors",
      "step_0000000004/optimizer.rank0-of-2.safetensors",
      "step_0000000004/optimizer.rank1-of-2.safetensors",
      "step_0000000005/state.safetensors",
      "step_0000000003.safetensors.tmp.999999999",
      "step_0000000006.tmp.999999999/state.safetensors",
      "step_0000000002.safetensors.old.999999999",
      "notes.txt",
  };
  return slots;
}

using PackedFile = std::pair<std::string, std::string>;  // path under the directory, content

inline std::vector<PackedFile> unpack_directory(const uint8_t* data, size_t size) {
  std::vector<PackedFile> files;
  size_t at = 0;
  while (at + 5 <= size) {
    const std::string& path = checkpoint_slots()[data[at] % checkpoint_slots().size()];
    const uint32_t length = uint32_t(data[at + 1]) | uint32_t(data[at + 2]) << 8 | uint32_t(data[at + 3]) << 16 |
                            uint32_t(data[at + 4]) << 24;
    at += 5;
    const size_t n = std::min(size_t(length), size - at);
    std::string content(reinterpret_cast<const char*>(data + at), n);
    at += n;
    bool replaced = false;
    for (PackedFile& f : files)
      if (f.first == path) f.second = content, replaced = true;
    if (!replaced) files.emplace_back(path, std::move(content));
  }
  return files;
}

inline std::string pack_record(size_t slot, const std::string& content) {
  std::string out(1, char(slot));
  const uint32_t n = uint32_t(content.size());
  for (int i = 0; i < 4; ++i) out += char((n >> (8 * i)) & 0xFF);
  return out + content;
}

// Removes `directory` and writes `files` under it.
inline void write_directory(const std::filesystem::path& directory, const std::vector<PackedFile>& files) {
  std::error_code ignored;
  std::filesystem::remove_all(directory, ignored);
  std::filesystem::create_directories(directory);
  for (const auto& [path, content] : files) {
    const std::filesystem::path file = directory / path;
    std::filesystem::create_directories(file.parent_path(), ignored);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << content;
  }
}

}  // namespace hg::fuzz
