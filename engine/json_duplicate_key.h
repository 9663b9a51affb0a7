#pragma once
// A parser callback for nlohmann's JSON parse that records the first key given twice in the top-level
// object (a plain parse keeps only the last one): the run config files (app/run_config.cpp) and a GPT-2
// directory's config.json (layers/gpt_hf_config.cpp) refuse such a file by name. Pass it by reference:
//   TopLevelDuplicateKey duplicates;
//   Json::parse(text, std::ref(duplicates));  then duplicates.duplicate names the key, if any.
// Its call operator is a template over nlohmann's parse event and JSON types, so that this installed header
// includes no dependency's header.
#include <optional>
#include <set>
#include <string>

namespace hg {

struct TopLevelDuplicateKey {
  int depth = 0;
  std::set<std::string> seen;
  std::optional<std::string> duplicate;
  template <class Event, class Json>
  bool operator()(int, Event event, Json& parsed) {
    if (event == Event::object_start || event == Event::array_start) ++depth;
    if (event == Event::object_end || event == Event::array_end) --depth;
    if (event == Event::key && depth == 1 && !seen.insert(parsed.template get<std::string>()).second && !duplicate)
      duplicate = parsed.template get<std::string>();
    return true;
  }
};

}  // namespace hg
