#include "common/testing_tls.h"

#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/subprocess.h"

namespace weft {

absl::StatusOr<TestCertificate> MakeSelfSignedCertificate(const std::string& dir,
                                                          const std::string& name) {
  TestCertificate cert{dir + "/" + name + ".crt", dir + "/" + name + ".key"};
  const std::string log = dir + "/" + name + ".openssl.log";
  SubprocessOptions options;
  options.argv = {"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                  "-days", "1", "-subj", "/CN=localhost",
                  "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                  "-keyout", cert.key_path, "-out", cert.cert_path};
  options.stdout_path = log;
  absl::StatusOr<std::unique_ptr<Subprocess>> openssl = Subprocess::Start(std::move(options));
  if (!openssl.ok()) return openssl.status();
  const std::optional<ExitStatus> exit = (*openssl)->WaitFor(absl::Seconds(60));
  const ExitStatus status = (*openssl)->Stop();
  if (!exit.has_value() || !status.exited() || status.code != 0) {
    absl::StatusOr<std::string> said = ReadFileToString(log);
    return absl::InternalError(absl::StrCat("openssl req for ", name, " ",
                                            exit.has_value() ? status.Describe() : "timed out",
                                            ": ", said.ok() ? *said : ""));
  }
  return cert;
}

}  // namespace weft
