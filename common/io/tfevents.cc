#include "common/io/tfevents.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <ctime>

#include "absl/strings/str_format.h"
#include "common/io/file_util.h"
#include "common/io/tfrecord.h"
#include "common/status.h"

namespace bertps {
namespace io {

EventLog::~EventLog() {
  if (fd_ >= 0) close(fd_);
}

tf::Event ScalarEvent(int64_t step, const std::string& tag, double value,
                      double wall_time) {
  tf::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  tf::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  return e;
}

tf::Event StartEvent(int64_t step, double wall_time) {
  tf::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  e.mutable_session_log()->set_status(tf::SessionLog::START);
  return e;
}

void EventLog::AddScalar(int64_t step, const std::string& tag, double value,
                         double wall_time) {
  if (!std::isfinite(value)) return;  // TensorBoard cannot plot them
  pending_.push_back(ScalarEvent(step, tag, value, wall_time));
}

void EventLog::AddStart(int64_t step, double wall_time) {
  pending_.push_back(StartEvent(step, wall_time));
}

absl::Status EventLog::Flush() {
  if (pending_.empty()) return absl::OkStatus();
  std::string bytes;
  if (fd_ < 0) {
    RETURN_IF_ERROR(MakeDirs(dir_));
    static std::atomic<int> sequence{0};
    char host[256] = "localhost";
    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    path_ = absl::StrFormat("%s/events.out.tfevents.%010d.%s.%d.%d", dir_,
                            static_cast<int64_t>(std::time(nullptr)), host,
                            getpid(), sequence++);
    fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) return ErrnoStatus(errno, "create", path_);
    tf::Event version;
    version.set_wall_time(pending_.front().wall_time());
    version.set_file_version("brain.Event:2");
    bytes += FrameTFRecord(version.SerializeAsString());
  }
  for (const tf::Event& e : pending_) bytes += FrameTFRecord(e.SerializeAsString());
  RETURN_IF_ERROR(WriteAll(fd_, bytes, path_));
  if (fsync(fd_) != 0) return ErrnoStatus(errno, "fsync", path_);
  pending_.clear();
  return absl::OkStatus();
}

}  // namespace io
}  // namespace bertps
