// Test helpers for the planner: job specs in a few lines and their plans, graphs of placed
// tensors for rule tests, and instruction counting in the manner of DTensor's CommDebugMode.
//
// E.g.
//   v1::JobSpec spec = SpecBuilder({4}, {"dp"}).Batch(8, {6}, {2}).Linear("fc0", 6, 2).Spec();
//   std::vector<v1::Program> programs = MustPlan(spec);
#ifndef WEFT_PLANNER_TEST_UTIL_H_
#define WEFT_PLANNER_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dist_attr.h"
#include "common/jobspec/defaults.h"
#include "common/jobspec/parallelize.h"
#include "common/program.h"
#include "planner/format.h"
#include "planner/graph.h"
#include "planner/pipeline/deadlock.h"
#include "planner/planner.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"

namespace weft::planner::testing {

// Placement shorthand as rule comments spell it: {S(0), R}, {R, P}.
inline const Placement R = Placement::Replicate();
inline Placement S(int axis) { return Placement::Shard(axis); }
inline const Placement P = Placement::Partial();

class SpecBuilder {
 public:
  SpecBuilder(std::vector<int64_t> mesh, std::vector<std::string> names) {
    spec_.set_name("test");
    for (int64_t s : mesh) spec_.mutable_mesh()->add_shape(s);
    for (const std::string& n : names) spec_.mutable_mesh()->add_dim_names(n);
    spec_.mutable_model()->set_loss("mse");
    spec_.mutable_optimizer()->set_type("sgd");
    spec_.mutable_optimizer()->set_lr(0.1);
    spec_.mutable_train()->set_steps(3);
    spec_.mutable_train()->set_seed(7);
    spec_.mutable_data()->set_source("synthetic");
    spec_.set_device("cpu");
    // One all-reduce per gradient, as the rules derive them; Buckets() fuses them (buckets.h).
    spec_.set_bucket_mb(0);
  }
  SpecBuilder& Buckets(double mb) {
    spec_.set_bucket_mb(mb);
    return *this;
  }
  SpecBuilder& Batch(int64_t batch, std::vector<int64_t> sample, std::vector<int64_t> label) {
    spec_.mutable_data()->set_batch_size(batch);
    for (int64_t s : sample) spec_.mutable_data()->add_sample_shape(s);
    for (int64_t s : label) spec_.mutable_data()->add_label_shape(s);
    return *this;
  }
  SpecBuilder& Linear(const std::string& name, int64_t in, int64_t out, bool bias = true) {
    v1::Layer* l = spec_.mutable_model()->add_layers();
    l->set_name(name);
    l->set_type("linear");
    l->set_in_features(in);
    l->set_out_features(out);
    if (!bias) l->set_bias(false);
    return *this;
  }
  SpecBuilder& Act(const std::string& name, const std::string& type) {
    v1::Layer* l = spec_.mutable_model()->add_layers();
    l->set_name(name);
    l->set_type(type);
    return *this;
  }
  // Placements of the last layer's parameter ("weight" | "bias").
  SpecBuilder& Place(const std::string& param, const std::vector<Placement>& placements) {
    v1::Layer* l = spec_.mutable_model()->mutable_layers(spec_.model().layers_size() - 1);
    v1::PlacementList& list = (*l->mutable_placements())[param];
    for (const Placement& p : placements) *list.add_placements() = p.ToProto();
    return *this;
  }
  SpecBuilder& DataPlacements(const std::vector<Placement>& placements) {
    for (const Placement& p : placements) *spec_.mutable_data()->add_placements() = p.ToProto();
    return *this;
  }
  SpecBuilder& AdamW() {
    v1::Optimizer* o = spec_.mutable_optimizer();
    o->set_type("adamw");
    o->add_betas(0.9);
    o->add_betas(0.999);
    o->set_eps(1e-8);
    o->set_weight_decay(0.01);
    return *this;
  }
  v1::JobSpec Spec() const { return spec_; }

 private:
  v1::JobSpec spec_;
};

// A spec of `arch` over 1 rank reading tokens (seq_len 8, batch 2) from a file that need not
// exist: the planner reads only its shapes.
inline v1::JobSpec TokenSpec(const std::string& arch) {
  v1::JobSpec spec;
  spec.set_name("tiny");
  spec.set_device("cpu");
  spec.mutable_mesh()->add_shape(1);
  spec.mutable_mesh()->add_dim_names("dp");
  spec.mutable_model()->set_arch(arch);
  spec.mutable_optimizer()->set_type("adamw");
  spec.mutable_optimizer()->set_lr(1e-3);
  spec.mutable_train()->set_steps(2);
  spec.mutable_train()->set_seed(1);
  v1::Data* data = spec.mutable_data();
  data->set_source("tokens");
  data->set_path("/nonexistent/train.bin");
  data->set_seq_len(8);
  data->set_batch_size(2);
  data->add_sample_shape(8);
  data->add_label_shape(8);
  data->set_num_samples(16);
  data->set_input_dtype(v1::I32);
  data->set_label_dtype(v1::I32);
  ApplyJobSpecDefaults(&spec);
  return spec;
}

// gpt2 with 2 blocks of width 8 (2 heads, MLP 32) over a vocabulary of 16.
inline v1::JobSpec Gpt2Spec() {
  v1::JobSpec spec = TokenSpec("gpt2");
  v1::TransformerConfig* c = spec.mutable_model()->mutable_config();
  c->set_vocab_size(16);
  c->set_n_positions(8);
  c->set_n_embd(8);
  c->set_n_layer(2);
  c->set_n_head(2);
  c->set_n_inner(32);
  c->set_layer_norm_epsilon(1e-5);
  return spec;
}

// PlanJob of spec with its defaults and `parallelize` applied, as job-1 (no files are read).
inline absl::StatusOr<std::shared_ptr<const Plan>> PlanWithDefaults(v1::JobSpec spec,
                                                                   int attempt = 0) {
  ApplyJobSpecDefaults(&spec);
  absl::Status parallelized = ApplyParallelize(&spec);
  if (!parallelized.ok()) return parallelized;
  return PlanJob(spec, "job-1", attempt);
}

// The plan of spec with its defaults applied (no files are read).
inline absl::StatusOr<std::vector<v1::Program>> PlanPrograms(v1::JobSpec spec, int attempt = 0) {
  absl::StatusOr<std::shared_ptr<const Plan>> plan = PlanWithDefaults(std::move(spec), attempt);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::vector<v1::Program>> programs = (*plan)->AllPrograms();
  if (!programs.ok()) return programs.status();
  // PlanJob checks one rank per pipeline stage; tests check every rank against every other.
  absl::Status matched = pipeline::CheckTransfersMatch(*programs);
  if (!matched.ok()) return matched;
  absl::Status free = pipeline::CheckDeadlockFree(*programs);
  if (!free.ok()) return free;
  // The worker fills in group ranks from mesh dims; so do the tests that look at them.
  for (v1::Program& p : *programs) {
    absl::Status resolved = ResolveGroupRanks(&p);
    if (!resolved.ok()) return resolved;
  }
  return programs;
}

// PlanPrograms(spec, attempt); a planning error fails the test and gives no programs.
inline std::vector<v1::Program> MustPlan(const v1::JobSpec& spec, int attempt = 0) {
  absl::StatusOr<std::vector<v1::Program>> programs = PlanPrograms(spec, attempt);
  EXPECT_TRUE(programs.ok()) << programs.status();
  return programs.ok() ? *std::move(programs) : std::vector<v1::Program>{};
}

inline Mesh MakeMesh(std::vector<int64_t> shape, std::vector<std::string> names) {
  return *Mesh::Create(std::move(shape), std::move(names));
}

// Adds a tensor placed by `placements` to g (whose mesh must be set).
inline int AddPlaced(Graph* g, const std::string& name, std::vector<int64_t> shape,
                     std::vector<Placement> placements) {
  int ndim = static_cast<int>(shape.size());
  Tensor t{name, std::move(shape), v1::F32, v1::Buffer::ACTIVATION, "l0"};
  t.dist = *DistAttr::Create(g->mesh, std::move(placements), ndim);
  return g->AddTensor(std::move(t));
}

inline int AddUnplaced(Graph* g, const std::string& name, std::vector<int64_t> shape) {
  return g->AddTensor(Tensor{name, std::move(shape), v1::F32, v1::Buffer::ACTIVATION, "l0"});
}

inline int Count(const v1::Program& p, v1::Instruction::Op op) {
  int n = 0;
  for (const v1::Instruction& i : p.instructions()) n += i.op() == op;
  return n;
}

inline std::vector<const v1::Instruction*> Collectives(const v1::Program& p) {
  std::vector<const v1::Instruction*> out;
  for (const v1::Instruction& i : p.instructions()) {
    if (IsCollective(i.op())) out.push_back(&i);
  }
  return out;
}

inline const std::string& BufferName(const v1::Program& p, int id) { return p.buffers(id).name(); }

}  // namespace weft::planner::testing

#endif  // WEFT_PLANNER_TEST_UTIL_H_
