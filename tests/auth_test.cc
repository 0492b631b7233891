// Bearer tokens through the real daemons on 127.0.0.1: a coordinator started with
// --client_token_file and --worker_token_file refuses weftctl without a token or with the
// workers' token, and a worker with the clients' token (which exits at once naming the refusal
// instead of retrying); weftctl with --token_file or $WEFT_TOKEN_FILE and a worker with
// --token_file work, and a job runs to its float64 reference's losses. Token files that cannot
// serve (empty, the same token for both roles) stop the coordinator at start naming the flag.
// `weftctl local` makes tokens of its own, so every test that runs it runs with tokens too.
//
// TLS the same way, with a self-signed certificate for 127.0.0.1 made here with openssl: a
// coordinator with --tls_cert and --tls_key, workers and weftctl with --tls_ca (and tokens) run
// a job across two workers (their stream and the rendezvous of their communicators over TLS) to
// the reference's losses; weftctl without --tls_ca, or trusting another certificate, gets no
// call through and says why; a coordinator given one of --tls_cert and --tls_key, or a file that
// is missing, garbage or another certificate's key, stops at start naming the flag and the file.
// With tokens and without TLS the coordinator warns at start that they travel in plaintext.
//
// The worker token alone does not open a job's rendezvous keys: while a job runs, a client with
// it but without the attempt's ticket (which only the attempt's workers get) can neither read,
// wait on nor write them, and once the attempt ends its scope is gone.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/subprocess.h"
#include "common/testing_tls.h"
#include "tests/cluster_fixture.h"
#include "tests/process.h"
#include "weft/v1/service.grpc.pb.h"

namespace weft::testing {
namespace {

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteTokens("auth");
    StartCoordinator({});
  }

  // A fresh folder with a client and a worker token in it.
  void WriteTokens(const std::string& prefix) {
    dir_ = MakeTempDir(prefix);
    client_token_ = dir_ + "/client.token";
    worker_token_ = dir_ + "/worker.token";
    WriteFile(client_token_, "client-7f3a9c-5e1d0b42\n");
    WriteFile(worker_token_, "worker-51be02-a9c47e13\n");
  }

  // The coordinator with both tokens and `flags`.
  void StartCoordinator(std::vector<std::string> flags) {
    flags.insert(flags.end(),
                 {"--client_token_file", client_token_, "--worker_token_file", worker_token_});
    auto coordinator =
        CoordinatorProcess::Start(BinaryPath("coordinator/weft-coordinator"), dir_, flags);
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
  }

  // A token file as an operator makes one: readable by its owner only.
  static void WriteFile(const std::string& path, const std::string& bytes) {
    FILE* f = fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr) << path;
    fputs(bytes.c_str(), f);
    fclose(f);
    ASSERT_EQ(chmod(path.c_str(), 0600), 0) << path;
  }

  // A worker with `token_file` and `flags`, its output in dir_/log.
  std::unique_ptr<Subprocess> StartWorker(const std::string& token_file, const std::string& log,
                                          const std::vector<std::string>& flags = {}) {
    std::vector<std::string> argv = {BinaryPath("worker/weft-worker"), "--coordinator",
                                     coordinator_->address(), "--token_file", token_file};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto worker = StartDaemon(argv, dir_ + "/" + log, {{"OMP_WAIT_POLICY", "passive"}});
    EXPECT_TRUE(worker.ok()) << worker.status();
    return worker.ok() ? *std::move(worker) : nullptr;
  }

  CommandResult Weftctl(std::vector<std::string> args,
                        const std::map<std::string, std::string>& env = {}) const {
    args.insert(args.begin(), {BinaryPath("client/weftctl"), "--coordinator",
                               coordinator_->address()});
    return RunCommand(args, 120, env);
  }

  // Submits the MLP job on a mesh of `ranks` with weftctl and `flags`, watches it to SUCCEEDED
  // and checks its losses against the float64 reference; `log` names a worker's log for failures.
  void ExpectJobMatchesReference(std::vector<std::string> flags, int ranks,
                                 const std::string& log) {
    MlpJob job = MlpJob::Create();
    const std::string mesh = absl::StrCat("{shape: [", ranks, "]}");
    const std::string spec =
        job.WriteSpec("job.yaml", MlpSpec(job, mesh, MlpJob::kSteps, "", false));
    flags.insert(flags.end(), {"submit", "--check-local-files", "--watch", "--json", spec});
    CommandResult submitted = Weftctl(flags);
    ASSERT_EQ(submitted.exit_code, 0) << submitted.err << "\n" << ReadFileOrEmpty(dir_ + "/" + log);
    std::string final_state;
    const std::vector<double> losses = ParseStepLosses(submitted.out, &final_state);
    EXPECT_EQ(final_state, "SUCCEEDED");
    const std::vector<double> reference = job.ReferenceLosses();
    ASSERT_EQ(losses.size(), reference.size());
    for (size_t s = 0; s < losses.size(); ++s) {
      EXPECT_LE(RelDiff(losses[s], reference[s]), 1e-4) << "step " << s + 1;
    }
  }

  std::string dir_, client_token_, worker_token_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
};

TEST_F(AuthTest, EachRoleNeedsItsOwnToken) {
  // A worker with the clients' token is refused and exits at once, saying so.
  std::unique_ptr<Subprocess> intruder = StartWorker(client_token_, "intruder.log");
  ASSERT_NE(intruder, nullptr);
  std::optional<ExitStatus> ended = intruder->WaitFor(absl::Seconds(30));
  ASSERT_TRUE(ended.has_value()) << "a refused worker kept retrying";
  EXPECT_NE(ended->CodeOrMinusSignal(), 0);
  const std::string log = ReadFileOrEmpty(dir_ + "/intruder.log");
  EXPECT_TRUE(absl::StrContains(log, "refused this worker")) << log;
  EXPECT_FALSE(absl::StrContains(log, "client-7f3a9c-5e1d0b42")) << "the log quotes a token";

  // weftctl without a token, or with the workers', is refused naming the service.
  for (const auto& [args, what] :
       {std::pair<std::vector<std::string>, std::string>{{"list"}, "no token"},
        {{"--token_file", worker_token_, "list"}, "the worker token"},
        {{"--token_file", worker_token_, "workers"}, "the worker token (workers)"}}) {
    CommandResult r = Weftctl(args);
    EXPECT_NE(r.exit_code, 0) << what;
    EXPECT_TRUE(absl::StrContains(r.err, "weft.v1.JobService")) << what << ": " << r.err;
    EXPECT_FALSE(absl::StrContains(r.err + r.out, "worker-51be02-a9c47e13")) << what << " quotes a token";
  }

  // A worker with its token registers; weftctl sees it with the client token, from the flag or
  // from $WEFT_TOKEN_FILE.
  std::unique_ptr<Subprocess> worker = StartWorker(worker_token_, "worker.log");
  ASSERT_NE(worker, nullptr);
  bool registered = false;
  for (int i = 0; i < 300 && !registered; ++i) {
    CommandResult r = Weftctl({"--token_file", client_token_, "workers"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    registered = absl::StrContains(r.out, "cpu");
    if (!registered) absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(registered) << ReadFileOrEmpty(dir_ + "/worker.log");
  CommandResult from_env = Weftctl({"workers"}, {{"WEFT_TOKEN_FILE", client_token_}});
  EXPECT_EQ(from_env.exit_code, 0) << from_env.err;

  // A job runs through the authenticated daemons to the float64 reference's losses.
  ExpectJobMatchesReference({"--token_file", client_token_}, 1, "worker.log");
}

TEST_F(AuthTest, TheWorkerTokenAloneOpensNoJobsRendezvousKeys) {
  std::unique_ptr<Subprocess> worker = StartWorker(worker_token_, "worker.log");
  ASSERT_NE(worker, nullptr);
  MlpJob job = MlpJob::Create();
  const std::string spec = job.WriteSpec("long.yaml", MlpSpec(job, "{shape: [1]}", 100000, "",
                                                              false));
  CommandResult submitted =
      Weftctl({"--token_file", client_token_, "submit", "--check-local-files", spec});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string id = std::string(absl::StripAsciiWhitespace(submitted.out));
  bool running = false;
  for (int i = 0; i < 600 && !running; ++i) {
    CommandResult r = Weftctl({"--token_file", client_token_, "get", id});
    running = absl::StrContains(r.out, "RUNNING");
    if (!running) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(running) << ReadFileOrEmpty(dir_ + "/worker.log");

  // A client with the worker token, guessing the scope's name (job/attempt) but not its ticket.
  std::string token = ReadFileOrEmpty(worker_token_);
  token = std::string(absl::StripAsciiWhitespace(token));
  auto stub = v1::RendezvousService::NewStub(
      grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials()));
  auto get = [&](const std::string& ticket) {
    grpc::ClientContext c;
    c.AddMetadata("authorization", "Bearer " + token);
    v1::RendezvousGetRequest request;
    request.set_scope(id + "/0");
    request.set_key("group-0-0/0");
    request.set_ticket(ticket);
    v1::RendezvousGetResponse response;
    return stub->Get(&c, request, &response);
  };
  for (const std::string& ticket : {std::string(), std::string(32, '0')}) {
    grpc::Status s = get(ticket);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "ticket does not match")) << s.error_message();
  }
  {
    grpc::ClientContext c;
    c.AddMetadata("authorization", "Bearer " + token);
    v1::RendezvousSetRequest request;
    request.set_scope(id + "/0");
    request.set_key("group-0-0/0");
    request.set_value("forged");
    v1::RendezvousSetResponse response;
    EXPECT_EQ(stub->Set(&c, request, &response).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }

  // The attempt ends: its scope with it.
  CommandResult cancelled = Weftctl({"--token_file", client_token_, "cancel", id});
  ASSERT_EQ(cancelled.exit_code, 0) << cancelled.err;
  grpc::Status gone = get(std::string(32, '0'));
  for (int i = 0; i < 600 && gone.error_code() != grpc::StatusCode::NOT_FOUND; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    gone = get(std::string(32, '0'));
  }
  EXPECT_EQ(gone.error_code(), grpc::StatusCode::NOT_FOUND) << gone.error_message();
  EXPECT_TRUE(absl::StrContains(gone.error_message(), "is not open")) << gone.error_message();
}

TEST_F(AuthTest, TokenFilesThatCannotServeStopTheCoordinatorAtStart) {
  const std::string empty = dir_ + "/empty.token";
  WriteFile(empty, "\n");
  // A guessable token, and a good one that others may read (0644, as a plain write leaves it).
  const std::string short_token = dir_ + "/short.token", loose = dir_ + "/loose.token";
  WriteFile(short_token, "abc123\n");
  WriteFile(loose, "client-7f3a9c-5e1d0b42\n");
  ASSERT_EQ(chmod(loose.c_str(), 0644), 0);
  for (const auto& [flags, says] :
       {std::pair<std::vector<std::string>, std::string>{
            {"--client_token_file", empty}, "--client_token_file: token file " + empty + ": empty"},
        {{"--worker_token_file", short_token}, short_token + ": fewer than 16 bytes"},
        {{"--client_token_file", loose},
         loose + ": group or others may read or write it (mode 0644); chmod 600 it"},
        {{"--client_token_file", client_token_, "--worker_token_file", client_token_},
         "hold the same token"}}) {
    std::vector<std::string> argv = {BinaryPath("coordinator/weft-coordinator"), "--listen",
                                     "127.0.0.1:0", "--data_dir", dir_ + "/other"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    CommandResult r = RunCommand(argv, 30);
    EXPECT_EQ(r.exit_code, 2) << says;
    EXPECT_TRUE(absl::StrContains(r.err, says)) << r.err;
    EXPECT_FALSE(absl::StrContains(r.err, "client-7f3a9c-5e1d0b42")) << "quotes a token";
  }
}

TEST_F(AuthTest, TokensWithoutTlsAreWarnedAboutAtStart) {
  const std::string log = ReadFileOrEmpty(dir_ + "/coordinator.log");
  EXPECT_TRUE(absl::StrContains(log, "its bearer token included, can be read")) << log;
}

// The coordinator serves TLS with a self-signed certificate for 127.0.0.1 (its own CA), and
// tokens as AuthTest's; `other_` is a second certificate, trusted by nothing.
class TlsTest : public AuthTest {
 protected:
  void SetUp() override {
    WriteTokens("tls");
    absl::StatusOr<TestCertificate> cert = MakeSelfSignedCertificate(dir_, "coordinator");
    absl::StatusOr<TestCertificate> other = MakeSelfSignedCertificate(dir_, "other");
    ASSERT_TRUE(cert.ok()) << cert.status();
    ASSERT_TRUE(other.ok()) << other.status();
    cert_ = *cert;
    other_ = *other;
    StartCoordinator({"--tls_cert", cert_.cert_path, "--tls_key", cert_.key_path});
  }

  TestCertificate cert_, other_;
};

TEST_F(TlsTest, AJobRunsOverTlsWithTokens) {
  const std::vector<std::string> tls = {"--tls_ca", cert_.cert_path};
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(StartWorker(worker_token_, absl::StrCat("worker-", i, ".log"), tls));
    ASSERT_NE(workers.back(), nullptr);
  }
  int registered = 0;
  for (int i = 0; i < 300 && registered < 2; ++i) {
    CommandResult r = Weftctl({"--token_file", client_token_, "--tls_ca", cert_.cert_path,
                               "--json", "workers"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    registered = 0;
    for (size_t at = r.out.find("\"worker_id\""); at != std::string::npos;
         at = r.out.find("\"worker_id\"", at + 1)) {
      ++registered;
    }
    if (registered < 2) absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(registered, 2) << ReadFileOrEmpty(dir_ + "/worker-0.log");
  EXPECT_TRUE(absl::StrContains(ReadFileOrEmpty(dir_ + "/coordinator.log"), "serving TLS"));

  // $WEFT_TLS_CA serves as --tls_ca does.
  CommandResult from_env = Weftctl({"--token_file", client_token_, "list"},
                                   {{"WEFT_TLS_CA", cert_.cert_path}});
  EXPECT_EQ(from_env.exit_code, 0) << from_env.err;

  // Two ranks: the workers' streams and the rendezvous of their communicators go over TLS.
  ExpectJobMatchesReference({"--token_file", client_token_, "--tls_ca", cert_.cert_path}, 2,
                            "worker-0.log");
}

TEST_F(TlsTest, ClientsThatDoNotTrustTheCertificateGetNoCallThrough) {
  // Plaintext to a TLS coordinator: refused, with a hint at TLS.
  CommandResult plain = Weftctl({"--token_file", client_token_, "list"});
  EXPECT_NE(plain.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(plain.err, "UNAVAILABLE")) << plain.err;
  EXPECT_TRUE(absl::StrContains(plain.err, "--tls_ca")) << plain.err;

  // Another certificate as the CA: the handshake fails, and weftctl says what to check.
  CommandResult wrong_ca =
      Weftctl({"--token_file", client_token_, "--tls_ca", other_.cert_path, "list"});
  EXPECT_NE(wrong_ca.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(wrong_ca.err, "UNAVAILABLE")) << wrong_ca.err;
  EXPECT_TRUE(absl::StrContains(wrong_ca.err, "TLS handshake failed")) << wrong_ca.err;

  // A name the certificate does not hold fails the same way; one it holds works.
  CommandResult wrong_name = Weftctl({"--token_file", client_token_, "--tls_ca", cert_.cert_path,
                                      "--tls_server_name", "weft.example.com", "list"});
  EXPECT_NE(wrong_name.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(wrong_name.err, "TLS handshake failed")) << wrong_name.err;
  CommandResult right_name = Weftctl({"--token_file", client_token_, "--tls_ca", cert_.cert_path,
                                      "--tls_server_name", "localhost", "list"});
  EXPECT_EQ(right_name.exit_code, 0) << right_name.err;

  // A CA file that holds no certificate stops weftctl before any call, naming it.
  CommandResult garbage = Weftctl({"--tls_ca", client_token_, "list"});
  EXPECT_EQ(garbage.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(garbage.err, "--tls_ca " + client_token_ + ": holds no PEM"))
      << garbage.err;
  EXPECT_FALSE(absl::StrContains(garbage.err, "client-7f3a9c-5e1d0b42")) << "quotes the file";

  // A worker that trusts another certificate never registers.
  std::unique_ptr<Subprocess> stranger =
      StartWorker(worker_token_, "stranger.log", {"--tls_ca", other_.cert_path});
  ASSERT_NE(stranger, nullptr);
  absl::SleepFor(absl::Seconds(2));
  CommandResult workers = Weftctl({"--token_file", client_token_, "--tls_ca", cert_.cert_path,
                                   "--json", "workers"});
  ASSERT_EQ(workers.exit_code, 0) << workers.err;
  EXPECT_FALSE(absl::StrContains(workers.out, "worker_id")) << workers.out;
  const std::string log = ReadFileOrEmpty(dir_ + "/stranger.log");
  EXPECT_TRUE(absl::StrContains(absl::AsciiStrToLower(log), "handshake failed")) << log;
}

TEST_F(TlsTest, CertificateFlagsThatCannotServeStopTheCoordinatorAtStart) {
  const std::string garbage = dir_ + "/garbage.key";
  WriteFile(garbage, "not a key: secret-4c1d\n");
  // A piece of each key's base64, which no message may hold.
  const std::string key_bytes = ReadFileOrEmpty(cert_.key_path).substr(40, 24);
  const std::string other_key_bytes = ReadFileOrEmpty(other_.key_path).substr(40, 24);
  for (const auto& [flags, says] :
       {std::pair<std::vector<std::string>, std::string>{
            {"--tls_cert", cert_.cert_path}, "--tls_cert needs --tls_key"},
        {{"--tls_key", cert_.key_path}, "--tls_key needs --tls_cert"},
        {{"--tls_cert", cert_.cert_path, "--tls_key", garbage},
         "--tls_key " + garbage + ": holds no PEM private key"},
        {{"--tls_cert", garbage, "--tls_key", cert_.key_path},
         "--tls_cert " + garbage + ": holds no PEM certificate"},
        {{"--tls_cert", cert_.cert_path, "--tls_key", dir_ + "/missing.key"},
         "--tls_key " + dir_ + "/missing.key: cannot be read"},
        {{"--tls_cert", cert_.cert_path, "--tls_key", other_.key_path},
         "--tls_key " + other_.key_path + " is not the private key of --tls_cert " +
             cert_.cert_path}}) {
    std::vector<std::string> argv = {BinaryPath("coordinator/weft-coordinator"), "--listen",
                                     "127.0.0.1:0", "--data_dir", dir_ + "/other"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    CommandResult r = RunCommand(argv, 30);
    EXPECT_EQ(r.exit_code, 2) << says;
    EXPECT_TRUE(absl::StrContains(r.err, says)) << r.err;
    EXPECT_FALSE(absl::StrContains(r.err, "secret-4c1d")) << "quotes a file";
    EXPECT_FALSE(absl::StrContains(r.err, key_bytes)) << "quotes a key";
    EXPECT_FALSE(absl::StrContains(r.err, other_key_bytes)) << "quotes a key";
  }
}

}  // namespace
}  // namespace weft::testing
