// --help of a daemon: absl lists the flags of the files it takes for the program's own (by the
// program's name, which finds none for weft-coordinator's coordinator/main.cc); this names the
// file instead. --version prints "<program> <version>" (common/version.h). Call before
// absl::ParseCommandLine.
//
// E.g.
//   HelpListsFlagsOf("coordinator/main.cc", "weft-coordinator");
//   absl::ParseCommandLine(argc, argv);
#ifndef WEFT_COMMON_HELP_FLAGS_H_
#define WEFT_COMMON_HELP_FLAGS_H_

#include <string>

#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "common/version.h"

namespace weft {

inline void HelpListsFlagsOf(absl::string_view main_file, absl::string_view program) {
  absl::FlagsUsageConfig usage;
  usage.version_string = [line = VersionLine(program)] { return line + "\n"; };
  usage.contains_help_flags = [file = std::string(main_file)](absl::string_view path) {
    return absl::EndsWith(path, file);
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
}

}  // namespace weft

#endif  // WEFT_COMMON_HELP_FLAGS_H_
