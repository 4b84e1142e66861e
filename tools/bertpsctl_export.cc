// bertpsctl export: the model of a checkpoint, without a job.
#include <ostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/model/hf_export.h"
#include "common/ps/checkpoint_export.h"
#include "tools/bertpsctl.h"
#include "tools/bertpsctl_internal.h"
#include "tools/printable.h"

namespace bertps {
namespace ctl {

using internal::Fail;
using internal::GetJob;
using internal::RpcError;

int CmdExport(JobService::StubInterface* stub, const CtlOptions& o,
              const std::string& source, const std::string& dest,
              std::ostream& out, std::ostream& err) {
  HfExportOptions hf;
  std::string checkpoints = source;  // a directory or a manifest
  if (source.find('/') == std::string::npos) {  // a job id
    JobStatus s;
    grpc::Status st = GetJob(stub, o, source, &s);
    if (!st.ok()) return Fail(err, RpcError(o, "GetJob", st, source));
    const JobSpec& spec = s.spec();
    checkpoints = spec.checkpoint().dir();
    if (checkpoints.empty()) {
      return Fail(err, absl::StrCat("job ", Printable(source),
                                    " has no checkpoint.dir: nothing to "
                                    "export from"));
    }
    hf.label_names.assign(spec.label_names().begin(),
                          spec.label_names().end());
    hf.vocab_path = spec.vocab();
    hf.do_lower_case = !spec.vocab_cased();
  }
  if (!o.vocab.empty()) hf.vocab_path = o.vocab;
  absl::StatusOr<std::string> manifest = ps::FindManifest(checkpoints, o.step);
  if (!manifest.ok()) {
    return Fail(err, absl::StrCat("export of ", Printable(source), ": ",
                                  manifest.status().message()));
  }
  absl::StatusOr<int64_t> step = ps::ExportCheckpointModel(*manifest, dest, hf);
  if (!step.ok()) {
    return Fail(err, absl::StrCat("export of ", Printable(source), " (",
                                  Printable(*manifest), "): ",
                                  step.status().message()));
  }
  out << "exported step " << *step << " of " << Printable(source) << " to "
      << Printable(dest) << "\n";
  return kExitOk;
}

}  // namespace ctl
}  // namespace bertps
