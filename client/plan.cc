#include "client/plan.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/spec/spec.h"
#include "common/status.h"
#include "coordinator/planner/format.h"
#include "coordinator/planner/planner.h"
#include "nlohmann/json.hpp"

namespace weft::client {
namespace {

// "4194304 B (4.0 MiB)": exact for scripts and diffing, readable for people.
std::string Bytes(int64_t n) {
  std::string readable;
  if (n >= (int64_t{1} << 30)) {
    readable = absl::StrFormat(" (%.1f GiB)", n / 1073741824.0);
  } else if (n >= (int64_t{1} << 20)) {
    readable = absl::StrFormat(" (%.1f MiB)", n / 1048576.0);
  } else if (n >= 1024) {
    readable = absl::StrFormat(" (%.1f KiB)", n / 1024.0);
  }
  return absl::StrCat(n, " B", readable);
}

nlohmann::json BufferJson(const v1::Program& program, int id) {
  nlohmann::json b = {{"buffer", id}};
  if (id >= 0 && id < program.buffers_size()) {
    b["name"] = program.buffers(id).name();
    b["shape"] = std::vector<int64_t>(program.buffers(id).shape().begin(),
                                      program.buffers(id).shape().end());
  }
  return b;
}

}  // namespace

absl::StatusOr<PlannedJob> PlanSpecFile(const std::string& path) {
  ASSIGN_OR_RETURN(v1::JobSpec spec, LoadJobSpecFile(path));
  // What SubmitJob does (coordinator.cc): prepare and validate, then plan.
  absl::Status s = PrepareJobSpec(&spec);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  PlannedJob job;
  absl::StatusOr<std::vector<v1::Program>> programs = planner::PlanJob(spec, "plan", 0);
  if (!programs.ok()) {
    return Annotate(programs.status(), absl::StrCat(path, ": planning the job"));
  }
  job.spec = std::move(spec);
  job.programs = *std::move(programs);
  job.report = planner::ReportPlan(job.programs);
  return job;
}

std::string FormatPlanText(const PlannedJob& job) {
  std::string out;
  absl::StrAppend(
      &out, "job ", job.spec.name(), ": mesh [", absl::StrJoin(job.spec.mesh().shape(), ","), "](",
      absl::StrJoin(job.spec.mesh().dim_names(), ","), "), ", job.programs.size(), " rank(s)\n");
  for (size_t r = 0; r < job.programs.size(); ++r) {
    absl::StrAppend(&out, "\n== rank ", r, " ==\n", planner::FormatProgram(job.programs[r]));
    if (r >= job.report.ranks.size()) continue;
    const planner::RankReport& rank = job.report.ranks[r];
    absl::StrAppend(&out, "memory: parameters ", Bytes(rank.param_bytes), ", gradients ",
                    Bytes(rank.grad_bytes), ", optimizer states ",
                    Bytes(rank.optimizer_state_bytes), ", peak activations ",
                    Bytes(rank.peak_activation_bytes), "\n");
    absl::StrAppend(&out, "collectives: ", rank.collectives.size(), ", ",
                    Bytes(rank.bytes_sent_per_step), " sent per step\n");
    for (const planner::CollectiveReport& c : rank.collectives) {
      absl::StrAppend(&out, absl::StrFormat("  %3d %-15s %s over %s ranks [%s]: %s sent\n",
                                            c.instruction, c.op, c.tensor, c.mesh_dims,
                                            absl::StrJoin(c.ranks, ","), Bytes(c.bytes_sent)));
    }
  }
  absl::StrAppend(&out, "\ntotal bytes moved per step (all ranks): ",
                  Bytes(job.report.total_bytes_per_step), "\n");
  return out;
}

std::string FormatPlanJson(const PlannedJob& job) {
  nlohmann::json doc;
  doc["job"] = job.spec.name();
  doc["mesh"] = {{"shape", std::vector<int64_t>(job.spec.mesh().shape().begin(),
                                                job.spec.mesh().shape().end())},
                 {"dim_names", std::vector<std::string>(job.spec.mesh().dim_names().begin(),
                                                        job.spec.mesh().dim_names().end())}};
  doc["world_size"] = job.programs.size();
  doc["total_bytes_per_step"] = job.report.total_bytes_per_step;
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t r = 0; r < job.programs.size(); ++r) {
    const v1::Program& program = job.programs[r];
    nlohmann::json rank = {{"rank", program.rank()}};
    if (r < job.report.ranks.size()) {
      const planner::RankReport& report = job.report.ranks[r];
      rank["memory"] = {{"param_bytes", report.param_bytes},
                        {"grad_bytes", report.grad_bytes},
                        {"optimizer_state_bytes", report.optimizer_state_bytes},
                        {"peak_activation_bytes", report.peak_activation_bytes}};
      rank["bytes_sent_per_step"] = report.bytes_sent_per_step;
      nlohmann::json collectives = nlohmann::json::array();
      for (const planner::CollectiveReport& c : report.collectives) {
        collectives.push_back({{"instruction", c.instruction},
                               {"op", c.op},
                               {"tensor", c.tensor},
                               {"ranks", c.ranks},
                               {"mesh_dims", c.mesh_dims},
                               {"bytes_sent", c.bytes_sent}});
      }
      rank["collectives"] = std::move(collectives);
    }
    nlohmann::json instructions = nlohmann::json::array();
    for (int i = 0; i < program.instructions_size(); ++i) {
      const v1::Instruction& ins = program.instructions(i);
      nlohmann::json inputs = nlohmann::json::array(), outputs = nlohmann::json::array();
      for (int b : ins.inputs()) inputs.push_back(BufferJson(program, b));
      for (int b : ins.outputs()) outputs.push_back(BufferJson(program, b));
      nlohmann::json item = {{"index", i},
                             {"op", v1::Instruction::Op_Name(ins.op())},
                             {"inputs", std::move(inputs)},
                             {"outputs", std::move(outputs)}};
      if (planner::IsCollective(ins.op())) item["group"] = ins.group();
      if (!ins.comment().empty()) item["comment"] = ins.comment();
      instructions.push_back(std::move(item));
    }
    rank["instructions"] = std::move(instructions);
    ranks.push_back(std::move(rank));
  }
  doc["ranks"] = std::move(ranks);
  return doc.dump(2);
}

}  // namespace weft::client
