#include "client/cli.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<CommandLine> Parse(const std::vector<std::string>& args) {
  return ParseCommandLine(args, "127.0.0.1:7070");
}

TEST(CliTest, DefaultCoordinatorComesFromTheEnvironment) {
  EXPECT_EQ(DefaultCoordinator(nullptr), "127.0.0.1:7070");
  EXPECT_EQ(DefaultCoordinator(""), "127.0.0.1:7070");
  EXPECT_EQ(DefaultCoordinator("10.0.0.1:9000"), "10.0.0.1:9000");
  absl::StatusOr<CommandLine> cl = ParseCommandLine({"list"}, DefaultCoordinator("h:1"));
  ASSERT_TRUE(cl.ok());
  EXPECT_EQ(cl->coordinator, "h:1");
}

TEST(CliTest, LocalWithFlagsInAnyOrder) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"local", "--ranks", "4", "--json", "job.yaml"},
           {"local", "job.yaml", "--ranks=4", "--json"},
           {"--json", "local", "--ranks", "4", "job.yaml"},
       }) {
    absl::StatusOr<CommandLine> cl = Parse(args);
    ASSERT_TRUE(cl.ok()) << cl.status();
    EXPECT_EQ(cl->command, "local");
    EXPECT_EQ(cl->ranks, 4);
    EXPECT_TRUE(cl->json);
    EXPECT_THAT(cl->positional, ElementsAre("job.yaml"));
  }
  absl::StatusOr<CommandLine> cl =
      Parse({"local", "--coordinator_bin", "/c", "--worker-bin=/w", "--keep_tmp", "j.yaml"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->coordinator_bin, "/c");
  EXPECT_EQ(cl->worker_bin, "/w");
  EXPECT_TRUE(cl->keep_tmp);
  EXPECT_EQ(cl->ranks, 0);  // the spec's world size
}

TEST(CliTest, GlobalCoordinatorFlag) {
  absl::StatusOr<CommandLine> cl = Parse({"--coordinator", "host:1234", "get", "job-1"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->coordinator, "host:1234");
  EXPECT_EQ(cl->command, "get");
  EXPECT_THAT(cl->positional, ElementsAre("job-1"));
  cl = Parse({"workers", "--coordinator=h:2"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->coordinator, "h:2");
}

TEST(CliTest, CredentialsForCommandsThatCallTheCoordinator) {
  absl::StatusOr<CommandLine> cl = Parse({"list", "--token_file", "t", "--tls_ca", "ca.crt",
                                          "--tls-server-name", "weft.example.com"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->token_file, "t");
  EXPECT_EQ(cl->tls_ca, "ca.crt");
  EXPECT_EQ(cl->tls_server_name, "weft.example.com");
  // `local` starts a cluster of its own; `plan` calls nothing.
  for (const std::string command : {"local", "plan"}) {
    absl::StatusOr<CommandLine> off = Parse({command, "--tls_ca", "ca.crt", "job.yaml"});
    ASSERT_FALSE(off.ok()) << command;
    EXPECT_THAT(std::string(off.status().message()), HasSubstr("--tls_ca does not apply"));
  }
  EXPECT_FALSE(Parse({"list", "--tls_ca="}).ok());
}

TEST(CliTest, SubmitWatchAndCancel) {
  absl::StatusOr<CommandLine> cl = Parse({"submit", "spec.yaml", "--watch", "--json"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_TRUE(cl->watch);
  EXPECT_TRUE(cl->json);
  cl = Parse({"submit", "spec.yaml", "--watch=false"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_FALSE(cl->watch);
  cl = Parse({"cancel", "job-1", "--reason", "no longer needed"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->reason, "no longer needed");
  cl = Parse({"list"});
  ASSERT_TRUE(cl.ok());
  EXPECT_FALSE(cl->json);
  // After --, everything is positional.
  cl = Parse({"get", "--", "--odd-job-id"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_THAT(cl->positional, ElementsAre("--odd-job-id"));
}

// kubectl's spelling of --json.
TEST(CliTest, OutputJsonIsJson) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"get", "job-1", "-o", "json"},
           {"-o", "json", "get", "job-1"},
           {"get", "job-1", "-o=json"},
           {"get", "job-1", "-ojson"},
           {"get", "job-1", "--output", "json"},
           {"get", "job-1", "--output=json"}}) {
    absl::StatusOr<CommandLine> cl = Parse(args);
    ASSERT_TRUE(cl.ok()) << cl.status();
    EXPECT_TRUE(cl->json) << absl::StrJoin(args, " ");
    EXPECT_THAT(cl->positional, ElementsAre("job-1"));
  }
  EXPECT_THAT(std::string(Parse({"get", "job-1", "-o", "yaml"}).status().message()),
              HasSubstr("-o/--output: \"yaml\" is not an output format; weftctl has json"));
  EXPECT_THAT(std::string(Parse({"get", "job-1", "-o"}).status().message()),
              HasSubstr("-o needs a value"));
  EXPECT_THAT(std::string(Parse({"cancel", "job-1", "-o", "json"}).status().message()),
              HasSubstr("--output does not apply to 'cancel'"));
}

TEST(CliTest, SubmitCheckLocalFilesAndDelete) {
  absl::StatusOr<CommandLine> cl = Parse({"submit", "spec.yaml"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_FALSE(cl->check_local_files);  // the cluster's paths by default
  cl = Parse({"submit", "--check-local-files", "spec.yaml"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_TRUE(cl->check_local_files);
  EXPECT_THAT(cl->positional, ElementsAre("spec.yaml"));
  EXPECT_THAT(std::string(Parse({"get", "--check-local-files", "job-1"}).status().message()),
              HasSubstr("--check_local_files does not apply to 'get' (only to submit)"));

  cl = Parse({"delete", "job-1", "job-2", "--json"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_THAT(cl->positional, ElementsAre("job-1", "job-2"));
  EXPECT_TRUE(cl->json);
  EXPECT_THAT(std::string(Parse({"delete"}).status().message()), HasSubstr("needs JOB..."));
  cl = Parse({"delete", "job-1", "--token_file", "t", "--tls_ca", "ca.pem"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->token_file, "t");
  EXPECT_THAT(UsageText(), HasSubstr("delete JOB..."));
  EXPECT_THAT(UsageText(), HasSubstr("--check-local-files"));
}

TEST(CliTest, ListLimitAndState) {
  absl::StatusOr<CommandLine> cl = Parse({"list"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->limit, kDefaultListLimit);
  EXPECT_EQ(cl->state, v1::JOB_STATE_UNSPECIFIED);
  cl = Parse({"list", "--limit", "2", "--state=running", "--json"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->limit, 2);
  EXPECT_EQ(cl->state, v1::RUNNING);
  EXPECT_TRUE(cl->json);
  cl = Parse({"--state", "PENDING", "list", "--limit=100000"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->state, v1::PENDING);
  EXPECT_EQ(cl->limit, 100000);

  for (const std::string limit : {"0", "-3", "ten", "99999999999"}) {
    EXPECT_THAT(std::string(Parse({"list", "--limit", limit}).status().message()),
                HasSubstr("--limit: expected a number of jobs, at least 1"))
        << limit;
  }
  // A bad state lists the states; the unspecified one is not a state to ask for.
  for (const std::string state : {"DONE", "JOB_STATE_UNSPECIFIED", ""}) {
    EXPECT_EQ(std::string(Parse({"list", "--state", state}).status().message()),
              absl::StrCat("--state: unknown job state \"", state,
                           "\"; known: PENDING, PLANNING, RUNNING, SUCCEEDED, FAILED, CANCELLED, "
                           "RESTARTING"));
  }
  EXPECT_THAT(std::string(Parse({"get", "job-1", "--limit", "2"}).status().message()),
              HasSubstr("--limit does not apply to 'get'"));
}

TEST(CliTest, LogsRankAttemptFollow) {
  absl::StatusOr<CommandLine> cl = Parse({"logs", "job-1"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->command, "logs");
  EXPECT_THAT(cl->positional, ElementsAre("job-1"));
  EXPECT_EQ(cl->rank, -1);
  EXPECT_EQ(cl->attempt, -1);
  EXPECT_FALSE(cl->follow);
  cl = Parse({"logs", "--rank", "1", "job-1", "--attempt=0", "--follow", "--json",
              "--token_file", "t"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->rank, 1);
  EXPECT_EQ(cl->attempt, 0);
  EXPECT_TRUE(cl->follow);
  EXPECT_TRUE(cl->json);
  EXPECT_EQ(cl->token_file, "t");
  for (const std::string bad : {"-1", "one", ""}) {
    EXPECT_THAT(std::string(Parse({"logs", "j", "--rank", bad}).status().message()),
                HasSubstr("--rank: expected a rank (0 or more)"))
        << bad;
    EXPECT_THAT(std::string(Parse({"logs", "j", "--attempt", bad}).status().message()),
                HasSubstr("--attempt: expected an attempt (0 or more)"))
        << bad;
  }
  EXPECT_THAT(std::string(Parse({"get", "j", "--rank", "1"}).status().message()),
              HasSubstr("--rank does not apply to 'get'"));
  EXPECT_THAT(std::string(Parse({"watch", "j", "--follow"}).status().message()),
              HasSubstr("--follow does not apply to 'watch'"));
  EXPECT_THAT(std::string(Parse({"logs"}).status().message()), HasSubstr("'logs' needs JOB"));
  EXPECT_THAT(UsageText(), HasSubstr("logs JOB [--rank R] [--attempt A] [--follow] [--json]"));
}

TEST(CliTest, PlanTakesASpecAndJson) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"plan", "--json", "job.yaml"},
           {"--json", "plan", "job.yaml"},
           {"plan", "job.yaml", "--json"}}) {
    absl::StatusOr<CommandLine> cl = Parse(args);
    ASSERT_TRUE(cl.ok()) << cl.status();
    EXPECT_EQ(cl->command, "plan");
    EXPECT_TRUE(cl->json);
    EXPECT_THAT(cl->positional, ElementsAre("job.yaml"));
  }
  EXPECT_FALSE(Parse({"plan", "job.yaml"})->json);
  EXPECT_THAT(std::string(Parse({"plan"}).status().message()), HasSubstr("'plan' needs SPEC"));
  EXPECT_THAT(std::string(Parse({"plan", "a.yaml", "b.yaml"}).status().message()),
              HasSubstr("'plan' takes one SPEC, got unexpected 'b.yaml'"));
  EXPECT_THAT(std::string(Parse({"plan", "--ranks", "4", "a.yaml"}).status().message()),
              HasSubstr("are for the search (plan --auto)"));
  EXPECT_THAT(UsageText(), HasSubstr("plan SPEC [--json]"));
}

TEST(CliTest, PlanAutoTakesRanksHostsMemoryAndNeedsAProfile) {
  absl::StatusOr<CommandLine> cl = Parse({"plan", "--auto", "a.yaml", "--ranks", "4", "--hosts",
                                          "2x2", "--memory", "1.5GiB", "--profile", "p.json"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_TRUE(cl->auto_search);
  EXPECT_EQ(cl->ranks, 4);
  EXPECT_THAT(cl->hosts, ElementsAre("h0", "h0", "h1", "h1"));
  EXPECT_EQ(cl->memory_bytes, int64_t{3} << 29);
  EXPECT_EQ(cl->profile, "p.json");
  cl = Parse({"plan", "--auto", "a.yaml", "--hosts", "a:1,b:2", "--profile", "p.json"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_THAT(cl->hosts, ElementsAre("a", "b", "b"));
  EXPECT_THAT(std::string(Parse({"plan", "--auto", "a.yaml"}).status().message()),
              HasSubstr("needs a cost profile: --profile FILE"));
  EXPECT_THAT(std::string(Parse({"plan", "--auto", "a.yaml", "--profile", "p", "--hosts", "2y"})
                              .status()
                              .message()),
              HasSubstr("--hosts: expected HOSTSxWORKERS"));
  EXPECT_THAT(std::string(Parse({"plan", "--auto", "a.yaml", "--profile", "p", "--memory", "-1"})
                              .status()
                              .message()),
              HasSubstr("--memory: bytes per worker: expected a size like 512MiB"));
}

TEST(CliTest, TraceCommandAndLocalTraceFlag) {
  absl::StatusOr<CommandLine> cl = Parse({"trace", "job-000001", "t.json"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->command, "trace");
  EXPECT_THAT(cl->positional, ElementsAre("job-000001", "t.json"));
  cl = Parse({"local", "--trace", "t.json", "job.yaml"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->trace, "t.json");
  EXPECT_THAT(cl->positional, ElementsAre("job.yaml"));
  EXPECT_TRUE(Parse({"local", "job.yaml"})->trace.empty());
  EXPECT_THAT(std::string(Parse({"trace", "j"}).status().message()),
              HasSubstr("'trace' needs JOB FILE"));
  EXPECT_THAT(std::string(Parse({"trace", "j", "f", "g"}).status().message()),
              HasSubstr("'trace' takes JOB FILE, got unexpected 'g'"));
  EXPECT_THAT(std::string(Parse({"submit", "--trace", "t.json", "j.yaml"}).status().message()),
              HasSubstr("--trace does not apply to 'submit'"));
  EXPECT_THAT(std::string(Parse({"local", "--trace=", "j.yaml"}).status().message()),
              HasSubstr("--trace: needs a FILE"));
  EXPECT_THAT(UsageText(), HasSubstr("trace JOB FILE"));
}

TEST(CliTest, LocalDeviceFlag) {
  absl::StatusOr<CommandLine> cl = Parse({"local", "--device", "cuda", "job.yaml"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->device, "cuda");
  EXPECT_TRUE(Parse({"local", "job.yaml"})->device.empty());
  EXPECT_THAT(std::string(Parse({"local", "--device", "cuda:0", "j.yaml"}).status().message()),
              HasSubstr("--device: expected cpu or cuda, got \"cuda:0\""));
  EXPECT_THAT(std::string(Parse({"submit", "--device", "cuda", "j.yaml"}).status().message()),
              HasSubstr("--device does not apply to 'submit'"));
}

TEST(CliTest, Help) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"help"}, {"--help"}, {"-h"}, {"local", "--help"}}) {
    absl::StatusOr<CommandLine> cl = Parse(args);
    ASSERT_TRUE(cl.ok()) << cl.status();
    EXPECT_TRUE(cl->help || cl->command == "help");
  }
  EXPECT_THAT(UsageText(), HasSubstr("local [--ranks N] [--json] SPEC"));
}

TEST(CliTest, Version) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"version"}, {"--version"}, {"list", "--version"}}) {
    absl::StatusOr<CommandLine> cl = Parse(args);
    ASSERT_TRUE(cl.ok()) << cl.status();
    EXPECT_TRUE(cl->version || cl->command == "version");
  }
  EXPECT_FALSE(Parse({"version", "extra"}).ok());
}

TEST(CliTest, Errors) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{}, "no command"},
           {{"frobnicate"}, "unknown command 'frobnicate'"},
           {{"list", "--jsn"}, "unknown flag --jsn"},
           {{"local", "--ranks"}, "--ranks needs a value"},
           {{"local", "--ranks", "zero", "j.yaml"}, "--ranks: expected"},
           {{"local", "--ranks", "0", "j.yaml"}, "--ranks: expected"},
           {{"local", "--ranks", "-3", "j.yaml"}, "--ranks: expected"},
           {{"local", "--ranks", "2"}, "'local' needs SPEC"},
           {{"get"}, "'get' needs JOB"},
           {{"list", "extra"}, "'list' takes no arguments"},
           {{"watch", "a", "b"}, "'watch' takes one JOB"},
           {{"watch", "j", "--ranks", "2"}, "--ranks does not apply to 'watch'"},
           {{"get", "j", "--watch"}, "--watch does not apply to 'get'"},
           {{"cancel", "j", "--json"}, "--json does not apply to 'cancel'"},
           {{"list", "--json=maybe"}, "--json: expected true or false"},
       }) {
    absl::StatusOr<CommandLine> cl = Parse(c.args);
    ASSERT_FALSE(cl.ok()) << c.message;
    EXPECT_EQ(cl.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(cl.status().message()), HasSubstr(c.message));
  }
}

TEST(CliTest, CkptSubcommands) {
  absl::StatusOr<CommandLine> cl = Parse({"ckpt", "inspect", "ckpt_dir", "--json"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->command, "ckpt");
  EXPECT_THAT(cl->positional, ElementsAre("inspect", "ckpt_dir"));
  EXPECT_TRUE(cl->json);
  cl = Parse({"ckpt", "export", "ckpt_dir", "out.safetensors"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_THAT(cl->positional, ElementsAre("export", "ckpt_dir", "out.safetensors"));
  EXPECT_THAT(Parse({"ckpt", "frob", "d"}).status().message(),
              HasSubstr("unknown 'ckpt' command 'frob'"));
  EXPECT_THAT(Parse({"ckpt", "verify", "d", "x"}).status().message(),
              HasSubstr("'ckpt verify' takes one DIR"));
  EXPECT_THAT(Parse({"ckpt", "export", "d"}).status().message(),
              HasSubstr("'ckpt export' takes DIR OUT.safetensors"));
  EXPECT_THAT(Parse({"ckpt", "verify", "d", "--json"}).status().message(),
              HasSubstr("--json applies to 'ckpt inspect' only"));
  EXPECT_THAT(Parse({"ckpt", "inspect"}).status().message(), HasSubstr("'ckpt' needs"));
}

TEST(CliTest, DataSubcommands) {
  absl::StatusOr<CommandLine> cl = Parse({"data", "tokenize", "--bytes", "in.txt", "out.bin"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->command, "data");
  EXPECT_THAT(cl->positional, ElementsAre("tokenize", "in.txt", "out.bin"));
  EXPECT_TRUE(cl->bytes);
  cl = Parse({"data", "inspect", "train", "--format", "megatron"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_THAT(cl->positional, ElementsAre("inspect", "train"));
  EXPECT_EQ(cl->format, "megatron");
  EXPECT_THAT(Parse({"data", "tokenize", "in.txt", "out.bin"}).status().message(),
              HasSubstr("'data tokenize' needs --bytes"));
  EXPECT_THAT(Parse({"data", "tokenize", "--bytes", "--format", "llmc", "a", "b"}).status().message(),
              HasSubstr("--format applies to 'data inspect' only"));
  EXPECT_THAT(Parse({"data", "inspect", "a", "b"}).status().message(),
              HasSubstr("'data inspect' takes one FILE"));
  EXPECT_THAT(Parse({"data", "x", "a"}).status().message(),
              HasSubstr("unknown 'data' command 'x'"));
  EXPECT_THAT(Parse({"plan", "j.yaml", "--bytes"}).status().message(),
              HasSubstr("--bytes does not apply to 'plan'"));
}

// 'data tokenize' takes any number of inputs before OUT; --holdout F and --holdout_out VAL.bin
// (in any order, either spelling) fill CommandLine.holdout and holdout_out; without them there is
// no holdout.
TEST(CliTest, DataTokenizeTakesSeveralInputsAndAHoldout) {
  absl::StatusOr<CommandLine> cl = Parse({"data", "tokenize", "--bytes", "a", "b", "c", "out.bin"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_THAT(cl->positional, ElementsAre("tokenize", "a", "b", "c", "out.bin"));
  EXPECT_EQ(cl->holdout, 0);
  EXPECT_EQ(cl->holdout_out, "");
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"data", "tokenize", "--bytes", "--holdout", "0.1", "--holdout_out", "v.bin", "a",
            "out.bin"},
           {"data", "tokenize", "--bytes", "a", "out.bin", "--holdout_out=v.bin",
            "--holdout=0.1"},
           {"data", "--holdout-out", "v.bin", "tokenize", "a", "--holdout", "1e-1", "out.bin",
            "--bytes"},
       }) {
    cl = Parse(args);
    ASSERT_TRUE(cl.ok()) << absl::StrJoin(args, " ") << ": " << cl.status();
    EXPECT_THAT(cl->positional, ElementsAre("tokenize", "a", "out.bin"));
    EXPECT_DOUBLE_EQ(cl->holdout, 0.1);
    EXPECT_EQ(cl->holdout_out, "v.bin");
    EXPECT_TRUE(cl->bytes);
  }
}

// The holdout's errors, and tokenize without both IN and OUT: each INVALID_ARGUMENT with its
// message.
TEST(CliTest, DataTokenizeHoldoutErrors) {
  const std::string together =
      "--holdout F and --holdout_out VAL.bin go together: the last fraction F of the tokens is "
      "written to VAL.bin instead of OUT";
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"data", "tokenize", "--bytes", "--holdout", "0.1", "a", "out.bin"}, together},
      {{"data", "tokenize", "--bytes", "--holdout_out", "v.bin", "a", "out.bin"}, together},
      {{"data", "tokenize", "--bytes", "--holdout", "0", "--holdout_out", "v.bin", "a", "o"},
       "--holdout: the held-out fraction of the tokens, a number in (0, 1), got \"0\""},
      {{"data", "tokenize", "--bytes", "--holdout", "1", "--holdout_out", "v.bin", "a", "o"},
       "--holdout: the held-out fraction of the tokens, a number in (0, 1), got \"1\""},
      {{"data", "tokenize", "--bytes", "--holdout", "1.5", "--holdout_out", "v.bin", "a", "o"},
       "--holdout: the held-out fraction of the tokens, a number in (0, 1), got \"1.5\""},
      {{"data", "tokenize", "--bytes", "--holdout=-0.1", "--holdout_out", "v.bin", "a", "o"},
       "--holdout: the held-out fraction of the tokens, a number in (0, 1), got \"-0.1\""},
      {{"data", "tokenize", "--bytes", "--holdout", "tenth", "--holdout_out", "v.bin", "a", "o"},
       "--holdout: the held-out fraction of the tokens, a number in (0, 1), got \"tenth\""},
      {{"data", "tokenize", "--bytes", "--holdout", "nan", "--holdout_out", "v.bin", "a", "o"},
       "--holdout: the held-out fraction of the tokens, a number in (0, 1), got \"nan\""},
      {{"data", "tokenize", "--bytes", "--holdout", "0.1", "--holdout_out=", "a", "o"},
       "--holdout_out: must be a file"},
      {{"data", "inspect", "--holdout", "0.1", "--holdout_out", "v.bin", "f.bin"},
       "--holdout applies to 'data tokenize' only"},
      {{"data", "inspect", "--holdout", "0.1", "f.bin"},
       "--holdout applies to 'data tokenize' only"},
      {{"data", "inspect", "--holdout_out", "v.bin", "f.bin"},
       "--holdout applies to 'data tokenize' only"},
      {{"data", "tokenize", "--bytes", "out.bin"}, "'data tokenize' takes IN... OUT.bin"},
      {{"data", "tokenize", "--bytes", "--holdout", "0.1", "--holdout_out", "v.bin", "out.bin"},
       "'data tokenize' takes IN... OUT.bin"},
      {{"data", "tokenize", "--bytes"}, "'data' needs tokenize --bytes IN... OUT or inspect FILE"},
      {{"list", "--holdout", "0.1"}, "--holdout does not apply to 'list' (only to data)"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<CommandLine> cl = Parse(c.args);
    ASSERT_FALSE(cl.ok()) << absl::StrJoin(c.args, " ");
    EXPECT_EQ(cl.status().code(), absl::StatusCode::kInvalidArgument) << cl.status();
    EXPECT_EQ(cl.status().message(), c.message) << absl::StrJoin(c.args, " ");
  }
}

}  // namespace
}  // namespace weft::client
