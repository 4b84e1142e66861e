#include "common/io/tfevents.h"

#include <filesystem>
#include <string>
#include <vector>

#include "common/io/tfrecord.h"
#include "gtest/gtest.h"

namespace bertps {
namespace io {
namespace {

namespace fs = std::filesystem;

// The events written read back as TensorBoard reads them: TFRecord records of
// tf.Event, the file version first, scalars with their tags and steps, and a
// START session log where a run continues from an earlier step.
TEST(EventLog, WritesTensorBoardEvents) {
  const std::string dir = ::testing::TempDir() + "/tb";
  fs::remove_all(dir);
  EventLog log(dir);
  log.AddScalar(1, "train/loss", 7.5, 1000.0);
  log.AddScalar(1, "train/learning_rate", 1e-4, 1000.0);
  log.AddScalar(2, "train/loss", std::nan(""), 1001.0);  // not plotted
  ASSERT_TRUE(log.Flush().ok());
  log.AddStart(1, 1002.0);
  log.AddScalar(2, "train/loss", 7.25, 1003.0);
  ASSERT_TRUE(log.Flush().ok());
  ASSERT_TRUE(log.Flush().ok());  // nothing pending: nothing written
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].filename().string().rfind("events.out.tfevents.", 0), 0u);
  auto reader = TFRecordReader::Open(files[0].string());
  ASSERT_TRUE(reader.ok());
  std::vector<tf::Event> events;
  std::string record;
  while (true) {
    auto got = (*reader)->Next(&record);
    ASSERT_TRUE(got.ok()) << got.status();
    if (!*got) break;
    tf::Event e;
    ASSERT_TRUE(e.ParseFromString(record));
    events.push_back(e);
  }
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_EQ(events[1].step(), 1);
  EXPECT_EQ(events[1].summary().value(0).tag(), "train/loss");
  EXPECT_FLOAT_EQ(events[1].summary().value(0).simple_value(), 7.5f);
  EXPECT_DOUBLE_EQ(events[1].wall_time(), 1000.0);
  EXPECT_EQ(events[2].summary().value(0).tag(), "train/learning_rate");
  EXPECT_EQ(events[3].session_log().status(), tf::SessionLog::START);
  EXPECT_EQ(events[3].step(), 1);
  EXPECT_EQ(events[4].step(), 2);
  EXPECT_FLOAT_EQ(events[4].summary().value(0).simple_value(), 7.25f);
}

}  // namespace
}  // namespace io
}  // namespace bertps
