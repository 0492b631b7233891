// bf16 storage through the whole planner: which buffers are bf16, the master weights and the
// casts that round them into the parameters (in place, or gathered under ZeRO), the checkpoint
// items and inits of both, and the planned scratch for the float32 copies of compute operands.
#include "planner/storage.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "common/program.h"
#include "planner/test_util.h"

namespace weft::planner {
namespace {

using testing::MustPlan;
using testing::SpecBuilder;
using v1::Buffer;
using v1::Instruction;

v1::JobSpec Mlp(std::vector<int64_t> mesh, const std::string& storage, int level = 0) {
  v1::JobSpec spec = SpecBuilder(mesh, {"dp"})
                         .Batch(8, {6}, {4})
                         .Linear("fc0", 6, 8)
                         .Act("act0", "gelu")
                         .Linear("fc1", 8, 4)
                         .AdamW()
                         .Spec();
  spec.set_storage(storage);
  if (level > 0) {
    spec.mutable_sharding()->set_dim("dp");
    spec.mutable_sharding()->set_level(level);
  }
  return spec;
}

std::map<std::string, const Buffer*> ByName(const v1::Program& p) {
  std::map<std::string, const Buffer*> out;
  for (const Buffer& b : p.buffers()) out.emplace(b.name(), &b);  // the first of a name
  return out;
}

TEST(StorageTest, ParametersGradientsAndActivationsAreBf16TheLossAndMastersFloat32) {
  const v1::Program p = MustPlan(Mlp({1}, "bf16"))[0];
  const auto buffers = ByName(p);
  for (const char* name : {"fc0.weight", "fc0.bias", "fc1.weight", "fc0.out", "act0.out",
                           "fc1.out", "fc0.weight@grad", "act0.out@grad"}) {
    ASSERT_EQ(buffers.count(name), 1u) << name;
    EXPECT_EQ(buffers.at(name)->dtype(), v1::BF16) << name;
  }
  for (const char* name : {"loss", "input", "label", "fc0.weight.master", "fc0.weight.m",
                           "fc0.weight.v"}) {
    ASSERT_EQ(buffers.count(name), 1u) << name;
    EXPECT_EQ(buffers.at(name)->dtype(), v1::F32) << name;
  }
  EXPECT_EQ(buffers.at("fc0.weight.master")->role(), Buffer::OPTIMIZER_STATE);
  // Float32 storage plans no bf16 buffer and no master.
  const v1::Program f32 = MustPlan(Mlp({1}, "f32"))[0];
  for (const Buffer& b : f32.buffers()) {
    EXPECT_EQ(b.dtype(), v1::F32) << b.name();
    EXPECT_EQ(b.name().find(".master"), std::string::npos) << b.name();
  }
}

TEST(StorageTest, TheUpdateRunsOnTheMasterAndACastRoundsItIntoTheParameter) {
  const v1::Program p = MustPlan(Mlp({2}, "bf16"))[0];
  const auto buffers = ByName(p);
  int updates = 0;
  for (int i = 0; i < p.instructions_size(); ++i) {
    const Instruction& ins = p.instructions(i);
    if (ins.op() != Instruction::ADAMW) continue;
    ++updates;
    const std::string master = p.buffers(ins.inputs(0)).name();
    ASSERT_EQ(master.substr(master.size() - 7), ".master");
    const std::string param = master.substr(0, master.size() - 7);
    EXPECT_EQ(p.buffers(ins.inputs(1)).dtype(), v1::BF16) << "the gradient of " << param;
    // The next instruction touching the parameter is the cast that writes it.
    ASSERT_LT(i + 1, p.instructions_size());
    const Instruction& cast = p.instructions(i + 1);
    EXPECT_EQ(cast.op(), Instruction::CAST);
    EXPECT_EQ(cast.inputs(0), ins.inputs(0));
    EXPECT_EQ(cast.outputs(0), buffers.at(param)->id()) << param;
  }
  EXPECT_EQ(updates, 4);
}

TEST(StorageTest, ZeroShardsTheMasterAndGathersTheRoundedShardInBf16) {
  for (int level : {1, 2}) {
    const v1::Program p = MustPlan(Mlp({4}, "bf16", level))[0];
    const auto buffers = ByName(p);
    // fc0.weight [6, 8]: its master is rank 0's shard, placed like the states.
    const Buffer& master = *buffers.at("fc0.weight.master");
    EXPECT_LT(BufferElements(master), 48) << "level " << level;
    EXPECT_EQ(BufferElements(master), BufferElements(*buffers.at("fc0.weight.m")))
        << "level " << level;
    int gathers = 0;
    for (const Instruction& ins : p.instructions()) {
      if (ins.op() != Instruction::ALL_GATHER || ins.phase() != Instruction::OPTIMIZER) continue;
      ++gathers;
      EXPECT_EQ(p.buffers(ins.inputs(0)).dtype(), v1::BF16);
      const std::string& param = p.buffers(ins.outputs(0)).name();
      EXPECT_EQ(p.buffers(ins.inputs(0)).name(), param + ".rounded");
      EXPECT_EQ(ins.outputs(0), buffers.at(param)->id()) << "level " << level;
    }
    EXPECT_EQ(gathers, 4) << "level " << level;
  }
  // Level 1 with sgd shards the master: it is a state.
  v1::JobSpec sgd = Mlp({4}, "bf16", 1);
  sgd.mutable_optimizer()->set_type("sgd");
  EXPECT_LT(BufferElements(*ByName(MustPlan(sgd)[0]).at("fc0.weight.master")), 48);
}

TEST(StorageTest, TheMasterIsCheckpointedUnderTheParametersNameAndStartsAsItDoes) {
  const std::vector<v1::Program> programs = MustPlan(Mlp({2}, "bf16"));
  int master_writes = 0;
  for (const v1::Program& p : programs) {
    std::map<int, const v1::ParamInit*> init;
    for (const v1::ParamInit& i : p.init()) init[i.buffer()] = &i;
    for (const v1::CheckpointItem& item : p.checkpoint_items()) {
      const Buffer& b = p.buffers(item.buffer());
      if (item.name() != "fc0.weight") continue;
      EXPECT_EQ(item.role(), Buffer::PARAM);
      if (b.dtype() == v1::BF16) {
        EXPECT_FALSE(item.write()) << "the bf16 parameter loads from checkpoints, never writes";
      } else {
        EXPECT_EQ(b.name(), "fc0.weight.master");
        master_writes += item.write();
      }
      // Both start from the same uniform draw (the bf16 one rounded on the host).
      EXPECT_EQ(init.at(item.buffer())->name(), "fc0.weight");
      EXPECT_EQ(init.at(item.buffer())->kind(), v1::ParamInit::UNIFORM);
    }
  }
  EXPECT_EQ(master_writes, 1) << "one copy of the replicated master";
}

TEST(StorageTest, ComputeInstructionsWithBf16OperandsHaveTheirPlannedScratch) {
  const v1::Program p = MustPlan(Mlp({1}, "bf16"))[0];
  int widened = 0;
  for (const Instruction& ins : p.instructions()) {
    const int64_t bytes = WidenedBytes(WidenedOperands(p, ins));
    if (bytes == 0) continue;
    ++widened;
    ASSERT_TRUE(ins.has_scratch()) << ins.comment();
    const Buffer& scratch = p.buffers(ins.scratch());
    EXPECT_EQ(scratch.role(), Buffer::SCRATCH);
    EXPECT_EQ(BufferBytes(scratch), bytes) << ins.comment();
  }
  EXPECT_GT(widened, 10);
  const v1::Program f32 = MustPlan(Mlp({1}, "f32"))[0];
  for (const Instruction& ins : f32.instructions()) {
    EXPECT_FALSE(ins.has_scratch()) << ins.comment();
  }
}

}  // namespace
}  // namespace weft::planner
