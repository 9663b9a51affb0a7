#pragma once
// Benchmarks print one JSON object per line. JsonLine builds one: JsonLine("gemm").add("m", 1024).print().
#include <cstdio>
#include <sstream>
#include <string>

namespace hg::bench {

class JsonLine {
 public:
  explicit JsonLine(const std::string& bench) { add("bench", bench); }
  JsonLine& add(const std::string& key, const std::string& value) {
    std::ostringstream& out = field(key);
    out << '"';
    for (char c : value) {
      if (c == '"' || c == '\\') out << '\\' << c;
      else if (c == '\n') out << "\\n";
      else if (static_cast<unsigned char>(c) < 0x20) out << ' ';
      else out << c;
    }
    out << '"';
    return *this;
  }
  JsonLine& add(const std::string& key, const char* value) { return add(key, std::string(value)); }
  JsonLine& add(const std::string& key, double value) {
    field(key) << value;
    return *this;
  }
  JsonLine& add(const std::string& key, long long value) {
    field(key) << value;
    return *this;
  }
  JsonLine& add(const std::string& key, bool value) {
    field(key) << (value ? "true" : "false");
    return *this;
  }
  JsonLine& add(const std::string& key, int value) { return add(key, (long long)value); }
  JsonLine& add(const std::string& key, long value) { return add(key, (long long)value); }
  // A JSON value written as is (e.g. RuntimeCounters::json()).
  JsonLine& add_raw(const std::string& key, const std::string& json) {
    field(key) << json;
    return *this;
  }
  // add_raw, or nothing when json is empty (a figure that this run did not measure).
  JsonLine& add_raw_if(const std::string& key, const std::string& json) {
    return json.empty() ? *this : add_raw(key, json);
  }
  void print() const {
    std::printf("{%s}\n", body_.str().c_str());
    std::fflush(stdout);
  }

 private:
  std::ostringstream& field(const std::string& key) {
    if (!first_) body_ << ", ";
    first_ = false;
    body_ << '"' << key << "\": ";
    return body_;
  }
  std::ostringstream body_;
  bool first_ = true;
};

}  // namespace hg::bench
