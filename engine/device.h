#pragma once
// Where a tensor's storage lives: the CPU, or CUDA device n. The CUDA backend arrives with
// kernels/cuda; until then a CUDA device can be named (and parsed) but not allocated on.
#include <string>

namespace hg {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  // "cpu", "cuda", "cuda:1"; throws hg::Error naming the string and the accepted forms.
  static Device parse(const std::string& text);

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  friend bool operator==(const Device&, const Device&) = default;
};

inline const Device kCPU = Device::cpu();

}  // namespace hg
