#include "common/bearer_token.h"

#include <sys/stat.h>

#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "grpcpp/support/client_interceptor.h"

namespace weft {
namespace {

constexpr size_t kMaxTokenBytes = 4096;

// Adds the authorization header to every call of the channel it is installed on.
class BearerInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerInterceptor(const std::string* value) : value_(value) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kAuthorizationKey, *value_);
    }
    methods->Proceed();
  }

 private:
  const std::string* value_;  // owned by the factory, which outlives the channel's calls
};

class BearerInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerInterceptorFactory(std::string value) : value_(std::move(value)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerInterceptor(&value_);
  }

 private:
  const std::string value_;
};

}  // namespace

std::string BearerValue(absl::string_view token) { return absl::StrCat("Bearer ", token); }

absl::StatusOr<std::string> ReadBearerTokenFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": cannot be read"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": not a regular file"));
  }
  if (static_cast<size_t>(st.st_size) > kMaxTokenBytes + 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file ", path, ": more than ", kMaxTokenBytes, " bytes"));
  }
  absl::StatusOr<std::string> read = ReadFileToString(path);
  if (!read.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": cannot be read"));
  }
  std::string token = *std::move(read);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' ||
                            token.back() == ' ' || token.back() == '\t')) {
    token.pop_back();
  }
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": empty"));
  }
  if (token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file ", path, ": more than ", kMaxTokenBytes, " bytes"));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7E) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token file ", path, ": holds a byte that is not printable ASCII (one line, no spaces)"));
    }
  }
  return token;
}

absl::StatusOr<std::string> NewBearerToken() {
  std::ifstream random("/dev/urandom", std::ios::binary);
  std::string bytes(32, '\0');
  if (!random.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
    return absl::UnavailableError("reading /dev/urandom for a token");
  }
  return absl::BytesToHexString(bytes);
}

bool BearerMatches(absl::string_view value, absl::string_view token) {
  // The scheme's case does not matter (RFC 6750), the token's does.
  constexpr absl::string_view kScheme = "bearer ";
  if (value.size() < kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return false;
  }
  value.remove_prefix(kScheme.size());
  unsigned char diff = value.size() == token.size() ? 0 : 1;
  for (size_t i = 0; i < token.size(); ++i) {
    diff |= static_cast<unsigned char>(token[i] ^ (i < value.size() ? value[i] : 0));
  }
  return diff == 0;
}

std::shared_ptr<grpc::Channel> NewCoordinatorChannel(const std::string& address,
                                                     const std::string& token,
                                                     const grpc::ChannelArguments& args) {
  if (token.empty()) {
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<BearerInterceptorFactory>(BearerValue(token)));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      address, grpc::InsecureChannelCredentials(), args, std::move(factories));
}

}  // namespace weft
