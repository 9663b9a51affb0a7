#pragma once
// The tokenizer of a run's token shards, as the text tasks use it (samples/gpt_tasks.h ShardTokenizer):
// loaded from its tokenizer.json, with every id's byte length for bits per byte.
#include <string>

#include "samples/gpt_tasks.h"

namespace hg::samples {

// An hg::Error names the file when it cannot be loaded (text/tokenizer.h).
ShardTokenizer load_shard_tokenizer(const std::string& path);

}  // namespace hg::samples
