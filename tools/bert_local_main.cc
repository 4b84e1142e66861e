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
//   bert_local create-pretraining-data --vocab V --input 'glob,glob'
//                    --output PREFIX [--num_output_files 1]
//                    [--max_seq_length 128] [--max_predictions_per_seq 20]
//                    [--dupe_factor 10] [--masked_lm_prob 0.15]
//                    [--short_seq_prob 0.1] [--do_lower_case=true]
//                    [--do_whole_word_mask=false] [--seed 12345]
//                    (create_pretraining_data.py: text files, one sentence a
//                    line, blank line between documents -> TFRecord files
//                    PREFIX-0000i-of-0000N.tfrecord; prints one JSON line of
//                    statistics)
//   bert_local create-classify-data --input x.jsonl --vocab V --labels a,b
//                    --output_dir D [--max_seq_length 128] [--cased]
//                    [--dev_fraction 0.1] [--test_fraction 0.1] [--seed 12345]
//                    (JSON lines {"id","label","text"} -> D/train.tfrecord,
//                    D/dev.tfrecord, D/test.tfrecord, D/labels.txt; see
//                    common/text/classify_data.h; prints one JSON line)
//   bert_local clean --format text|paragraphs|jsonl|email|fortunes
//                    --input PATH --output OUT[.jsonl] [--report R.json]
//                    [--strip_email] [--strip_html] [--strip_dict_markup]
//                    [--normalization NFC|NFKC|none] [--dedup_exact]
//                    [--dedup_near --near_threshold 0.8] [--min_chars N]
//                    [--max_chars N] [--min_words N] [--remove_stopwords]
//                    (common/text/clean.h; OUT ending in .jsonl gets JSON
//                    lines, else one sentence a line, blank line between
//                    documents; prints the report as one JSON line)
//   bert_local extract-labelled --source spamassassin|debian-sections|fortunes
//                    --input PATH --output OUT.jsonl [clean flags]
//                    [--sections games,sound,...] (common/text/labelled.h)
//   bert_local augment [--wordnet /usr/share/wordnet] [--num_aug 4]
//                    [--alpha_sr 0.1] [--alpha_ri 0.1] [--alpha_rs 0.1]
//                    [--p_rd 0.1] [--seed 12345] < in.txt > out.txt
//                    (EDA, common/text/augment.h: each input line, then its
//                    num_aug augmentations one a line, keyed by line number;
//                    blank lines copied alone)
//   bert_local build-vocab --input 'glob,glob' --output vocab.txt
//                    [--vocab_size 30522] [--min_frequency 2] [--cased]
//                    [--limit_alphabet 1000] [--num_unused 0]
//                    (WordPiece training, common/text/vocab_builder.h;
//                    prints one JSON line of statistics)
//
// --config is a preset name (tiny, mini, small, medium, base, large) or a
// Hugging Face config.json.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/flag_checks.h"
#include "common/init.h"
#include "common/io/bert_example.h"
#include "common/kernels/matmul.h"
#include "common/kernels/threads.h"
#include "common/model/bert_config.h"
#include "common/optim/optimizer_config.h"
#include "common/text/classify_data.h"
#include "common/io/file_util.h"
#include "common/text/clean.h"
#include "common/text/documents.h"
#include "common/text/labelled.h"
#include "common/text/pretraining_data.h"
#include "common/text/tokenize_lines.h"
#include "common/text/tokenizer.h"
#include "common/text/augment.h"
#include "common/text/vocab_builder.h"
#include "common/text/wordnet.h"
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
ABSL_FLAG(std::string, precision, "fp32",
          "grad, train, eval: fp32, or bf16 (products in bfloat16 with fp32 "
          "accumulation; fp32 with a warning where the CPU has no native "
          "bf16).");
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
ABSL_FLAG(std::string, input, "",
          "create-pretraining-data: comma-separated text file globs.");
ABSL_FLAG(std::string, output, "",
          "create-pretraining-data: output prefix of the TFRecord files.");
ABSL_FLAG(int, num_output_files, 1, "create-pretraining-data: output files.");
ABSL_FLAG(int, max_seq_length, 128, "create-pretraining-data: S.");
ABSL_FLAG(int, max_predictions_per_seq, 20, "create-pretraining-data: P.");
ABSL_FLAG(int, dupe_factor, 10,
          "create-pretraining-data: passes over the input (masks differ).");
ABSL_FLAG(double, masked_lm_prob, 0.15, "create-pretraining-data.");
ABSL_FLAG(double, short_seq_prob, 0.1, "create-pretraining-data.");
ABSL_FLAG(bool, do_whole_word_mask, false,
          "create-pretraining-data: mask all pieces of a word together.");
ABSL_FLAG(std::string, labels, "",
          "create-classify-data: comma-separated labels (label i = id i).");
ABSL_FLAG(std::string, output_dir, "", "create-classify-data: output dir.");
ABSL_FLAG(bool, cased, false,
          "create-classify-data, build-vocab: keep case and accents (cased "
          "vocab).");
ABSL_FLAG(double, dev_fraction, 0.1, "create-classify-data.");
ABSL_FLAG(double, test_fraction, 0.1, "create-classify-data.");

ABSL_FLAG(std::string, format, "text",
          "clean: input format (text, paragraphs, jsonl, email, fortunes).");
ABSL_FLAG(std::string, report, "", "clean, extract-labelled: report JSON file.");
ABSL_FLAG(std::string, source, "",
          "extract-labelled: spamassassin, debian-sections or fortunes.");
ABSL_FLAG(std::string, sections, "",
          "extract-labelled: Debian sections to keep (default: games, sound, "
          "graphics, science, mail, editors, net, text, utils).");
ABSL_FLAG(std::string, normalization, "NFC", "clean: NFC, NFKC or none.");
ABSL_FLAG(bool, strip_control, true, "clean: remove control characters.");
ABSL_FLAG(bool, strip_email, false, "clean: documents are raw e-mails.");
ABSL_FLAG(bool, strip_html, false, "clean: strip HTML markup.");
ABSL_FLAG(bool, strip_dict_markup, false, "clean: strip GCIDE markup.");
ABSL_FLAG(bool, normalize_whitespace, true, "clean: normalise whitespace.");
ABSL_FLAG(bool, dedup_exact, false, "clean: drop exact duplicates.");
ABSL_FLAG(bool, dedup_near, false, "clean: drop MinHash near duplicates.");
ABSL_FLAG(double, near_threshold, 0.8, "clean: Jaccard threshold.");
ABSL_FLAG(int, min_chars, 0, "clean: minimum characters (0: none).");
ABSL_FLAG(int, max_chars, 0, "clean: maximum characters (0: none).");
ABSL_FLAG(int, min_words, 0, "clean: minimum words (0: none).");
ABSL_FLAG(bool, remove_stopwords, false, "clean: remove English stop words.");
ABSL_FLAG(std::string, wordnet, "/usr/share/wordnet",
          "augment: WordNet database directory (package wordnet-base).");
ABSL_FLAG(int, num_aug, 4, "augment: augmented sentences per line.");
ABSL_FLAG(double, alpha_sr, 0.1, "augment: synonym replacement rate.");
ABSL_FLAG(double, alpha_ri, 0.1, "augment: random insertion rate.");
ABSL_FLAG(double, alpha_rs, 0.1, "augment: random swap rate.");
ABSL_FLAG(double, p_rd, 0.1, "augment: random deletion probability.");
ABSL_FLAG(int, vocab_size, 30522, "build-vocab: entries wanted.");
ABSL_FLAG(int, min_frequency, 2, "build-vocab: smallest pair count merged.");
ABSL_FLAG(int, limit_alphabet, 1000, "build-vocab: most characters kept.");
ABSL_FLAG(int, num_unused, 0, "build-vocab: [unusedN] entries.");

namespace {

constexpr char kUsage[] =
    "bert_local grad|train|eval|synthetic-data|tokenize|"
    "create-pretraining-data|create-classify-data|clean|extract-labelled|"
    "augment|build-vocab "
    "[flags]; see "
    "tools/bert_local_main.cc";

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "bert_local: %s\n", std::string(s.ToString()).c_str());
  return 1;
}

// create-pretraining-data: flags -> options, one JSON line of statistics.
int CreatePretrainingData() {
  namespace text = bertps::text;
  if (absl::GetFlag(FLAGS_vocab).empty() ||
      absl::GetFlag(FLAGS_input).empty() ||
      absl::GetFlag(FLAGS_output).empty()) {
    return Fail(absl::InvalidArgumentError(
        "create-pretraining-data needs --vocab, --input and --output"));
  }
  const absl::Time start = absl::Now();
  auto tok = text::FullTokenizer::Create(absl::GetFlag(FLAGS_vocab),
                                         absl::GetFlag(FLAGS_do_lower_case));
  if (!tok.ok()) return Fail(tok.status());
  std::vector<std::string> patterns =
      absl::StrSplit(absl::GetFlag(FLAGS_input), ',', absl::SkipEmpty());
  auto files = bertps::io::MatchShardFiles(patterns);
  if (!files.ok()) return Fail(files.status());
  text::PretrainingDataOptions o;
  o.max_seq_length = absl::GetFlag(FLAGS_max_seq_length);
  o.max_predictions_per_seq = absl::GetFlag(FLAGS_max_predictions_per_seq);
  o.dupe_factor = absl::GetFlag(FLAGS_dupe_factor);
  o.masked_lm_prob = absl::GetFlag(FLAGS_masked_lm_prob);
  o.short_seq_prob = absl::GetFlag(FLAGS_short_seq_prob);
  o.random_seed = absl::GetFlag(FLAGS_seed);
  o.do_whole_word_mask = absl::GetFlag(FLAGS_do_whole_word_mask);
  text::PretrainingDataStats stats;
  absl::Status s = text::CreatePretrainingData(
      **tok, *files, o, absl::GetFlag(FLAGS_output),
      absl::GetFlag(FLAGS_num_output_files), &stats);
  if (!s.ok()) return Fail(s);
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  std::string json = stats.ToJson();
  json.pop_back();  // '}'
  std::printf("%s,\"seconds\":%.3f,\"instances_per_second\":%.1f}\n",
              json.c_str(), secs, secs > 0 ? stats.instances / secs : 0.0);
  return 0;
}

// create-classify-data: JSON lines -> split TFRecord files, one JSON line.
int CreateClassifyData() {
  namespace text = bertps::text;
  if (absl::GetFlag(FLAGS_vocab).empty() ||
      absl::GetFlag(FLAGS_input).empty() ||
      absl::GetFlag(FLAGS_labels).empty() ||
      absl::GetFlag(FLAGS_output_dir).empty()) {
    return Fail(absl::InvalidArgumentError(
        "create-classify-data needs --input, --vocab, --labels and "
        "--output_dir"));
  }
  const absl::Time start = absl::Now();
  auto tok = text::FullTokenizer::Create(absl::GetFlag(FLAGS_vocab),
                                         !absl::GetFlag(FLAGS_cased));
  if (!tok.ok()) return Fail(tok.status());
  std::vector<std::string> patterns =
      absl::StrSplit(absl::GetFlag(FLAGS_input), ',', absl::SkipEmpty());
  auto files = bertps::io::MatchShardFiles(patterns);
  if (!files.ok()) return Fail(files.status());
  std::vector<text::LabelledText> docs;
  int64_t bytes = 0;
  for (const std::string& f : *files) {
    auto part = text::ReadLabelledJsonl(f);
    if (!part.ok()) return Fail(part.status());
    for (text::LabelledText& d : *part) {
      bytes += static_cast<int64_t>(d.text.size());
      docs.push_back(std::move(d));
    }
  }
  text::ClassifyDataOptions o;
  o.max_seq_length = absl::GetFlag(FLAGS_max_seq_length);
  o.labels = absl::StrSplit(absl::GetFlag(FLAGS_labels), ',');
  o.dev_fraction = absl::GetFlag(FLAGS_dev_fraction);
  o.test_fraction = absl::GetFlag(FLAGS_test_fraction);
  o.seed = absl::GetFlag(FLAGS_seed);
  text::ClassifyDataStats stats;
  absl::Status s = text::WriteClassifyData(
      docs, **tok, o, absl::GetFlag(FLAGS_output_dir), &stats);
  if (!s.ok()) return Fail(s);
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  std::string json = stats.ToJson(o);
  json.pop_back();  // '}'
  std::printf("%s,\"text_bytes\":%lld,\"seconds\":%.3f}\n", json.c_str(),
              static_cast<long long>(bytes), secs);
  return 0;
}

// clean / extract-labelled: flags -> CleanOptions; documents out; report.
int CleanOrExtract(const std::string& cmd) {
  namespace text = bertps::text;
  const std::string input = absl::GetFlag(FLAGS_input);
  const std::string output = absl::GetFlag(FLAGS_output);
  if (input.empty() || output.empty()) {
    return Fail(absl::InvalidArgumentError(cmd + " needs --input and --output"));
  }
  text::CleanOptions o;
  o.normalization = absl::GetFlag(FLAGS_normalization);
  o.strip_control = absl::GetFlag(FLAGS_strip_control);
  o.strip_email = absl::GetFlag(FLAGS_strip_email);
  o.strip_html = absl::GetFlag(FLAGS_strip_html);
  o.strip_dict_markup = absl::GetFlag(FLAGS_strip_dict_markup);
  o.normalize_whitespace = absl::GetFlag(FLAGS_normalize_whitespace);
  o.dedup_exact = absl::GetFlag(FLAGS_dedup_exact);
  o.dedup_near = absl::GetFlag(FLAGS_dedup_near);
  o.near_threshold = absl::GetFlag(FLAGS_near_threshold);
  o.min_chars = absl::GetFlag(FLAGS_min_chars);
  o.max_chars = absl::GetFlag(FLAGS_max_chars);
  o.min_words = absl::GetFlag(FLAGS_min_words);
  o.remove_stopwords = absl::GetFlag(FLAGS_remove_stopwords);
  o.seed = absl::GetFlag(FLAGS_seed);
  text::CleanReport report;
  absl::StatusOr<std::vector<text::Document>> docs;
  if (cmd == "clean") {
    docs = text::ReadDocuments(input, absl::GetFlag(FLAGS_format));
    if (docs.ok()) docs = text::CleanDocuments(std::move(*docs), o, &report);
  } else {
    std::vector<std::string> sections =
        absl::StrSplit(absl::GetFlag(FLAGS_sections), ',', absl::SkipEmpty());
    if (sections.empty()) sections = text::DefaultDebianSections();
    docs = text::ExtractLabelled(absl::GetFlag(FLAGS_source), input, o,
                                 sections, &report);
  }
  if (!docs.ok()) return Fail(docs.status());
  const bool jsonl = cmd != "clean" || absl::EndsWith(output, ".jsonl");
  absl::Status s = jsonl ? text::WriteJsonl(*docs, output)
                         : text::WriteTextDocuments(*docs, output);
  if (s.ok() && !absl::GetFlag(FLAGS_report).empty()) {
    s = bertps::io::WriteFileAtomically(absl::GetFlag(FLAGS_report),
                                        report.ToJson() + "\n");
  }
  if (!s.ok()) return Fail(s);
  std::printf("%s\n", report.ToJson().c_str());
  return 0;
}

// augment: stdin -> stdout, a summary line on stderr.
int Augment() {
  namespace text = bertps::text;
  auto wn = text::WordNet::Load(absl::GetFlag(FLAGS_wordnet));
  if (!wn.ok()) return Fail(wn.status());
  text::EdaOptions o;
  o.alpha_sr = absl::GetFlag(FLAGS_alpha_sr);
  o.alpha_ri = absl::GetFlag(FLAGS_alpha_ri);
  o.alpha_rs = absl::GetFlag(FLAGS_alpha_rs);
  o.p_rd = absl::GetFlag(FLAGS_p_rd);
  o.num_aug = absl::GetFlag(FLAGS_num_aug);
  o.seed = absl::GetFlag(FLAGS_seed);
  std::ios::sync_with_stdio(false);
  int64_t sentences = 0;
  const absl::Time start = absl::Now();
  absl::Status s =
      text::AugmentLines(*wn, o, std::cin, std::cout, 0, &sentences);
  if (!s.ok()) return Fail(s);
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  std::fprintf(stderr,
               "{\"sentences\":%lld,\"num_aug\":%d,\"seconds\":%.3f}\n",
               static_cast<long long>(sentences), o.num_aug, secs);
  return 0;
}

// build-vocab: files -> vocab.txt, one JSON line of statistics.
int BuildVocab() {
  namespace text = bertps::text;
  if (absl::GetFlag(FLAGS_input).empty() ||
      absl::GetFlag(FLAGS_output).empty()) {
    return Fail(absl::InvalidArgumentError(
        "build-vocab needs --input and --output"));
  }
  std::vector<std::string> patterns =
      absl::StrSplit(absl::GetFlag(FLAGS_input), ',', absl::SkipEmpty());
  auto files = bertps::io::MatchShardFiles(patterns);
  if (!files.ok()) return Fail(files.status());
  text::VocabBuilderOptions o;
  o.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  o.min_frequency = absl::GetFlag(FLAGS_min_frequency);
  o.do_lower_case = !absl::GetFlag(FLAGS_cased);
  o.limit_alphabet = absl::GetFlag(FLAGS_limit_alphabet);
  o.num_unused = absl::GetFlag(FLAGS_num_unused);
  text::VocabBuilderStats st;
  auto vocab = text::BuildWordPieceVocab(*files, o, &st);
  if (!vocab.ok()) return Fail(vocab.status());
  absl::Status s = text::WriteVocabFile(absl::GetFlag(FLAGS_output), *vocab);
  if (!s.ok()) return Fail(s);
  std::printf(
      "{\"files\":%zu,\"bytes\":%lld,\"words\":%lld,\"distinct_words\":"
      "%lld,\"skipped_words\":%lld,\"alphabet\":%lld,\"merges\":%lld,"
      "\"vocab_size\":%zu,\"exhausted\":%s,\"seconds\":%.3f}\n",
      files->size(), static_cast<long long>(st.bytes),
      static_cast<long long>(st.words),
      static_cast<long long>(st.distinct_words),
      static_cast<long long>(st.skipped_words),
      static_cast<long long>(st.alphabet), static_cast<long long>(st.merges),
      vocab->size(), st.exhausted ? "true" : "false",
      st.count_seconds + st.merge_seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args = bertps::InitProcess(argc, argv, kUsage);
  if (args.size() != 2) {
    std::fprintf(stderr, "usage: %s\n", kUsage);
    return 2;
  }
  bertps::FlagChecks checks("bert_local");
  const int max_seq = absl::GetFlag(FLAGS_max_seq_length);
  checks.Range("threads", absl::GetFlag(FLAGS_threads), 1, 256)
      .Range("steps", absl::GetFlag(FLAGS_steps), 1, int64_t{1} << 40)
      .Range("log_every", absl::GetFlag(FLAGS_log_every), 1, int64_t{1} << 40)
      .Range("warmup_steps", absl::GetFlag(FLAGS_warmup_steps), 0,
             int64_t{1} << 40)
      .RealRange("lr", absl::GetFlag(FLAGS_lr), 0, 1e6)
      .RealRange("weight_decay", absl::GetFlag(FLAGS_weight_decay), 0, 1e6)
      .RealRange("clip_norm", absl::GetFlag(FLAGS_clip_norm), -1e30, 1e30)
      .Range("num_output_files", absl::GetFlag(FLAGS_num_output_files), 1,
             100000)
      .Range("max_seq_length", max_seq, 4, 1 << 16)
      .Range("max_predictions_per_seq",
             absl::GetFlag(FLAGS_max_predictions_per_seq), 0, max_seq)
      .Range("dupe_factor", absl::GetFlag(FLAGS_dupe_factor), 1, 1000)
      .RealRange("masked_lm_prob", absl::GetFlag(FLAGS_masked_lm_prob), 0, 1)
      .RealRange("short_seq_prob", absl::GetFlag(FLAGS_short_seq_prob), 0, 1)
      .RealRange("dev_fraction", absl::GetFlag(FLAGS_dev_fraction), 0, 1)
      .RealRange("test_fraction", absl::GetFlag(FLAGS_test_fraction), 0, 1)
      .RealRange("near_threshold", absl::GetFlag(FLAGS_near_threshold), 0, 1)
      .Range("min_chars", absl::GetFlag(FLAGS_min_chars), 0, 1 << 30)
      .Range("max_chars", absl::GetFlag(FLAGS_max_chars), 0, 1 << 30)
      .Range("min_words", absl::GetFlag(FLAGS_min_words), 0, 1 << 30)
      .Range("num_aug", absl::GetFlag(FLAGS_num_aug), 0, 1000)
      .RealRange("alpha_sr", absl::GetFlag(FLAGS_alpha_sr), 0, 1)
      .RealRange("alpha_ri", absl::GetFlag(FLAGS_alpha_ri), 0, 1)
      .RealRange("alpha_rs", absl::GetFlag(FLAGS_alpha_rs), 0, 1)
      .RealRange("p_rd", absl::GetFlag(FLAGS_p_rd), 0, 1)
      .Range("vocab_size", absl::GetFlag(FLAGS_vocab_size), 1, 1 << 24)
      .Range("min_frequency", absl::GetFlag(FLAGS_min_frequency), 1,
             1 << 30)
      .Range("limit_alphabet", absl::GetFlag(FLAGS_limit_alphabet), 1,
             1 << 24)
      .Range("num_unused", absl::GetFlag(FLAGS_num_unused), 0, 1 << 20);
  bertps::kernels::Precision precision;
  checks.Require(bertps::kernels::ParsePrecision(absl::GetFlag(FLAGS_precision),
                                                 &precision),
                 "precision",
                 "must be fp32 or bf16, not '" + absl::GetFlag(FLAGS_precision) +
                     "'");
  if (!checks.ok()) return checks.Fail();
  bertps::kernels::SetNumThreads(absl::GetFlag(FLAGS_threads));
  const std::string& cmd = args[1];
  if (cmd == "create-pretraining-data") return CreatePretrainingData();
  if (cmd == "clean" || cmd == "extract-labelled") return CleanOrExtract(cmd);
  if (cmd == "create-classify-data") return CreateClassifyData();
  if (cmd == "augment") return Augment();
  if (cmd == "build-vocab") return BuildVocab();
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
  bertps::kernels::ParsePrecision(absl::GetFlag(FLAGS_precision), &o.precision);

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
