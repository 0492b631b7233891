#include "common/open_file_limit.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace weft {

absl::StatusOr<int64_t> RaiseOpenFileLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::InternalError(absl::StrCat("reading RLIMIT_NOFILE: ", std::strerror(errno)));
  }
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      return absl::InternalError(absl::StrCat("raising RLIMIT_NOFILE to its hard limit ",
                                              limit.rlim_max, ": ", std::strerror(errno)));
    }
  }
  return static_cast<int64_t>(limit.rlim_cur);
}

}  // namespace weft
