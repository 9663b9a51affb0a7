#include "app/cli.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "engine/cuda/cuda_context.h"

namespace hg::app {

Flags::Flags(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

namespace {
// --help, --config and --print-config belong to Flags; a name is declared once.
void check_new_name(const std::string& program, const std::string& name, bool taken) {
  HG_CHECK(!name.empty() && name != "help" && name != "config" && name != "print-config" && !taken, "[Flags] ", program,
           " declares the flag '", name, "' twice or one of Flags' own (help, config, print-config)");
}
}  // namespace

int64_t& Flags::add_int(const std::string& name, int64_t value, const std::string& help, int64_t min, int64_t max) {
  check_new_name(program_, name, find(name) != nullptr);
  ints_.push_back(value);
  flags_.push_back({name, help, "int", std::to_string(value), &ints_.back(), double(min), 0, min, max});
  return ints_.back();
}

double& Flags::add_double(const std::string& name, double value, const std::string& help, double min, double max) {
  check_new_name(program_, name, find(name) != nullptr);
  doubles_.push_back(value);
  std::ostringstream text;
  text << value;
  flags_.push_back({name, help, "float", text.str(), &doubles_.back(), min, max, 0, 0});
  return doubles_.back();
}

std::string& Flags::add_string(const std::string& name, std::string value, const std::string& help) {
  check_new_name(program_, name, find(name) != nullptr);
  strings_.push_back(value);
  flags_.push_back({name, help, "text", value.empty() ? "\"\"" : value, &strings_.back(), 0, 0, 0, 0});
  return strings_.back();
}

bool& Flags::add_bool(const std::string& name, bool value, const std::string& help) {
  check_new_name(program_, name, find(name) != nullptr);
  bools_.push_back(value);
  flags_.push_back({name, help, "bool", value ? "true" : "false", &bools_.back(), 0, 0, 0, 0});
  return bools_.back();
}

Flags::Flag* Flags::find(const std::string& name) {
  return const_cast<Flag*>(static_cast<const Flags&>(*this).find(name));
}

const Flags::Flag* Flags::find(const std::string& name) const {
  const std::string* renamed = renamed_to(name);
  const std::string& current = renamed ? *renamed : name;
  for (const Flag& f : flags_)
    if (f.name == current) return &f;
  return nullptr;
}

const std::string* Flags::renamed_to(const std::string& old_name) const {
  for (const auto& [old, now] : renamed_)
    if (old == old_name) return &now;
  return nullptr;
}

Flags& Flags::rename(const std::string& old_name, const std::string& new_name) {
  check_new_name(program_, old_name, find(old_name) != nullptr);
  HG_CHECK(find(new_name) != nullptr, "[Flags] rename: '", new_name, "' is not a flag of ", program_);
  renamed_.emplace_back(old_name, new_name);
  return *this;
}

Flags& Flags::after_parse(std::function<void()> hook) {
  after_parse_.push_back(std::move(hook));
  return *this;
}

bool Flags::given(const std::string& name) const {
  const Flag* flag = find(name);
  HG_CHECK(flag != nullptr, "[Flags] given(): '", name, "' is not a flag of ", program_);
  return flag->given;
}

namespace {
bool throw_usage_exits = false;
}

size_t utf8_error_offset(const std::string& text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned lead = bytes[i];
    size_t length = 0;
    uint32_t code = 0, least = 0;
    if (lead < 0x80)
      length = 1, code = lead;
    else if ((lead & 0xE0) == 0xC0)
      length = 2, code = lead & 0x1F, least = 0x80;
    else if ((lead & 0xF0) == 0xE0)
      length = 3, code = lead & 0x0F, least = 0x800;
    else if ((lead & 0xF8) == 0xF0)
      length = 4, code = lead & 0x07, least = 0x10000;
    else
      return i;  // a continuation byte or 0xF8..0xFF where a character starts
    if (i + length > n) return i;
    for (size_t k = 1; k < length; ++k) {
      if ((bytes[i + k] & 0xC0) != 0x80) return i;
      code = (code << 6) | (bytes[i + k] & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and code points beyond U+10FFFF are not UTF-8.
    if (code < least || (code >= 0xD800 && code <= 0xDFFF) || code > 0x10FFFF) return i;
    i += length;
  }
  return std::string::npos;
}

ThrowUsageExits::ThrowUsageExits() : previous_(throw_usage_exits) { throw_usage_exits = true; }
ThrowUsageExits::~ThrowUsageExits() { throw_usage_exits = previous_; }

void exit_with_usage_error(const std::string& program, const std::string& message) {
  if (throw_usage_exits) throw UsageExit{2, program + ": error: " + message};
  std::fprintf(stderr, "%s: error: %s\n", program.c_str(), message.c_str());
  std::exit(2);
}

void check_at_most(const std::string& program, std::initializer_list<FlagBound> bounds) {
  for (const FlagBound& b : bounds)
    if (b.value > b.max)
      exit_with_usage_error(program, std::string("--") + b.flag + " " + std::to_string(b.value) +
                                         " is too large; expected at most " + std::to_string(b.max));
}

void check_readable_file(const std::string& program, const std::string& flag, const std::string& path,
                         bool allow_pipe) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0)
    exit_with_usage_error(program,
                          "--" + flag + " \"" + path + "\": " + std::strerror(errno) + "; expected a readable file");
  if (allow_pipe && !S_ISREG(info.st_mode) && !S_ISFIFO(info.st_mode))
    exit_with_usage_error(program, "--" + flag + " \"" + path +
                                       "\" is neither a regular file nor a pipe; expected a readable file or pipe");
  if (!allow_pipe && !S_ISREG(info.st_mode))
    exit_with_usage_error(program, "--" + flag + " \"" + path + "\" is not a regular file; expected a readable file");
  if (::access(path.c_str(), R_OK) != 0)
    exit_with_usage_error(program,
                          "--" + flag + " \"" + path + "\": " + std::strerror(errno) + "; expected a readable file");
}

void Flags::fail(const std::string& message) const { exit_with_usage_error(program_, message + " (see --help)"); }

std::string Flags::usage() const {
  std::ostringstream out;
  out << description_ << "\n\nusage: " << program_ << " [flags]\n\n";
  for (const Flag& f : flags_) {
    std::string left = "  --";  // appended piece by piece: "x" + string trips a GCC 12 -Wrestrict false positive
    left.append(f.name);
    if (f.kind != "bool") left.append(f.kind == "int" ? " N" : f.kind == "float" ? " X" : " VALUE");
    left.resize(std::max<size_t>(left.size() + 2, 26), ' ');
    out << left << f.help << " (default " << f.default_text << ")\n";
  }
  out << "  --config FILE           read settings from a JSON object of flag names (flags given here win)\n";
  out << "  --print-config          print the effective settings as JSON and exit\n";
  out << "  --help                  show this help\n";
  return out.str();
}

void Flags::parse(int argc, char** argv) {
  std::string config_path;
  bool config_given = false, print_config = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      if (throw_usage_exits) throw UsageExit{0, usage()};
      std::fputs(usage().c_str(), stdout);
      std::exit(0);
    }
    if (arg.rfind("--", 0) != 0) fail("unexpected argument \"" + arg + "\"; flags start with --");
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    bool has_value = eq != std::string::npos;
    if (has_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (name == "print-config") {
      if (has_value) fail("--print-config takes no value, got \"" + value + "\"");
      print_config = true;
      continue;
    }
    if (name == "config") {
      if (config_given) fail("--config is given twice; expected one config file (flags override its keys)");
      if (!has_value) {
        if (i + 1 >= argc) fail("--config needs a value");
        value = argv[++i];
      }
      config_given = true;
      config_path = value;
      continue;
    }
    if (const std::string* renamed = renamed_to(name))
      std::fprintf(stderr, "%s: note: --%s is now --%s (the old name still works)\n", program_.c_str(), name.c_str(),
                   renamed->c_str());
    Flag* flag = find(name);
    if (flag == nullptr && name.rfind("no-", 0) == 0 && find(name.substr(3)) && find(name.substr(3))->kind == "bool") {
      *static_cast<bool*>(find(name.substr(3))->target) = false;
      find(name.substr(3))->given = true;
      continue;
    }
    if (flag == nullptr) fail("unknown flag --" + name);
    flag->given = true;
    if (flag->kind == "bool") {
      if (!has_value) value = "true";
      if (value != "true" && value != "false") fail("--" + name + " expects true or false, got \"" + value + "\"");
      *static_cast<bool*>(flag->target) = value == "true";
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) fail("--" + name + " needs a value");
      value = argv[++i];
    }
    if (flag->kind == "text") {
      // Every text value is printed by --print-config and stored in run configs: JSON text, UTF-8.
      const size_t bad = utf8_error_offset(value);
      if (bad != std::string::npos) {
        char byte[8];
        std::snprintf(byte, sizeof byte, "0x%02x", unsigned(static_cast<unsigned char>(value[bad])));
        fail("--" + name + " must be UTF-8 text (its value goes into --print-config and run configs as JSON); byte " +
             std::to_string(bad) + " (" + byte + ") is not");
      }
      *static_cast<std::string*>(flag->target) = value;
      continue;
    }
    char* end = nullptr;
    errno = 0;
    if (flag->kind == "int") {
      const long long parsed = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || errno == ERANGE)
        fail("--" + name + " expects an integer, got \"" + value + "\"");
      if (parsed < flag->int_min) fail("--" + name + " must be >= " + std::to_string(flag->int_min) + ", got " + value);
      if (parsed > flag->int_max) fail("--" + name + " must be <= " + std::to_string(flag->int_max) + ", got " + value);
      *static_cast<int64_t*>(flag->target) = parsed;
    } else {
      const double parsed = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || errno == ERANGE || parsed != parsed)
        fail("--" + name + " expects a number, got \"" + value + "\"");
      if (parsed < flag->min || parsed > flag->max) {
        std::ostringstream range;
        range << "--" << name << " must be in [" << flag->min << ", " << flag->max << "], got " << value;
        fail(range.str());
      }
      *static_cast<double*>(flag->target) = parsed;
    }
  }
  // The file after the flags: apply_json leaves the keys given on the command line as they are.
  if (config_given) {
    check_readable_file(program_, "config", config_path, /*allow_pipe=*/true);
    std::FILE* file = std::fopen(config_path.c_str(), "rb");
    if (file == nullptr)
      exit_with_usage_error(program_,
                            "--config \"" + config_path + "\": " + std::strerror(errno) + "; expected a readable file");
    std::string text;
    char buffer[1 << 16];
    size_t got = 0;
    while ((got = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, got);
    const bool failed = std::ferror(file) != 0;
    const int error = errno;
    std::fclose(file);
    if (failed)
      exit_with_usage_error(program_, "--config \"" + config_path + "\": cannot read it (" + std::strerror(error) +
                                          "); expected a readable file");
    apply_json(text, config_path);
  }
  for (const std::function<void()>& hook : after_parse_) hook();
  if (print_config) {
    if (throw_usage_exits) throw UsageExit{0, to_json()};
    std::fputs(to_json().c_str(), stdout);
    std::exit(0);
  }
}

Device checked_device(const std::string& program, const std::string& text) {
  Device device;
  try {
    device = Device::parse(text);
  } catch (const Error&) {
    exit_with_usage_error(program, "unknown --device \"" + text + "\"; expected cpu, cuda or cuda:N");
  }
  if (device.is_cuda() && device.index >= cuda::device_count()) {
    exit_with_usage_error(
        program,
        "--device " + text + " is not available: " +
            (cuda::is_available() ? "this machine has " + std::to_string(cuda::device_count()) + " CUDA device(s)"
                                  : cuda::unavailable_reason()));
  }
  return device;
}

int guarded_main(const std::string& program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageExit& e) {  // only while a ThrowUsageExits guard is alive
    throw;
  } catch (const InputError& e) {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: out of host memory\n", program.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
    return 1;
  } catch (...) {
    std::fprintf(stderr, "%s: error: an unknown exception\n", program.c_str());
    return 1;
  }
}

}  // namespace hg::app
