#include "engine/device.h"

#include <cctype>

#include "kernels/error.h"

namespace hg {

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5 && text.size() <= 8) {
    int index = 0;
    for (size_t i = 5; i < text.size(); ++i) {
      if (!std::isdigit(static_cast<unsigned char>(text[i]))) index = -1;
      if (index >= 0) index = index * 10 + (text[i] - '0');
    }
    if (index >= 0) return cuda(index);
  }
  HG_FAIL("[Device] unknown device \"", text, "\"; expected \"cpu\", \"cuda\" or \"cuda:N\"");
}

std::string Device::str() const { return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index); }

}  // namespace hg
