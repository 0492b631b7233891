// A fuzz test of the spec parser and SubmitJob: mutated job specs (the examples and the MLP job
// of the integration tests, their YAML text mutated line by line, token by token and byte by
// byte) go through ParseJobSpecYaml and then an in-process Coordinator's SubmitJob, exactly as a
// submitted spec does: defaults, paths, validation, the data's headers, planning. Nothing may
// crash, and every error must name what is wrong: a field of the spec (`train.steps: ...`), the
// YAML position (`job spec: ... line 3`), or a file the spec names. What SubmitJob accepts goes
// on as a worker would take it: the Programs of its first and last role ranks, as the
// coordinator's plan emits them, open their data sources and read the first and the last step's
// batch into buffers of the planned sizes, which the reads must fill exactly (issue 30: a batch
// of 2^61 samples was planned at 21 KiB and crashed every worker that read it). Then mutated
// JobSpec protos and raw bytes go to a real coordinator over gRPC, which must keep serving.
//
// The seed is printed (common/test_seed); WEFT_TEST_SEED reproduces a run, WEFT_FUZZ_SPECS sets
// how many specs (default 100000) and WEFT_FUZZ_REQUESTS how many go over gRPC (default 3000).
// With WEFT_FUZZ_DEBUG set, each spec is written to the test's outputs (current.yaml) before it
// is tried, so a spec that hangs can be found.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/checked_math.h"
#include "common/dtype.h"
#include "common/jobspec/validate.h"
#include "common/jobspec/yaml.h"
#include "common/path_roots.h"
#include "common/program.h"
#include "common/status.h"
#include "common/test_seed.h"
#include "coordinator/coordinator.h"
#include "coordinator/job_plan.h"
#include "coordinator/job_store.h"
#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"
#include "tests/process.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "weft/v1/service.grpc.pb.h"
#include "worker/data/batch_source.h"

namespace weft::testing {
namespace {

namespace fs = std::filesystem;
using coordinator::Coordinator;
using coordinator::CoordinatorOptions;
using coordinator::JobPlan;
using coordinator::JobStore;

std::string TestOutputsPath(const std::string& name) {
  const char* dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

// Values a mutation puts where a scalar was: edges of every type the spec has.
const std::vector<std::string>& Interesting() {
  static const auto* values = new std::vector<std::string>{
      "0", "-1", "1", "2", "3", "7", "64", "65537", "2147483648", "9223372036854775807",
      "-9223372036854775808", "99999999999999999999", "1.0e+308", "-1.0e+308", "1.0e-320",
      ".nan", ".inf", "-.inf", "0.5", "\"\"", "x", "null", "~", "true", "false", "[]", "{}",
      "[1, 2, 3]", "[0]", "[-1]", "[1000000]", "[65536, 2]", "{a: 1}", "Shard(0)", "Shard(1)",
      "Shard(-1)", "Shard(99)", "Partial", "Partial(sum)", "Replicate()", "[Shard(0), Shard(0)]",
      "dp", "mp", "pp", "cpu", "cuda", "bf16", "f32", "1F1B", "VPP", "adamw", "sgd", "gpt2",
      "llama", "/etc/shadow", "../../etc/passwd", "\"\\u0000\"", "\"\\xff\"", "&a", "*a",
      "!!binary aGVsbG8=", "|", ">"};
  return *values;
}

// The keys of every seed, so a mutation can rename one key into another that exists elsewhere.
std::vector<std::string> KeysOf(const std::vector<std::string>& seeds) {
  std::vector<std::string> keys;
  const std::regex key(R"(([A-Za-z_][A-Za-z0-9_]*):)");
  for (const std::string& s : seeds) {
    for (std::sregex_iterator it(s.begin(), s.end(), key), end; it != end; ++it) {
      keys.push_back((*it)[1]);
    }
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

class Mutator {
 public:
  Mutator(uint64_t seed, std::vector<std::string> keys) : rng_(seed), keys_(std::move(keys)) {}

  // 1 to 3 mutations of `text`.
  std::string Mutate(std::string text) {
    const int n = 1 + Pick(3);
    for (int i = 0; i < n; ++i) text = MutateOnce(std::move(text));
    return text;
  }

 private:
  int Pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }

  std::string MutateOnce(std::string text) {
    std::vector<std::string> lines = absl::StrSplit(text, '\n');
    if (lines.empty()) return text;
    const int at = Pick(static_cast<int>(lines.size()));
    switch (Pick(9)) {
      case 0:
      case 1:
      case 2: {  // a scalar (a number, a word, a placement) becomes an interesting value
        static const std::regex scalar(R"([A-Za-z0-9_.+\-()/]+)");
        std::string& line = lines[at];
        std::vector<std::pair<size_t, size_t>> spans;
        for (std::sregex_iterator it(line.begin(), line.end(), scalar), end; it != end; ++it) {
          spans.push_back({static_cast<size_t>(it->position()), static_cast<size_t>(it->length())});
        }
        if (spans.empty()) break;
        const auto [pos, len] = spans[Pick(static_cast<int>(spans.size()))];
        line.replace(pos, len, Interesting()[Pick(static_cast<int>(Interesting().size()))]);
        break;
      }
      case 3: {  // a key becomes another key
        static const std::regex key(R"([A-Za-z_][A-Za-z0-9_]*:)");
        std::smatch m;
        if (std::regex_search(lines[at], m, key) && !keys_.empty()) {
          lines[at].replace(m.position(), m.length() - 1, keys_[Pick(static_cast<int>(keys_.size()))]);
        }
        break;
      }
      case 4:  // a line goes
        lines.erase(lines.begin() + at);
        break;
      case 5:  // a line twice (duplicate keys)
        lines.insert(lines.begin() + at, lines[at]);
        break;
      case 6: {  // two lines swap
        std::swap(lines[at], lines[Pick(static_cast<int>(lines.size()))]);
        break;
      }
      case 7: {  // a number scaled far up or to its negative
        static const std::regex number(R"(-?[0-9]+)");
        std::smatch m;
        if (std::regex_search(lines[at], m, number)) {
          int64_t v = 0;
          // An earlier mutation may have put an int64 edge here, whose negative or multiple
          // would wrap (UBSan stops the test): such a number stays.
          if (absl::SimpleAtoi(m.str(), &v)) {
            const absl::StatusOr<int64_t> scaled = CheckedMul(v, Pick(2) == 0 ? -1 : 1000003, "");
            if (scaled.ok()) lines[at].replace(m.position(), m.length(), absl::StrCat(*scaled));
          }
        }
        break;
      }
      default: {  // bytes: one flipped, inserted or removed
        std::string& line = lines[at];
        const size_t pos = line.empty() ? 0 : static_cast<size_t>(Pick(static_cast<int>(line.size())));
        const char byte = static_cast<char>(Pick(256));
        if (line.empty() || Pick(3) == 0) {
          line.insert(line.begin() + pos, byte);
        } else if (Pick(2) == 0) {
          line[pos] = byte;
        } else {
          line.erase(pos, 1);
        }
      }
    }
    return absl::StrJoin(lines, "\n");
  }

  std::mt19937_64 rng_;
  const std::vector<std::string> keys_;
};

// Mutates one field of a JobSpec proto, anywhere in it, to an edge of its type (or removes or
// repeats an element of a list): specs a YAML file cannot spell, as a gRPC client sends them.
class ProtoMutator {
 public:
  explicit ProtoMutator(uint64_t seed) : rng_(seed) {}

  void Mutate(google::protobuf::Message* message) {
    std::vector<Leaf> leaves;
    Collect(message, &leaves);
    if (leaves.empty()) return;
    const Leaf& leaf = leaves[Pick(static_cast<int>(leaves.size()))];
    const google::protobuf::Reflection* r = leaf.message->GetReflection();
    const google::protobuf::FieldDescriptor* f = leaf.field;
    if (f->is_repeated() && Pick(4) == 0) {  // an element goes, or comes twice
      if (Pick(2) == 0) {
        r->RemoveLast(leaf.message, f);
      } else if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
        r->AddMessage(leaf.message, f)->CopyFrom(r->GetRepeatedMessage(*leaf.message, f, 0));
      }
      return;
    }
    const int i = leaf.index;
    using FD = google::protobuf::FieldDescriptor;
    switch (f->cpp_type()) {
      case FD::CPPTYPE_INT32: {
        const int32_t v[] = {0, -1, 1, 3, 1 << 30, INT32_MIN, INT32_MAX};
        f->is_repeated() ? r->SetRepeatedInt32(leaf.message, f, i, v[Pick(7)])
                         : r->SetInt32(leaf.message, f, v[Pick(7)]);
        break;
      }
      case FD::CPPTYPE_INT64: {
        const int64_t v[] = {0, -1, 1, 3, 65537, INT64_MIN, INT64_MAX, int64_t{1} << 40};
        f->is_repeated() ? r->SetRepeatedInt64(leaf.message, f, i, v[Pick(8)])
                         : r->SetInt64(leaf.message, f, v[Pick(8)]);
        break;
      }
      case FD::CPPTYPE_UINT32:
      case FD::CPPTYPE_UINT64: {
        const uint64_t v[] = {0, 1, UINT32_MAX, UINT64_MAX};
        if (f->cpp_type() == FD::CPPTYPE_UINT32) {
          f->is_repeated() ? r->SetRepeatedUInt32(leaf.message, f, i, static_cast<uint32_t>(v[Pick(4)]))
                           : r->SetUInt32(leaf.message, f, static_cast<uint32_t>(v[Pick(4)]));
        } else {
          f->is_repeated() ? r->SetRepeatedUInt64(leaf.message, f, i, v[Pick(4)])
                           : r->SetUInt64(leaf.message, f, v[Pick(4)]);
        }
        break;
      }
      case FD::CPPTYPE_DOUBLE:
      case FD::CPPTYPE_FLOAT: {
        const double v[] = {0, -1, 1e308, -1e308, 1e-320, std::nan(""), HUGE_VAL, -HUGE_VAL};
        if (f->cpp_type() == FD::CPPTYPE_DOUBLE) {
          f->is_repeated() ? r->SetRepeatedDouble(leaf.message, f, i, v[Pick(8)])
                           : r->SetDouble(leaf.message, f, v[Pick(8)]);
        } else {
          f->is_repeated() ? r->SetRepeatedFloat(leaf.message, f, i, static_cast<float>(v[Pick(8)]))
                           : r->SetFloat(leaf.message, f, static_cast<float>(v[Pick(8)]));
        }
        break;
      }
      case FD::CPPTYPE_BOOL:
        if (!f->is_repeated()) r->SetBool(leaf.message, f, !r->GetBool(*leaf.message, f));
        break;
      case FD::CPPTYPE_ENUM: {
        const int v = Pick(3) == 0 ? 12345 : Pick(8);  // proto3 keeps unknown values
        f->is_repeated() ? r->SetRepeatedEnumValue(leaf.message, f, i, v)
                         : r->SetEnumValue(leaf.message, f, v);
        break;
      }
      case FD::CPPTYPE_STRING: {
        const std::string v[] = {"", "x", std::string(300, 'a'), "/etc/shadow", "../../x",
                                 "Shard(0)", "dp", "mp", "gpt2", "adamw", "\xff\xfe"};
        const std::string& pick = v[Pick(11)];
        f->is_repeated() ? r->SetRepeatedString(leaf.message, f, i, pick)
                         : r->SetString(leaf.message, f, pick);
        break;
      }
      case FD::CPPTYPE_MESSAGE:
        if (!f->is_repeated()) r->ClearField(leaf.message, f);
        break;
    }
  }

 private:
  struct Leaf {
    google::protobuf::Message* message;
    const google::protobuf::FieldDescriptor* field;
    int index;  // of an element of a repeated field
  };

  int Pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }

  static void Collect(google::protobuf::Message* message, std::vector<Leaf>* out) {
    const google::protobuf::Reflection* r = message->GetReflection();
    std::vector<const google::protobuf::FieldDescriptor*> fields;
    r->ListFields(*message, &fields);
    for (const google::protobuf::FieldDescriptor* f : fields) {
      const int n = f->is_repeated() ? r->FieldSize(*message, f) : 1;
      for (int i = 0; i < n; ++i) {
        out->push_back({message, f, i});
        if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
          Collect(f->is_repeated() ? r->MutableRepeatedMessage(message, f, i)
                                   : r->MutableMessage(message, f),
                  out);
        }
      }
    }
  }

  std::mt19937_64 rng_;
};

// Whether an error names what is wrong: a field of the spec (`train.steps: ...`, after the
// planner's "planning the job: planning job <name>: "), a position in the YAML (`job spec: ...
// (line 3, column 5)`), or a file the spec names (its path).
bool NamesWhatIsWrong(std::string message, const std::string& dir) {
  // Up to the first ": " after the job's name, which may hold a colon ("res:dual").
  static const std::regex planning(R"(^planning the job: (planning job .*?: )?)");
  message = std::regex_replace(message, planning, "");
  static const std::regex field(
      R"(^(name|mesh|model|data|optimizer|train|checkpoint|init_from|device|parallelize|)"
      R"(pipeline|sharding|storage|precision|allow_tf32|trace|overlap|bucket_mb)[.:\[ ])");
  if (std::regex_search(message, field)) return true;
  static const std::regex position(R"(^job spec(:| is not valid (YAML|UTF-8) at) .*line [0-9]+)");
  if (std::regex_search(message, position)) return true;
  return absl::StartsWith(message, dir);
}

struct Tally {
  int64_t specs = 0, unparsable = 0, refused = 0, accepted = 0;
  std::map<std::string, int64_t> unnamed;  // a message that names nothing, and how often
  int64_t reads = 0, large = 0;            // batches read; loads too large to read, sizes checked
  int64_t out_of_vocabulary = 0;           // accepted, with training tokens past the model's
  // A mutation may scale a batch to gigabytes (validation allows 2^40 elements), which no test
  // should allocate; and making even a megabyte of synthetic data for every accepted spec would
  // double the test's time. The seeds, as written, are read whole.
  int64_t max_read_bytes = int64_t{256} << 10;  // a larger load is checked by its sizes only
};

// One LOAD_INPUT or LOAD_LABEL of a Program over `data` (the step's or the evaluation's), as the
// worker's executor runs it: the source it opens (BatchSource::Create), the box checked against
// it and against the planned output buffer (DecodeLoad), then the first and the last step read
// into a buffer of the planned bytes. The read must fill it exactly: nothing past its end, no
// element left as it was (F32 data is finite and token ids are >= 0, so four 0xff bytes show).
absl::Status ReadLoad(const v1::Program& program, const v1::Data& data,
                      const v1::Instruction& ins, int64_t last_step, Tally* tally) {
  const bool input = ins.op() == v1::Instruction::LOAD_INPUT;
  ASSIGN_OR_RETURN(std::unique_ptr<BatchSource> source,
                   BatchSource::Create(data, input ? BatchSource::kInput : BatchSource::kLabel,
                                       program.seed()));
  RETURN_IF_ERROR(source->CheckBox(ins.box()));
  if (ins.outputs_size() != 1 || ins.outputs(0) < 0 || ins.outputs(0) >= program.buffers_size()) {
    return absl::InternalError("the load has no output buffer");
  }
  const v1::Buffer& out = program.buffers(ins.outputs(0));
  ASSIGN_OR_RETURN(const int64_t planned, CheckedBufferBytes(out));
  const std::vector<int64_t> lengths(ins.box().lengths().begin(), ins.box().lengths().end());
  ASSIGN_OR_RETURN(const int64_t elements, CheckedProduct(lengths, "the load's box"));
  ASSIGN_OR_RETURN(const int64_t bytes, CheckedMul(elements, DTypeSize(source->dtype()),
                                                   "the load's box bytes"));
  if (out.dtype() != source->dtype() || bytes != planned) {
    return absl::InternalError(absl::StrCat(
        "the load's box of ", elements, " ", DTypeName(source->dtype()), " elements (", bytes,
        " bytes) does not fill its planned buffer '", out.name(), "' of ", planned, " bytes (",
        DTypeName(out.dtype()), ")"));
  }
  if (bytes > tally->max_read_bytes) {
    ++tally->large;
    return absl::OkStatus();
  }
  constexpr int64_t kGuard = 64;
  std::vector<unsigned char> buffer(static_cast<size_t>(bytes + kGuard));
  for (int64_t step : {int64_t{1}, last_step}) {
    std::memset(buffer.data(), 0xff, buffer.size());
    RETURN_IF_ERROR(Annotate(source->ReadBox(step, ins.box(), out.dtype(), buffer.data()),
                             absl::StrCat("reading step ", step)));
    ++tally->reads;
    for (int64_t i = bytes; i < bytes + kGuard; ++i) {
      if (buffer[i] != 0xff) {
        return absl::InternalError(absl::StrCat("reading step ", step, " wrote byte ", i,
                                                " past the planned ", bytes, " bytes"));
      }
    }
    const bool marked = source->dtype() == v1::F32 || data.source() == "tokens";
    for (int64_t i = 0; i < elements && marked; ++i) {
      const unsigned char* e = buffer.data() + i * DTypeSize(source->dtype());
      if (e[0] == 0xff && e[1] == 0xff && e[2] == 0xff && e[3] == 0xff) {
        return absl::InternalError(absl::StrCat("reading step ", step, " left element ", i,
                                                " of the planned ", elements, " unwritten"));
      }
    }
  }
  return absl::OkStatus();
}

// Which role ranks ReadPlannedBatches reads: the first (the start of every split), the last
// (the remainders, the last pipeline stage) or both. The fuzz loop takes one of them per spec,
// by turns, which keeps it near its time without the reads.
enum class Roles { kFirst, kLast, kBoth };

// What a worker does with an accepted job's data: the Program the coordinator would send to a
// role rank, then the first and the last LOAD_INPUT and LOAD_LABEL of its step and of its
// evaluation read as ReadLoad reads them. Errors name the rank and the instruction.
absl::Status ReadPlannedBatches(const JobPlan& plan, Roles which, Tally* tally) {
  const std::vector<int> roles = plan.RoleRanks();
  std::vector<int> ranks;
  if (which != Roles::kLast) ranks.push_back(roles.front());
  if (which != Roles::kFirst && (ranks.empty() || roles.back() != ranks[0])) {
    ranks.push_back(roles.back());
  }
  for (int rank : ranks) {
    ASSIGN_OR_RETURN(const v1::Program program, plan.Program(rank, planner::Attempt{}, {}));
    // The evaluation runs its own instructions over its own data, as the executor runs it.
    struct List {
      const google::protobuf::RepeatedPtrField<v1::Instruction>& instructions;
      const v1::Data& data;
      int64_t last_step;
      const char* what;
    };
    for (const List& list :
         {List{program.instructions(), program.data(), program.steps(), "instruction"},
          List{program.eval().instructions(), program.eval().data(),
               std::max<int64_t>(program.eval().batches(), 1), "eval instruction"}}) {
      for (v1::Instruction::Op op : {v1::Instruction::LOAD_INPUT, v1::Instruction::LOAD_LABEL}) {
        std::vector<int> loads;
        for (int i = 0; i < list.instructions.size(); ++i) {
          if (list.instructions.Get(i).op() == op) loads.push_back(i);
        }
        if (loads.size() > 2) loads.erase(loads.begin() + 1, loads.end() - 1);
        for (int i : loads) {
          RETURN_IF_ERROR(Annotate(
              ReadLoad(program, list.data, list.instructions.Get(i), list.last_step, tally),
              absl::StrCat("rank ", rank, " ", list.what, " ", i, " (",
                           v1::Instruction::Op_Name(op), ")")));
        }
      }
    }
  }
  return absl::OkStatus();
}

TEST(SpecFuzzTest, MutatedSpecsAreRefusedNamingAFieldOrAccepted) {
  const std::string dir = fs::canonical(MakeTempDir("fuzz")).string();
  ASSERT_TRUE(WriteReadmeTokens(dir));
  std::vector<std::string> seeds;
  for (const char* name :
       {"quickstart", "dp_mp", "tensor_parallel", "pipeline", "pipeline_dp", "residual", "zero",
        "zero_bf16", "gpt2_tiny", "gpt2_zero3", "llama_tiny"}) {
    seeds.push_back(ReadFileOrEmpty(BinaryPath(absl::StrCat("examples/", name, ".yaml"))));
    ASSERT_FALSE(seeds.back().empty()) << name;
  }
  // The integration tests' MLP job: npy data, init_from, a checkpoint folder.
  const MlpJob job = MlpJob::Create();
  for (const char* file : {"inputs.npy", "labels.npy", "init.safetensors"}) {
    fs::copy_file(job.dir + "/" + file, dir + "/" + std::string(file));
  }
  seeds.push_back(MlpSpec(job, "{shape: [2], dim_names: [dp]}", 3, "{dir: ckpt, every: 1}", false));

  auto store = JobStore::Open(":memory:");
  ASSERT_TRUE(store.ok()) << store.status();
  CoordinatorOptions options;
  options.max_ranks = 64;  // keeps each plan small; --max_ranks itself is bad_input_test's
  // The plan SubmitJob made last, to emit the Programs of what it accepts.
  std::shared_ptr<const JobPlan> last_plan;
  options.plan = [&last_plan](const v1::JobSpec& spec, const planner::StopCheck& stop) {
    absl::StatusOr<std::shared_ptr<const JobPlan>> plan = coordinator::PlanWithPlanner(spec, stop);
    last_plan = plan.ok() ? *plan : nullptr;
    return plan;
  };
  auto roots = PathRoots::Resolve(dir, dir);
  ASSERT_TRUE(roots.ok());
  options.roots = *roots;
  auto coordinator = Coordinator::Create(std::move(*store), options);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  for (const std::string& seed : seeds) {  // every seed is accepted as written
    auto spec = ParseJobSpecYaml(seed, dir);
    ASSERT_TRUE(spec.ok()) << spec.status() << "\n" << seed;
    absl::StatusOr<std::string> id = (*coordinator)->SubmitJob(*spec);
    ASSERT_TRUE(id.ok()) << id.status() << "\n" << seed;
    ASSERT_TRUE((*coordinator)->CancelJob(*id, "fuzz").ok());
    Tally seeds_read;
    seeds_read.max_read_bytes = int64_t{64} << 20;
    const absl::Status read = ReadPlannedBatches(*last_plan, Roles::kBoth, &seeds_read);
    ASSERT_TRUE(read.ok()) << read << "\n" << seed;
    EXPECT_GT(seeds_read.reads, 0) << "no batch was read:\n" << seed;
  }

  const char* count_env = std::getenv("WEFT_FUZZ_SPECS");
  const int64_t count = count_env != nullptr ? std::atoll(count_env) : 100000;
  Mutator mutator(TestSeed(), KeysOf(seeds));
  Tally tally;
  for (int64_t i = 0; i < count; ++i) {
    const std::string text = mutator.Mutate(seeds[i % seeds.size()]);
    ++tally.specs;
    if (std::getenv("WEFT_FUZZ_DEBUG") != nullptr) {
      std::ofstream(TestOutputsPath("current.yaml")) << text;
    }
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(text, dir);
    absl::Status status = spec.status();
    if (spec.ok()) {
      absl::StatusOr<std::string> id = (*coordinator)->SubmitJob(*spec);
      status = id.status();
      if (id.ok()) {
        ++tally.accepted;
        absl::StatusOr<v1::Job> cancelled = (*coordinator)->CancelJob(*id, "fuzz");
        ASSERT_TRUE(cancelled.ok()) << cancelled.status() << "\nspec:\n" << text;
        const absl::Status read = ReadPlannedBatches(
            *last_plan, tally.accepted % 2 == 0 ? Roles::kFirst : Roles::kLast, &tally);
        // Training tokens are checked against the vocabulary as a worker reads them
        // (batch_source.h), not at submit: a clean refusal naming the file and the token.
        if (read.code() == absl::StatusCode::kInvalidArgument &&
            absl::StrContains(read.message(), ", not below vocab_size ")) {
          ++tally.out_of_vocabulary;
          continue;
        }
        ASSERT_TRUE(read.ok()) << "a worker could not read the batch of an accepted spec: "
                               << read << "\nspec:\n" << text;
        continue;
      }
      ++tally.refused;
    } else {
      ++tally.unparsable;
    }
    const std::string message(status.message());
    if (!NamesWhatIsWrong(message, dir)) {
      if (++tally.unnamed[message.substr(0, 120)] == 1 && tally.unnamed.size() <= 60) {
        ADD_FAILURE() << "an error that names no field: " << status
                      << (tally.unnamed.size() <= 3 ? "\nspec:\n" + text : "");
      }
    }
  }
  std::printf("[fuzz] %lld specs: %lld unparsable, %lld refused, %lld accepted; %zu messages "
              "naming nothing; %lld batches read, %lld loads too large to read, %lld accepted "
              "with tokens past the vocabulary\n",
              static_cast<long long>(tally.specs), static_cast<long long>(tally.unparsable),
              static_cast<long long>(tally.refused), static_cast<long long>(tally.accepted),
              tally.unnamed.size(), static_cast<long long>(tally.reads),
              static_cast<long long>(tally.large), static_cast<long long>(tally.out_of_vocabulary));
  EXPECT_TRUE(tally.unnamed.empty());
  EXPECT_GT(tally.accepted, 0) << "no mutation was valid: the mutator only makes noise";
  EXPECT_GT(tally.refused, 0);
}

// Issue 30's spec past validation: quickstart with num_samples = batch_size = 2^61 (2^64 input
// elements, which wrapped to a 21 KiB plan), given to the planner as the coordinator plans, is
// refused naming the fields; and a worker given such a Program refuses to open its data.
TEST(SpecFuzzTest, ABatchOfTwoToTheSixtyFirstSamplesPastValidationIsRefusedNotRun) {
  const std::string dir = fs::canonical(MakeTempDir("huge")).string();
  auto spec = ParseJobSpecYaml(ReadFileOrEmpty(BinaryPath("examples/quickstart.yaml")), dir);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(PrepareJobSpec(&*spec).ok());
  auto good = coordinator::PlanWithPlanner(*spec, {});
  ASSERT_TRUE(good.ok()) << good.status();
  Tally tally;
  ASSERT_TRUE(ReadPlannedBatches(**good, Roles::kBoth, &tally).ok());
  EXPECT_GT(tally.reads, 0);

  spec->mutable_data()->set_num_samples(int64_t{1} << 61);
  spec->mutable_data()->set_batch_size(int64_t{1} << 61);
  auto huge = coordinator::PlanWithPlanner(*spec, {});
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument) << huge.status();
  EXPECT_EQ(std::string(huge.status().message()),
            "planning job quickstart: data.batch_size × data.sample_shape: tensor input "
            "[2305843009213693952,1024] overflows int64");

  v1::Program program = (*good)->Program(0, planner::Attempt{}, {}).value();
  *program.mutable_data() = spec->data();
  auto source = BatchSource::Create(program.data(), BatchSource::kInput, program.seed());
  EXPECT_EQ(source.status().code(), absl::StatusCode::kInvalidArgument) << source.status();
  EXPECT_TRUE(absl::StrContains(source.status().message(), "overflows int64")) << source.status();
}

// A real coordinator over gRPC: mutated JobSpec protos and requests of random bytes. Each call
// gets an answer (no crash, no hang), a refused spec names what is wrong, and the coordinator
// still serves a good spec afterwards.
TEST(SpecFuzzTest, ARealCoordinatorAnswersMutatedRequestsAndKeepsServing) {
  const MlpJob job = MlpJob::Create();
  auto cluster = DaemonCluster::Start(0);  // no workers: an accepted job waits and is cancelled
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto parsed = ParseJobSpecYaml(
      MlpSpec(job, "{shape: [2], dim_names: [dp]}", 3, "{dir: ckpt, every: 1}", false), job.dir);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const v1::JobSpec seed = *parsed;
  auto channel = grpc::CreateChannel((*cluster)->address(), grpc::InsecureChannelCredentials());
  auto stub = v1::JobService::NewStub(channel);
  ProtoMutator mutator(TestSeed());
  std::mt19937_64 rng(TestSeed() + 1);
  int64_t accepted = 0, refused = 0;
  const char* count_env = std::getenv("WEFT_FUZZ_REQUESTS");
  const int count = count_env != nullptr ? std::atoi(count_env) : 3000;
  for (int i = 0; i < count; ++i) {
    v1::JobSpec spec = seed;
    for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k) mutator.Mutate(&spec);
    const grpc::Status s = (*cluster)->Submit(spec);
    if (s.ok()) {
      ++accepted;
      continue;
    }
    ++refused;
    ASSERT_NE(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << spec.DebugString();
    ASSERT_NE(s.error_code(), grpc::StatusCode::UNAVAILABLE)
        << "the coordinator stopped answering: " << s.error_message() << "\n"
        << spec.DebugString() << (*cluster)->Logs();
    // A string that is not UTF-8 does not parse as a proto: gRPC refuses the request (INTERNAL)
    // before Weft sees it.
    if (!v1::JobSpec().ParseFromString(spec.SerializePartialAsString())) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL) << s.error_message();
      continue;
    }
    EXPECT_TRUE(NamesWhatIsWrong(s.error_message(), job.dir))
        << s.error_code() << " " << s.error_message() << "\n" << spec.DebugString();
  }
  // Requests that are not a SubmitJobRequest at all.
  grpc::GenericStub generic(channel);
  grpc::CompletionQueue queue;
  for (int i = 0; i < 300; ++i) {
    std::string bytes(rng() % 512, '\0');
    for (char& b : bytes) b = static_cast<char>(rng());
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto call = generic.PrepareUnaryCall(&ctx, "/weft.v1.JobService/SubmitJob", request, &queue);
    call->StartCall();
    grpc::ByteBuffer response;
    grpc::Status status;
    call->Finish(&response, &status, reinterpret_cast<void*>(1));
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(queue.Next(&tag, &ok));
    ASSERT_NE(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    ASSERT_NE(status.error_code(), grpc::StatusCode::UNAVAILABLE) << (*cluster)->Logs();
  }
  queue.Shutdown();
  std::printf("[fuzz] %d mutated requests over gRPC: %lld refused, %lld accepted; 300 of random "
              "bytes\n",
              count, static_cast<long long>(refused), static_cast<long long>(accepted));
  EXPECT_GT(refused, 0);
  // Still serving: the seed itself is accepted, and the process is alive.
  std::string id;
  const grpc::Status good = (*cluster)->Submit(seed, &id);
  EXPECT_TRUE(good.ok()) << good.error_message();
  EXPECT_EQ((*cluster)->GetJob(id).state(), v1::PENDING);
}

}  // namespace
}  // namespace weft::testing
