// TLS between the coordinator and its clients and workers: the coordinator serves with a
// certificate and its private key (`weft-coordinator --tls_cert C --tls_key K`), weftctl and the
// workers check that certificate against a CA certificate (`--tls_ca A`). The files are PEM,
// read once when a daemon starts and parsed here with OpenSSL, so that a missing, garbled or
// mismatched file stops it there naming the file instead of failing every handshake later. No
// message ever quotes a file's bytes.
//
// E.g.
//   ASSIGN_OR_RETURN(std::string cert, ReadPemCertificates("/etc/weft/tls.crt"));
//   ASSIGN_OR_RETURN(std::string key, ReadPemPrivateKey("/etc/weft/tls.key"));
//   RETURN_IF_ERROR(CheckKeyMatchesCertificate(cert, key));
#ifndef WEFT_COMMON_TLS_H_
#define WEFT_COMMON_TLS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weft {

// The bytes of `path`, a PEM file of one or more certificates (a server's chain, its own first,
// or a CA bundle). INVALID_ARGUMENT "<path>: ..." for a file that is not a regular file, holds
// more than 1 MiB, or holds a PEM block that is not a certificate OpenSSL can parse (or none).
absl::StatusOr<std::string> ReadPemCertificates(const std::string& path);

// The bytes of `path`, a PEM private key without a passphrase (a daemon has no one to ask).
// INVALID_ARGUMENT "<path>: ..." as ReadPemCertificates, also for an encrypted key.
absl::StatusOr<std::string> ReadPemPrivateKey(const std::string& path);

// OK when `key_pem` is the private key of the first certificate of `cert_pem` (both as the
// readers above return them); else INVALID_ARGUMENT.
absl::Status CheckKeyMatchesCertificate(const std::string& cert_pem, const std::string& key_pem);

}  // namespace weft

#endif  // WEFT_COMMON_TLS_H_
