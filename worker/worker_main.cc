// bertps_worker: the stateless worker daemon.
//
//   bertps_worker --role=train --ps 127.0.0.1:7000,127.0.0.1:7001 \
//       --worker_index 0 --num_workers 2 --data 'data/*.tfrecord' \
//       --config tiny --batch 32 --steps 1000
#include <cstdio>
#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "common/init.h"
#include "common/kernels/threads.h"
#include "common/signals.h"
#include "glog/logging.h"
#include "worker/train_member.h"
#include "worker/train_worker.h"

ABSL_FLAG(std::string, role, "train", "Worker role: train.");
ABSL_FLAG(std::string, coordinator, "",
          "Coordinator address: take work from it (the job flags below are "
          "then ignored).");
ABSL_FLAG(std::string, ps, "", "Comma-separated shard addresses, in order.");
ABSL_FLAG(int, worker_index, 0, "This worker's index.");
ABSL_FLAG(int, num_workers, 1, "Number of train workers.");
ABSL_FLAG(std::string, data, "", "Comma-separated TFRecord globs.");
ABSL_FLAG(std::string, config, "tiny", "Model preset or config.json.");
ABSL_FLAG(std::string, task, "pretrain", "pretrain or classify.");
ABSL_FLAG(int, batch, 32, "Examples per worker per step.");
ABSL_FLAG(int64_t, steps, 100, "Total steps of the job.");
ABSL_FLAG(uint64_t, seed, 12345, "Dropout seed.");
ABSL_FLAG(bool, dropout, true, "Dropout on.");
ABSL_FLAG(int, threads, 1, "Compute threads.");
ABSL_FLAG(bool, bf16_push, false, "Push bf16 gradients with error feedback.");
ABSL_FLAG(std::string, checkpoint_dir, "", "Worker 0 checkpoints here.");
ABSL_FLAG(int64_t, checkpoint_every, 0, "Steps between checkpoints.");
ABSL_FLAG(std::string, export_path, "", "Worker 0 exports the final model.");
ABSL_FLAG(int64_t, log_every, 10, "Progress line every N steps.");
ABSL_FLAG(int, rpc_timeout_s, 120, "Deadline of every RPC, seconds.");

int main(int argc, char** argv) {
  bertps::BlockShutdownSignals();
  bertps::InitProcess(argc, argv, "bertps_worker --role=train [flags]");
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "bertps_worker: %s\n", s.ToString().c_str());
    return 1;
  };
  if (absl::GetFlag(FLAGS_role) != "train") {
    return fail(absl::InvalidArgumentError(
        "--role: only 'train' exists in this build"));
  }
  bertps::kernels::SetNumThreads(absl::GetFlag(FLAGS_threads));
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (!coordinator.empty()) {
    bertps::TrainMember member(coordinator);
    std::thread waiter([&] {
      int sig = bertps::WaitForShutdownSignal();
      LOG(INFO) << "signal " << sig << ": leaving";
      member.Stop();
    });
    absl::Status st = member.Run();
    waiter.detach();
    if (!st.ok()) return fail(st);
    return 0;
  }
  bertps::TrainWorkerOptions o;
  o.ps.addresses = absl::StrSplit(absl::GetFlag(FLAGS_ps), ',', absl::SkipEmpty());
  o.ps.rpc_timeout = absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout_s));
  o.ps.compress_bf16 = absl::GetFlag(FLAGS_bf16_push);
  auto config = bertps::ResolveBertConfig(absl::GetFlag(FLAGS_config));
  if (!config.ok()) return fail(config.status());
  o.config = *config;
  const std::string task = absl::GetFlag(FLAGS_task);
  if (task != "pretrain" && task != "classify") {
    return fail(absl::InvalidArgumentError("--task must be pretrain or classify"));
  }
  o.task = task == "pretrain" ? bertps::BertTask::kPretrain
                              : bertps::BertTask::kClassify;
  o.worker = absl::GetFlag(FLAGS_worker_index);
  o.num_workers = absl::GetFlag(FLAGS_num_workers);
  o.data = absl::StrSplit(absl::GetFlag(FLAGS_data), ',', absl::SkipEmpty());
  o.batch = absl::GetFlag(FLAGS_batch);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.dropout = absl::GetFlag(FLAGS_dropout);
  o.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  o.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  o.export_path = absl::GetFlag(FLAGS_export_path);
  o.log_every = absl::GetFlag(FLAGS_log_every);
  o.log = &std::cout;
  auto worker = bertps::TrainWorker::Create(o);
  if (!worker.ok()) return fail(worker.status());
  absl::Status st = (*worker)->Run();
  if (!st.ok()) return fail(st);
  return 0;
}
