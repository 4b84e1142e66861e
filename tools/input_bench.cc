// Input-pipeline benchmark: BERT pretraining records (seq 128, 20 masked
// positions, as create_pretraining_data.py writes them) in TFRecord files.
// Prints JSON lines:
//   index       building the record indices (records/s, MB/s), then loading
//               them again, for plain and GZIP TFRecord files of the same
//               records
//   read        reading + CRC-checking + decoding one worker's batches
//               through the indices, in file order and shuffled (records/s
//               and MB/s per core; GZIP: inflating included, MB of
//               compressed file read), plain and GZIP
//   first_batch the time to a worker's first batch when a job resumes at
//               step 0 and at step 1,000 x later, through the indices and,
//               as the peer, by reading the stream up to that step (what
//               every worker did before the indices)
//
//   input_bench --dir /tmp/input_bench --records 100000 --files 8
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/init.h"
#include "common/io/bert_example.h"
#include "common/io/record_index.h"
#include "common/io/tfrecord.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, dir, "/tmp/bertps_input_bench", "Where the data goes.");
ABSL_FLAG(int64_t, records, 100000, "Records in all files.");
ABSL_FLAG(int, files, 8, "Files.");
ABSL_FLAG(int, batch, 32, "Examples per worker per step.");
ABSL_FLAG(int, workers, 4, "Workers (a worker reads 1/workers of a batch).");
ABSL_FLAG(int, steps, 200, "Steps read per measurement.");
ABSL_FLAG(bool, keep, false, "Keep the data files (DIR/part-*.tfrecord).");

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void Fail(const absl::Status& st) {
  std::fprintf(stderr, "input_bench: %s\n", st.ToString().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  bertps::InitProcess(argc, argv, "input_bench [flags]");
  namespace fs = std::filesystem;
  using bertps::io::IndexedExampleSource;
  const std::string dir = absl::GetFlag(FLAGS_dir);
  const int64_t n = absl::GetFlag(FLAGS_records);
  const int nfiles = absl::GetFlag(FLAGS_files);
  const int batch = absl::GetFlag(FLAGS_batch);
  const int workers = absl::GetFlag(FLAGS_workers);
  const int steps = absl::GetFlag(FLAGS_steps);
  fs::remove_all(dir);
  fs::create_directories(dir + "/gz");
  std::mt19937 rng(1);
  int64_t bytes = 0, gz_bytes = 0;
  for (int f = 0; f < nfiles; ++f) {
    auto w = bertps::io::TFRecordWriter::Open(
        absl::StrCat(dir, "/part-", f, ".tfrecord"));
    if (!w.ok()) Fail(w.status());
    auto z = bertps::io::TFRecordWriter::Open(
        absl::StrCat(dir, "/gz/part-", f, ".tfrecord.gz"));
    if (!z.ok()) Fail(z.status());
    for (int64_t i = f; i < n; i += nfiles) {
      bertps::io::PretrainExample e;
      for (int s = 0; s < 128; ++s) {
        e.input_ids.push_back(static_cast<int32_t>(rng() % 30522));
        e.input_mask.push_back(1);
        e.segment_ids.push_back(s < 64 ? 0 : 1);
      }
      for (int p = 0; p < 20; ++p) {
        e.masked_lm_positions.push_back(1 + p * 6);
        e.masked_lm_ids.push_back(static_cast<int32_t>(rng() % 30522));
        e.masked_lm_weights.push_back(1.0f);
      }
      e.next_sentence_label = static_cast<int32_t>(rng() % 2);
      const std::string record = bertps::io::EncodePretrainExample(e);
      if (auto st = (*w)->Write(record); !st.ok()) Fail(st);
      if (auto st = (*z)->Write(record); !st.ok()) Fail(st);
    }
    if (auto st = (*w)->Close(); !st.ok()) Fail(st);
    if (auto st = (*z)->Close(); !st.ok()) Fail(st);
    bytes += (*w)->num_bytes();
    gz_bytes += static_cast<int64_t>(
        fs::file_size(absl::StrCat(dir, "/gz/part-", f, ".tfrecord.gz")));
  }
  for (const bool gzip : {false, true}) {
    const std::vector<std::string> glob = {gzip ? dir + "/gz/part-*.tfrecord.gz"
                                                : dir + "/part-*.tfrecord"};
    const std::string format = gzip ? "gzip" : "plain";
    const int64_t file_bytes = gzip ? gz_bytes : bytes;
    const std::string cache = dir + "/cache";
    nlohmann::ordered_json j;
    // Indices: built, then loaded.
    auto t0 = Clock::now();
    auto src = IndexedExampleSource::Open(glob, cache);
    if (!src.ok()) Fail(src.status());
    auto t1 = Clock::now();
    auto again = IndexedExampleSource::Open(glob, cache);
    if (!again.ok()) Fail(again.status());
    auto t2 = Clock::now();
    j["bench"] = "index";
    j["format"] = format;
    j["records"] = n;
    j["mb"] = file_bytes / 1e6;
    j["record_mb"] = bytes / 1e6;
    j["build_s"] = Seconds(t0, t1);
    j["build_records_per_s"] = n / Seconds(t0, t1);
    j["load_s"] = Seconds(t1, t2);
    std::printf("%s\n", j.dump().c_str());
    // Reading one worker's share of `steps` global batches from `from`.
    auto read = [&](IndexedExampleSource& s, int64_t from_step) {
      std::string record;
      bertps::io::BertBatch b;
      for (int64_t t = from_step; t < from_step + steps; ++t) {
        const int64_t first = (t * workers + 1) * batch;  // worker 1
        b = bertps::io::BertBatch();
        for (int e = 0; e < batch; ++e) {
          if (auto st = s.Read(first + e, &record); !st.ok()) Fail(st);
          auto ex = bertps::io::DecodePretrainExample(record);
          if (!ex.ok()) Fail(ex.status());
          bertps::io::AppendExample(*ex, &b);
        }
      }
    };
    for (bool shuffle : {false, true}) {
      auto s = IndexedExampleSource::Open(glob, cache);
      (*s)->set_shuffle(shuffle, 12345);
      const auto a = Clock::now();
      read(**s, 0);
      const double secs = Seconds(a, Clock::now());
      nlohmann::ordered_json r;
      r["bench"] = "read";
      r["format"] = format;
      r["order"] = shuffle ? "shuffled" : "file";
      r["records_per_s"] = (*s)->records_read() / secs;
      r["mb_per_s"] = (*s)->bytes_read() / 1e6 / secs;
      r["bytes_read_fraction_of_data"] =
          static_cast<double>((*s)->bytes_read()) / file_bytes;
      r["share_of_data_read"] = static_cast<double>((*s)->records_read()) / n;
      r["gzip_blocks_inflated"] = (*s)->blocks_inflated();
      std::printf("%s\n", r.dump().c_str());
    }
    if (gzip) break;  // the first-batch figures: plain files
    // Time to the first batch at step 0 and at a late step (1,000 x later,
    // within the data: the stream wraps at its end).
    const int64_t late =
        std::min<int64_t>(1000, n / (int64_t(batch) * workers) - 2);
    for (int64_t at : {int64_t{0}, late}) {
      auto s = IndexedExampleSource::Open(glob, cache);
      const auto a = Clock::now();
      std::string record;
      const int64_t first = (at * workers + 1) * batch;
      for (int e = 0; e < batch; ++e) {
        if (auto st = (*s)->Read(first + e, &record); !st.ok()) Fail(st);
      }
      const double indexed = Seconds(a, Clock::now());
      // The peer: reading the stream up to the worker's first example.
      auto stream = bertps::io::ExampleStream::Open(glob);
      if (!stream.ok()) Fail(stream.status());
      const auto b = Clock::now();
      int64_t records = 0;
      for (int64_t p = 0; p < first + batch; ++p) {
        auto got = (*stream)->Next(&record);
        if (!got.ok()) Fail(got.status());
        ++records;
      }
      const double scanned = Seconds(b, Clock::now());
      nlohmann::ordered_json r;
      r["bench"] = "first_batch";
      r["step"] = at;
      r["indexed_s"] = indexed;
      r["indexed_records_read"] = (*s)->records_read();
      r["peer_stream_s"] = scanned;
      r["peer_records_read"] = records;
      r["ratio_peer_over_indexed"] = scanned / std::max(indexed, 1e-9);
      std::printf("%s\n", r.dump().c_str());
    }
  }
  if (!absl::GetFlag(FLAGS_keep)) fs::remove_all(dir);
  return 0;
}
