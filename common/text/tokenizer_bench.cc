// Throughput of FullTokenizer (bytes of text in per second), tokenizing a
// file line by line the way `bert_local tokenize` does. Prints one JSON line:
// mb_per_s is per core (thread CPU time, robust on a shared machine),
// mb_per_s_wall by the wall clock; both medians over --repeat passes.
//
//   tokenizer_bench --vocab data/vocab/bert-base-uncased-vocab.txt
//                   --file corpus.txt [--do_lower_case=true] [--repeat 5]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/string_view.h"
#include "common/init.h"
#include "common/text/tokenizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, vocab, "", "vocab.txt");
ABSL_FLAG(std::string, file, "", "UTF-8 text, one example per line.");
ABSL_FLAG(bool, do_lower_case, true, "Lowercase and strip accents.");
ABSL_FLAG(int, repeat, 5, "Timed passes over the file (median reported).");

namespace {

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  bertps::InitProcess(argc, argv, "tokenizer_bench --vocab V --file F");
  auto tok = bertps::text::FullTokenizer::Create(
      absl::GetFlag(FLAGS_vocab), absl::GetFlag(FLAGS_do_lower_case));
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
    return 1;
  }
  std::ifstream in(absl::GetFlag(FLAGS_file), std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot open --file %s\n",
                 absl::GetFlag(FLAGS_file).c_str());
    return 1;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<absl::string_view> lines;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    lines.push_back(absl::string_view(text).substr(pos, nl - pos));
    pos = nl + 1;
  }

  using Clock = std::chrono::steady_clock;
  std::vector<int32_t> ids;
  std::vector<double> wall, cpu;
  int64_t tokens = 0;
  const int repeat = std::max(1, absl::GetFlag(FLAGS_repeat));
  for (int r = 0; r <= repeat; ++r) {  // pass 0 warms up
    tokens = 0;
    const auto t0 = Clock::now();
    const double c0 = ThreadCpuSeconds();
    for (absl::string_view line : lines) {
      ids.clear();
      (*tok)->EncodeAppend(line, &ids);
      tokens += static_cast<int64_t>(ids.size());
    }
    const double c = ThreadCpuSeconds() - c0;
    const double w = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r > 0) {
      cpu.push_back(c);
      wall.push_back(w);
    }
  }
  const double cpu_s = Median(cpu), wall_s = Median(wall);
  nlohmann::json j;
  j["impl"] = "bertps";
  j["file"] = absl::GetFlag(FLAGS_file);
  j["bytes"] = text.size();
  j["lines"] = lines.size();
  j["tokens"] = tokens;
  j["cpu_seconds"] = cpu_s;
  j["wall_seconds"] = wall_s;
  j["mb_per_s"] = text.size() / cpu_s / 1e6;
  j["mb_per_s_wall"] = text.size() / wall_s / 1e6;
  j["tokens_per_s"] = tokens / cpu_s;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
