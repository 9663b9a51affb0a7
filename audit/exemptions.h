#pragma once
// The gate's exemptions (audit/gate.h): the one list of kernels that are what they are by design, each
// with the reason, which is also written in the kernel's header comment (kernels/cuda/*.cu).
#include <string>
#include <vector>

#include "audit/gate.h"

namespace hg::audit {

struct Exemption {
  const char* op;      // the op's name in bench_kernels' report
  Check check;         // the check it waives for every dtype of the op
  const char* reason;  // why the kernel is what it is (the same words as in its header comment)
};

const std::vector<Exemption>& exemptions();
// The exemption of `op` for `check`, or null.
const Exemption* find_exemption(const std::string& op, Check check);

}  // namespace hg::audit
