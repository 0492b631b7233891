#include "common/host_port.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace weft {

absl::Status ParseHostPort(const std::string& flag, const std::string& address, std::string* host,
                           int* port, bool allow_empty_host) {
  const size_t colon = address.rfind(':');
  int value = -1;
  const bool parsed = colon != std::string::npos &&
                      absl::SimpleAtoi(address.substr(colon + 1), &value) && value >= 0 &&
                      value <= 65535 && address.substr(colon + 1).find_first_not_of(
                                            "0123456789") == std::string::npos;
  std::string h = colon == std::string::npos ? "" : address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (!parsed || (h.empty() && !allow_empty_host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " ", address, ": expected HOST:PORT with a port from 0 (any free one) to 65535"));
  }
  *host = std::move(h);
  *port = value;
  return absl::OkStatus();
}

std::string JoinHostPort(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return v6 ? absl::StrCat("[", host, "]:", port) : absl::StrCat(host, ":", port);
}

}  // namespace weft
