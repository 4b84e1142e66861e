// bert_local: single-process BERT on this machine.
//
//   bert_local grad  --config C --weights W.safetensors --batch B.safetensors
//                    --out G.safetensors [--task pretrain|classify]
//   bert_local train --config C --data 'glob*.tfrecord' --steps N --batch B
//                    [--init W.safetensors] --out W2.safetensors [optimizer flags]
//   bert_local eval  --config C --weights W.safetensors --data 'glob'
//   bert_local synthetic-data --config C --out DIR --steps N
//                    (2 files of N random examples, seq 128, 20 predictions)
//   bert_local tokenize --vocab V [--do_lower_case=true|false] < in > out
//                    (per input line, one line of space-separated token ids)
//
// --config is a preset name (tiny, mini, small, medium, base, large) or a
// Hugging Face config.json.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "common/init.h"
#include "common/kernels/threads.h"
#include "common/model/bert_config.h"
#include "common/optim/optimizer_config.h"
#include "common/text/tokenize_lines.h"
#include "common/text/tokenizer.h"
#include "tools/bert_local.h"

ABSL_FLAG(std::string, config, "", "Preset name or config.json path.");
ABSL_FLAG(std::string, task, "pretrain", "pretrain or classify.");
ABSL_FLAG(std::string, weights, "", "Weights (safetensors) for grad/eval.");
ABSL_FLAG(std::string, batch, "",
          "grad: batch file (safetensors); train/eval: examples per batch.");
ABSL_FLAG(std::string, out, "", "Output safetensors file.");
ABSL_FLAG(std::string, data, "", "Comma-separated TFRecord globs.");
ABSL_FLAG(int64_t, steps, 100, "Training steps.");
ABSL_FLAG(std::string, init, "", "Initial weights for train (else random).");
ABSL_FLAG(uint64_t, seed, 12345, "Seed of initialisation and dropout.");
ABSL_FLAG(bool, dropout, true, "Dropout during training.");
ABSL_FLAG(int, threads, 1, "Compute threads.");
ABSL_FLAG(std::string, optimizer, "adam_weight_decay",
          "adam_weight_decay, adamw, lamb or sgd.");
ABSL_FLAG(double, lr, 1e-4, "Peak learning rate.");
ABSL_FLAG(double, weight_decay, 0.01, "Weight decay.");
ABSL_FLAG(int64_t, warmup_steps, 0, "Linear warmup steps.");
ABSL_FLAG(double, clip_norm, 1.0, "Global-norm clipping (<= 0: off).");
ABSL_FLAG(int64_t, log_every, 10, "Print progress every N steps.");
ABSL_FLAG(std::string, vocab, "", "tokenize: BERT vocab.txt.");
ABSL_FLAG(bool, do_lower_case, true,
          "tokenize: lowercase and strip accents (uncased models).");

namespace {

constexpr char kUsage[] =
    "bert_local grad|train|eval|synthetic-data|tokenize [flags]; see "
    "tools/bert_local_main.cc";

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "bert_local: %s\n", std::string(s.ToString()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args = bertps::InitProcess(argc, argv, kUsage);
  if (args.size() != 2) {
    std::fprintf(stderr, "usage: %s\n", kUsage);
    return 2;
  }
  bertps::kernels::SetNumThreads(absl::GetFlag(FLAGS_threads));
  const std::string& cmd = args[1];
  if (cmd == "tokenize") {
    if (absl::GetFlag(FLAGS_vocab).empty()) {
      return Fail(absl::InvalidArgumentError("tokenize needs --vocab"));
    }
    auto tok = bertps::text::FullTokenizer::Create(
        absl::GetFlag(FLAGS_vocab), absl::GetFlag(FLAGS_do_lower_case));
    if (!tok.ok()) return Fail(tok.status());
    absl::Status s = bertps::text::TokenizeLines(**tok, std::cin, std::cout);
    return s.ok() ? 0 : Fail(s);
  }

  bertps::LocalOptions o;
  auto config = bertps::ResolveBertConfig(absl::GetFlag(FLAGS_config));
  if (!config.ok()) return Fail(config.status());
  o.config = *config;
  auto task = bertps::ParseBertTask(absl::GetFlag(FLAGS_task));
  if (!task.ok()) return Fail(task.status());
  o.task = *task;
  o.weights = absl::GetFlag(FLAGS_weights);
  o.out = absl::GetFlag(FLAGS_out);
  o.init = absl::GetFlag(FLAGS_init);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.dropout = absl::GetFlag(FLAGS_dropout);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.log_every = absl::GetFlag(FLAGS_log_every);
  for (absl::string_view g :
       absl::StrSplit(absl::GetFlag(FLAGS_data), ',', absl::SkipEmpty())) {
    o.data.emplace_back(g);
  }
  auto kind = bertps::optim::ParseOptimizerKind(absl::GetFlag(FLAGS_optimizer));
  if (!kind.ok()) return Fail(kind.status());
  o.optimizer.kind = *kind;
  o.optimizer.learning_rate = absl::GetFlag(FLAGS_lr);
  o.optimizer.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.optimizer.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  o.optimizer.total_steps = o.steps;
  o.optimizer.clip_norm = absl::GetFlag(FLAGS_clip_norm);

  absl::Status status;
  if (cmd == "grad") {
    o.batch_file = absl::GetFlag(FLAGS_batch);
    status = bertps::RunGrad(o, std::cout);
  } else if (cmd == "synthetic-data") {
    status = bertps::RunSyntheticData(o.out, 2, static_cast<int>(o.steps), 128,
                                      20, static_cast<int>(o.config.vocab_size),
                                      o.seed);
  } else if (cmd == "train" || cmd == "eval") {
    const std::string b = absl::GetFlag(FLAGS_batch);
    if (!b.empty() && !absl::SimpleAtoi(b, &o.batch_size)) {
      return Fail(absl::InvalidArgumentError("--batch must be an integer"));
    }
    status = cmd == "train" ? bertps::RunTrain(o, std::cout)
                            : bertps::RunEval(o, std::cout);
  } else {
    std::fprintf(stderr, "unknown command '%s'; usage: %s\n", cmd.c_str(),
                 kUsage);
    return 2;
  }
  if (!status.ok()) return Fail(status);
  return 0;
}
