// The engine's CUDA device layer in a build without a CUDA backend: no device answers, and anything
// that needs one says how to get one.
#include "engine/cuda/cuda_allocator.h"
#include "engine/cuda/cuda_context.h"
#include "engine/cuda/cuda_graph.h"
#include "kernels/error.h"

namespace hg::cuda {

namespace {
constexpr const char* kReason =
    "this build has no CUDA backend (configure with -DHALFGRAD_CUDA=ON on a machine with the CUDA toolkit, "
    "or -DHALFGRAD_CUDA=EMULATED to run CUDA kernels on the CPU)";
[[noreturn]] void unavailable() { HG_FAIL("[cuda] ", kReason); }
}  // namespace

int device_count() { return 0; }
bool is_available() { return false; }
std::string unavailable_reason() { return kReason; }
std::string device_name(int) { unavailable(); }
bool is_emulated() { return false; }
Stream compute_stream(int) { unavailable(); }
Stream copy_stream(int) { unavailable(); }
void synchronize(int) { unavailable(); }
void synchronize(Stream) { unavailable(); }
CudaCachingAllocator& device_allocator(int device) {
  HG_FAIL("[cuda] device cuda:", device, " is not available: ", kReason);
}
void copy_to_device(void*, const void*, size_t, int) { unavailable(); }
void copy_to_host(void*, const void*, size_t, int) { unavailable(); }
void copy_device_to_device(void*, const void*, size_t, int) { unavailable(); }
void copy_to_host_async(void*, const void*, size_t, Stream) { unavailable(); }
void copy_to_device_async(void*, const void*, size_t, Stream) { unavailable(); }
void record_stream(void*, int, Stream) { unavailable(); }
CUevent_st* acquire_event(bool) { unavailable(); }
void release_event(CUevent_st*, bool) {}
CpuCachingAllocator& pinned_allocator() { unavailable(); }
Event::Event() { unavailable(); }
Event::~Event() = default;
void Event::record(Stream) { unavailable(); }
void Event::block(Stream) const { unavailable(); }
void Event::synchronize() const { unavailable(); }
bool Event::query() const { unavailable(); }
float Event::elapsed_ms_since(const Event&) const { unavailable(); }

// No graph is ever captured here, so there is nothing to release or move but the empty fields.
Graph::~Graph() = default;
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;
void Graph::reset() noexcept {}
void Graph::capture(Stream, const std::function<void()>&, CaptureMode) { unavailable(); }
void Graph::replay() const { unavailable(); }
size_t Graph::pool_reserved_bytes() const { return 0; }

}  // namespace hg::cuda

namespace hg {
MemoryStats pinned_memory_stats() { return {}; }
}  // namespace hg
