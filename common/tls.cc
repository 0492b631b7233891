#include "common/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"

namespace weft {
namespace {

// A chain or a CA bundle is a few KiB; a megabyte is no PEM file a daemon should be given.
constexpr int64_t kMaxPemBytes = 1 << 20;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Certificate = std::unique_ptr<X509, X509Free>;
using PrivateKey = std::unique_ptr<EVP_PKEY, PkeyFree>;

Bio MemoryBio(const std::string& bytes) {
  return Bio(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())));
}

// Declines to give a passphrase: without this OpenSSL would ask for one on the terminal.
int NoPassphrase(char*, int, int, void*) { return -1; }

// Why the last OpenSSL call failed, in OpenSSL's words ("bad base64 decode"), which name the
// problem and never the bytes; the error queue is cleared.
std::string TakeOpenSslError() {
  const unsigned long err = ERR_peek_last_error();
  ERR_clear_error();
  const char* reason = err == 0 ? nullptr : ERR_reason_error_string(err);
  return reason != nullptr ? reason : "unknown error";
}

// Whether the last OpenSSL error is the end of the PEM input (no further BEGIN line).
bool AtEndOfPem() {
  const unsigned long err = ERR_peek_last_error();
  return err == 0 ||
         (ERR_GET_LIB(err) == ERR_LIB_PEM && ERR_GET_REASON(err) == PEM_R_NO_START_LINE);
}

absl::Status Invalid(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

}  // namespace

absl::StatusOr<std::string> ReadPemCertificates(const std::string& path) {
  absl::StatusOr<std::string> pem = ReadSmallRegularFile(path, kMaxPemBytes);
  if (!pem.ok()) return pem.status();
  ERR_clear_error();
  Bio bio = MemoryBio(*pem);
  int count = 0;
  while (Certificate(PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)) != nullptr) {
    ++count;
  }
  if (!AtEndOfPem()) {
    return Invalid(path, absl::StrCat("certificate ", count + 1, " cannot be parsed (OpenSSL: ",
                                      TakeOpenSslError(), ")"));
  }
  ERR_clear_error();
  if (count == 0) {
    return Invalid(path, "holds no PEM certificate (a -----BEGIN CERTIFICATE----- block)");
  }
  return pem;
}

absl::StatusOr<std::string> ReadPemPrivateKey(const std::string& path) {
  absl::StatusOr<std::string> pem = ReadSmallRegularFile(path, kMaxPemBytes);
  if (!pem.ok()) return pem.status();
  // PKCS#8's label, or the traditional format's header.
  if (absl::StrContains(*pem, "ENCRYPTED PRIVATE KEY-----") ||
      absl::StrContains(*pem, "Proc-Type: 4,ENCRYPTED")) {
    return Invalid(path, "the private key is encrypted; a daemon has no one to ask for its "
                         "passphrase (openssl pkey -in KEY -out PLAIN writes it unencrypted)");
  }
  // OpenSSL's decoders say "unsupported" for a file with no key and for a garbled one alike;
  // the PEM label tells them apart.
  if (!absl::StrContains(*pem, "PRIVATE KEY-----")) {
    return Invalid(path, "holds no PEM private key (a -----BEGIN PRIVATE KEY----- block)");
  }
  ERR_clear_error();
  Bio bio = MemoryBio(*pem);
  if (PrivateKey(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr)) == nullptr) {
    return Invalid(path, absl::StrCat("the private key cannot be parsed (OpenSSL: ",
                                      TakeOpenSslError(), ")"));
  }
  ERR_clear_error();
  return pem;
}

absl::Status CheckKeyMatchesCertificate(const std::string& cert_pem, const std::string& key_pem) {
  ERR_clear_error();
  Bio cert_bio = MemoryBio(cert_pem);
  Bio key_bio = MemoryBio(key_pem);
  Certificate cert(PEM_read_bio_X509(cert_bio.get(), nullptr, NoPassphrase, nullptr));
  PrivateKey key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr));
  const bool matches =
      cert != nullptr && key != nullptr && X509_check_private_key(cert.get(), key.get()) == 1;
  ERR_clear_error();
  if (!matches) {
    return absl::InvalidArgumentError("the private key is not the key of the certificate");
  }
  return absl::OkStatus();
}

}  // namespace weft
