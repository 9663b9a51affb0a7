// Module::repr: PyTorch's printed tree, with shapes and parameter counts. PyTorch's rule for a module:
// "Name(extra)" when it has no children and a one-line extra_repr; otherwise "Name(", then the extra
// lines and "(key): child" lines indented by two, then ")". Here each module's first line is followed
// by "  # " and its own parameters' shapes and its subtree's parameter count, so the print doubles as
// a summary:
//
//   Net(  # 1370 parameters, 1370 trainable
//     (features): Sequential(  # 80 parameters
//       (0): Conv2d(1, 8, kernel_size=(3, 3), stride=(1, 1))  # weight [8, 1, 3, 3], bias [8]: 80 parameters
//       (1): ReLU()
//     )
//     (fc): Linear(in_features=128, out_features=10, bias=True)  # weight [10, 128], bias [10]: 1290 parameters
//   )
#include <charconv>
#include <cmath>
#include <sstream>

#include "layers/module.h"

namespace hg::nn {
namespace {

// "weight [10, 128], bias [10]" (a frozen one marked), over the module's own parameters.
std::string own_shapes(const NamedTensors& own) {
  std::string out;
  for (const auto& [name, p] : own) {
    out += (out.empty() ? "" : ", ") + name + " " + shape_str(p.shape());
    if (!p.requires_grad()) out += " (frozen)";
  }
  return out;
}

// The "  # ..." comment of a module's first line ("" for a module without parameters).
std::string comment(const Module& module, const NamedTensors& own, bool top) {
  const int64_t count = module.parameter_count();
  if (count == 0 && !top) return "";
  std::string text = own_shapes(own);
  text += (text.empty() ? "" : ": ") + std::to_string(count) + " parameters";
  if (top) text += ", " + std::to_string(module.trainable_parameter_count()) + " trainable";
  return "  # " + text;
}

void print(std::ostringstream& out, const Module& module, const std::string& indent, bool top) {
  NamedTensors own;  // the module's own parameters: its named_parameters without a '.' in the name
  for (auto& entry : module.named_parameters())
    if (entry.first.find('.') == std::string::npos) own.push_back(entry);
  const std::string extra = module.extra_repr();
  const bool one_line = module.children().empty() && extra.find('\n') == std::string::npos;
  out << module.type_name() << "(";
  if (one_line) {
    out << extra << ")" << comment(module, own, top);
    return;
  }
  out << comment(module, own, top) << "\n";
  const std::string inner = indent + "  ";
  std::istringstream lines(extra);
  for (std::string line; std::getline(lines, line);) out << inner << line << "\n";
  for (const auto& [name, child] : module.children()) {
    out << inner << "(" << name << "): ";
    print(out, *child, inner, false);
    out << "\n";
  }
  out << indent << ")";
}

}  // namespace

// Python's repr: the shortest digits that read back, in fixed notation when the decimal exponent is in
// [-4, 16), else as d.ddde-XX (at least two exponent digits).
std::string repr_float(double value) {
  if (!std::isfinite(value)) return std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf");
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  const std::string sci(buffer, result.ptr);  // "-1.2345e-05"
  const size_t e = sci.find('e');
  const bool negative = sci[0] == '-';
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  const int exponent = std::stoi(sci.substr(e + 1));
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "");
    const std::string magnitude = std::to_string(std::abs(exponent));
    return out + "e" + (exponent < 0 ? "-" : "+") + (magnitude.size() < 2 ? "0" : "") + magnitude;
  }
  if (exponent < 0) return out + "0." + std::string(size_t(-exponent - 1), '0') + digits;
  const size_t whole = size_t(exponent) + 1;
  if (digits.size() <= whole) return out + digits + std::string(whole - digits.size(), '0') + ".0";
  return out + digits.substr(0, whole) + "." + digits.substr(whole);
}

std::string tuple_repr(const Shape& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

std::string Module::repr() const {
  std::ostringstream out;
  print(out, *this, "", true);
  return out.str();
}

}  // namespace hg::nn
