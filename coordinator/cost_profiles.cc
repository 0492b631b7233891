#include "coordinator/cost_profiles.h"

#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/cost_profile_json.h"
#include "common/file_io.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace weft::coordinator {
namespace {

constexpr int kMaxEntries = 4096;

absl::Status CheckFit(const v1::LinearFit& fit, const std::string& what) {
  for (double v : {fit.alpha_s(), fit.per_unit_s(), fit.tail_ratio()}) {
    if (!std::isfinite(v) || v < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cost profile: ", what, ": fits must be finite and not negative, got ", v));
    }
  }
  return absl::OkStatus();
}

// kind@host.json, the host's characters that are not [A-Za-z0-9.-] as '_'.
std::string FileName(const v1::CostProfile& p) {
  std::string host = p.host().empty() ? "any" : p.host();
  for (char& c : host) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
  }
  return absl::StrCat(p.kind(), "@", host, ".json");
}

}  // namespace

absl::Status ValidateCostProfile(const v1::CostProfile& p) {
  if (p.kind() != "cpu" && p.kind() != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("cost profile: kind must be cpu or cuda, got \"", p.kind(), "\""));
  }
  for (char c : p.host()) {
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError("cost profile: host must be printable ASCII");
    }
  }
  if (p.host().size() > 255) return absl::InvalidArgumentError("cost profile: host too long");
  if (p.kernels_size() + p.links_size() > kMaxEntries) {
    return absl::InvalidArgumentError(
        absl::StrCat("cost profile: more than ", kMaxEntries, " kernels and links"));
  }
  bool matmul = false, memory = false;
  for (const v1::KernelCost& k : p.kernels()) {
    RETURN_IF_ERROR(CheckFit(k.fit(), v1::KernelCost::Kind_Name(k.kind())));
    matmul |= k.kind() == v1::KernelCost::MATMUL;
    memory |= k.kind() == v1::KernelCost::MEMORY;
  }
  if (!matmul || !memory) {
    return absl::InvalidArgumentError(
        "cost profile: needs MATMUL and MEMORY kernel fits (weft-calibrate measures both)");
  }
  for (const v1::LinkCost& l : p.links()) {
    const std::string what = absl::StrCat(v1::Instruction::Op_Name(l.op()), " over ",
                                          l.group_size(), " ", v1::LinkCost::Scope_Name(l.scope()));
    if (l.group_size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat("cost profile: ", what, ": group_size < 2"));
    }
    RETURN_IF_ERROR(CheckFit(l.fit(), what));
  }
  for (double v : {p.overlap_slowdown(), p.peak_flops(), p.instruction_overhead_s(),
                   static_cast<double>(p.memory_bytes())}) {
    if (!std::isfinite(v) || v < 0) {
      return absl::InvalidArgumentError(
          "cost profile: overlap_slowdown, peak_flops, instruction_overhead_s and memory_bytes "
          "must be finite and not negative");
    }
  }
  return absl::OkStatus();
}

absl::Status CostProfiles::Load() {
  if (dir_.empty()) return absl::OkStatus();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir_, ec)) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    if (entry.path().extension() != ".json") continue;
    absl::StatusOr<v1::CostProfile> p = ReadCostProfile(entry.path().string());
    if (p.ok()) {
      absl::Status valid = ValidateCostProfile(*p);
      if (valid.ok()) {
        by_kind_host_[{p->kind(), p->host()}] = *std::move(p);
        continue;
      }
      p = valid;
    }
    spdlog::warn("cost profile {} skipped: {}", entry.path().string(),
                 std::string(p.status().message()));
  }
  return absl::OkStatus();
}

absl::Status CostProfiles::Put(const v1::CostProfile& profile) {
  RETURN_IF_ERROR(ValidateCostProfile(profile));
  // One writer at a time, the file written off mu_: a submit or a worker listing never waits
  // for the disk.
  absl::MutexLock writing(&write_mu_);
  if (!dir_.empty()) {
    RETURN_IF_ERROR(MakeDirs(dir_));
    RETURN_IF_ERROR(WriteCostProfile(profile, dir_ + "/" + FileName(profile)));
  }
  absl::MutexLock lock(&mu_);
  by_kind_host_[{profile.kind(), profile.host()}] = profile;
  return absl::OkStatus();
}

std::optional<v1::CostProfile> CostProfiles::NewestOfKind(const std::string& kind) const {
  absl::MutexLock lock(&mu_);
  const v1::CostProfile* newest = nullptr;
  for (const auto& [key, p] : by_kind_host_) {
    if (key.first == kind &&
        (newest == nullptr || p.measured_unix_ms() > newest->measured_unix_ms())) {
      newest = &p;
    }
  }
  if (newest == nullptr) return std::nullopt;
  return *newest;
}

std::vector<v1::CostProfile> CostProfiles::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::CostProfile> out;
  for (const auto& [key, p] : by_kind_host_) out.push_back(p);
  return out;
}

}  // namespace weft::coordinator
