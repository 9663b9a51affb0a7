#pragma once
// safetensors I/O: named tensors in the published format (https://github.com/huggingface/safetensors),
// read by memory map (zero-copy) and written atomically.
//
// FORMAT
//   [8 bytes]  N, u64 little-endian: the header length
//   [N bytes]  the header, a UTF-8 JSON object:
//                "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...
//                "__metadata__": {"<key>": "<string value>", ...}        (optional)
//              offsets are byte offsets into the data buffer that follows the header; the header
//              may end in spaces (writers pad it so the buffer starts 8-aligned).
//   [rest]     the data buffer: each tensor's elements row-major, little-endian, no strides.
//   dtypes read and written: F32 F64 F16 BF16 I32 I64. The format's others (BOOL U8 I8 U16 I16 U32
//   U64 F8_E4M3 F8_E5M2 ...) are recognised and refused as "unsupported dtype".
//
// RULES ENFORCED ON LOAD (each violation throws hg::Error naming the file, the tensor where there is
// one, and the rule): the file holds at least the 8-byte length; N <= 100,000,000 and the header
// fits in the file; the header is valid UTF-8 JSON, an object, with no duplicate key at any level;
// every entry is an object with a string "dtype", a "shape" array of non-negative integers (rank
// <= 8) and a "data_offsets" pair of non-negative integers begin <= end with end - begin ==
// numel * dtype size; "__metadata__", when present, is an object of strings; and the tensors tile the
// buffer exactly: sorted by offset the first begins at 0, each begins where the previous ended (no
// hole, no overlap), and 8 + N + the last end is the file size (no trailing bytes). These include
// every check of the reference (Rust) reader, which does not refuse duplicate keys (its JSON parser
// keeps one), empty names or rank > 8 as halfgrad does; keys may come in any order and the header need
// not be padded, so files from other writers load.
//
// LOADED TENSORS
//   - Zero-copy views of one private mapping of the file (PROT_READ|PROT_WRITE, MAP_PRIVATE): each
//     tensor's Storage keeps the mapping alive, so tensors outlive the File; the mapping is unmapped
//     when the last of them lets go. Writing to a loaded tensor is copy-on-write: it changes this
//     process's pages, never the file.
//   - A tensor whose bytes are not aligned to its element size in memory (possible when another
//     writer did not pad the header) is copied into a fresh tensor instead; so are zero-size tensors.
//   - The mapping reads the file lazily: a file truncated by someone else while its tensors are
//     alive makes the next touch of a lost page fault (SIGBUS). save() never does that to a mapped
//     file: it replaces the path by rename, and the old file lives on until unmapped.
//
// CHECKSUMS: save() records the CRC32C (engine/crc32c.h) of every tensor's bytes in the metadata,
// one key per tensor: "halfgrad.crc32c.<name>": "<8 lowercase hex digits>". load() verifies each
// (at memory speed: the CPU's crc32 instruction) and refuses a mismatch naming the file and the
// tensor ("tensor 'x': checksum mismatch ..."): a flipped bit anywhere in the data buffer is caught.
// The keys are taken out of File::metadata (a load-save round trip keeps the caller's metadata as it
// was). Files without them (other writers, halfgrad before checksums) load unverified; a file with
// some must have one for every tensor, each naming a tensor of the file, well formed.
// The header has one too: "halfgrad.crc32c.__metadata__" is the CRC32C of the user metadata (sorted,
// length-prefixed key/value pairs) and every tensor's name, dtype, shape and data offsets, verified on
// every load that finds it, Verify::structure_only included ("header checksum mismatch"): a flipped
// digit in a metadata value (a step, a ZeRO range) is refused. Whether a file must have checksums is
// its reader's rule (load_checkpoint and ZeRO's shards require them of their current version).
//
// SAVE: tensors in the order given, each made contiguous and moved to the CPU; names unique and
// non-empty (and not "__metadata__"); the header is padded with spaces to a multiple of 8 bytes.
// The file is written to "<path>.tmp.<pid>", fsync'd, renamed over <path> and the directory
// fsync'd, so <path> holds either the old file or the whole new one. On failure the temporary file is
// removed and hg::Error names the path and the system's reason.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace hg::safetensors {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using Metadata = std::map<std::string, std::string>;

// The metadata key prefix of the per-tensor checksums (reserved: save() refuses it in `metadata`).
inline constexpr const char* kChecksumKeyPrefix = "halfgrad.crc32c.";

struct SaveOptions {
  bool checksums = true;  // false: no CRC32C keys (a file as other writers make it; benchmarks, tests)
};

// Writes `tensors` (in this order) and `metadata` to `path`, atomically.
void save(const std::string& path, const NamedTensors& tensors, const Metadata& metadata = {},
          const SaveOptions& options = {});

enum class Verify {
  checksums,       // every tensor's CRC32C, where the file has them (reads every byte)
  structure_only,  // the header and the layout only (reads only the header: for its metadata)
};

struct File {
  NamedTensors tensors;  // ordered by data offset (so in save()'s order for files written by save())
  Metadata metadata;     // without the checksum keys
  bool checksummed = false;  // the file has a CRC32C for every tensor (verified unless structure_only)
  bool header_checksummed = false;  // the file has the header's CRC32C (verified in both modes)
  // The tensor named `name`, or nullptr.
  const Tensor* find(const std::string& name) const;
};

// The rule of a format version written with checksums (a training checkpoint's "version" "2", a ZeRO
// shard's "shard_version" "2"): a file whose metadata `version_key` is `checksummed_version` must have
// the header's checksum and every tensor's (when it holds any). One that lacks them lost them to damage:
// a flipped bit in a key's name ("crc32c" -> "crc32b") turns the key into plain metadata, which load()
// cannot tell from a file written without checksums. True when `file` breaks that rule. The readers
// (load_checkpoint, ZeroOptimizer::load_state) and CheckpointDirectory::damage share it.
bool lacks_promised_checksums(const File& file, const std::string& version_key, const std::string& checksummed_version);

// Reads and validates `path` (see RULES and CHECKSUMS above).
File load(const std::string& path, Verify verify = Verify::checksums);

}  // namespace hg::safetensors
