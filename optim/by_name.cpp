// The local optimizers by name (optim/by_name.h).
#include "optim/by_name.h"

#include "optim/optim.h"

namespace hg::optim {

const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names = {"sgd", "adam", "adamw", "rmsprop", "adagrad", "lion"};
  return names;
}

std::string optimizer_name_list() {
  const std::vector<std::string>& names = optimizer_names();
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return list;
}

std::unique_ptr<LocalOptimizer> make_optimizer(const std::string& name, std::vector<Tensor> params, double lr,
                                               double weight_decay) {
  if (name == "sgd")
    return std::make_unique<SGD>(std::move(params), SGDOptions().lr(lr).momentum(0.9).weight_decay(weight_decay));
  if (name == "adam") return std::make_unique<Adam>(std::move(params), AdamOptions().lr(lr).weight_decay(weight_decay));
  if (name == "adamw")
    return std::make_unique<AdamW>(std::move(params), AdamWOptions().lr(lr).weight_decay(weight_decay));
  if (name == "rmsprop")
    return std::make_unique<RMSprop>(std::move(params), RMSpropOptions().lr(lr).weight_decay(weight_decay));
  if (name == "adagrad")
    return std::make_unique<Adagrad>(std::move(params), AdagradOptions().lr(lr).weight_decay(weight_decay));
  if (name == "lion") return std::make_unique<Lion>(std::move(params), LionOptions().lr(lr).weight_decay(weight_decay));
  HG_FAIL("unknown optimizer '", name, "'; expected ", optimizer_name_list());
}

}  // namespace hg::optim
