// TensorBoard event files: one events.out.tfevents.<unix seconds>.<host>
// .<pid>.<n> file per EventLog (per job and coordinator process) in its
// directory, a TFRecord file (common/io/tfrecord.h) of tf.Event records
// (proto/event.proto): the file version first, then scalar summaries,
// appended at each Flush() and fsync'ed. A crash can leave a last record cut
// short, which TensorBoard's reader skips.
//
// A run that starts again from an earlier step (a restart from a
// checkpoint, a restart of the coordinator) writes a SessionLog START at
// that step: TensorBoard then drops the points past it that were written
// before, so the curves continue without duplicates (TensorFlow's own
// convention). A coordinator restarted writes a new file, and TensorBoard
// reads every file of the directory in order of name.
//
// Thread-safety: not thread-safe.
#ifndef BERTPS_COMMON_IO_TFEVENTS_H_
#define BERTPS_COMMON_IO_TFEVENTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/event.pb.h"

namespace bertps {
namespace io {

// A scalar event, and a START at `step` (see EventLog).
tf::Event ScalarEvent(int64_t step, const std::string& tag, double value,
                      double wall_time);
tf::Event StartEvent(int64_t step, double wall_time);

class EventLog {
 public:
  explicit EventLog(std::string dir) : dir_(std::move(dir)) {}
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  void AddScalar(int64_t step, const std::string& tag, double value,
                 double wall_time);
  // The run continues from `step` (TensorBoard purges the later points).
  void AddStart(int64_t step, double wall_time);
  void Add(tf::Event event) { pending_.push_back(std::move(event)); }
  bool empty() const { return pending_.empty(); }
  // Appends the pending events to this log's file (created, with the
  // directory, at the first flush) and fsyncs it.
  absl::Status Flush();
  const std::string& dir() const { return dir_; }
  const std::string& path() const { return path_; }

 private:
  std::string dir_;
  std::string path_;
  int fd_ = -1;
  std::vector<tf::Event> pending_;
};

}  // namespace io
}  // namespace bertps

#endif  // BERTPS_COMMON_IO_TFEVENTS_H_
