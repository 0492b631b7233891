#include "common/tls.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "common/testing_files.h"
#include "common/testing_tls.h"

namespace weft {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<TestCertificate> a = MakeSelfSignedCertificate(TestTmpDir(), "a");
    absl::StatusOr<TestCertificate> b = MakeSelfSignedCertificate(TestTmpDir(), "b");
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    a_ = *a;
    b_ = *b;
  }

  inline static TestCertificate a_, b_;
};

TEST_F(TlsTest, ReadsACertificateAndItsKey) {
  absl::StatusOr<std::string> cert = ReadPemCertificates(a_.cert_path);
  absl::StatusOr<std::string> key = ReadPemPrivateKey(a_.key_path);
  ASSERT_TRUE(cert.ok()) << cert.status();
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(*cert, ReadAll(a_.cert_path));
  EXPECT_TRUE(CheckKeyMatchesCertificate(*cert, *key).ok());

  // A bundle of two CAs is read whole.
  const std::string bundle = TempPath("bundle.crt");
  WriteAll(bundle, ReadAll(a_.cert_path) + ReadAll(b_.cert_path));
  absl::StatusOr<std::string> both = ReadPemCertificates(bundle);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(*both, ReadAll(bundle));
}

TEST_F(TlsTest, AnotherCertificatesKeyDoesNotMatch) {
  absl::Status s = CheckKeyMatchesCertificate(ReadAll(a_.cert_path), ReadAll(b_.key_path));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("not the key of the certificate"));
}

TEST_F(TlsTest, BadFilesAreRefusedNamingThePathNeverTheBytes) {
  const std::string dir = TestTmpDir();
  const std::string cert = ReadAll(a_.cert_path);
  WriteAll(dir + "/garbage", "not-a-pem-file secret-bytes\n");
  WriteAll(dir + "/empty", "");
  // The certificate's base64 broken in its middle.
  std::string broken = cert;
  broken.replace(broken.size() / 2, 8, "!!!!!!!!");
  WriteAll(dir + "/broken.crt", broken);
  WriteAll(dir + "/huge", std::string(2 << 20, 'a'));
  ASSERT_EQ(mkfifo((dir + "/fifo").c_str(), 0600), 0);
  for (const auto& [file, why] :
       {std::pair<std::string, std::string>{"garbage", "holds no PEM certificate"},
        {"empty", "holds no PEM certificate"},
        {"broken.crt", "certificate 1 cannot be parsed (OpenSSL: "},
        {"huge", "more than 1048576 bytes"},
        {"fifo", "not a regular file"},
        {"missing", "cannot be read"}}) {
    absl::StatusOr<std::string> read = ReadPemCertificates(dir + "/" + file);
    ASSERT_FALSE(read.ok()) << file;
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument) << file;
    const std::string message(read.status().message());
    EXPECT_THAT(message, HasSubstr(dir + "/" + file + ": "));
    EXPECT_THAT(message, HasSubstr(why));
    EXPECT_THAT(message, Not(HasSubstr("secret-bytes")));
    EXPECT_THAT(message, Not(HasSubstr(cert.substr(100, 20))));
  }

  // A certificate is no key, and garbage is none either.
  const std::string key = ReadAll(a_.key_path);
  std::string broken_key = key;
  broken_key.replace(broken_key.size() / 2, 8, "!!!!!!!!");
  WriteAll(dir + "/broken.key", broken_key);
  for (const auto& [file, why] :
       {std::pair<std::string, std::string>{"garbage", "holds no PEM private key"},
        {"a.crt", "holds no PEM private key"},
        {"broken.key", "the private key cannot be parsed (OpenSSL: "}}) {
    absl::StatusOr<std::string> read = ReadPemPrivateKey(dir + "/" + file);
    ASSERT_FALSE(read.ok()) << file;
    const std::string message(read.status().message());
    EXPECT_THAT(message, HasSubstr(dir + "/" + file + ": " + why));
    EXPECT_THAT(message, Not(HasSubstr("secret-bytes")));
    EXPECT_THAT(message, Not(HasSubstr(key.substr(100, 20))));
  }
}

TEST_F(TlsTest, AnEncryptedKeyIsRefused) {
  const std::string path = TempPath("encrypted.key");
  WriteAll(path, "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFHDBOBgkqhkiG9w0BBQ0wQTApBgkq\n"
                 "-----END ENCRYPTED PRIVATE KEY-----\n");
  absl::StatusOr<std::string> read = ReadPemPrivateKey(path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("encrypted"));
}

}  // namespace
}  // namespace weft
