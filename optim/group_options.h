#pragma once
// Per-group hyper-parameters (optim/optimizer.h ParamGroup::overrides): the table an optimizer keeps of
// the options a group may override, and the options a group runs with.
//
//   const GroupOptionTable<AdamOptions> kTable = {HG_GROUP_OPTION(AdamOptions, beta1),
//                                                 HG_GROUP_FLAG(AdamOptions, amsgrad)};
//   AdamOptions o = with_overrides(options_, group, kTable);   // options_ with the group's values
//
// LocalOptimizer::add_param_group has checked the names (against group_option_names(kTable)) and the
// flags' values before any update reads them; with_overrides reads the values without checking again.
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace hg::optim {

template <class Options>
struct GroupOption {
  const char* name;
  bool flag;
  void (*set)(Options&, double);
};

template <class Options>
using GroupOptionTable = std::vector<GroupOption<Options>>;

// A double option `name` of Options, and a bool one (given as 0 or 1).
// clang-format off
#define HG_GROUP_OPTION(Options, name) \
  ::hg::optim::GroupOption<Options> { #name, false, [](Options& o, double v) { o.name(v); } }
#define HG_GROUP_FLAG(Options, name) \
  ::hg::optim::GroupOption<Options> { #name, true, [](Options& o, double v) { o.name(v != 0.0); } }
// clang-format on

template <class Options>
std::vector<GroupOptionName> group_option_names(const GroupOptionTable<Options>& table) {
  std::vector<GroupOptionName> names;
  for (const GroupOption<Options>& option : table) names.push_back({option.name, option.flag});
  return names;
}

// `defaults` with the overrides of `group` written in (unknown names are skipped: add_param_group refused
// them already).
template <class Options>
Options with_overrides(Options defaults, const ParamGroup& group, const GroupOptionTable<Options>& table) {
  for (const auto& [name, value] : group.overrides)
    for (const GroupOption<Options>& option : table)
      if (name == option.name) option.set(defaults, value);
  return defaults;
}

}  // namespace hg::optim
