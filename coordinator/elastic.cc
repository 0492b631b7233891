#include "coordinator/elastic.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/jobspec/elastic.h"

namespace weft::coordinator {

int ElasticSize(const v1::Job& job) {
  if (job.elastic_size() > 0) return job.elastic_size();
  return ElasticSubmittedSize(job.spec());
}

std::optional<int> ShrinkTo(const v1::Job& job, int64_t available, int64_t waiting_since_ms,
                            int64_t now_ms) {
  const int current = ElasticSize(job);
  if (current == 0) return std::nullopt;
  if (now_ms - waiting_since_ms < int64_t{job.spec().train().elastic().wait_s()} * 1000) {
    return std::nullopt;
  }
  const int64_t per_unit = ElasticRanksPerUnit(job.spec());
  if (int64_t{current} * per_unit <= available) return std::nullopt;
  const std::vector<int> sizes = ElasticSizes(job.spec());
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    if (*it < current && int64_t{*it} * per_unit <= available) return *it;
  }
  return std::nullopt;
}

std::optional<int> GrowTo(const v1::Job& job, int64_t idle) {
  const int current = ElasticSize(job);
  if (current == 0) return std::nullopt;
  const int64_t per_unit = ElasticRanksPerUnit(job.spec());
  const int64_t workers = int64_t{current} * per_unit + idle;
  const std::vector<int> sizes = ElasticSizes(job.spec());
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    if (*it > current && int64_t{*it} * per_unit <= workers) return *it;
  }
  return std::nullopt;
}

v1::JobEvent ResizeEvent(const v1::Job& job, int to, int64_t step, int64_t now_ms) {
  const v1::JobSpec& spec = job.spec();
  const int from = ElasticSize(job);
  const int32_t micro_batches = ElasticMicroBatches(spec, to);
  v1::JobEvent event;
  event.set_job_id(job.id());
  event.set_time_ms(now_ms);
  v1::Resize* r = event.mutable_resize();
  r->set_dim(spec.train().elastic().dim());
  r->set_from_size(from);
  r->set_to_size(to);
  r->set_micro_batches(micro_batches);
  r->set_world_size(ElasticRanksPerUnit(spec) * to);
  r->set_step(step);
  r->set_time_ms(now_ms);
  const bool grow = to > from;
  event.set_message(absl::StrCat(
      grow ? "growing " : "shrinking ", r->dim(), " ", from, " -> ", to, " (", r->world_size(),
      " ranks, ", micro_batches, " micro-batch", micro_batches == 1 ? "" : "es",
      ", the same global batch): ",
      grow ? absl::StrCat("idle workers registered; resuming from the checkpoint of step ", step)
           : absl::StrCat("no replacement within train.elastic.wait_s (",
                          spec.train().elastic().wait_s(), " s); resuming from the newest "
                          "checkpoint")));
  return event;
}

void ApplyResize(const v1::JobEvent& resize, v1::Job* job) {
  job->set_elastic_size(resize.resize().to_size());
  job->set_message(resize.message());
  *job->add_resizes() = resize.resize();
}

}  // namespace weft::coordinator
