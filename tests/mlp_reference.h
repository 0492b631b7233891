// An independent float64 reference of the math Weft trains, written for tests: an MLP of linear
// / relu / gelu layers and `add` layers summing earlier layers' outputs (residual connections),
// mean-squared-error loss, SGD or decoupled AdamW, and the data order of a Weft job (step s uses
// samples (s-1)*B .. s*B-1, wrapping). Deliberately plain loops: it shares no code with Weft's
// kernels, planner or executor.
//
// E.g.
//   RefMlp mlp({{"fc0", "linear", 8, 16, true}, {"act0", "gelu"}, ...});
//   mlp.params["fc0.weight"] = ...;  // [in, out], row-major
//   std::vector<double> losses = mlp.Train(inputs, labels, num_samples, batch, steps, opt);
#ifndef WEFT_TESTS_MLP_REFERENCE_H_
#define WEFT_TESTS_MLP_REFERENCE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace weft::testing {

struct RefLayer {
  std::string name;
  std::string type;  // linear | relu | gelu | add
  int in = 0;
  int out = 0;
  bool bias = false;
  // The layers read, by name ("input": the batch); empty: the previous layer (the batch for the
  // first). add sums them.
  std::vector<std::string> inputs = {};
};

struct RefOptimizer {
  std::string type = "adamw";  // sgd | adamw
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// One update of p by gradient g at global step `step` (from 1), PyTorch semantics: SGD with
// weight decay added to the gradient, or AdamW (any other type), which decays before the moment
// update and bias-corrects with the step. m and v are AdamW's moments, zero-sized until first use.
void ApplyRefOptimizer(const RefOptimizer& opt, int64_t step, const std::vector<double>& g,
                       std::vector<double>* p, std::vector<double>* m, std::vector<double>* v);

class RefMlp {
 public:
  explicit RefMlp(std::vector<RefLayer> layers) : layers_(std::move(layers)) {}

  // Parameters by global name ("fc0.weight" [in,out], "fc0.bias" [out]), row-major.
  std::map<std::string, std::vector<double>> params;
  // `precision: bf16`: every matmul operand (forward and both backward products) is rounded to
  // float32 and then to bfloat16 (nearest even) before the products; everything else stays
  // float64.
  bool bf16_matmul = false;
  // `storage: bf16`: the values Weft stores in bfloat16 are rounded (float32, then bfloat16) where
  // it stores them: the parameters as the layers read them (params keeps the float64 master
  // weights the optimizer updates), every layer's output (a linear layer with a bias: its product
  // before the bias too), the loss's gradient, and every gradient (each term and each sum of
  // terms); the batch, the loss and the updates are not.
  bool bf16_storage = false;

  // Trains for `steps` steps and returns the loss of each step, computed before its update.
  // inputs: [num_samples, in of the first layer]; labels: [num_samples, out of the last].
  std::vector<double> Train(const std::vector<double>& inputs, const std::vector<double>& labels,
                            int num_samples, int batch, int steps, const RefOptimizer& opt);

 private:
  std::vector<RefLayer> layers_;
  std::map<std::string, std::vector<double>> m_, v_;
};

// Test-side writers, independent of common/npy and common/safetensors.
void WriteNpyF32(const std::string& path, const std::vector<int64_t>& shape,
                 const std::vector<double>& values);
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<double> values;
};
void WriteSafetensorsF32(const std::string& path, const std::vector<NamedTensor>& tensors);

// v rounded to float32, then to bfloat16 (round to nearest even), as a double.
double RoundToBf16(double v);

// Deterministic values in [-scale, scale), never exactly zero, from a small LCG.
std::vector<double> TestValues(size_t n, uint64_t seed, double scale);

}  // namespace weft::testing

#endif  // WEFT_TESTS_MLP_REFERENCE_H_
