// JSONL metrics through nlohmann::json (numbers are printed in their shortest round-trip form).
#include "metrics/metrics_log.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/error.h"

namespace hg::metrics {

Record& Record::set(const std::string& key, double value) {
  HG_CHECK(!key.empty() && key != "step", "[metrics] field name \"", key,
           "\" is reserved or empty; expected a name such as \"loss\"");
  for (auto& [k, v] : fields_) {
    if (k == key) {
      v = value;
      return *this;
    }
  }
  fields_.emplace_back(key, value);
  return *this;
}

Record& Record::set(const std::string& key, std::optional<double> value) {
  if (value) set(key, *value);
  return *this;
}

bool Record::has(const std::string& key) const { return find(key).has_value(); }

std::optional<double> Record::find(const std::string& key) const {
  for (const auto& [k, v] : fields_)
    if (k == key) return v;
  return std::nullopt;
}

double Record::at(const std::string& key) const {
  const std::optional<double> value = find(key);
  HG_CHECK(value.has_value(), "[metrics] step ", step_, " has no field \"", key, "\"");
  return *value;
}

std::string to_json_line(const Record& record) {
  nlohmann::ordered_json object;
  object["step"] = record.step();
  for (const auto& [key, value] : record.fields()) {
    if (std::isfinite(value))
      object[key] = value;
    else
      object[key] = nullptr;
  }
  return object.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Record parse_json_line(const std::string& line) {
  nlohmann::ordered_json object;
  try {
    object = nlohmann::ordered_json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    HG_FAIL("[metrics] not a JSON line: ", e.what());
  }
  HG_CHECK(object.is_object(), "[metrics] expected a JSON object per line, got ", object.type_name());
  HG_CHECK(object.contains("step") && object["step"].is_number_integer(),
           "[metrics] expected an integer \"step\" field in every line");
  Record record(object["step"].get<int64_t>());
  for (const auto& [key, value] : object.items()) {
    if (key == "step") continue;
    if (value.is_null()) {
      record.set(key, NAN);
    } else {
      HG_CHECK(value.is_number(), "[metrics] field \"", key, "\" at step ", record.step(), " is a ", value.type_name(),
               "; expected a number or null");
      record.set(key, value.get<double>());
    }
  }
  return record;
}

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "w");
  HG_CHECK(file_ != nullptr, "[metrics] cannot open the metrics log \"", path, "\" for writing");
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const Record& record) {
  const std::string line = to_json_line(record) + "\n";
  const bool ok = std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0;
  HG_CHECK(ok, "[metrics] writing to the metrics log \"", path_, "\" failed (disk full?)");
}

std::vector<Record> read_metrics(const std::string& path) {
  std::ifstream file(path);
  HG_CHECK(file.is_open(), "[metrics] cannot open the metrics log \"", path, "\"");
  std::vector<Record> records;
  std::string line;
  for (int64_t number = 1; std::getline(file, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      records.push_back(parse_json_line(line));
    } catch (const Error& e) {
      HG_FAIL("[metrics] ", path, ":", number, ": ", e.what());
    }
  }
  return records;
}

}  // namespace hg::metrics
