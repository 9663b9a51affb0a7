#pragma once
// nvcuda::wmma (CUDA's warp matrix functions, <mma.h>) for the SIMT emulator: what a kernels/cuda/*.cu
// file gets from kernels/cuda/platform.h in the emulated build, with CUDA's names and signatures.
//
//   fragment<Use, m, n, k, T, Layout>   Use: matrix_a (m x k), matrix_b (k x n), accumulator (m x n);
//                                       `x[num_elements]` are this lane's elements, `element_type`
//   fill_fragment(f, v)                 every element of this lane's f = v (per lane, not collective)
//   load_matrix_sync(f, p, ldm)         warp-collective load of a matrix_a / matrix_b fragment; its
//                                       Layout says how the tile lies in memory (row_major: element
//                                       (r, c) at p[r * ldm + c]; col_major: at p[c * ldm + r])
//   load_matrix_sync(f, p, ldm, layout) the same for an accumulator, layout mem_row_major/mem_col_major
//   store_matrix_sync(p, f, ldm, layout) warp-collective store of an accumulator
//   mma_sync(d, a, b, c)                warp-collective D = A * B + C
//
// Shapes (m, n, k): 16x16x16, 32x8x16 and 8x32x16. Inputs __half or __nv_bfloat16 (A and B alike);
// accumulators float, or __half when the inputs are __half. Anything else is a static_assert, as nvcc
// refuses it. The same rules as CUDA's for the arguments, checked at run time (hg::Error naming the call
// site): all 32 lanes of the warp call the collective together with the same arguments (a lane that
// exited is an error, a lane that waits elsewhere a deadlock report), `p` is 256-bit (32-byte)
// aligned, `ldm` is a multiple of 8 elements for __half/__nv_bfloat16 and of 4 for float.
//
// The element-to-lane mapping is DELIBERATELY SCRAMBLED. CUDA leaves it unspecified (it differs between
// architectures), so a kernel may only apply the same operation to every x[i] (scale, convert, clamp,
// an elementwise op between two fragments of the same type). Here every fragment kind (use, shape,
// element type, and for matrix_a/matrix_b the layout) gets a random permutation of its (row, col)
// positions over (lane, i), drawn from a fixed seed mixed with HG_EMU_SEED (read once per process), so
// a kernel that reads x[i] as if it knew the row or column gets garbage, on every run.
// What IS guaranteed, as by CUDA: accumulators of the same shape and element type share one mapping
// (a loaded C, mma_sync's D and a filled fragment agree element by element), so D = A*B + C and
// elementwise ops between accumulators are legal; two matrix_a (or matrix_b) fragments of the same
// type and layout share one too. Nothing else: A and B, row_major and col_major, f16 and bf16, or
// float and half accumulators map differently.
//
// Semantics and cost (kernels/emu/wmma.cpp does the exchanges): each call is two or three warp
// collectives (WarpOp::WmmaLoad/Store/Mma, block.h) that meet the 32 lanes. Memory is touched by each
// lane in pieces of contiguous elements, in the order a GPU uses (PieceGeometry below): an operand as
// ldmatrix moves it (16-byte pieces, 8-byte for the small 32x8x16 / 8x32x16 operands; each phase of a
// warp's access is 8 stored lines x 16 bytes), an accumulator in the mma.sync fragment order (lane
// 4 g + t: elements 2 t, 2 t + 1 of line g of an 8 x 8 block; 8-byte pieces for float, 4 for __half).
// These accesses are inline here, in the kernel's translation unit, so the kernel audit records them
// as the kernel's (coalescing, bank conflicts, races) at the wmma call's line. The pieces are
// then exchanged between lanes into the scrambled mapping through the lanes' stacks, which neither the
// audit nor racecheck sees (registers on a GPU). The collectives do not order memory between lanes: a
// lane's plain store to shared memory read by another lane's load_matrix_sync still needs __syncwarp
// or __syncthreads, as on a GPU. mma_sync computes in float: each D element = C + sum over k (in
// increasing k) of A * B, products of the 16-bit inputs exact in float, rounded once to a __half D.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/emu/emu.h"

namespace hg::emu::wmma_detail {

enum class FragmentUse : uint8_t { MatrixA, MatrixB, Accumulator };
enum class Element : uint8_t { F16, BF16, F32 };

// What decides a fragment's element-to-lane mapping. rows x cols is the matrix it holds.
struct FragmentKind {
  FragmentUse use = FragmentUse::Accumulator;
  Element element = Element::F32;
  uint8_t rows = 0, cols = 0;
  bool col_major = false;  // matrix_a / matrix_b: its Layout (accumulators: always false)
};

// Slot s = lane * per_lane + i (x[i] of lane `lane`) holds the element at position row * cols + col.
struct Mapping {
  FragmentKind kind;
  int elements = 0;  // rows * cols
  int per_lane = 0;  // elements / 32 = num_elements
  uint16_t position_of_slot[512] = {};
  uint16_t slot_of_position[512] = {};
};
// The mapping of a kind: built on first use, then constant for the life of the process.
const Mapping* mapping(const FragmentKind& kind);

enum class Call : uint8_t { Load, Store, Mma };

// What a lane brings to a wmma collective; the lanes read each other's records (on their fibers'
// stacks) between the collective's steps.
struct LaneRecord {
  Call call = Call::Load;
  const Mapping* map = nullptr;    // load/store: the fragment's; mma: C's and D's
  const Mapping* map_a = nullptr;  // mma only
  const Mapping* map_b = nullptr;
  void* fragment = nullptr;  // load: the x[] to fill; store: the x[] to read; mma: D's x[]
  const void* a = nullptr;   // mma: the operands' x[]
  const void* b = nullptr;
  const void* c = nullptr;
  const void* memory = nullptr;  // load/store: the tile
  unsigned ldm = 0;
  bool storage_col_major = false;  // load/store: how the tile lies in memory
  int lane = 0;                    // filled in by begin()
  alignas(16) unsigned char staging[32] = {};  // the pieces of the tile this lane moves
  const LaneRecord* lanes[32] = {};            // every lane's record, filled in by begin()
};

// Meets the 32 lanes in the call's collective, fills r.lanes and r.lane, and checks the call (every
// lane there with the same arguments; pointer alignment and ldm for load/store): hg::Error otherwise.
void begin(LaneRecord& r, const Site& site);
// Waits until the 32 lanes reach this step of the call.
void step(const LaneRecord& r, const Site& site);
// Load: this lane's x[] from the lanes' staged pieces. Store: this lane's staged pieces from the lanes' x[].
void gather_fragment(LaneRecord& r);
void scatter_fragment(LaneRecord& r);
// Mma: this lane's elements of D.
void multiply_accumulate(LaneRecord& r);

// The order in which the lanes move a tile (wmma.h's header): a GPU's, so that the kernel audit's
// phases (128 bytes of lanes: 8 lanes of 16-byte, 16 of 8-byte or 32 of 4-byte accesses) see what a
// GPU's shared-memory pipeline sees. The tile is cut into 8 x 8 blocks (8 stored lines -- rows of a
// row-major tile, columns of a col-major one -- by 8 elements of each line); a lane moves one `piece`
// (piece_elements contiguous elements of one line) per access, and the 32 lanes of one access cover
// whole blocks, line by line:
//   - matrix_a / matrix_b (16-bit) as ldmatrix.x4 (.x2 for the 128-element operands) does: 16-byte
//     pieces (8-byte for 128 elements), so one phase is one block, 8 lines x 16 bytes; access k covers
//     blocks 4 k .. 4 k + 3 (2 k, 2 k + 1), lane l line l % 8 of block 4 k + l / 8;
//   - accumulators as a GPU's fragment store/load does (the mma.sync m16n8k16 accumulator layout):
//     2-element pieces (8 bytes for float, 4 for __half), access k covers block k, lane l = 4 g + t
//     elements 2 t, 2 t + 1 of line g (a half-warp phase of float: 4 lines x 32 bytes).
// Blocks are numbered line-block first: block b = (line block b % line_blocks, column block
// b / line_blocks). A padded tile (rows 16 bytes apart mod 128 for operands, 8 words mod 32 for float
// accumulators) is conflict-free in this order, a tile with a 128-byte row stride is not, as on a GPU.
struct PieceGeometry {
  int piece_elements = 8;
  int piece_bytes = 16;
  int pieces_per_lane = 1;
  int lanes_per_line = 1;  // lanes sharing one line of a block: 8 / piece_elements
  int line_length = 16;    // elements of one stored line
  int line_blocks = 2;     // stored lines / 8
};
inline PieceGeometry piece_geometry(const LaneRecord& r, int element_bytes) {
  const FragmentKind& kind = r.map->kind;
  const int elements = kind.rows * kind.cols;
  PieceGeometry g;
  g.piece_elements = kind.use == FragmentUse::Accumulator ? 2 : (elements / 32 < 8 ? elements / 32 : 8);
  g.piece_bytes = g.piece_elements * element_bytes;
  g.pieces_per_lane = elements / (32 * g.piece_elements);
  g.lanes_per_line = 8 / g.piece_elements;
  g.line_length = r.storage_col_major ? kind.rows : kind.cols;
  g.line_blocks = elements / g.line_length / 8;
  return g;
}
// A place in the tile in storage coordinates: element `pos` of stored line `line`.
struct TilePlace {
  int line = 0, pos = 0;
};
// Where lane `lane`'s k-th piece starts.
inline TilePlace piece_place(const PieceGeometry& g, int lane, int k) {
  const int lanes_per_block = 8 * g.lanes_per_line;
  const int block = k * (32 / lanes_per_block) + lane / lanes_per_block;
  const int within = lane % lanes_per_block;
  return {8 * (block % g.line_blocks) + within / g.lanes_per_line,
          8 * (block / g.line_blocks) + (within % g.lanes_per_line) * g.piece_elements};
}
// Which lane, piece and element of the piece hold a place (piece_place's inverse).
struct PieceSlot {
  int lane = 0, piece = 0, element = 0;
};
inline PieceSlot piece_holding(const PieceGeometry& g, const TilePlace& at) {
  const int lanes_per_block = 8 * g.lanes_per_line;
  const int block = (at.pos / 8) * g.line_blocks + at.line / 8;
  const int within = (at.line % 8) * g.lanes_per_line + (at.pos % 8) / g.piece_elements;
  return {(block % (32 / lanes_per_block)) * lanes_per_block + within, block / (32 / lanes_per_block),
          at.pos % g.piece_elements};
}
inline size_t piece_offset(const LaneRecord& r, const PieceGeometry& g, int k) {
  const TilePlace at = piece_place(g, r.lane, k);
  return size_t(at.line) * r.ldm + size_t(at.pos);
}

// The tile's memory accesses, one 16-, 8- or 4-byte access per piece, made here in the kernel's code.
// Always inlined, as are load/store_matrix_sync: the audit names each access by the wmma call's line
// in the kernel, one site per call.
#define HG_EMU_WMMA_INLINE inline __attribute__((always_inline))
template <int kBytes>
HG_EMU_WMMA_INLINE void copy_piece(void* to, const void* from) {
  if constexpr (kBytes == 16) {
    *static_cast<uint4*>(to) = *static_cast<const uint4*>(from);
  } else if constexpr (kBytes == 8) {
    *static_cast<uint2*>(to) = *static_cast<const uint2*>(from);
  } else {
    *static_cast<uint32_t*>(to) = *static_cast<const uint32_t*>(from);
  }
}
HG_EMU_WMMA_INLINE void copy_piece(void* to, const void* from, int bytes) {
  if (bytes == 16) {
    copy_piece<16>(to, from);
  } else if (bytes == 8) {
    copy_piece<8>(to, from);
  } else {
    copy_piece<4>(to, from);
  }
}
template <class T>
HG_EMU_WMMA_INLINE void read_pieces(LaneRecord& r) {
  const PieceGeometry g = piece_geometry(r, int(sizeof(T)));
  const T* tile = static_cast<const T*>(r.memory);
  for (int k = 0; k < g.pieces_per_lane; ++k) {
    copy_piece(r.staging + g.piece_bytes * k, tile + piece_offset(r, g, k), g.piece_bytes);
  }
}
template <class T>
HG_EMU_WMMA_INLINE void write_pieces(const LaneRecord& r) {
  const PieceGeometry g = piece_geometry(r, int(sizeof(T)));
  T* tile = static_cast<T*>(const_cast<void*>(r.memory));
  for (int k = 0; k < g.pieces_per_lane; ++k) {
    copy_piece(tile + piece_offset(r, g, k), r.staging + g.piece_bytes * k, g.piece_bytes);
  }
}

template <class T>
inline constexpr bool is_input_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <class T>
inline constexpr bool is_accumulator_v = std::is_same_v<T, float> || std::is_same_v<T, __half>;
template <class T>
constexpr Element element_of() {
  if constexpr (std::is_same_v<T, __half>) {
    return Element::F16;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return Element::BF16;
  } else {
    return Element::F32;
  }
}

}  // namespace hg::emu::wmma_detail

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int m, int n, int k, class T, class Layout = void>
class fragment {
  static constexpr bool is_a = std::is_same_v<Use, matrix_a>;
  static constexpr bool is_b = std::is_same_v<Use, matrix_b>;
  static constexpr bool is_c = std::is_same_v<Use, accumulator>;
  static_assert(is_a || is_b || is_c, "wmma::fragment: Use must be matrix_a, matrix_b or accumulator");
  static_assert((m == 16 && n == 16 && k == 16) || (m == 32 && n == 8 && k == 16) || (m == 8 && n == 32 && k == 16),
                "wmma::fragment: the emulator (like CUDA for 16-bit inputs) supports the shapes m16n16k16, "
                "m32n8k16 and m8n32k16 only");
  static_assert(!(is_a || is_b) || ::hg::emu::wmma_detail::is_input_v<T>,
                "wmma::fragment: matrix_a / matrix_b elements must be __half or __nv_bfloat16");
  static_assert(!is_c || ::hg::emu::wmma_detail::is_accumulator_v<T>,
                "wmma::fragment: accumulator elements must be float or __half");
  static_assert(!(is_a || is_b) || std::is_same_v<Layout, row_major> || std::is_same_v<Layout, col_major>,
                "wmma::fragment: matrix_a / matrix_b need a Layout, row_major or col_major");
  static_assert(!is_c || std::is_void_v<Layout>, "wmma::fragment: an accumulator takes no Layout");

 public:
  static constexpr int rows = is_b ? k : m;
  static constexpr int cols = is_a ? k : n;
  static constexpr int num_elements = rows * cols / 32;
  using element_type = T;
  using storage_element_type = T;
  T x[num_elements];

  // The mapping of this fragment type (hg::emu::wmma_detail::mapping), looked up once.
  static const ::hg::emu::wmma_detail::Mapping* emu_mapping() {
    using namespace ::hg::emu::wmma_detail;
    static const Mapping* const map = ::hg::emu::wmma_detail::mapping(
        FragmentKind{is_a ? FragmentUse::MatrixA : (is_b ? FragmentUse::MatrixB : FragmentUse::Accumulator), element_of<T>(), uint8_t(rows),
                     uint8_t(cols), std::is_same_v<Layout, col_major>});
    return map;
  }
};

// Not collective: CUDA documents that the mapping is unspecified, so every lane fills all its elements.
template <class Use, int m, int n, int k, class T, class Layout>
inline void fill_fragment(fragment<Use, m, n, k, T, Layout>& f, const std::type_identity_t<T>& v) {
  for (int i = 0; i < f.num_elements; ++i) f.x[i] = v;
}

template <class Use, int m, int n, int k, class T, class Layout>
HG_EMU_WMMA_INLINE void load_matrix_sync(fragment<Use, m, n, k, T, Layout>& f, const std::type_identity_t<T>* p, unsigned ldm,
                      ::hg::emu::Site site = ::hg::emu::Site::here()) {
  static_assert(!std::is_same_v<Use, accumulator>,
                "wmma::load_matrix_sync: an accumulator fragment needs the layout_t argument");
  using namespace ::hg::emu::wmma_detail;
  LaneRecord r;
  r.call = Call::Load;
  r.map = f.emu_mapping();
  r.fragment = f.x;
  r.memory = p;
  r.ldm = ldm;
  r.storage_col_major = std::is_same_v<Layout, col_major>;
  begin(r, site);
  read_pieces<T>(r);
  step(r, site);
  gather_fragment(r);
  step(r, site);  // every lane has its elements: the staged pieces may go
}

template <int m, int n, int k, class T>
HG_EMU_WMMA_INLINE void load_matrix_sync(fragment<accumulator, m, n, k, T>& f, const std::type_identity_t<T>* p, unsigned ldm,
                      layout_t layout, ::hg::emu::Site site = ::hg::emu::Site::here()) {
  using namespace ::hg::emu::wmma_detail;
  LaneRecord r;
  r.call = Call::Load;
  r.map = f.emu_mapping();
  r.fragment = f.x;
  r.memory = p;
  r.ldm = ldm;
  r.storage_col_major = layout == mem_col_major;
  begin(r, site);
  read_pieces<T>(r);
  step(r, site);
  gather_fragment(r);
  step(r, site);
}

template <int m, int n, int k, class T>
HG_EMU_WMMA_INLINE void store_matrix_sync(std::type_identity_t<T>* p, const fragment<accumulator, m, n, k, T>& f, unsigned ldm,
                       layout_t layout, ::hg::emu::Site site = ::hg::emu::Site::here()) {
  using namespace ::hg::emu::wmma_detail;
  LaneRecord r;
  r.call = Call::Store;
  r.map = f.emu_mapping();
  r.fragment = const_cast<T*>(f.x);
  r.memory = p;
  r.ldm = ldm;
  r.storage_col_major = layout == mem_col_major;
  begin(r, site);
  scatter_fragment(r);
  step(r, site);  // every lane has read the fragments it stores: they may change
  write_pieces<T>(r);
}

template <int m, int n, int k, class TC, class TAB, class LayoutA, class LayoutB>
void mma_sync(fragment<accumulator, m, n, k, TC>& d, const fragment<matrix_a, m, n, k, TAB, LayoutA>& a,
              const fragment<matrix_b, m, n, k, TAB, LayoutB>& b, const fragment<accumulator, m, n, k, TC>& c,
              ::hg::emu::Site site = ::hg::emu::Site::here()) {
  static_assert(std::is_same_v<TC, float> || std::is_same_v<TAB, __half>,
                "wmma::mma_sync: __nv_bfloat16 inputs need a float accumulator");
  using namespace ::hg::emu::wmma_detail;
  LaneRecord r;
  r.call = Call::Mma;
  r.map = d.emu_mapping();
  r.map_a = a.emu_mapping();
  r.map_b = b.emu_mapping();
  r.fragment = d.x;
  r.a = a.x;
  r.b = b.x;
  r.c = c.x;
  begin(r, site);
  multiply_accumulate(r);
  step(r, site);  // every lane has read the operands it needs: they may change
}

}  // namespace nvcuda::wmma
