// Where the coordinator keeps its job store when --data_dir is not given: systemd's
// StateDirectory= ($STATE_DIRECTORY, its first folder: /var/lib/weft in the shipped unit), else
// the XDG state folder of the user who runs it ($XDG_STATE_HOME/weft, or
// $HOME/.local/state/weft), so that it works without root. FAILED_PRECONDITION when none of
// them is set (or set to a relative path, which the XDG spec says to ignore).
//
// E.g.
//   ASSIGN_OR_RETURN(std::string dir, DefaultStateDir([](const char* name) {
//     return std::getenv(name);
//   }));
#ifndef WEFT_COORDINATOR_STATE_DIR_H_
#define WEFT_COORDINATOR_STATE_DIR_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace weft::coordinator {

// `getenv` returns a variable's value, or null when it is unset.
inline absl::StatusOr<std::string> DefaultStateDir(
    const std::function<const char*(const char*)>& getenv) {
  auto absolute = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    return v != nullptr && v[0] == '/' ? std::string(v) : std::string();
  };
  if (std::string systemd = absolute("STATE_DIRECTORY"); !systemd.empty()) {
    return systemd.substr(0, systemd.find(':'));  // several folders are separated by ':'
  }
  if (std::string xdg = absolute("XDG_STATE_HOME"); !xdg.empty()) return xdg + "/weft";
  if (std::string home = absolute("HOME"); !home.empty()) return home + "/.local/state/weft";
  return absl::FailedPreconditionError(
      "--data_dir is not given, and neither $STATE_DIRECTORY, $XDG_STATE_HOME nor $HOME names "
      "a folder to keep the job store in");
}

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_STATE_DIR_H_
