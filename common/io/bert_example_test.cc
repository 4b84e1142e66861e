#include "common/io/bert_example.h"

#include <sys/stat.h>

#include <limits>
#include <set>
#include <string>
#include <vector>

#include "common/io/tfrecord.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/example.pb.h"

namespace bertps {
namespace io {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  const char* base = getenv("TEST_TMPDIR");
  const std::string dir = std::string(base ? base : "/tmp") + "/" + name;
  mkdir(dir.c_str(), 0755);
  return dir;
}

// Example `k` of a family with S = 4, P = 2; values depend on k.
PretrainExample MakePretrain(int k) {
  PretrainExample ex;
  ex.input_ids = {101, 1000 + k, 103, 102};
  ex.input_mask = {1, 1, 1, 0};
  ex.segment_ids = {0, 0, 1, 1};
  ex.masked_lm_positions = {2, 0};
  ex.masked_lm_ids = {2000 + k, 0};
  ex.masked_lm_weights = {1.0f, 0.0f};
  ex.next_sentence_label = k % 2;
  return ex;
}

ClassifyExample MakeClassify(int k) {
  ClassifyExample ex;
  ex.input_ids = {101, 500 + k, 102};
  ex.input_mask = {1, 1, 1};
  ex.segment_ids = {0, 0, 0};
  ex.label_id = k % 3;
  return ex;
}

void WriteFile(const std::string& path, const std::vector<std::string>& recs) {
  auto w = TFRecordWriter::Open(path);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const auto& r : recs) ASSERT_TRUE((*w)->Write(r).ok());
  ASSERT_TRUE((*w)->Close().ok());
}

TEST(ExampleProtoTest, WireFormatMatchesTfTrainExample) {
  // Example{features{feature{key "a" value{int64_list{value [1, 2]}}}}},
  // encoded by hand from the field numbers of TensorFlow's feature.proto.
  const std::string ints(
      "\x0a\x0d"  // Example.features (1), 13 bytes
      "\x0a\x0b"  // Features.feature (1) map entry, 11 bytes
      "\x0a\x01"
      "a"                  // key (1)
      "\x12\x06"           // value (2): Feature, 6 bytes
      "\x1a\x04"           // Feature.int64_list (3), 4 bytes
      "\x0a\x02\x01\x02",  // Int64List.value (1), packed [1, 2]
      15);
  tf::Example ex;
  ASSERT_TRUE(ex.ParseFromString(ints));
  const auto& f = ex.features().feature().at("a");
  ASSERT_EQ(f.kind_case(), tf::Feature::kInt64List);
  EXPECT_THAT(f.int64_list().value(), ElementsAre(1, 2));
  EXPECT_EQ(ex.SerializeAsString(), ints);

  // float_list (2) with [1.0f] and bytes_list (1) with ["hi"].
  tf::Example ex2;
  (*ex2.mutable_features()->mutable_feature())["f"]
      .mutable_float_list()
      ->add_value(1.0f);
  EXPECT_EQ(ex2.SerializeAsString(),
            std::string("\x0a\x0f\x0a\x0d\x0a\x01"
                        "f"
                        "\x12\x08\x12\x06\x0a\x04\x00\x00\x80\x3f",
                        17));
  tf::Example ex3;
  (*ex3.mutable_features()->mutable_feature())["b"]
      .mutable_bytes_list()
      ->add_value("hi");
  EXPECT_EQ(ex3.SerializeAsString(), std::string("\x0a\x0d\x0a\x0b\x0a\x01"
                                                 "b"
                                                 "\x12\x06\x0a\x04\x0a\x02hi",
                                                 15));
}

TEST(BertExampleTest, PretrainRoundTrip) {
  const PretrainExample ex = MakePretrain(7);
  const std::string bytes = EncodePretrainExample(ex);
  EXPECT_EQ(bytes, EncodePretrainExample(ex));  // Deterministic.
  auto back = DecodePretrainExample(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->input_ids, ex.input_ids);
  EXPECT_EQ(back->input_mask, ex.input_mask);
  EXPECT_EQ(back->segment_ids, ex.segment_ids);
  EXPECT_EQ(back->masked_lm_positions, ex.masked_lm_positions);
  EXPECT_EQ(back->masked_lm_ids, ex.masked_lm_ids);
  EXPECT_EQ(back->masked_lm_weights, ex.masked_lm_weights);
  EXPECT_EQ(back->next_sentence_label, 1);

  // The features are exactly BERT's names and kinds.
  tf::Example proto;
  ASSERT_TRUE(proto.ParseFromString(bytes));
  const auto& m = proto.features().feature();
  EXPECT_EQ(m.size(), 7u);
  for (const char* name :
       {"input_ids", "input_mask", "segment_ids", "masked_lm_positions",
        "masked_lm_ids", "next_sentence_labels"}) {
    ASSERT_TRUE(m.count(name)) << name;
    EXPECT_EQ(m.at(name).kind_case(), tf::Feature::kInt64List) << name;
  }
  EXPECT_EQ(m.at("masked_lm_weights").kind_case(), tf::Feature::kFloatList);
  EXPECT_THAT(m.at("next_sentence_labels").int64_list().value(),
              ElementsAre(1));
}

TEST(BertExampleTest, ClassifyRoundTrip) {
  const ClassifyExample ex = MakeClassify(5);
  const std::string bytes = EncodeClassifyExample(ex);
  auto back = DecodeClassifyExample(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->input_ids, ex.input_ids);
  EXPECT_EQ(back->input_mask, ex.input_mask);
  EXPECT_EQ(back->segment_ids, ex.segment_ids);
  EXPECT_EQ(back->label_id, 2);
  tf::Example proto;
  ASSERT_TRUE(proto.ParseFromString(bytes));
  EXPECT_THAT(proto.features().feature().at("label_ids").int64_list().value(),
              ElementsAre(2));
  EXPECT_THAT(
      proto.features().feature().at("is_real_example").int64_list().value(),
      ElementsAre(1));
}

// Encodes MakePretrain(0) after `edit` changed the proto.
template <typename Edit>
std::string EditedPretrain(Edit edit) {
  tf::Example proto;
  EXPECT_TRUE(proto.ParseFromString(EncodePretrainExample(MakePretrain(0))));
  edit(*proto.mutable_features()->mutable_feature());
  return proto.SerializeAsString();
}

void ExpectDecodeError(const std::string& bytes, const std::string& feature,
                       const std::string& what) {
  auto r = DecodePretrainExample(bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("\"" + feature + "\""));
  EXPECT_THAT(r.status().message(), HasSubstr(what));
}

TEST(BertExampleTest, DecodeErrors) {
  using Map = google::protobuf::Map<std::string, tf::Feature>;
  ExpectDecodeError(EditedPretrain([](Map& m) { m.erase("segment_ids"); }),
                    "segment_ids", "missing");
  ExpectDecodeError(EditedPretrain([](Map& m) {
                      m["masked_lm_weights"].mutable_int64_list()->add_value(1);
                    }),
                    "masked_lm_weights", "not a float_list");
  ExpectDecodeError(EditedPretrain([](Map& m) {
                      m["input_ids"].mutable_float_list()->add_value(1);
                    }),
                    "input_ids", "not an int64_list");
  ExpectDecodeError(EditedPretrain([](Map& m) {
                      m["input_mask"].mutable_int64_list()->add_value(1);
                    }),
                    "input_mask", "has 5 values");
  ExpectDecodeError(
      EditedPretrain([](Map& m) {
        m["segment_ids"].mutable_int64_list()->mutable_value()->RemoveLast();
      }),
      "segment_ids", "has 3 values");
  ExpectDecodeError(EditedPretrain([](Map& m) {
                      m["masked_lm_ids"].mutable_int64_list()->add_value(1);
                    }),
                    "masked_lm_ids", "has 3 values");
  ExpectDecodeError(EditedPretrain([](Map& m) {
                      m["masked_lm_weights"].mutable_float_list()->add_value(1);
                    }),
                    "masked_lm_weights", "has 3 values");
  ExpectDecodeError(EditedPretrain([](Map& m) {
                      m["input_ids"].mutable_int64_list()->set_value(
                          1, int64_t{1} << 33);
                    }),
                    "input_ids", "outside int32");
  ExpectDecodeError(
      EditedPretrain([](Map& m) {
        m["next_sentence_labels"].mutable_int64_list()->add_value(0);
      }),
      "next_sentence_labels", "expected 1");
  auto garbage = DecodePretrainExample("\xff\xff\xff");
  EXPECT_TRUE(absl::IsInvalidArgument(garbage.status()));
  EXPECT_THAT(garbage.status().message(), HasSubstr("tf.train.Example"));
  // A classification example is not a pretraining example.
  ExpectDecodeError(EncodeClassifyExample(MakeClassify(0)),
                    "masked_lm_positions", "missing");
  auto c = DecodeClassifyExample(EncodePretrainExample(MakePretrain(0)));
  EXPECT_THAT(c.status().message(), HasSubstr("\"label_ids\""));
}

TEST(ExampleStreamTest, BatchAcrossTwoFilesWithWrapAround) {
  const std::string dir = TempDir("two_files");
  // File a: examples 0, 1, 2; file b: 3, 4.
  WriteFile(dir + "/part-a.tfrecord", {EncodePretrainExample(MakePretrain(0)),
                                       EncodePretrainExample(MakePretrain(1)),
                                       EncodePretrainExample(MakePretrain(2))});
  WriteFile(dir + "/part-b.tfrecord", {EncodePretrainExample(MakePretrain(3)),
                                       EncodePretrainExample(MakePretrain(4))});
  auto stream = ExampleStream::Open({dir + "/part-*.tfrecord"});
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_THAT((*stream)->files(),
              ElementsAre(dir + "/part-a.tfrecord", dir + "/part-b.tfrecord"));
  BertBatch batch;
  ASSERT_TRUE(FillPretrainBatch(**stream, 4, 4, 2, &batch).ok());
  EXPECT_EQ((*stream)->epoch(), 0);
  EXPECT_EQ(batch.batch, 4);
  EXPECT_EQ(batch.input_ids.size(), 16u);
  EXPECT_THAT(batch.next_sentence_labels, ElementsAre(0, 1, 0, 1));
  // Second batch: 4, then wrap around to 0, 1, 2.
  ASSERT_TRUE(FillPretrainBatch(**stream, 4, 4, 2, &batch).ok());
  EXPECT_EQ((*stream)->epoch(), 1);
  std::vector<int32_t> second_tokens;
  for (int b = 0; b < 4; ++b)
    second_tokens.push_back(batch.input_ids[b * 4 + 1]);
  EXPECT_THAT(second_tokens, ElementsAre(1004, 1000, 1001, 1002));
  EXPECT_THAT(batch.masked_lm_ids,
              ElementsAre(2004, 0, 2000, 0, 2001, 0, 2002, 0));
  EXPECT_THAT(batch.masked_lm_positions, ElementsAre(2, 0, 2, 0, 2, 0, 2, 0));
  EXPECT_THAT(batch.masked_lm_weights, ElementsAre(1, 0, 1, 0, 1, 0, 1, 0));
  EXPECT_THAT(std::vector<int32_t>(batch.segment_ids.begin(),
                                   batch.segment_ids.begin() + 4),
              ElementsAre(0, 0, 1, 1));
  EXPECT_TRUE(batch.label_ids.empty());
  EXPECT_TRUE(batch.Validate(30522, 512, 2, 0).ok());

  // A batch whose S or P differs from the examples' is refused, naming the
  // example's file and offset.
  auto s = FillPretrainBatch(**stream, 1, 8, 2, &batch);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("part-b.tfrecord@0"));
  EXPECT_THAT(s.message(), HasSubstr("sequence length 4"));
  s = FillPretrainBatch(**stream, 1, 4, 3, &batch);
  EXPECT_THAT(s.message(), HasSubstr("masked predictions 2"));
}

TEST(ExampleStreamTest, ClassifyBatchAndReset) {
  const std::string dir = TempDir("classify");
  WriteFile(dir + "/train.tfrecord", {EncodeClassifyExample(MakeClassify(0)),
                                      EncodeClassifyExample(MakeClassify(1))});
  auto stream = ExampleStream::Open({dir + "/train.tfrecord"});
  ASSERT_TRUE(stream.ok());
  BertBatch batch;
  ASSERT_TRUE(FillClassifyBatch(**stream, 3, 3, &batch).ok());
  EXPECT_THAT(batch.label_ids, ElementsAre(0, 1, 0));
  EXPECT_EQ(batch.preds, 0);
  EXPECT_TRUE(batch.masked_lm_ids.empty());
  EXPECT_TRUE(batch.next_sentence_labels.empty());
  EXPECT_EQ((*stream)->epoch(), 1);
  EXPECT_TRUE(batch.Validate(1000, 512, 2, 3).ok());
  // label 1 is outside 1 class.
  EXPECT_FALSE(batch.Validate(1000, 512, 2, 1).ok());

  (*stream)->Reset();
  EXPECT_EQ((*stream)->epoch(), 2);
  std::string rec;
  ASSERT_TRUE(*(*stream)->Next(&rec));
  EXPECT_EQ(DecodeClassifyExample(rec)->label_id, 0);
  // Pretraining records are not classification records.
  auto s = FillPretrainBatch(**stream, 1, 3, 0, &batch);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(), HasSubstr("train.tfrecord@"));
}

TEST(ExampleStreamTest, EmptyFilesAreAnError) {
  const std::string dir = TempDir("empty");
  WriteFile(dir + "/e.tfrecord", {});
  auto stream = ExampleStream::Open({dir + "/*.tfrecord"});
  ASSERT_TRUE(stream.ok());
  BertBatch batch;
  auto s = FillPretrainBatch(**stream, 2, 4, 2, &batch);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("no records"));
}

TEST(ExampleStreamTest, CorruptFileErrorNamesFile) {
  const std::string dir = TempDir("corrupt");
  WriteFile(dir + "/c.tfrecord", {"xxxx"});
  {
    FILE* f = fopen((dir + "/c.tfrecord").c_str(), "r+b");
    fseek(f, 13, SEEK_SET);
    fputc('Y', f);
    fclose(f);
  }
  auto stream = ExampleStream::Open({dir + "/c.tfrecord"});
  ASSERT_TRUE(stream.ok());
  std::string rec;
  auto r = (*stream)->Next(&rec);
  EXPECT_TRUE(absl::IsDataLoss(r.status()));
  EXPECT_THAT(r.status().message(), HasSubstr("c.tfrecord"));
}

// A pattern matching a FIFO is refused at once (reading it would block),
// and a missing directory names the directory and the reason.
TEST(ExampleStreamTest, SpecialFilesAndMissingDirectoriesAreRefused) {
  const std::string dir = TempDir("special");
  WriteFile(dir + "/a.tfrecord", {"x"});
  ASSERT_EQ(mkfifo((dir + "/b.tfrecord").c_str(), 0600), 0);
  auto files = MatchShardFiles({dir + "/*.tfrecord"});
  ASSERT_FALSE(files.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(files.status())) << files.status();
  EXPECT_THAT(files.status().message(),
              HasSubstr("b.tfrecord is not a regular file (a FIFO"));
  EXPECT_FALSE(ExampleStream::Open({dir + "/*.tfrecord"}).ok());
  auto dev = MatchShardFiles({"/dev/zero"});
  ASSERT_FALSE(dev.ok());
  EXPECT_THAT(dev.status().message(), HasSubstr("/dev/zero is not a regular"));
  auto missing = MatchShardFiles({dir + "/no-such-dir/*.tfrecord"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              HasSubstr("cannot read directory " + dir + "/no-such-dir"));
  EXPECT_THAT(missing.status().message(), HasSubstr("No such file"));
}

TEST(ExampleStreamTest, ShardingPicksDisjointFiles) {
  const std::string dir = TempDir("shards");
  std::vector<std::string> names;
  for (int i = 0; i < 7; ++i) {
    names.push_back(dir + "/shard-" + std::to_string(i) + ".tfrecord");
    WriteFile(names.back(), {EncodePretrainExample(MakePretrain(i))});
  }
  // Two patterns that overlap: each file still counted once.
  const std::vector<std::string> patterns = {dir + "/shard-*.tfrecord",
                                             dir + "/shard-1.tfrecord"};
  auto all = MatchShardFiles(patterns);
  ASSERT_TRUE(all.ok());
  EXPECT_THAT(*all, ElementsAreArray(names));
  std::set<std::string> seen;
  size_t total = 0;
  for (int shard = 0; shard < 3; ++shard) {
    auto mine = MatchShardFiles(patterns, shard, 3);
    ASSERT_TRUE(mine.ok());
    for (const auto& f : *mine) seen.insert(f);
    total += mine->size();
    EXPECT_EQ((*mine)[0], names[shard]);  // Index % 3 == shard.
    // Deterministic.
    EXPECT_EQ(*mine, *MatchShardFiles(patterns, shard, 3));
  }
  EXPECT_EQ(total, 7u);
  EXPECT_EQ(seen.size(), 7u);
  EXPECT_THAT(*MatchShardFiles(patterns, 1, 3),
              ElementsAre(names[1], names[4]));

  EXPECT_TRUE(absl::IsNotFound(MatchShardFiles(patterns, 7, 8).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(MatchShardFiles(patterns, 3, 3).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(MatchShardFiles({}, 0, 1).status()));
  auto none = MatchShardFiles({dir + "/nothing-*"});
  EXPECT_TRUE(absl::IsNotFound(none.status()));
  EXPECT_THAT(none.status().message(), HasSubstr("nothing-*"));
}

BertBatch ValidPretrainBatch() {
  BertBatch b;
  b.batch = 2;
  b.seq = 4;
  b.preds = 2;
  b.input_ids = {101, 5, 6, 102, 101, 7, 102, 0};
  b.input_mask = {1, 1, 1, 1, 1, 1, 1, 0};
  b.segment_ids = {0, 0, 1, 1, 0, 0, 0, 0};
  b.masked_lm_positions = {1, 2, 1, 0};
  b.masked_lm_ids = {5, 6, 7, 0};
  b.masked_lm_weights = {1, 1, 1, 0};
  b.next_sentence_labels = {0, 1};
  return b;
}

TEST(BertBatchTest, ValidateAcceptsGoodBatch) {
  EXPECT_TRUE(ValidPretrainBatch().Validate(200, 4, 2, 0).ok());
}

TEST(BertBatchTest, ValidateRejectsBadValues) {
  struct Case {
    const char* name;
    void (*edit)(BertBatch&);
    const char* needle;
  };
  const Case cases[] = {
      {"id too big", [](BertBatch& b) { b.input_ids[5] = 200; },
       "input_ids[1, 1] = 200"},
      {"negative id", [](BertBatch& b) { b.input_ids[0] = -1; }, "input_ids"},
      {"mask 2", [](BertBatch& b) { b.input_mask[3] = 2; }, "input_mask[0, 3]"},
      {"segment 2", [](BertBatch& b) { b.segment_ids[2] = 2; }, "segment_ids"},
      {"position = seq", [](BertBatch& b) { b.masked_lm_positions[3] = 4; },
       "masked_lm_positions[1, 1] = 4"},
      {"masked id", [](BertBatch& b) { b.masked_lm_ids[0] = 999; },
       "masked_lm_ids"},
      {"nan weight",
       [](BertBatch& b) {
         b.masked_lm_weights[1] = std::numeric_limits<float>::quiet_NaN();
       },
       "masked_lm_weights[0, 1]"},
      {"nsp label", [](BertBatch& b) { b.next_sentence_labels[1] = 2; },
       "next_sentence_labels"},
      {"short array", [](BertBatch& b) { b.segment_ids.pop_back(); },
       "segment_ids has 7 values, expected 8"},
      {"labels without classes",
       [](BertBatch& b) {
         b.label_ids = {0, 0};
       },
       "label_ids"},
      {"seq over max",
       [](BertBatch& b) {
         b.seq = 8;
         b.batch = 1;
       },
       "max positions"},
      {"zero batch", [](BertBatch& b) { b.batch = 0; }, "B=0"},
  };
  for (const Case& c : cases) {
    BertBatch b = ValidPretrainBatch();
    c.edit(b);
    const absl::Status s = b.Validate(200, 4, 2, 0);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << c.name << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.needle)) << c.name;
  }
  BertBatch b = ValidPretrainBatch();
  b.label_ids = {0, 3};
  EXPECT_THAT(b.Validate(200, 4, 2, 3).message(), HasSubstr("label_ids[1, 0]"));
  b.label_ids = {0};
  EXPECT_FALSE(b.Validate(200, 4, 2, 3).ok());
}

}  // namespace
}  // namespace io
}  // namespace bertps
