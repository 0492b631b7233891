// The memory the plan predicts is the memory the workers use: for a plain data-parallel job, a
// tensor-parallel one, a pipelined one, a residual dp x mp one, a ZeRO level 2 one, a ZeRO level 1
// one with bf16 storage, a gpt2 dp x mp one, the same under ZeRO-3 with recompute, and a Llama
// pp x dp one with bf16 matmuls (the examples), the largest memory.peak_bytes over the ranks of
// `weftctl plan --json` and the largest "peak_bytes" of `weftctl local --json`'s step events (each
// the most any rank's allocator held during that step) are the same number of bytes: the arena
// and the CPU kernels' own scratch (attention, the norms' and the embedding's gradients, the
// rotary embedding, bf16 operand copies). Both figures are printed; bench/RESULTS.md records them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "nlohmann/json.hpp"
#include "tests/cluster_fixture.h"
#include "tests/process.h"

namespace weft::testing {
namespace {

struct Example {
  std::string name;
  std::string spec;
  // Reads examples/readme.bin, this README tokenized (`weftctl data tokenize --bytes`): made in a
  // scratch folder the spec is copied into.
  bool readme_tokens = false;
  // Top-level keys appended to that copy (e.g. "precision: bf16").
  std::string append;
};

void PrintTo(const Example& e, std::ostream* os) { *os << e.name; }

class MemoryTest : public ::testing::TestWithParam<Example> {};

int64_t PlannedPeak(const std::string& spec) {
  int64_t peak = 0;
  const nlohmann::json plan = PlanJson(spec);
  for (const nlohmann::json& rank : plan["ranks"]) {
    peak = std::max(peak, rank["memory"]["peak_bytes"].get<int64_t>());
  }
  return peak;
}

TEST_P(MemoryTest, MeasuredPeakIsThePlannedOne) {
  std::string spec = BinaryPath(GetParam().spec);
  if (GetParam().readme_tokens) {
    const std::string dir = MakeTempDir("memory-" + GetParam().name);
    ASSERT_TRUE(WriteReadmeTokens(dir));
    const std::string copy = dir + "/" + std::filesystem::path(spec).filename().string();
    std::filesystem::copy_file(spec, copy);
    if (!GetParam().append.empty()) {
      std::ofstream(copy, std::ios::app) << "\n" << GetParam().append << "\n";
    }
    spec = copy;
  }
  const int64_t planned = PlannedPeak(spec);
  const int64_t measured = LocalPeakBytes(spec);
  std::printf("[memory] %-16s planned %lld B, measured %lld B (%+.2f%%)\n",
              GetParam().name.c_str(), static_cast<long long>(planned),
              static_cast<long long>(measured),
              planned > 0 ? 100.0 * (measured - planned) / planned : 0.0);
  ASSERT_GT(planned, 0);
  EXPECT_GT(measured, 0);
  EXPECT_EQ(measured, planned) << "planned " << planned << " B, the workers' allocators held "
                               << measured << " B";
}

INSTANTIATE_TEST_SUITE_P(Examples, MemoryTest,
                         ::testing::Values(Example{"data_parallel", "examples/quickstart.yaml"},
                                           Example{"tensor_parallel", "examples/tensor_parallel.yaml"},
                                           Example{"pipeline", "examples/pipeline.yaml"},
                                           Example{"residual", "examples/residual.yaml"},
                                           Example{"zero", "examples/zero.yaml"},
                                           Example{"zero_bf16", "examples/zero_bf16.yaml"},
                                           Example{"gpt2", "examples/gpt2_tiny.yaml",
                                                   /*readme_tokens=*/true},
                                           Example{"gpt2_zero3", "examples/gpt2_zero3.yaml",
                                                   /*readme_tokens=*/true},
                                           Example{"llama_bf16", "examples/llama_tiny.yaml",
                                                   /*readme_tokens=*/true, "precision: bf16"}),
                         [](const ::testing::TestParamInfo<Example>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace weft::testing
