// Bearer tokens for the coordinator's gRPC services (`weft-coordinator --client_token_file F
// --worker_token_file G`): a client sends `authorization: Bearer <token>` with every call, the
// coordinator compares it with the token of the role the service serves (JobService: clients;
// WorkerService and RendezvousService: workers). A token lives in a file of its own, read once;
// no message ever quotes its bytes. Channels send it through common/coordinator_channel.h.
//
// E.g.
//   ASSIGN_OR_RETURN(std::string token, ReadBearerTokenFile("/run/credentials/weft/client"));
//   if (!BearerMatches(authorization, token)) return Unauthenticated(...);
#ifndef WEFT_COMMON_BEARER_TOKEN_H_
#define WEFT_COMMON_BEARER_TOKEN_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace weft {

// The gRPC metadata key, and the value a token makes: "Bearer <token>".
inline constexpr char kAuthorizationKey[] = "authorization";
std::string BearerValue(absl::string_view token);

// The shortest token a file may hold: a guessable one protects nothing (NewBearerToken makes 64
// hex digits).
inline constexpr size_t kMinTokenBytes = 16;

// The token in `path`: its bytes less trailing whitespace (a final newline). INVALID_ARGUMENT
// naming the path (never the contents) for a file that is not a regular file, that group or
// others may read or write (mode & 077, as ssh refuses a loose key: chmod 600 it), is empty,
// holds fewer than 16 bytes or more than 4 KiB, or holds a byte that is not printable ASCII (a
// gRPC header value must be).
absl::StatusOr<std::string> ReadBearerTokenFile(const std::string& path);

// A fresh token: 32 random bytes from /dev/urandom, hex. For `weftctl local`'s own cluster.
absl::StatusOr<std::string> NewBearerToken();

// Whether `value` (a call's authorization metadata) is BearerValue(token), the scheme in any
// case, the token compared in time that does not depend on where they differ.
bool BearerMatches(absl::string_view value, absl::string_view token);

}  // namespace weft

#endif  // WEFT_COMMON_BEARER_TOKEN_H_
