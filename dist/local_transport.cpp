// The host transport of a world of one: a reduction over one rank is the identity, so collectives
// copy (reduce_scatter, all_gather between distinct buffers) or do nothing.
#include <cstring>

#include "dist/transport.h"

namespace hg::dist {
namespace {

class LocalTransport final : public HostTransport {
 public:
  std::string name() const override { return "single"; }
  void all_reduce(void*, int64_t, DType, ReduceOp) override {}
  void reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                      ReduceOp) override {
    if (send != recv && counts[0] > 0) std::memmove(recv, send, size_t(counts[0]) * dtype_size(dtype));
  }
  void all_gather(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype) override {
    if (send != recv && counts[0] > 0) std::memmove(recv, send, size_t(counts[0]) * dtype_size(dtype));
  }
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
};

}  // namespace

std::shared_ptr<HostTransport> make_local_transport() { return std::make_shared<LocalTransport>(); }

}  // namespace hg::dist
