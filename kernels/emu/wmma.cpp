// nvcuda::wmma's warp-collective side (kernels/emu/wmma.h says what is emulated and guaranteed): the
// scrambled element-to-lane mappings, the meeting of the 32 lanes with its argument checks, the exchange
// of staged memory pieces into fragments and back, and D = A * B + C in float.
//
// The lanes of a call meet in a warp collective whose result is every lane's LaneRecord (on its fiber's
// stack, alive while the lane waits in the call's next step). Between two steps no lane runs kernel
// code, so a lane may read the other lanes' records, staged pieces and fragments.
#include "kernels/emu/wmma.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kernels/emu/block.h"
#include "kernels/error.h"

namespace hg::emu::wmma_detail {
namespace {

using detail::BlockRunner;
using detail::Fiber;
using detail::WarpOp;
using detail::WmmaResult;

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t mapping_seed() {
  uint64_t seed = 0x776d6d61'5f656d75ull;  // "wmma_emu"
  if (const char* text = std::getenv("HG_EMU_SEED")) seed ^= mix(std::strtoull(text, nullptr, 0));
  return seed;
}

unsigned kind_code(const FragmentKind& k) {
  return unsigned(k.use) | unsigned(k.element) << 2 | unsigned(k.rows) << 4 | unsigned(k.cols) << 10 |
         unsigned(k.col_major) << 16;
}

int element_bytes(Element e) { return e == Element::F32 ? 4 : 2; }

const char* call_name(Call call) {
  switch (call) {
    case Call::Load:
      return "wmma::load_matrix_sync";
    case Call::Store:
      return "wmma::store_matrix_sync";
    case Call::Mma:
      return "wmma::mma_sync";
  }
  return "?";
}

WarpOp call_op(Call call) {
  return call == Call::Load ? WarpOp::WmmaLoad : call == Call::Store ? WarpOp::WmmaStore : WarpOp::WmmaMma;
}

std::string site_text(const Site& site) {
  const char* slash = std::strrchr(site.file, '/');
  return ::hg::detail::concat(slash ? slash + 1 : site.file, ":", site.line);
}

[[noreturn]] void fail(const LaneRecord& r, const Site& site, const std::string& what) {
  BlockRunner::this_thread().fail(::hg::detail::concat(call_name(r.call), " at ", site_text(site), ": ", what));
}

const char* layout_text(bool col_major) { return col_major ? "col-major" : "row-major"; }

float read_element(Element e, const void* x, int i) {
  switch (e) {
    case Element::F16:
      return __half2float(static_cast<const __half*>(x)[i]);
    case Element::BF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(x)[i]);
    case Element::F32:
      return static_cast<const float*>(x)[i];
  }
  return 0.0f;
}

void write_element(Element e, void* x, int i, float v) {
  if (e == Element::F16) {
    static_cast<__half*>(x)[i] = __float2half_rn(v);
  } else {
    static_cast<float*>(x)[i] = v;  // accumulators are float or __half
  }
}

// Where position (row, col) = (position / cols, position % cols) of `kind`'s matrix lies in a tile
// stored row-major (line = row) or column-major (line = col).
TilePlace tile_place(const FragmentKind& kind, bool col_major_storage, int position) {
  const int row = position / kind.cols, col = position % kind.cols;
  return col_major_storage ? TilePlace{col, row} : TilePlace{row, col};
}

}  // namespace

const Mapping* mapping(const FragmentKind& kind) {
  static std::mutex mutex;
  static std::unordered_map<unsigned, std::unique_ptr<Mapping>> table;  // one per kind, for the process
  static const uint64_t seed = mapping_seed();
  const unsigned code = kind_code(kind);
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Mapping>& slot = table[code];
  if (slot) return slot.get();
  auto map = std::make_unique<Mapping>();
  map->kind = kind;
  map->elements = kind.rows * kind.cols;
  map->per_lane = map->elements / 32;
  HG_CHECK(map->elements <= 512 && map->elements % 32 == 0, "[emu] wmma: no mapping for a ", int(kind.rows), "x",
           int(kind.cols), " fragment");
  // A Fisher-Yates shuffle of the positions over the slots, from the kind and the seed.
  for (int s = 0; s < map->elements; ++s) map->position_of_slot[s] = uint16_t(s);
  uint64_t state = mix(seed ^ mix(code));
  for (int s = map->elements - 1; s > 0; --s) {
    state = mix(state);
    std::swap(map->position_of_slot[s], map->position_of_slot[state % uint64_t(s + 1)]);
  }
  for (int s = 0; s < map->elements; ++s) map->slot_of_position[map->position_of_slot[s]] = uint16_t(s);
  slot = std::move(map);
  return slot.get();
}

void begin(LaneRecord& r, const Site& site) {
  const LaneRecord* self = &r;
  WmmaResult met;
  std::memcpy(&met, detail::warp_collective(call_op(r.call), ~0u, &self, sizeof self, 0, 32, site), sizeof met);
  r.lane = int(static_cast<const Fiber*>(detail::t_thread)->linear & 31);
  if (met.lanes != ~0u) {
    std::string missing;
    for (int lane = 0; lane < 32; ++lane) {
      if (!(met.lanes >> lane & 1u)) missing += (missing.empty() ? "" : ", ") + std::to_string(lane);
    }
    fail(r, site,
         ::hg::detail::concat("lanes ", missing,
                              " of the warp do not take part (exited, or absent because the block's size is not a "
                              "multiple of 32): all 32 lanes must call it together"));
  }
  for (int lane = 0; lane < 32; ++lane) r.lanes[lane] = static_cast<const LaneRecord*>(met.records[lane]);

  if (r.call != Call::Mma) {
    const int bytes = element_bytes(r.map->kind.element);
    const unsigned multiple = bytes == 2 ? 8 : 4;
    if (reinterpret_cast<uintptr_t>(r.memory) % 32 != 0) {
      fail(r, site,
           ::hg::detail::concat("pointer ", r.memory, " is not 256-bit (32-byte) aligned, as WMMA requires"));
    }
    if (r.ldm == 0 || r.ldm % multiple != 0) {
      fail(r, site,
           ::hg::detail::concat("ldm = ", r.ldm, " must be a positive multiple of ", multiple, " for ",
                                bytes == 2 ? "16-bit" : "32-bit", " elements (16 bytes)"));
    }
  }
  const LaneRecord& first = *r.lanes[0];
  const bool same = first.call == r.call && first.map == r.map && first.map_a == r.map_a && first.map_b == r.map_b &&
                    first.memory == r.memory && first.ldm == r.ldm && first.storage_col_major == r.storage_col_major;
  if (!same) {
    fail(r, site,
         ::hg::detail::concat("lane ", r.lane, " passes pointer ", r.memory, ", ldm ", r.ldm, ", ",
                              layout_text(r.storage_col_major), " while lane 0 passes ", first.memory, ", ldm ",
                              first.ldm, ", ", layout_text(first.storage_col_major),
                              " (or another fragment type): the lanes of a warp must pass the same arguments"));
  }
}

void step(const LaneRecord& r, const Site& site) {
  const LaneRecord* self = &r;
  detail::warp_collective(call_op(r.call), ~0u, &self, sizeof self, 0, 32, site);
}

// The lanes' staged pieces hold the tile in wmma.h's piece order (piece_place / piece_holding).
void gather_fragment(LaneRecord& r) {
  const Mapping& map = *r.map;
  const int bytes = element_bytes(map.kind.element);
  const PieceGeometry g = piece_geometry(r, bytes);
  unsigned char* x = static_cast<unsigned char*>(r.fragment);
  for (int i = 0; i < map.per_lane; ++i) {
    const PieceSlot held = piece_holding(g, tile_place(map.kind, r.storage_col_major, map.position_of_slot[r.lane * map.per_lane + i]));
    std::memcpy(x + i * bytes, r.lanes[held.lane]->staging + held.piece * g.piece_bytes + held.element * bytes, bytes);
  }
}

void scatter_fragment(LaneRecord& r) {
  const Mapping& map = *r.map;
  const FragmentKind& kind = map.kind;
  const int bytes = element_bytes(kind.element);
  const PieceGeometry g = piece_geometry(r, bytes);
  for (int k = 0; k < g.pieces_per_lane; ++k) {
    const TilePlace first = piece_place(g, r.lane, k);
    for (int j = 0; j < g.piece_elements; ++j) {
      const int position = r.storage_col_major ? (first.pos + j) * kind.cols + first.line : first.line * kind.cols + first.pos + j;
      const int slot = map.slot_of_position[position];
      const auto* x = static_cast<const unsigned char*>(r.lanes[slot / map.per_lane]->fragment);
      std::memcpy(r.staging + k * g.piece_bytes + j * bytes, x + (slot % map.per_lane) * bytes, bytes);
    }
  }
}

void multiply_accumulate(LaneRecord& r) {
  const Mapping& dm = *r.map;
  const Mapping& am = *r.map_a;
  const Mapping& bm = *r.map_b;
  const int n = dm.kind.cols, k_depth = am.kind.cols;
  float out[16];
  for (int i = 0; i < dm.per_lane; ++i) {
    const int position = dm.position_of_slot[r.lane * dm.per_lane + i];
    const int row = position / n, col = position % n;
    float acc = read_element(dm.kind.element, r.c, i);  // C shares D's mapping
    for (int k = 0; k < k_depth; ++k) {
      const int sa = am.slot_of_position[row * k_depth + k];
      const int sb = bm.slot_of_position[k * n + col];
      const float a = read_element(am.kind.element, r.lanes[sa / am.per_lane]->a, sa % am.per_lane);
      const float b = read_element(bm.kind.element, r.lanes[sb / bm.per_lane]->b, sb % bm.per_lane);
      acc += a * b;  // exact product of two 16-bit inputs; the sum rounds in float, k in order
    }
    out[i] = acc;
  }
  for (int i = 0; i < dm.per_lane; ++i) write_element(dm.kind.element, r.fragment, i, out[i]);
}

}  // namespace hg::emu::wmma_detail
