// PyTorch parity: halfgrad's ops against the outputs and gradients PyTorch 1.13 computed for them
// (tests/data/torch/ops.jsonl, written once by scripts/make-torch-vectors; PyTorch is never a
// dependency of the build or the tests). Each case is run in f64 (tight tolerance: the same math) and
// f32 (the half of it that rounding allows), on the CPU; built as test_cuda_torch_parity
// (HG_TORCH_PARITY_DEVICE) the same cases run on the CUDA device, or the emulator, in f32.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/device.h"
#include "engine/ops.h"
#include "support/skip_cuda.h"

using namespace hg;
using nlohmann::json;

namespace {

const std::string kVectors = std::string(HG_TORCH_TEST_DATA) + "/ops.jsonl";

double number(const json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "nan") return NAN;
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    FAIL("unknown number spelling '", s, "' in ", kVectors);
  }
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  return v.get<double>();
}

std::vector<double> numbers(const json& values) {
  std::vector<double> out;
  for (const json& v : values) out.push_back(number(v));
  return out;
}

Shape shape_of(const json& s) { return s.get<Shape>(); }

Reduction reduction_of(const json& args) {
  const std::string r = args.value("reduction", std::string("mean"));
  if (r == "none") return Reduction::None;
  if (r == "sum") return Reduction::Sum;
  if (r == "batchmean") return Reduction::BatchMean;
  REQUIRE(r == "mean");
  return Reduction::Mean;
}

std::optional<double> optional_arg(const json& args, const char* name) {
  if (!args.contains(name) || args[name].is_null()) return std::nullopt;
  return number(args[name]);
}

Tensor arg_or_none(const std::vector<Tensor>& x, size_t i) { return i < x.size() ? x[i] : Tensor(); }

std::vector<int> dims_of(const json& args) { return args.value("dim", std::vector<int>{}); }

// A (height, width) argument, `fallback` in both when absent.
Size2d pair_arg(const json& args, const char* name, int64_t fallback) {
  if (!args.contains(name)) return {fallback, fallback};
  const auto v = args[name].get<std::vector<int64_t>>();
  REQUIRE(v.size() == 2);
  return {v[0], v[1]};
}

InterpolateOptions interpolate_options(const json& args) {
  InterpolateOptions o;
  const std::string mode = args["mode"];
  o.mode = mode == "nearest"         ? InterpolateMode::Nearest
           : mode == "nearest-exact" ? InterpolateMode::NearestExact
           : mode == "linear"        ? InterpolateMode::Linear
                                     : InterpolateMode::Bilinear;
  if (args.contains("size")) o.set_size(args["size"].get<std::vector<int64_t>>());
  if (args.contains("scale_factor")) o.set_scale_factor(args["scale_factor"].get<std::vector<double>>());
  if (args.contains("align_corners")) o.set_align_corners(args["align_corners"]);
  return o;
}

// The dtype and device of the run (for the factories, which take no input).
DType g_dtype = f64;
Device g_device = kCPU;

// The pieces scaled by 1, 2, 3, ... and joined again: one tensor that shows each piece's extent.
Tensor scaled_pieces(const std::vector<Tensor>& pieces, int dim) {
  std::vector<Tensor> scaled;
  for (size_t i = 0; i < pieces.size(); ++i) scaled.push_back(pieces[i] * double(i + 1));
  return cat(scaled, dim);
}

using Op = std::function<Tensor(const std::vector<Tensor>&, const json&)>;

// The halfgrad call for each "op" of the vectors, with PyTorch's keyword arguments.
const std::map<std::string, Op>& ops() {
  using V = const std::vector<Tensor>&;
  using A = const json&;
  static const std::map<std::string, Op> table = {
      {"sin", [](V x, A) { return sin(x[0]); }},
      {"cos", [](V x, A) { return cos(x[0]); }},
      {"erf", [](V x, A) { return erf(x[0]); }},
      {"rsqrt", [](V x, A) { return rsqrt(x[0]); }},
      {"sign", [](V x, A) { return sign(x[0]); }},
      {"floor", [](V x, A) { return floor(x[0]); }},
      {"leaky_relu", [](V x, A a) { return leaky_relu(x[0], a.value("negative_slope", 0.01)); }},
      {"elu", [](V x, A a) { return elu(x[0], a.value("alpha", 1.0)); }},
      {"softplus", [](V x, A a) { return softplus(x[0], a.value("beta", 1.0), a.value("threshold", 20.0)); }},
      {"log_sigmoid", [](V x, A) { return log_sigmoid(x[0]); }},
      {"maximum", [](V x, A) { return maximum(x[0], x[1]); }},
      {"minimum", [](V x, A) { return minimum(x[0], x[1]); }},
      {"pow", [](V x, A) { return pow(x[0], x[1]); }},
      {"pow_scalar", [](V x, A a) { return pow(x[0], number(a["exponent"])); }},
      {"clamp", [](V x, A a) { return clamp(x[0], optional_arg(a, "min"), optional_arg(a, "max")); }},
      {"clamp_tensor", [](V x, A) { return clamp(x[0], x[1], x[2]); }},
      {"eq", [](V x, A) { return eq(x[0], x[1]); }},
      {"ne", [](V x, A) { return ne(x[0], x[1]); }},
      {"lt", [](V x, A) { return lt(x[0], x[1]); }},
      {"le", [](V x, A) { return le(x[0], x[1]); }},
      {"gt", [](V x, A) { return gt(x[0], x[1]); }},
      {"ge", [](V x, A) { return ge(x[0], x[1]); }},
      {"eq_scalar", [](V x, A a) { return eq(x[0], number(a["other"])); }},
      {"ne_scalar", [](V x, A a) { return ne(x[0], number(a["other"])); }},
      {"lt_scalar", [](V x, A a) { return lt(x[0], number(a["other"])); }},
      {"le_scalar", [](V x, A a) { return le(x[0], number(a["other"])); }},
      {"gt_scalar", [](V x, A a) { return gt(x[0], number(a["other"])); }},
      {"ge_scalar", [](V x, A a) { return ge(x[0], number(a["other"])); }},
      {"logical_and", [](V x, A) { return logical_and(x[0], x[1]); }},
      {"logical_or", [](V x, A) { return logical_or(x[0], x[1]); }},
      {"logical_xor", [](V x, A) { return logical_xor(x[0], x[1]); }},
      {"logical_not", [](V x, A) { return logical_not(x[0]); }},
      {"any",
       [](V x, A a) {
         return a.contains("dim") ? any(x[0], {a["dim"].get<int>()}, a.value("keepdim", false)) : any(x[0]);
       }},
      {"all",
       [](V x, A a) {
         return a.contains("dim") ? all(x[0], {a["dim"].get<int>()}, a.value("keepdim", false)) : all(x[0]);
       }},
      {"where", [](V x, A) { return where(x[0], x[1], x[2]); }},
      {"masked_fill", [](V x, A a) { return masked_fill(x[0], x[1], number(a["value"])); }},
      {"min", [](V x, A a) { return min(x[0], a["dim"].get<int>(), a.value("keepdim", false)).first; }},
      {"min_all", [](V x, A) { return min(x[0]); }},
      {"argmax", [](V x, A a) { return argmax(x[0], a["dim"].get<int>(), a.value("keepdim", false)); }},
      {"argmin", [](V x, A a) { return argmin(x[0], a["dim"].get<int>(), a.value("keepdim", false)); }},
      {"var", [](V x, A a) { return var(x[0], dims_of(a), a.value("correction", 1.0), a.value("keepdim", false)); }},
      {"std", [](V x, A a) { return hg::std(x[0], dims_of(a), a.value("correction", 1.0), a.value("keepdim", false)); }},
      {"logsumexp", [](V x, A a) { return logsumexp(x[0], dims_of(a), a.value("keepdim", false)); }},
      {"stack", [](V x, A a) { return stack(x, a.value("dim", 0)); }},
      {"split",
       [](V x, A a) {
         return scaled_pieces(split(x[0], a["sizes"].get<std::vector<int64_t>>(), a["dim"]), a["dim"]);
       }},
      {"chunk", [](V x, A a) { return scaled_pieces(chunk(x[0], a["chunks"], a["dim"]), a["dim"]); }},
      {"flatten", [](V x, A a) { return flatten(x[0], a["start_dim"], a["end_dim"]) * 2.0; }},
      {"unflatten", [](V x, A a) { return unflatten(x[0], a["dim"], a["sizes"].get<Shape>()) * 2.0; }},
      {"repeat", [](V x, A a) { return repeat(x[0], a["repeats"].get<Shape>()); }},
      {"pad", [](V x, A a) { return pad(x[0], a["pad"].get<std::vector<int64_t>>(), a.value("value", 0.0)); }},
      {"tril", [](V x, A a) { return tril(x[0], a.value("diagonal", 0)); }},
      {"triu", [](V x, A a) { return triu(x[0], a.value("diagonal", 0)); }},
      {"one_hot", [](V x, A a) { return one_hot(x[0], a.value("num_classes", -1)); }},
      {"arange",
       [](V, A a) { return arange(number(a["start"]), number(a["end"]), number(a["step"]), g_dtype, g_device); }},
      {"linspace",
       [](V, A a) { return linspace(number(a["start"]), number(a["end"]), a["steps"], g_dtype, g_device); }},
      {"eye", [](V, A a) { return eye(a["n"], a["m"], g_dtype, g_device); }},
      {"mse_loss", [](V x, A a) { return mse_loss(x[0], x[1], reduction_of(a)); }},
      {"l1_loss", [](V x, A a) { return l1_loss(x[0], x[1], reduction_of(a)); }},
      {"smooth_l1_loss", [](V x, A a) { return smooth_l1_loss(x[0], x[1], reduction_of(a), a.value("beta", 1.0)); }},
      {"huber_loss", [](V x, A a) { return huber_loss(x[0], x[1], reduction_of(a), a.value("delta", 1.0)); }},
      {"binary_cross_entropy",
       [](V x, A a) { return binary_cross_entropy(x[0], x[1], arg_or_none(x, 2), reduction_of(a)); }},
      {"binary_cross_entropy_with_logits",
       [](V x, A a) {
         return binary_cross_entropy_with_logits(x[0], x[1], arg_or_none(x, 2), arg_or_none(x, 3), reduction_of(a));
       }},
      {"nll_loss",
       [](V x, A a) { return nll_loss(x[0], x[1], arg_or_none(x, 2), a.value("ignore_index", -100), reduction_of(a)); }},
      {"cross_entropy",
       [](V x, A a) {
         return cross_entropy(x[0], x[1],
                              CrossEntropyOptions()
                                  .set_weight(arg_or_none(x, 2))
                                  .set_ignore_index(a.value("ignore_index", -100))
                                  .set_reduction(reduction_of(a))
                                  .set_label_smoothing(a.value("label_smoothing", 0.0)));
       }},
      {"kl_div", [](V x, A a) { return kl_div(x[0], x[1], reduction_of(a), a.value("log_target", false)); }},
      {"cosine_similarity",
       [](V x, A a) { return cosine_similarity(x[0], x[1], a.value("dim", 1), a.value("eps", 1e-8)); }},
      {"pairwise_distance",
       [](V x, A a) { return pairwise_distance(x[0], x[1], a.contains("p") ? number(a["p"]) : 2.0, a.value("eps", 1e-6)); }},
      {"gather", [](V x, A a) { return gather(x[0], a["dim"], x[1]); }},
      {"scatter_add", [](V x, A a) { return scatter_add(x[0], a["dim"], x[1], x[2]); }},
      {"index_select", [](V x, A a) { return index_select(x[0], a["dim"], x[1]); }},
      {"index_add", [](V x, A a) { return index_add(x[0], a["dim"], x[1], x[2], a.value("alpha", 1.0)); }},
      {"flip", [](V x, A a) { return flip(x[0], a["dims"].get<std::vector<int>>()); }},
      {"cumsum", [](V x, A a) { return cumsum(x[0], a["dim"]); }},
      {"layer_norm",
       [](V x, A a) {
         return layer_norm(x[0], a["normalized_shape"].get<Shape>(), arg_or_none(x, 1), arg_or_none(x, 2),
                           a.value("eps", 1e-5));
       }},
      {"batch_norm_stats",
       [](V x, A a) {
         // The running statistics are updated in place: the output carries them after y, as the vectors do.
         const Tensor rm = x[1].clone(), rv = x[2].clone();
         const Tensor y = batch_norm(x[0], rm, rv, x[3], x[4], a["training"], a["momentum"], 1e-5);
         return cat({y.reshape({-1}), rm, rv}, 0);
       }},
      {"group_norm",
       [](V x, A a) { return group_norm(x[0], a["num_groups"], arg_or_none(x, 1), arg_or_none(x, 2), a.value("eps", 1e-5)); }},
      {"rms_norm",
       [](V x, A a) {
         return rms_norm(x[0], a["normalized_shape"].get<Shape>(), arg_or_none(x, 1), optional_arg(a, "eps"));
       }},
      {"conv1d",
       [](V x, A a) {
         return conv1d(x[0], x[1], arg_or_none(x, 2), a.value("stride", 1), a.value("padding", 0),
                       a.value("dilation", 1), a.value("groups", 1));
       }},
      {"conv_transpose2d",
       [](V x, A a) {
         return conv_transpose2d(x[0], x[1], arg_or_none(x, 2), pair_arg(a, "stride", 1), pair_arg(a, "padding", 0),
                                 pair_arg(a, "output_padding", 0), a.value("groups", 1), pair_arg(a, "dilation", 1));
       }},
      {"conv_transpose1d",
       [](V x, A a) {
         return conv_transpose1d(x[0], x[1], arg_or_none(x, 2), a.value("stride", 1), a.value("padding", 0),
                                 a.value("output_padding", 0), a.value("groups", 1), a.value("dilation", 1));
       }},
      {"interpolate", [](V x, A a) { return interpolate(x[0], interpolate_options(a)); }},
      {"adaptive_avg_pool2d", [](V x, A a) { return adaptive_avg_pool2d(x[0], pair_arg(a, "output_size", 1)); }},
      {"adaptive_avg_pool1d", [](V x, A a) { return adaptive_avg_pool1d(x[0], a["output_size"]); }},
      {"pad_mode",
       [](V x, A a) {
         const PadMode mode = a["mode"] == "reflect" ? PadMode::Reflect : PadMode::Replicate;
         return pad(x[0], a["pad"].get<std::vector<int64_t>>(), mode);
       }},
      {"topk", [](V x, A a) { return topk(x[0], a["k"], a.value("dim", -1), a.value("largest", true)).first; }},
      {"topk_indices",
       [](V x, A a) { return topk(x[0], a["k"], a.value("dim", -1), a.value("largest", true)).second; }},
      {"attention_mask",
       [](V x, A a) { return scaled_dot_product_attention(x[0], x[1], x[2], x[3], a.value("causal", false)); }},
      {"triplet_margin_loss",
       [](V x, A a) {
         return triplet_margin_loss(x[0], x[1], x[2], a.value("margin", 1.0), a.value("p", 2.0), a.value("eps", 1e-6),
                                    a.value("swap", false), reduction_of(a));
       }},
  };
  return table;
}

struct Vectors {
  json header;
  std::vector<json> cases;
};

const Vectors& vectors() {
  static const Vectors v = [] {
    std::ifstream in(kVectors);
    REQUIRE_MESSAGE(in.good(), "cannot read ", kVectors, " (scripts/make-torch-vectors writes it)");
    Vectors out;
    std::string line;
    std::getline(in, line);
    out.header = json::parse(line);
    while (std::getline(in, line))
      if (!line.empty()) out.cases.push_back(json::parse(line));
    return out;
  }();
  return v;
}

// One input as the case describes it, on `device`: floating values in `dtype`; "transposed" inputs are
// stored transposed and viewed back. `leaf` receives the tensor whose grad() the case checks.
Tensor make_input(const json& spec, DType dtype, const Device& device, Tensor& leaf) {
  const Shape shape = shape_of(spec["shape"]);
  const std::vector<double> values = numbers(spec["values"]);
  const std::string kind = spec["dtype"];
  Tensor t;
  if (kind == "bool") {
    t = ne(from_vector(values, shape, f64, device), 0.0);
  } else if (kind == "i64") {  // read as integers: a double would round ids beyond 2^53
    t = from_vector(spec["values"].get<std::vector<int64_t>>(), shape, i64, device);
  } else {
    t = from_vector(values, shape, dtype, device);
  }
  const bool transposed = spec.value("layout", std::string("contiguous")) == "transposed";
  if (transposed) {
    REQUIRE(t.dim() == 2);
    t = t.t().contiguous();  // storage of the transpose; the view below reads the logical tensor
  }
  if (spec.value("grad", false)) t.requires_grad_();
  leaf = t;
  return transposed ? t.t() : t;
}

struct Tolerance {
  double atol, rtol;
};

// got vs expected element by element: NaN meets NaN, an infinity the same infinity.
std::string compare(const std::vector<double>& got, const std::vector<double>& expected, Tolerance tol) {
  if (got.size() != expected.size())
    return "size " + std::to_string(got.size()) + ", expected " + std::to_string(expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], e = expected[i];
    const bool ok = std::isnan(e) ? std::isnan(g) : (g == e || std::fabs(g - e) <= tol.atol + tol.rtol * std::fabs(e));
    if (!ok) {
      std::ostringstream s;
      s.precision(17);
      s << "element " << i << ": got " << g << ", PyTorch " << e;
      return s.str();
    }
  }
  return "";
}

void run_case(const json& c, DType dtype, const Device& device, Tolerance tol) {
  const std::string name = c["name"], op = c["op"];
  INFO("case '", name, "' (op ", op, ") in ", std::string(dtype_name(dtype)), " on ", device.str());
  g_dtype = dtype;
  g_device = device;
  if (dtype != f64 && c.value("f64_only", false)) return;
  const auto found = ops().find(op);
  REQUIRE_MESSAGE(found != ops().end(), "no halfgrad call for op '", op, "'");
  std::vector<Tensor> inputs, leaves;
  for (const json& spec : c["inputs"]) {
    Tensor leaf;
    inputs.push_back(make_input(spec, dtype, device, leaf));
    leaves.push_back(leaf);
  }
  const Tensor out = found->second(inputs, c["args"]);
  const json& expected = c["output"];
  CHECK(out.shape() == shape_of(expected["shape"]));
  const std::string want_dtype = expected["dtype"];
  CHECK(std::string(dtype_name(out.dtype())) == (want_dtype == "f64" ? std::string(dtype_name(dtype)) : want_dtype));
  const std::string forward = compare(out.to_vector<double>(), numbers(expected["values"]), tol);
  CHECK_MESSAGE(forward.empty(), "forward: ", forward);
  if (!c.contains("grads")) return;
  const Tensor g = from_vector(numbers(c["grad_output"]), out.shape(), out.dtype(), device);
  out.backward(g);
  for (size_t i = 0; i < leaves.size(); ++i) {
    const json& want = c["grads"][i];
    if (want.is_null()) continue;
    INFO("gradient of input ", i);
    REQUIRE(leaves[i].grad().defined());
    const bool transposed = c["inputs"][i].value("layout", std::string("contiguous")) == "transposed";
    const Tensor grad = transposed ? leaves[i].grad().t() : leaves[i].grad();
    const std::string backward = compare(grad.to_vector<double>(), numbers(want), tol);
    CHECK_MESSAGE(backward.empty(), "backward: ", backward);
  }
}

}  // namespace

#if !defined(HG_TORCH_PARITY_DEVICE)

TEST_CASE("torch vectors: the file is the generator's, and every op it names has a halfgrad call") {
  const Vectors& v = vectors();
  CHECK(v.header["generator"] == "scripts/make-torch-vectors");
  CHECK(std::string(v.header["torch"]).rfind("1.13", 0) == 0);
  CHECK(v.header["cases"].get<size_t>() == v.cases.size());
  CHECK(v.cases.size() >= 120);
  for (const json& c : v.cases) CHECK_MESSAGE(ops().count(c["op"]) == 1, c["op"].get<std::string>());
}

TEST_CASE("torch parity in f64 on the CPU: outputs and gradients") {
  for (const json& c : vectors().cases) run_case(c, f64, kCPU, {1e-12, 1e-9});
}

TEST_CASE("torch parity in f32 on the CPU: outputs and gradients") {
  for (const json& c : vectors().cases) run_case(c, f32, kCPU, {2e-5, 5e-5});
}

#else

TEST_CASE("torch parity in f32 on the CUDA device: outputs and gradients") {
  if (hg::testing::skip_without_cuda("torch parity on CUDA")) return;
  for (const json& c : vectors().cases) run_case(c, f32, Device::cuda(0), {2e-5, 5e-5});
}

#endif
