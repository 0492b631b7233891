#include "worker/comm/gloo/gloo_status.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"

namespace weft {
namespace {

// Gloo prefixes its messages with "[/path/file.cc:123] "; the location says nothing to a user.
std::string StripLocation(const std::string& what) {
  if (!what.empty() && what[0] == '[') {
    size_t end = what.find("] ");
    if (end != std::string::npos) return what.substr(end + 2);
  }
  return what;
}

// Gloo says "Timed out waiting 1000ms for recv ..." (transport) or "Wait timeout for key(s)"
// (stores); there is no dedicated exception type.
bool IsTimeout(const std::string& what) {
  const std::string lower = absl::AsciiStrToLower(what);
  return absl::StrContains(lower, "timed out") || absl::StrContains(lower, "timeout");
}

}  // namespace

absl::Status FromGlooException(const std::exception_ptr& error, const std::string& context) {
  try {
    std::rethrow_exception(error);
  } catch (const gloo::IoException& e) {
    std::string what = StripLocation(e.what());
    absl::StatusCode code =
        IsTimeout(what) ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kUnavailable;
    return absl::Status(code, absl::StrCat(context, ": ", what));
  } catch (const gloo::Exception& e) {
    std::string what = StripLocation(e.what());
    absl::StatusCode code =
        IsTimeout(what) ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kInternal;
    return absl::Status(code, absl::StrCat(context, ": ", what));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(context, ": ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(context, ": unknown exception"));
  }
}

}  // namespace weft
