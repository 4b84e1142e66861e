// Fuzzes TFRecordReader (common/io/tfrecord.h) on arbitrary file contents.
// Invariants: no crash; every record read advances offset() by its framed
// size; a clean end of file is reached exactly at the file size; an error is
// DataLoss and sticky; a file read cleanly is exactly the framing of its
// records (TFRecord framing is canonical).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/io/crc32c.h"
#include "common/io/tfrecord.h"
#include "fuzz/fuzz_input.h"

namespace {

void AppendFixed(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

std::string Frame(const std::string& record) {
  using bertps::io::Crc32c;
  using bertps::io::MaskCrc;
  std::string out;
  AppendFixed(&out, record.size(), 8);
  AppendFixed(&out, MaskCrc(Crc32c(out.data(), 8)), 4);
  out += record;
  AppendFixed(&out, MaskCrc(Crc32c(record.data(), record.size())), 4);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The reader takes a path: an in-memory file reached through /proc.
  static const int fd = memfd_create("tfrecord_fuzz", 0);
  static const std::string path = absl::StrCat("/proc/self/fd/", fd);
  BERTPS_FUZZ_CHECK(fd >= 0, "memfd_create failed");
  BERTPS_FUZZ_CHECK(ftruncate(fd, 0) == 0, "ftruncate");
  BERTPS_FUZZ_CHECK(pwrite(fd, data, size, 0) == static_cast<ssize_t>(size),
                    "pwrite");

  auto reader = bertps::io::TFRecordReader::Open(path);
  BERTPS_FUZZ_CHECK(reader.ok(), "%s", reader.status().ToString().c_str());
  std::string record, reframed;
  for (int i = 0; i < 100000; ++i) {
    const int64_t before = (*reader)->offset();
    absl::StatusOr<bool> more = (*reader)->Next(&record);
    if (!more.ok()) {
      BERTPS_FUZZ_CHECK(absl::IsDataLoss(more.status()), "%s",
                        more.status().ToString().c_str());
      absl::StatusOr<bool> again = (*reader)->Next(&record);
      BERTPS_FUZZ_CHECK(!again.ok(), "an error must be sticky");
      return 0;
    }
    if (!*more) {
      BERTPS_FUZZ_CHECK((*reader)->offset() == static_cast<int64_t>(size),
                        "clean end at %lld of %zu",
                        static_cast<long long>((*reader)->offset()), size);
      BERTPS_FUZZ_CHECK(reframed == std::string(reinterpret_cast<const char*>(data), size),
                        "records do not frame back to the file");
      return 0;
    }
    BERTPS_FUZZ_CHECK(
        (*reader)->offset() == before + 16 + static_cast<int64_t>(record.size()),
        "offset moved by %lld for a record of %zu bytes",
        static_cast<long long>((*reader)->offset() - before), record.size());
    reframed += Frame(record);
  }
  return 0;
}
