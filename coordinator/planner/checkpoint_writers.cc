#include "coordinator/planner/checkpoint_writers.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft::planner {
namespace {

using BoxKey = std::tuple<std::string, std::vector<int64_t>, std::vector<int64_t>>;

BoxKey KeyOf(const v1::CheckpointItem& item) {
  return {item.name(),
          {item.box().offsets().begin(), item.box().offsets().end()},
          {item.box().lengths().begin(), item.box().lengths().end()}};
}

int64_t Bytes(const v1::CheckpointItem& item) {
  int64_t n = 4;
  for (int64_t d : item.box().lengths()) n *= d;
  return n;
}

}  // namespace

absl::Status AssignCheckpointWriters(std::vector<v1::Program>* programs) {
  const int world = static_cast<int>(programs->size());
  // Which ranks hold each (name, box) at all.
  std::map<BoxKey, std::set<int>> holders;
  for (int r = 0; r < world; ++r) {
    for (const v1::CheckpointItem& item : (*programs)[r].checkpoint_items()) {
      if (!holders[KeyOf(item)].insert(r).second) {
        return absl::InternalError(absl::StrCat("rank ", r, " has two checkpoint items for ",
                                                item.name()));
      }
    }
  }
  // Groups of identical copies: (name, box, replicas that hold it) -> (rank, item index).
  using GroupKey = std::pair<BoxKey, std::vector<int>>;
  std::map<GroupKey, std::vector<std::pair<int, int>>> groups;
  for (int r = 0; r < world; ++r) {
    const v1::Program& p = (*programs)[r];
    for (int i = 0; i < p.checkpoint_items_size(); ++i) {
      const v1::CheckpointItem& item = p.checkpoint_items(i);
      const std::set<int>& held = holders[KeyOf(item)];
      std::vector<int> replicas;
      for (int q : item.replicas()) {
        if (held.count(q) > 0) replicas.push_back(q);
      }
      if (std::find(replicas.begin(), replicas.end(), r) == replicas.end()) {
        return absl::InternalError(absl::StrCat("rank ", r, ": checkpoint item ", item.name(),
                                                " does not list the rank among its replicas [",
                                                absl::StrJoin(item.replicas(), ","), "]"));
      }
      groups[{KeyOf(item), replicas}].emplace_back(r, i);
    }
  }
  std::vector<const GroupKey*> order;
  for (const auto& [key, members] : groups) {
    // Every replica must see the same group; one that does not is a planner bug.
    if (members.size() != key.second.size()) {
      return absl::InternalError(absl::StrCat(
          "checkpoint item ", std::get<0>(key.first), ": replicas [",
          absl::StrJoin(key.second, ","), "] disagree about who holds the same copy"));
    }
    order.push_back(&key);
  }
  auto bytes_of = [&](const GroupKey* key) {
    const auto& [r, i] = groups.at(*key).front();
    return Bytes((*programs)[r].checkpoint_items(i));
  };
  std::stable_sort(order.begin(), order.end(), [&](const GroupKey* a, const GroupKey* b) {
    return bytes_of(a) > bytes_of(b);
  });
  std::vector<int64_t> load(world, 0);
  for (const GroupKey* key : order) {
    const std::vector<int>& replicas = key->second;
    int writer = replicas.front();
    for (int q : replicas) {
      if (load[q] < load[writer]) writer = q;
    }
    load[writer] += bytes_of(key);
    for (const auto& [r, i] : groups.at(*key)) {
      (*programs)[r].mutable_checkpoint_items(i)->set_write(r == writer);
    }
  }
  return absl::OkStatus();
}

}  // namespace weft::planner
