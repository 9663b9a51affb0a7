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
    field(key) << '"' << value << '"';
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
  JsonLine& add(const std::string& key, int value) { return add(key, (long long)value); }
  JsonLine& add(const std::string& key, long value) { return add(key, (long long)value); }
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
