// The float64 reference is itself checked: its gradients (read back from one SGD step with
// lr = 1) equal central finite differences of its loss.
#include "tests/mlp_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace weft::testing {
namespace {

std::vector<RefLayer> Layers() {
  return {{"fc0", "linear", 3, 5, true}, {"a0", "gelu"}, {"fc1", "linear", 5, 4, false},
          {"a1", "relu"}, {"fc2", "linear", 4, 2, true}};
}

std::map<std::string, std::vector<double>> Params() {
  return {{"fc0.weight", TestValues(15, 11, 0.8)}, {"fc0.bias", TestValues(5, 12, 0.3)},
          {"fc1.weight", TestValues(20, 13, 0.8)}, {"fc2.weight", TestValues(8, 14, 0.8)},
          {"fc2.bias", TestValues(2, 15, 0.3)}};
}

// One SGD step with lr = 1 moves each parameter by its gradient: compare with central finite
// differences of the loss.
void ExpectGradientsMatchFiniteDifferences(const std::vector<RefLayer>& layers,
                                           const std::map<std::string, std::vector<double>>& params,
                                           int in, int out) {
  const int samples = 6, batch = 6;
  std::vector<double> x = TestValues(samples * in, 21, 1.0), y = TestValues(samples * out, 22, 1.0);
  RefOptimizer sgd;
  sgd.type = "sgd";
  sgd.lr = 1.0;

  RefMlp mlp(layers);
  mlp.params = params;
  mlp.Train(x, y, samples, batch, 1, sgd);

  for (const auto& [name, p0] : params) {
    for (size_t i = 0; i < p0.size(); ++i) {
      const double analytic = p0[i] - mlp.params[name][i];
      const double h = 1e-6;
      RefMlp plus(layers), minus(layers);
      plus.params = minus.params = params;
      plus.params[name][i] += h;
      minus.params[name][i] -= h;
      const double lp = plus.Train(x, y, samples, batch, 1, sgd)[0];
      const double lm = minus.Train(x, y, samples, batch, 1, sgd)[0];
      EXPECT_NEAR(analytic, (lp - lm) / (2 * h), 1e-6) << name << "[" << i << "]";
    }
  }
}

TEST(MlpReferenceTest, SgdStepMatchesFiniteDifferences) {
  ExpectGradientsMatchFiniteDifferences(Layers(), Params(), 3, 2);
}

TEST(MlpReferenceTest, ResidualGradientsSumOverTheReadersOfATensor) {
  // a0 is read by fc1 and by res (a residual over fc1 -> a1 -> fc2); res also reads the batch.
  const std::vector<RefLayer> layers = {{"fc0", "linear", 3, 3, true},
                                        {"a0", "gelu"},
                                        {"fc1", "linear", 3, 3, false},
                                        {"a1", "relu"},
                                        {"fc2", "linear", 3, 3, true},
                                        {"res", "add", 0, 0, false, {"a0", "fc2", "input"}},
                                        {"fc3", "linear", 3, 2, true}};
  const std::map<std::string, std::vector<double>> params = {
      {"fc0.weight", TestValues(9, 41, 0.8)}, {"fc0.bias", TestValues(3, 42, 0.3)},
      {"fc1.weight", TestValues(9, 43, 0.8)}, {"fc2.weight", TestValues(9, 44, 0.8)},
      {"fc2.bias", TestValues(3, 45, 0.3)},   {"fc3.weight", TestValues(6, 46, 0.8)},
      {"fc3.bias", TestValues(2, 47, 0.3)}};
  ExpectGradientsMatchFiniteDifferences(layers, params, 3, 2);
}

TEST(MlpReferenceTest, AdamWReducesTheLoss) {
  std::vector<double> x = TestValues(12 * 3, 31, 1.0), y = TestValues(12 * 2, 32, 0.5);
  RefMlp mlp(Layers());
  mlp.params = Params();
  RefOptimizer adamw;
  adamw.lr = 0.01;
  adamw.weight_decay = 0.01;
  std::vector<double> losses = mlp.Train(x, y, 12, 4, 30, adamw);
  EXPECT_LT(losses.back(), 0.7 * losses.front());
}

}  // namespace
}  // namespace weft::testing

namespace weft::testing {
namespace {

TEST(MlpReferenceTest, RoundToBf16KeepsEightSignificantBitsNearestEven) {
  EXPECT_EQ(RoundToBf16(1.0), 1.0);
  EXPECT_EQ(RoundToBf16(-2.5), -2.5);
  // bf16 spacing at 1 is 2^-7: 1 + 2^-8 is a tie and goes to the even 1; 1 + 3*2^-8 rounds up to
  // 1 + 2^-6 (even); just above the tie rounds up.
  EXPECT_EQ(RoundToBf16(1.0 + std::ldexp(1.0, -8)), 1.0);
  EXPECT_EQ(RoundToBf16(1.0 + 3 * std::ldexp(1.0, -8)), 1.0 + std::ldexp(1.0, -6));
  EXPECT_EQ(RoundToBf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -20)),
            1.0 + std::ldexp(1.0, -7));
  EXPECT_EQ(RoundToBf16(0.1), 0.10009765625);
  // A bf16 run differs from the float64 one: the reference really rounds.
  std::vector<double> x = TestValues(24, 31, 1.0), y = TestValues(16, 32, 1.0);
  RefMlp exact({{"fc0", "linear", 3, 2, false}}), bf16({{"fc0", "linear", 3, 2, false}});
  exact.params["fc0.weight"] = bf16.params["fc0.weight"] = TestValues(6, 33, 0.8);
  bf16.bf16_matmul = true;
  const double a = exact.Train(x, y, 8, 8, 1, RefOptimizer())[0];
  const double b = bf16.Train(x, y, 8, 8, 1, RefOptimizer())[0];
  EXPECT_NE(a, b);
  EXPECT_NEAR(a, b, 1e-2 * std::fabs(a));
}

}  // namespace
}  // namespace weft::testing
