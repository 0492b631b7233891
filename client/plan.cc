#include "client/plan.h"

#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/jobspec/validate.h"
#include "common/jobspec/yaml.h"
#include "common/status.h"
#include "planner/format.h"
#include "common/dtype.h"
#include "common/program.h"
#include "planner/submit/submit.h"
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
    b["dtype"] = std::string(DTypeName(program.buffers(id).dtype()));
  }
  return b;
}

nlohmann::json InstructionsJson(const v1::Program& program,
                                const google::protobuf::RepeatedPtrField<v1::Instruction>& list) {
  nlohmann::json instructions = nlohmann::json::array();
  for (int i = 0; i < list.size(); ++i) {
    const v1::Instruction& ins = list.Get(i);
    nlohmann::json inputs = nlohmann::json::array(), outputs = nlohmann::json::array();
    for (int b : ins.inputs()) inputs.push_back(BufferJson(program, b));
    for (int b : ins.outputs()) outputs.push_back(BufferJson(program, b));
    nlohmann::json item = {{"index", i},
                           {"op", v1::Instruction::Op_Name(ins.op())},
                           {"inputs", std::move(inputs)},
                           {"outputs", std::move(outputs)}};
    if (IsCollective(ins.op())) item["group"] = ins.group();
    if (!ins.comment().empty()) item["comment"] = ins.comment();
    instructions.push_back(std::move(item));
  }
  return instructions;
}

}  // namespace

absl::StatusOr<PlannedJob> PlanSpecFile(const std::string& path, const std::vector<int>& ranks,
                                        bool all) {
  ASSIGN_OR_RETURN(v1::JobSpec spec, LoadJobSpecFile(path));
  // What SubmitJob does (coordinator.cc): prepare, validate and plan.
  absl::StatusOr<std::shared_ptr<const planner::Plan>> planned =
      planner::PrepareAndPlan(&spec, "plan", 0);
  if (!planned.ok()) {
    return absl::Status(planned.status().code(),
                        absl::StrCat(path, ": ", planned.status().message()));
  }
  const planner::Plan& plan = **planned;
  const int world = plan.world_size();
  std::set<int> listed(ranks.begin(), ranks.end());
  for (int r : listed) {
    if (r < 0 || r >= world) {
      return absl::InvalidArgumentError(
          absl::StrCat("--list_ranks: rank ", r, " is not in the job's ", world, " ranks"));
    }
  }
  if (listed.empty()) {
    if (all || world <= kListAllRanks) {
      for (int r = 0; r < world; ++r) listed.insert(r);
    } else {
      // The first rank of each pipeline stage.
      const planner::Graph& g = plan.planned().graph;
      for (int s = 0; s < plan.planned().pipeline.stages; ++s) {
        std::vector<int64_t> coord(g.mesh.ndim(), 0);
        if (g.pipeline.dim >= 0) coord[g.pipeline.dim] = s;
        listed.insert(g.mesh.RankAt(coord));
      }
    }
  }
  PlannedJob job;
  for (int r = 0; r < world; ++r) {
    absl::StatusOr<v1::Program> program = plan.Program(r);
    if (!program.ok()) {
      return Annotate(program.status(), absl::StrCat(path, ": planning the job"));
    }
    // As a worker sees it: group ranks filled in from the mesh dims the planner sends.
    RETURN_IF_ERROR(ResolveGroupRanks(&*program));
    const bool full = listed.count(r) > 0;
    job.report.ranks.push_back(planner::ReportRank(*program, /*collectives=*/full));
    job.report.total_bytes_per_step += job.report.ranks.back().bytes_sent_per_step;
    if (full) {
      job.programs.push_back(*std::move(program));
      job.listed.push_back(r);
    }
  }
  job.spec = std::move(spec);
  return job;
}

std::string FormatPlanText(const PlannedJob& job) {
  std::string out;
  const size_t world = job.report.ranks.size();
  absl::StrAppend(
      &out, "job ", job.spec.name(), ": mesh [", absl::StrJoin(job.spec.mesh().shape(), ","), "](",
      absl::StrJoin(job.spec.mesh().dim_names(), ","), "), ", world, " rank(s)\n");
  if (job.listed.size() < world) {
    absl::StrAppend(&out, "listed in full: rank(s) ", absl::StrJoin(job.listed, ","),
                    " (--list_ranks R,... or all for others)\n");
  }
  for (size_t i = 0; i < job.programs.size(); ++i) {
    const planner::RankReport& rank = job.report.ranks[job.listed[i]];
    absl::StrAppend(&out, "\n== rank ", rank.rank, " ==\n", planner::FormatProgram(job.programs[i]));
    absl::StrAppend(&out, "memory: parameters ", Bytes(rank.param_bytes), ", gradients ",
                    Bytes(rank.grad_bytes), ", optimizer states ",
                    Bytes(rank.optimizer_state_bytes), ", peak activations ",
                    Bytes(rank.peak_activation_bytes), "; at its peak ",
                    Bytes(rank.peak_bytes), " in all (the arena its buffers share)\n");
    absl::StrAppend(&out, "collectives: ", rank.collectives.size(), ", ",
                    Bytes(rank.bytes_sent_per_step), " sent per step\n");
    for (const planner::CollectiveReport& c : rank.collectives) {
      absl::StrAppend(&out, absl::StrFormat("  %3d %-15s %s over %s ranks [%s]: %s sent\n",
                                            c.instruction, c.op, c.tensor, c.mesh_dims,
                                            absl::StrJoin(c.ranks, ","), Bytes(c.bytes_sent)));
    }
  }
  if (job.listed.size() < world) {
    absl::StrAppend(&out, "\nevery rank: memory at its peak, bytes sent per step\n");
    for (const planner::RankReport& rank : job.report.ranks) {
      absl::StrAppend(&out, "  rank ", rank.rank, ": ", Bytes(rank.peak_bytes), ", ",
                      Bytes(rank.bytes_sent_per_step), " sent\n");
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
  doc["world_size"] = job.report.ranks.size();
  doc["total_bytes_per_step"] = job.report.total_bytes_per_step;
  doc["listed_ranks"] = job.listed;
  std::map<int, const v1::Program*> listed;
  for (size_t i = 0; i < job.programs.size(); ++i) listed[job.listed[i]] = &job.programs[i];
  nlohmann::json ranks = nlohmann::json::array();
  for (const planner::RankReport& report : job.report.ranks) {
    nlohmann::json rank = {{"rank", report.rank}};
    rank["memory"] = {{"peak_bytes", report.peak_bytes},
                      {"param_bytes", report.param_bytes},
                      {"grad_bytes", report.grad_bytes},
                      {"optimizer_state_bytes", report.optimizer_state_bytes},
                      {"peak_activation_bytes", report.peak_activation_bytes}};
    rank["bytes_sent_per_step"] = report.bytes_sent_per_step;
    auto program = listed.find(report.rank);
    if (program != listed.end()) {
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
      const v1::Program& p = *program->second;
      rank["instructions"] = InstructionsJson(p, p.instructions());
      if (p.has_eval()) {
        rank["eval"] = {{"every", p.eval().every()},
                        {"batches", p.eval().batches()},
                        {"instructions", InstructionsJson(p, p.eval().instructions())}};
      }
    }
    ranks.push_back(std::move(rank));
  }
  doc["ranks"] = std::move(ranks);
  return doc.dump(2);
}

}  // namespace weft::client
