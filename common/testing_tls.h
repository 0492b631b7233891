// Certificates for TLS tests, made at run time with the openssl command line (tools/setup.sh
// installs it): a self-signed certificate for localhost and 127.0.0.1 that serves as its own
// CA, valid for a day.
//
// E.g.
//   ASSIGN_OR_RETURN(TestCertificate cert, MakeSelfSignedCertificate(dir, "server"));
//   // weft-coordinator --tls_cert cert.cert_path --tls_key cert.key_path
//   // weftctl --tls_ca cert.cert_path
#ifndef WEFT_COMMON_TESTING_TLS_H_
#define WEFT_COMMON_TESTING_TLS_H_

#include <string>

#include "absl/status/statusor.h"

namespace weft {

struct TestCertificate {
  std::string cert_path;  // dir/<name>.crt, PEM
  std::string key_path;   // dir/<name>.key, PEM, unencrypted
};

// Writes dir/<name>.crt and dir/<name>.key: an RSA 2048 key and a self-signed certificate with
// CN=localhost and subjectAltName IP:127.0.0.1, DNS:localhost. Errors quote openssl's stderr.
absl::StatusOr<TestCertificate> MakeSelfSignedCertificate(const std::string& dir,
                                                          const std::string& name);

}  // namespace weft

#endif  // WEFT_COMMON_TESTING_TLS_H_
