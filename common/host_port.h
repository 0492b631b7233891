// HOST:PORT as the daemons' address flags take it (--listen, --metrics_listen): the host a name
// or an address, an IPv6 address in brackets.
//
// E.g.
//   std::string host;
//   int port = 0;
//   RETURN_IF_ERROR(ParseHostPort("--metrics_listen", "[::1]:9471", &host, &port));  // "::1", 9471
//   JoinHostPort(host, port);                                                        // "[::1]:9471"
#ifndef WEFT_COMMON_HOST_PORT_H_
#define WEFT_COMMON_HOST_PORT_H_

#include <string>

#include "absl/status/status.h"

namespace weft {

// Splits HOST:PORT ("[::1]:9100" -> "::1", 9100): INVALID_ARGUMENT naming `flag` unless the port
// is 0..65535 and the host is not empty (allow_empty_host: ":7070", which gRPC reads as every
// interface).
absl::Status ParseHostPort(const std::string& flag, const std::string& address, std::string* host,
                           int* port, bool allow_empty_host = false);

// HOST:PORT, the host in brackets when it is an IPv6 address ("[::1]:9100").
std::string JoinHostPort(const std::string& host, int port);

}  // namespace weft

#endif  // WEFT_COMMON_HOST_PORT_H_
