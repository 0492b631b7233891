#include "common/cost_profile_json.h"

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/status.h"
#include "google/protobuf/util/json_util.h"

namespace weft {

absl::StatusOr<v1::CostProfile> ReadCostProfile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  v1::CostProfile profile;
  const auto parsed = google::protobuf::util::JsonStringToMessage(text, &profile);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a cost profile (", std::string(parsed.message()), ")"));
  }
  return profile;
}

absl::Status WriteCostProfile(const v1::CostProfile& profile, const std::string& path) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  const auto printed = google::protobuf::util::MessageToJsonString(profile, &text, options);
  if (!printed.ok()) {
    return absl::InternalError(
        absl::StrCat(path, ": cost profile: ", std::string(printed.message())));
  }
  return WriteFileAtomically(path, {text});
}

}  // namespace weft
