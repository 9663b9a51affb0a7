#pragma once
// GPU utilisation and memory through NVML, the driver's management library, loaded at run time with
// dlopen: a build (or a machine) without the driver still builds and runs, and says why it has no
// samples instead of failing.
//
//   profiler::Nvml nvml;                       // never throws
//   if (auto s = nvml.sample(0)) log(s->gpu_percent, s->memory_used_bytes);
//   else std::puts(nvml.unavailable_reason().c_str());
//
// Devices are NVML indices, which equal CUDA indices unless CUDA_VISIBLE_DEVICES reorders them.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hg::profiler {

struct GpuSample {
  unsigned gpu_percent = 0;     // share of the last sample period in which a kernel ran
  unsigned memory_percent = 0;  // share of it in which device memory was read or written
  uint64_t memory_used_bytes = 0, memory_total_bytes = 0;
};

class Nvml {
 public:
  // Tries each library name in turn (default: libnvidia-ml.so.1, then libnvidia-ml.so).
  Nvml();
  explicit Nvml(const std::vector<std::string>& library_names);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool available() const { return init_ok_; }
  // Why there are no samples ("" when available): the library that could not be loaded, the missing
  // symbol, or the error nvmlInit returned.
  const std::string& unavailable_reason() const { return reason_; }
  // The device's utilisation and memory now; nullopt when NVML is unavailable or the query fails
  // (last_error() says why).
  std::optional<GpuSample> sample(int device);
  const std::string& last_error() const { return last_error_; }

 private:
  struct Api;
  void* library_ = nullptr;
  Api* api_ = nullptr;
  bool init_ok_ = false;
  std::string reason_, last_error_;
};

}  // namespace hg::profiler
