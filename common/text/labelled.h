// Labelled examples for fine-tuning, extracted from the real corpora that
// tools/get_data.sh fetches, cleaned with CleanDocuments (clean.h).
//
// Sources:
//   "spamassassin"     a directory of the SpamAssassin public corpus
//                      (<group>/<file>.txt raw e-mails); label "spam" for
//                      groups whose name starts with "spam", else "ham";
//                      text = Subject and body (the email step always runs)
//   "debian-sections"  a deb822 file of Package / Section / Description
//                      stanzas (data/corpus/debian/packages.deb822); label =
//                      Section without its archive area ("contrib/net" ->
//                      "net"), only packages in `sections` (default
//                      DefaultDebianSections()); text = synopsis line, then
//                      the long description, one paragraph per line
//   "fortunes"         a directory (or file) of fortune files; label = the
//                      category (file name)
// Document ids: the e-mail's relative path, the package name, or
// "<category>:<index>".
//
// Thread-safety: pure functions, thread-safe.
#ifndef BERTPS_COMMON_TEXT_LABELLED_H_
#define BERTPS_COMMON_TEXT_LABELLED_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/text/clean.h"
#include "common/text/documents.h"

namespace bertps::text {

// games, sound, graphics, science, mail, editors, net, text, utils.
const std::vector<std::string>& DefaultDebianSections();

// Parses deb822 stanzas (see above) into unclean documents of the sections
// listed (all when `sections` is empty).
absl::StatusOr<std::vector<Document>> ParseDebianPackages(
    absl::string_view deb822, const std::vector<std::string>& sections);

// Reads `input` for `source` (above), then cleans with `options` (for
// spamassassin with strip_email forced on). InvalidArgument for an unknown
// source; the report (may be null) gets the cleaning counts.
absl::StatusOr<std::vector<Document>> ExtractLabelled(
    const std::string& source, const std::string& input,
    const CleanOptions& options, const std::vector<std::string>& sections,
    CleanReport* report);

}  // namespace bertps::text

#endif  // BERTPS_COMMON_TEXT_LABELLED_H_
