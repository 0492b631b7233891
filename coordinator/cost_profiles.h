// The cost profiles the coordinator holds: one per worker kind and host, as `weftctl calibrate`
// (PutCostProfile) stored them, each kept in a JSON file of its own under a folder of the data
// dir so that a restarted coordinator has them again. The search of a `mesh: {auto: true}` job
// prices its plans with the newest profile of the job's kind (planner/cost/search.h).
//
// E.g.
//   CostProfiles profiles(data_dir + "/cost_profiles");
//   RETURN_IF_ERROR(profiles.Load());
//   RETURN_IF_ERROR(profiles.Put(profile));        // INVALID_ARGUMENT names a bad field
//   std::optional<v1::CostProfile> p = profiles.NewestOfKind("cpu");
#ifndef WEFT_COORDINATOR_COST_PROFILES_H_
#define WEFT_COORDINATOR_COST_PROFILES_H_

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "weft/v1/profile.pb.h"

namespace weft::coordinator {

// A profile's checks: a kind (cpu or cuda), MATMUL and MEMORY kernel fits, every fit finite and
// not negative, at most a few thousand entries, a host of printable characters.
absl::Status ValidateCostProfile(const v1::CostProfile& profile);

class CostProfiles {
 public:
  // `dir`: where the profiles are kept (made on the first Put); empty: in memory only.
  explicit CostProfiles(std::string dir) : dir_(std::move(dir)) {}

  // Reads the folder's profiles; a file that is not one is skipped with a warning.
  absl::Status Load() ABSL_LOCKS_EXCLUDED(mu_);
  // Validates and stores `profile`, replacing the one of its kind and host (written atomically).
  absl::Status Put(const v1::CostProfile& profile) ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<v1::CostProfile> NewestOfKind(const std::string& kind) const
      ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<v1::CostProfile> List() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::string dir_;
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // serializes Put's file writes
  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, v1::CostProfile> by_kind_host_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_COST_PROFILES_H_
