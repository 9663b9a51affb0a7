// NVML by dlopen: the few entry points the profiler needs, declared here with NVML's C ABI (nvml.h
// is part of the driver/toolkit, which a CPU build may not have).
#include "engine/profiler/nvml.h"

#include <dlfcn.h>

namespace hg::profiler {

namespace {
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*device_by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
};

Nvml::Nvml() : Nvml(std::vector<std::string>{"libnvidia-ml.so.1", "libnvidia-ml.so"}) {}

Nvml::Nvml(const std::vector<std::string>& library_names) {
  std::string tried;
  for (const std::string& name : library_names) {
    library_ = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library_) break;
    const char* why = dlerror();
    tried += (tried.empty() ? "" : "; ") + (why ? std::string(why) : name + ": not found");
  }
  if (!library_) {
    reason_ = "NVML unavailable: could not load the NVIDIA driver's management library (" + tried +
              "); GPU utilisation and memory are not sampled";
    return;
  }
  api_ = new Api;
  auto bind = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(library_, symbol));
    if (!fn && reason_.empty())
      reason_ = std::string("NVML unavailable: the loaded library has no symbol ") + symbol +
                " (expected libnvidia-ml from an NVIDIA driver)";
  };
  bind(api_->init, "nvmlInit_v2");
  bind(api_->shutdown, "nvmlShutdown");
  bind(api_->error_string, "nvmlErrorString");
  bind(api_->device_by_index, "nvmlDeviceGetHandleByIndex_v2");
  bind(api_->utilization, "nvmlDeviceGetUtilizationRates");
  bind(api_->memory, "nvmlDeviceGetMemoryInfo");
  if (!reason_.empty()) return;
  const nvmlReturn_t status = api_->init();
  if (status != 0) {
    reason_ = std::string("NVML unavailable: nvmlInit failed: ") + api_->error_string(status);
    return;
  }
  init_ok_ = true;
}

Nvml::~Nvml() {
  if (init_ok_) api_->shutdown();
  delete api_;
  if (library_) dlclose(library_);
}

std::optional<GpuSample> Nvml::sample(int device) {
  if (!init_ok_) {
    last_error_ = reason_;
    return std::nullopt;
  }
  auto fail = [&](const char* what, nvmlReturn_t status) {
    last_error_ = std::string("NVML ") + what + " for device " + std::to_string(device) +
                  " failed: " + api_->error_string(status);
    return std::nullopt;
  };
  if (device < 0) {
    last_error_ = "NVML device index must be >= 0, got " + std::to_string(device);
    return std::nullopt;
  }
  nvmlDevice_t handle = nullptr;
  if (nvmlReturn_t s = api_->device_by_index(unsigned(device), &handle); s != 0) return fail("device lookup", s);
  nvmlUtilization_t utilization{};
  if (nvmlReturn_t s = api_->utilization(handle, &utilization); s != 0) return fail("utilization query", s);
  nvmlMemory_t memory{};
  if (nvmlReturn_t s = api_->memory(handle, &memory); s != 0) return fail("memory query", s);
  last_error_.clear();
  return GpuSample{utilization.gpu, utilization.memory, memory.used, memory.total};
}

}  // namespace hg::profiler
