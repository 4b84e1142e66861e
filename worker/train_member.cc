#include "worker/train_member.h"

#include <algorithm>
#include <memory>
#include <new>
#include <system_error>
#include <vector>

#include "common/cluster/path_policy.h"
#include "absl/strings/str_cat.h"
#include "common/cluster/job_plan.h"
#include "common/cluster/memory_plan.h"
#include "common/memory_limit.h"
#include "worker/job_options.h"
#include "worker/train_worker.h"

namespace bertps {

TrainMember::TrainMember(const std::string& coordinator,
                         const SecurityConfig& security)
    : security_(security),
      member_(coordinator, TRAIN, "", security,
              [this](const Assignment& a, std::atomic<bool>* cancel,
                     const std::function<void(const StepReport&)>& report,
                     const std::shared_ptr<SlotFeed>& slots) {
                return RunPart(a, cancel, report, slots);
              }) {
  member_.set_serial(
      [](const Assignment& a) { return PlanOf(a.spec()).SerialSlots(); });
}

absl::Status TrainMember::RunPart(
    const Assignment& a, std::atomic<bool>* cancel,
    const std::function<void(const StepReport&)>& report,
    const std::shared_ptr<SlotFeed>& slots) {
  // Before anything is opened: links may have changed since the submit.
  if (absl::Status st = CheckAssignmentPaths(a); !st.ok()) return st;
  std::vector<std::string> ps(a.ps_addresses().begin(), a.ps_addresses().end());
  absl::StatusOr<TrainWorkerOptions> o =
      TrainWorkerOptionsFromSpec(a.spec(), a.index(), ps);
  if (!o.ok()) return o.status();
  o->also_workers.assign(a.also_indices().begin(), a.also_indices().end());
  o->slot_feed = slots;
  for (const DataFile& f : a.data_files()) {
    o->expected_files.push_back({f.path(), f.bytes(), f.records()});
  }
  o->ps.security = security_;
  o->simulate_compute_ms = simulate_compute_ms_;
  o->prefetch_batches = prefetch_batches_;
  o->max_open_files = max_open_files_;
  o->ps.incarnation = a.incarnation();
  o->ps.job_id = a.job_id();
  o->ps.job_key = a.job_key();
  o->ps.capability = member_.capability();
  o->ps.layout = a.ps_layout();
  o->ps.cancel = cancel;
  // A shard unreachable: the coordinator hears it on the next heartbeat
  // (and probes the shards), not only once this part gives up.
  o->ps.on_unavailable = [this](const absl::Status& st) {
    member_.ReportUnreachable(std::string(st.message()));
  };
  o->cancel = cancel;
  o->on_step = [&report](const TrainStepReport& r) {
    StepReport s;
    s.set_slot(r.slot);
    s.set_step(r.step);
    s.set_version(r.version);
    s.set_first_example(r.first_example);
    s.set_examples(r.examples);
    s.set_tokens(r.tokens);
    s.set_loss(r.loss);
    s.set_learning_rate(r.learning_rate);
    s.set_pull_ms(r.pull_ms);
    s.set_pull_bytes(r.pull_bytes);
    s.set_compute_ms(r.compute_ms);
    s.set_compute_cpu_ms(r.compute_cpu_ms);
    s.set_push_ms(r.push_ms);
    s.set_wait_ms(r.wait_ms);
    s.set_input_ms(r.input_ms);
    s.set_precision(r.precision == kernels::Precision::kBf16 ? BF16 : F32);
    // Each earlier checkpoint in a repeat of the same report first: the
    // coordinator counts the step once and every checkpoint, in order.
    for (const TrainStepReport::Completed& c : r.earlier_checkpoints) {
      StepReport earlier = s;
      earlier.set_checkpoint(c.manifest);
      earlier.set_checkpoint_version(c.version);
      report(earlier);
    }
    s.set_checkpoint(r.checkpoint);
    s.set_checkpoint_version(r.checkpoint_version);
    report(s);
  };
  // An allocation or a thread start that fails (std::bad_alloc,
  // std::system_error: a tight memory or address-space limit) ends this
  // part with an error that names the need and the limit, never the
  // process (the error reaches the job through the heartbeat).
  auto out_of_memory = [&](const char* cause) {
    int64_t seq = 0, preds = 0;
    for (const DataFile& f : a.data_files()) {
      seq = std::max<int64_t>(seq, f.seq_length());
      preds = std::max<int64_t>(preds, f.masked_positions());
    }
    const MemoryNeed need =
        TrainWorkerMemoryNeed(o->config, o->task, static_cast<int>(o->plan.batch), seq, preds);
    return OutOfMemoryError(absl::StrCat("train worker ", a.index()), cause,
                            need.bytes, need.detail, DetectMemoryLimit());
  };
  try {
    absl::StatusOr<std::unique_ptr<TrainWorker>> w = TrainWorker::Create(*o);
    if (!w.ok()) return w.status();
    return (*w)->Run();
  } catch (const std::bad_alloc&) {
    return out_of_memory("std::bad_alloc");
  } catch (const std::system_error& e) {
    return out_of_memory(e.code() == std::errc::resource_unavailable_try_again
                             ? "a thread could not start: no memory for its stack"
                             : e.what());
  }
}

}  // namespace bertps
