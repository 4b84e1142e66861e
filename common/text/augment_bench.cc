// Throughput of the preprocessing steps beside tokenization: EDA
// augmentation (sentences/s) and WordPiece vocabulary building (MB/s of
// input text). Prints one JSON line per step; rates are per core (thread CPU
// time, robust on a shared machine), with the wall-clock figure beside, and
// the median over --repeat passes.
//
//   augment_bench --wordnet /usr/share/wordnet
//                 --file data/corpus/small/part-00.txt
//                 [--sentences 5000] [--num_aug 4]
//                 [--vocab_input 'data/corpus/small/part-*.txt']
//                 [--vocab_size 30522] [--repeat 3]
//
// --file empty skips augmentation; --vocab_input empty skips vocab building.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "common/init.h"
#include "common/io/bert_example.h"
#include "common/text/augment.h"
#include "common/text/vocab_builder.h"
#include "common/text/wordnet.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, wordnet, "/usr/share/wordnet",
          "WordNet database directory (wordnet-base).");
ABSL_FLAG(std::string, file, "", "Sentences to augment, one per line.");
ABSL_FLAG(int, sentences, 5000, "Augment the first N non-blank lines.");
ABSL_FLAG(int, num_aug, 4, "Augmentations per sentence.");
ABSL_FLAG(std::string, vocab_input, "",
          "Comma-separated globs of text to build a vocabulary from.");
ABSL_FLAG(int, vocab_size, 30522, "Vocabulary size to build.");
ABSL_FLAG(int, repeat, 3, "Timed passes (median reported).");

namespace {

using Clock = std::chrono::steady_clock;

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double WallSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "augment_bench: %s\n", s.ToString().c_str());
  return 1;
}

int BenchEda(int repeat) {
  namespace text = bertps::text;
  auto t0 = Clock::now();
  auto wn = text::WordNet::Load(absl::GetFlag(FLAGS_wordnet));
  if (!wn.ok()) return Fail(wn.status());
  const double load_s = WallSince(t0);
  std::ifstream in(absl::GetFlag(FLAGS_file));
  if (!in) {
    return Fail(
        absl::NotFoundError("cannot open --file " + absl::GetFlag(FLAGS_file)));
  }
  std::vector<std::string> sentences;
  std::string line;
  while (static_cast<int>(sentences.size()) < absl::GetFlag(FLAGS_sentences) &&
         std::getline(in, line)) {
    if (!absl::StripAsciiWhitespace(line).empty()) sentences.push_back(line);
  }
  if (sentences.empty()) {
    return Fail(absl::InvalidArgumentError("no sentences in --file"));
  }
  text::EdaOptions o;
  o.num_aug = absl::GetFlag(FLAGS_num_aug);
  std::vector<double> cpu, wall;
  int64_t words = 0, out_bytes = 0;
  for (int r = 0; r <= repeat; ++r) {  // pass 0 warms up
    words = out_bytes = 0;
    const auto w0 = Clock::now();
    const double c0 = ThreadCpuSeconds();
    for (size_t k = 0; k < sentences.size(); ++k) {
      for (const std::string& a : text::Eda(sentences[k], *wn, o, k)) {
        out_bytes += static_cast<int64_t>(a.size());
      }
    }
    const double c = ThreadCpuSeconds() - c0, w = WallSince(w0);
    if (r > 0) {
      cpu.push_back(c);
      wall.push_back(w);
    }
  }
  for (const std::string& s : sentences) {
    words += static_cast<int64_t>(text::EdaWords(s).size());
  }
  const double cpu_s = Median(cpu), wall_s = Median(wall);
  nlohmann::json j;
  j["bench"] = "eda";
  j["file"] = absl::GetFlag(FLAGS_file);
  j["sentences"] = sentences.size();
  j["words"] = words;
  j["num_aug"] = o.num_aug;
  j["output_bytes"] = out_bytes;
  j["wordnet_load_seconds"] = load_s;
  j["cpu_seconds"] = cpu_s;
  j["wall_seconds"] = wall_s;
  j["sentences_per_s"] = sentences.size() / cpu_s;
  j["sentences_per_s_wall"] = sentences.size() / wall_s;
  j["augmented_per_s"] = sentences.size() * o.num_aug / cpu_s;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

int BenchVocab(int repeat) {
  namespace text = bertps::text;
  std::vector<std::string> patterns =
      absl::StrSplit(absl::GetFlag(FLAGS_vocab_input), ',', absl::SkipEmpty());
  auto files = bertps::io::MatchShardFiles(patterns);
  if (!files.ok()) return Fail(files.status());
  text::VocabBuilderOptions o;
  o.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  std::vector<double> cpu, wall, count_s, merge_s;
  text::VocabBuilderStats stats;
  size_t vocab_size = 0;
  for (int r = 0; r < repeat; ++r) {  // no warm-up: each pass is long
    const auto w0 = Clock::now();
    const double c0 = ThreadCpuSeconds();
    auto vocab = text::BuildWordPieceVocab(*files, o, &stats);
    if (!vocab.ok()) return Fail(vocab.status());
    cpu.push_back(ThreadCpuSeconds() - c0);
    wall.push_back(WallSince(w0));
    count_s.push_back(stats.count_seconds);
    merge_s.push_back(stats.merge_seconds);
    vocab_size = vocab->size();
  }
  const double cpu_s = Median(cpu), wall_s = Median(wall);
  const double mb = stats.bytes / 1e6;
  nlohmann::json j;
  j["bench"] = "build_vocab";
  j["files"] = files->size();
  j["bytes"] = stats.bytes;
  j["words"] = stats.words;
  j["distinct_words"] = stats.distinct_words;
  j["vocab_size"] = vocab_size;
  j["exhausted"] = stats.exhausted;
  j["merges"] = stats.merges;
  j["cpu_seconds"] = cpu_s;
  j["wall_seconds"] = wall_s;
  j["count_seconds"] = Median(count_s);
  j["merge_seconds"] = Median(merge_s);
  j["mb_per_s"] = mb / cpu_s;
  j["mb_per_s_wall"] = mb / wall_s;
  j["count_mb_per_s"] = mb / Median(count_s);
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bertps::InitProcess(argc, argv,
                      "augment_bench --wordnet DIR --file F "
                      "[--vocab_input GLOB]");
  const int repeat = std::max(1, absl::GetFlag(FLAGS_repeat));
  if (!absl::GetFlag(FLAGS_file).empty()) {
    if (int rc = BenchEda(repeat); rc != 0) return rc;
  }
  if (!absl::GetFlag(FLAGS_vocab_input).empty()) {
    if (int rc = BenchVocab(repeat); rc != 0) return rc;
  }
  return 0;
}
