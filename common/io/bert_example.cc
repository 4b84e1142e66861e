#include "common/io/bert_example.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/io/file_util.h"
#include "common/status.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "proto/example.pb.h"

namespace bertps {
namespace io {
namespace {

constexpr char kInputIds[] = "input_ids";
constexpr char kInputMask[] = "input_mask";
constexpr char kSegmentIds[] = "segment_ids";
constexpr char kMaskedLmPositions[] = "masked_lm_positions";
constexpr char kMaskedLmIds[] = "masked_lm_ids";
constexpr char kMaskedLmWeights[] = "masked_lm_weights";
constexpr char kNextSentenceLabels[] = "next_sentence_labels";
constexpr char kLabelIds[] = "label_ids";
constexpr char kIsRealExample[] = "is_real_example";

using FeatureMap = google::protobuf::Map<std::string, tf::Feature>;

template <typename T>
void PutInts(FeatureMap& map, const char* name, const std::vector<T>& values) {
  auto* list = map[name].mutable_int64_list();
  list->mutable_value()->Reserve(static_cast<int>(values.size()));
  for (T v : values) list->add_value(v);
}

void PutFloats(FeatureMap& map, const char* name,
               const std::vector<float>& values) {
  auto* list = map[name].mutable_float_list();
  list->mutable_value()->Add(values.begin(), values.end());
}

std::string SerializeDeterministic(const tf::Example& example) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    example.SerializeToCodedStream(&coded);
  }
  return out;
}

absl::Status Bad(absl::string_view feature, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("tf.train.Example feature \"", feature, "\": ", what));
}

absl::StatusOr<tf::Example> Parse(absl::string_view serialized) {
  tf::Example example;
  if (!example.ParseFromArray(serialized.data(),
                              static_cast<int>(serialized.size()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a valid tf.train.Example (", serialized.size(), " bytes)"));
  }
  return example;
}

absl::StatusOr<std::vector<int32_t>> GetInts(const tf::Example& example,
                                             const char* name) {
  const FeatureMap& map = example.features().feature();
  auto it = map.find(name);
  if (it == map.end()) return Bad(name, "missing");
  if (it->second.kind_case() != tf::Feature::kInt64List) {
    return Bad(name, "is not an int64_list");
  }
  const auto& values = it->second.int64_list().value();
  std::vector<int32_t> out;
  out.reserve(values.size());
  for (int i = 0; i < values.size(); ++i) {
    const int64_t v = values[i];
    if (v < std::numeric_limits<int32_t>::min() ||
        v > std::numeric_limits<int32_t>::max()) {
      return Bad(name, absl::StrCat("value ", v, " at index ", i,
                                    " is outside int32"));
    }
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

absl::StatusOr<std::vector<float>> GetFloats(const tf::Example& example,
                                             const char* name) {
  const FeatureMap& map = example.features().feature();
  auto it = map.find(name);
  if (it == map.end()) return Bad(name, "missing");
  if (it->second.kind_case() != tf::Feature::kFloatList) {
    return Bad(name, "is not a float_list");
  }
  const auto& values = it->second.float_list().value();
  return std::vector<float>(values.begin(), values.end());
}

absl::StatusOr<int32_t> GetScalarInt(const tf::Example& example,
                                     const char* name) {
  ASSIGN_OR_RETURN(std::vector<int32_t> v, GetInts(example, name));
  if (v.size() != 1) {
    return Bad(name, absl::StrCat("has ", v.size(), " values, expected 1"));
  }
  return v[0];
}

absl::Status SameLength(const char* a, size_t na, const char* b, size_t nb) {
  if (na == nb) return absl::OkStatus();
  return Bad(b, absl::StrCat("has ", nb, " values but \"", a, "\" has ", na));
}

// Reads the three (S) token features.
absl::Status GetTokens(const tf::Example& example, std::vector<int32_t>* ids,
                       std::vector<int32_t>* mask,
                       std::vector<int32_t>* segments) {
  ASSIGN_OR_RETURN(*ids, GetInts(example, kInputIds));
  ASSIGN_OR_RETURN(*mask, GetInts(example, kInputMask));
  ASSIGN_OR_RETURN(*segments, GetInts(example, kSegmentIds));
  RETURN_IF_ERROR(SameLength(kInputIds, ids->size(), kInputMask, mask->size()));
  return SameLength(kInputIds, ids->size(), kSegmentIds, segments->size());
}

}  // namespace

std::string EncodePretrainExample(const PretrainExample& ex) {
  tf::Example example;
  FeatureMap& map = *example.mutable_features()->mutable_feature();
  PutInts(map, kInputIds, ex.input_ids);
  PutInts(map, kInputMask, ex.input_mask);
  PutInts(map, kSegmentIds, ex.segment_ids);
  PutInts(map, kMaskedLmPositions, ex.masked_lm_positions);
  PutInts(map, kMaskedLmIds, ex.masked_lm_ids);
  PutFloats(map, kMaskedLmWeights, ex.masked_lm_weights);
  PutInts(map, kNextSentenceLabels,
          std::vector<int32_t>{ex.next_sentence_label});
  return SerializeDeterministic(example);
}

absl::StatusOr<PretrainExample> DecodePretrainExample(
    absl::string_view serialized) {
  ASSIGN_OR_RETURN(tf::Example example, Parse(serialized));
  PretrainExample ex;
  RETURN_IF_ERROR(
      GetTokens(example, &ex.input_ids, &ex.input_mask, &ex.segment_ids));
  ASSIGN_OR_RETURN(ex.masked_lm_positions,
                   GetInts(example, kMaskedLmPositions));
  ASSIGN_OR_RETURN(ex.masked_lm_ids, GetInts(example, kMaskedLmIds));
  ASSIGN_OR_RETURN(ex.masked_lm_weights, GetFloats(example, kMaskedLmWeights));
  RETURN_IF_ERROR(SameLength(kMaskedLmPositions, ex.masked_lm_positions.size(),
                             kMaskedLmIds, ex.masked_lm_ids.size()));
  RETURN_IF_ERROR(SameLength(kMaskedLmPositions, ex.masked_lm_positions.size(),
                             kMaskedLmWeights, ex.masked_lm_weights.size()));
  ASSIGN_OR_RETURN(ex.next_sentence_label,
                   GetScalarInt(example, kNextSentenceLabels));
  return ex;
}

std::string EncodeClassifyExample(const ClassifyExample& ex) {
  tf::Example example;
  FeatureMap& map = *example.mutable_features()->mutable_feature();
  PutInts(map, kInputIds, ex.input_ids);
  PutInts(map, kInputMask, ex.input_mask);
  PutInts(map, kSegmentIds, ex.segment_ids);
  PutInts(map, kLabelIds, std::vector<int32_t>{ex.label_id});
  PutInts(map, kIsRealExample, std::vector<int32_t>{1});
  return SerializeDeterministic(example);
}

absl::StatusOr<ClassifyExample> DecodeClassifyExample(
    absl::string_view serialized) {
  ASSIGN_OR_RETURN(tf::Example example, Parse(serialized));
  ClassifyExample ex;
  RETURN_IF_ERROR(
      GetTokens(example, &ex.input_ids, &ex.input_mask, &ex.segment_ids));
  ASSIGN_OR_RETURN(ex.label_id, GetScalarInt(example, kLabelIds));
  return ex;
}

// ---------------------------------------------------------------------------
// BertBatch

namespace {

absl::Status CheckSize(const char* field, size_t got, int64_t want) {
  if (static_cast<int64_t>(got) == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "batch field ", field, " has ", got, " values, expected ", want));
}

// Checks lo <= v[i] < hi for a (rows, cols) array.
absl::Status CheckRange(const char* field, const std::vector<int32_t>& v,
                        int cols, int64_t lo, int64_t hi) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < lo || v[i] >= hi) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch field ", field, "[", i / cols, ", ", i % cols,
                       "] = ", v[i], " is outside [", lo, ", ", hi, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status BertBatch::Validate(int vocab_size, int max_positions,
                                 int type_vocab, int num_labels) const {
  if (batch <= 0 || seq <= 0 || preds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch dimensions B=", batch, " S=", seq, " P=", preds,
                     " must be positive (P may be 0)"));
  }
  if (seq > max_positions) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch sequence length ", seq,
                     " exceeds the model's max positions ", max_positions));
  }
  const int64_t bs = static_cast<int64_t>(batch) * seq;
  const int64_t bp = static_cast<int64_t>(batch) * preds;
  RETURN_IF_ERROR(CheckSize(kInputIds, input_ids.size(), bs));
  RETURN_IF_ERROR(CheckSize(kInputMask, input_mask.size(), bs));
  RETURN_IF_ERROR(CheckSize(kSegmentIds, segment_ids.size(), bs));
  RETURN_IF_ERROR(
      CheckSize(kMaskedLmPositions, masked_lm_positions.size(), bp));
  RETURN_IF_ERROR(CheckSize(kMaskedLmIds, masked_lm_ids.size(), bp));
  RETURN_IF_ERROR(CheckSize(kMaskedLmWeights, masked_lm_weights.size(), bp));
  if (!next_sentence_labels.empty()) {
    RETURN_IF_ERROR(
        CheckSize(kNextSentenceLabels, next_sentence_labels.size(), batch));
  }
  RETURN_IF_ERROR(
      CheckSize(kLabelIds, label_ids.size(), num_labels > 0 ? batch : 0));

  RETURN_IF_ERROR(CheckRange(kInputIds, input_ids, seq, 0, vocab_size));
  RETURN_IF_ERROR(CheckRange(kInputMask, input_mask, seq, 0, 2));
  RETURN_IF_ERROR(CheckRange(kSegmentIds, segment_ids, seq, 0, type_vocab));
  if (preds > 0) {
    RETURN_IF_ERROR(
        CheckRange(kMaskedLmPositions, masked_lm_positions, preds, 0, seq));
    RETURN_IF_ERROR(
        CheckRange(kMaskedLmIds, masked_lm_ids, preds, 0, vocab_size));
    for (size_t i = 0; i < masked_lm_weights.size(); ++i) {
      const float w = masked_lm_weights[i];
      if (!std::isfinite(w) || w < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "batch field masked_lm_weights[", i / preds, ", ", i % preds,
            "] = ", w, " is not a finite non-negative weight"));
      }
    }
  }
  RETURN_IF_ERROR(
      CheckRange(kNextSentenceLabels, next_sentence_labels, 1, 0, 2));
  return CheckRange(kLabelIds, label_ids, 1, 0, num_labels);
}

// ---------------------------------------------------------------------------
// ExampleStream

namespace {

template <typename T>
void Append(const std::vector<T>& src, std::vector<T>* dst) {
  dst->insert(dst->end(), src.begin(), src.end());
}

}  // namespace

void AppendExample(const PretrainExample& e, BertBatch* b) {
  Append(e.input_ids, &b->input_ids);
  Append(e.input_mask, &b->input_mask);
  Append(e.segment_ids, &b->segment_ids);
  Append(e.masked_lm_positions, &b->masked_lm_positions);
  Append(e.masked_lm_ids, &b->masked_lm_ids);
  Append(e.masked_lm_weights, &b->masked_lm_weights);
  b->next_sentence_labels.push_back(e.next_sentence_label);
  ++b->batch;
}

void AppendExample(const ClassifyExample& e, BertBatch* b) {
  Append(e.input_ids, &b->input_ids);
  Append(e.input_mask, &b->input_mask);
  Append(e.segment_ids, &b->segment_ids);
  b->label_ids.push_back(e.label_id);
  ++b->batch;
}

namespace {

// glob()'s error callback has no user data: the first failing directory of
// this thread's current glob() call.
thread_local std::string glob_error_path;
thread_local int glob_error_errno = 0;

int OnGlobError(const char* path, int err) {
  if (glob_error_path.empty()) {
    glob_error_path = path;
    glob_error_errno = err;
  }
  return 1;  // stop: GLOB_ERR
}

}  // namespace

absl::StatusOr<std::vector<std::string>> MatchShardFiles(
    const std::vector<std::string>& patterns, int shard, int num_shards,
    const std::function<absl::Status(const std::string&)>& check) {
  if (num_shards < 1 || shard < 0 || shard >= num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard ", shard, " of ", num_shards, " is not valid"));
  }
  if (patterns.empty()) {
    return absl::InvalidArgumentError("no input file patterns given");
  }
  std::vector<std::string> all;
  for (const std::string& pattern : patterns) {
    glob_t g;
    glob_error_path.clear();
    glob_error_errno = 0;
    const int rc = glob(pattern.c_str(), GLOB_ERR, &OnGlobError, &g);
    if (rc == GLOB_NOMATCH) {
      globfree(&g);
      return absl::NotFoundError(
          absl::StrCat("input pattern \"", pattern, "\" matches no files"));
    }
    if (rc == GLOB_ABORTED && !glob_error_path.empty()) {
      globfree(&g);
      return ErrnoStatus(glob_error_errno,
                         absl::StrCat("input pattern \"", pattern,
                                      "\": cannot read directory"),
                         glob_error_path);
    }
    if (rc != 0) {
      globfree(&g);
      return absl::InternalError(absl::StrCat(
          "glob of input pattern \"", pattern, "\" failed (",
          rc == GLOB_NOSPACE ? "out of memory" : "read error", ")"));
    }
    for (size_t i = 0; i < g.gl_pathc; ++i) {
      // Record indices beside the data (common/io/record_index.h) are not
      // data, whatever the pattern.
      if (absl::EndsWith(g.gl_pathv[i], ".bertps-index")) continue;
      all.emplace_back(g.gl_pathv[i]);
    }
    globfree(&g);
  }
  for (const std::string& f : all) {
    if (check) RETURN_IF_ERROR(check(f));
    // Only regular files: a FIFO or a device matched by a pattern would
    // block or never end when read.
    struct stat st;
    if (stat(f.c_str(), &st) != 0) return ErrnoStatus(errno, "stat", f);
    if (!S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input file ", f, " is not a regular file (",
          S_ISDIR(st.st_mode) ? "a directory" : "a FIFO, device or socket",
          ")"));
    }
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  std::vector<std::string> mine;
  for (size_t i = shard; i < all.size(); i += num_shards) {
    mine.push_back(all[i]);
  }
  if (mine.empty()) {
    return absl::NotFoundError(absl::StrCat("shard ", shard, " of ", num_shards,
                                            " gets none of the ", all.size(),
                                            " input files"));
  }
  return mine;
}

absl::StatusOr<std::unique_ptr<ExampleStream>> ExampleStream::Open(
    const std::vector<std::string>& patterns, int shard, int num_shards) {
  ASSIGN_OR_RETURN(std::vector<std::string> files,
                   MatchShardFiles(patterns, shard, num_shards));
  return std::make_unique<ExampleStream>(std::move(files));
}

ExampleStream::ExampleStream(std::vector<std::string> files)
    : files_(std::move(files)) {}

absl::StatusOr<bool> ExampleStream::Next(std::string* record) {
  while (file_index_ < files_.size()) {
    if (reader_ == nullptr) {
      ASSIGN_OR_RETURN(reader_, TFRecordReader::Open(files_[file_index_]));
    }
    const int64_t offset = reader_->offset();
    ASSIGN_OR_RETURN(bool more, reader_->Next(record));
    if (more) {
      last_file_ = files_[file_index_];
      last_offset_ = offset;
      return true;
    }
    reader_.reset();
    ++file_index_;
  }
  return false;
}

void ExampleStream::Reset() {
  reader_.reset();
  file_index_ = 0;
  ++epoch_;
}

std::string ExampleStream::last_position() const {
  return absl::StrCat(last_file_, "@", last_offset_);
}

namespace {

// Next record, starting over once at the end of the files.
absl::Status NextWrapping(ExampleStream& stream, std::string* record) {
  ASSIGN_OR_RETURN(bool more, stream.Next(record));
  if (more) return absl::OkStatus();
  stream.Reset();
  ASSIGN_OR_RETURN(more, stream.Next(record));
  if (more) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat(
      "the ", stream.files().size(),
      " input files hold no records (first: ", stream.files().front(), ")"));
}

absl::Status CheckLength(const ExampleStream& stream, const char* what,
                         size_t got, int want) {
  if (static_cast<int64_t>(got) == want) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("example at ", stream.last_position(), " has ", what, " ",
                   got, ", the batch expects ", want));
}

template <typename T>
void CopyRow(const std::vector<T>& src, std::vector<T>& dst, int row) {
  std::copy(src.begin(), src.end(), dst.begin() + row * src.size());
}

absl::Status CheckDims(int batch, int seq, int preds) {
  if (batch <= 0 || seq <= 0 || preds < 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch dimensions B=", batch,
                                                   " S=", seq, " P=", preds,
                                                   " are invalid"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FillPretrainBatch(ExampleStream& stream, int batch, int seq,
                               int preds, BertBatch* out) {
  RETURN_IF_ERROR(CheckDims(batch, seq, preds));
  out->batch = batch;
  out->seq = seq;
  out->preds = preds;
  const size_t bs = static_cast<size_t>(batch) * seq;
  const size_t bp = static_cast<size_t>(batch) * preds;
  out->input_ids.resize(bs);
  out->input_mask.resize(bs);
  out->segment_ids.resize(bs);
  out->masked_lm_positions.resize(bp);
  out->masked_lm_ids.resize(bp);
  out->masked_lm_weights.resize(bp);
  out->next_sentence_labels.resize(batch);
  out->label_ids.clear();
  std::string record;
  for (int b = 0; b < batch; ++b) {
    RETURN_IF_ERROR(NextWrapping(stream, &record));
    absl::StatusOr<PretrainExample> ex = DecodePretrainExample(record);
    if (!ex.ok()) {
      return Annotate(ex.status(),
                      absl::StrCat("example at ", stream.last_position()));
    }
    RETURN_IF_ERROR(
        CheckLength(stream, "sequence length", ex->input_ids.size(), seq));
    RETURN_IF_ERROR(CheckLength(stream, "masked predictions",
                                ex->masked_lm_positions.size(), preds));
    CopyRow(ex->input_ids, out->input_ids, b);
    CopyRow(ex->input_mask, out->input_mask, b);
    CopyRow(ex->segment_ids, out->segment_ids, b);
    CopyRow(ex->masked_lm_positions, out->masked_lm_positions, b);
    CopyRow(ex->masked_lm_ids, out->masked_lm_ids, b);
    CopyRow(ex->masked_lm_weights, out->masked_lm_weights, b);
    out->next_sentence_labels[b] = ex->next_sentence_label;
  }
  return absl::OkStatus();
}

absl::Status FillClassifyBatch(ExampleStream& stream, int batch, int seq,
                               BertBatch* out) {
  RETURN_IF_ERROR(CheckDims(batch, seq, 0));
  out->batch = batch;
  out->seq = seq;
  out->preds = 0;
  const size_t bs = static_cast<size_t>(batch) * seq;
  out->input_ids.resize(bs);
  out->input_mask.resize(bs);
  out->segment_ids.resize(bs);
  out->masked_lm_positions.clear();
  out->masked_lm_ids.clear();
  out->masked_lm_weights.clear();
  out->next_sentence_labels.clear();
  out->label_ids.resize(batch);
  std::string record;
  for (int b = 0; b < batch; ++b) {
    RETURN_IF_ERROR(NextWrapping(stream, &record));
    absl::StatusOr<ClassifyExample> ex = DecodeClassifyExample(record);
    if (!ex.ok()) {
      return Annotate(ex.status(),
                      absl::StrCat("example at ", stream.last_position()));
    }
    RETURN_IF_ERROR(
        CheckLength(stream, "sequence length", ex->input_ids.size(), seq));
    CopyRow(ex->input_ids, out->input_ids, b);
    CopyRow(ex->input_mask, out->input_mask, b);
    CopyRow(ex->segment_ids, out->segment_ids, b);
    out->label_ids[b] = ex->label_id;
  }
  return absl::OkStatus();
}

}  // namespace io
}  // namespace bertps
