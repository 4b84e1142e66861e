// Fuzzes the JobSpec parser (common/cluster/job_spec.h) on arbitrary
// text (protobuf text format or JSON). Invariants: no crash; errors are
// InvalidArgument; an accepted spec is valid (as a client checks it: outputs
// a coordinator may fill can be missing), re-validates after a text
// format round trip, and its model/optimizer pieces resolve or fail cleanly.
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/proto_mutator.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "common/cluster/job_spec.h"

[[maybe_unused]] static const bool kQuiet = bertps::fuzz::QuietProtobuf();

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<bertps::JobSpec> spec = bertps::ParseJobSpec(text);
  if (!spec.ok()) {
    BERTPS_FUZZ_CHECK(absl::IsInvalidArgument(spec.status()), "%s",
                      spec.status().ToString().c_str());
    return 0;
  }
  // The parser is a client's check: outputs a coordinator's --jobs_root may
  // fill are allowed missing, as ParseJobSpec allows them.
  absl::Status valid =
      bertps::ValidateJobSpec(*spec, /*outputs_may_default=*/true);
  BERTPS_FUZZ_CHECK(valid.ok(), "accepted spec fails validation: %s",
                    valid.ToString().c_str());
  std::string printed;
  BERTPS_FUZZ_CHECK(google::protobuf::TextFormat::PrintToString(*spec, &printed),
                    "print");
  absl::StatusOr<bertps::JobSpec> again = bertps::ParseJobSpec(printed);
  BERTPS_FUZZ_CHECK(again.ok(), "printed spec does not parse: %s\n%s",
                    again.status().ToString().c_str(), printed.c_str());
  BERTPS_FUZZ_CHECK(
      google::protobuf::util::MessageDifferencer::Equals(*spec, *again),
      "text round trip changed the spec:\n%s", printed.c_str());
  // The model is a preset or a config.json path; only presets are resolved
  // here (a path would make the fuzzer read arbitrary files).
  if (spec->model().find('/') == std::string::npos &&
      spec->model().find('.') == std::string::npos) {
    absl::StatusOr<bertps::BertConfig> config = bertps::JobModelConfig(*spec);
    if (!config.ok()) {
      BERTPS_FUZZ_CHECK(absl::IsInvalidArgument(config.status()) ||
                            absl::IsNotFound(config.status()),
                        "%s", config.status().ToString().c_str());
    }
  }
  absl::StatusOr<bertps::optim::OptimizerConfig> opt =
      bertps::JobOptimizerConfig(*spec);
  BERTPS_FUZZ_CHECK(opt.ok() || absl::IsInvalidArgument(opt.status()), "%s",
                    opt.status().ToString().c_str());
  return 0;
}
