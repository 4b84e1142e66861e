// Documents of text and the file formats they are read from and written to
// by the preprocessing tools (cleaning, labelled extraction, pretraining).
//
// Formats read by ReadDocuments (a path is a file or a directory; a
// directory is read recursively, files in byte order of their relative
// paths, skipping hidden files, files named SOURCE and fortune *.dat files):
//   "text"        documents separated by blank lines, one sentence per line
//                 (create_pretraining_data.py's input); text keeps the lines
//   "paragraphs"  blank-line separated paragraphs, each one document; the
//                 lines of a paragraph are joined with one space
//   "jsonl"       one JSON object per line: {"id", "label", "text"} (id and
//                 label optional; a missing id becomes "<file>:<line>")
//   "email"       a whole file is one document (a raw RFC 5322 message);
//                 id = path relative to the input directory (or file name)
//   "fortunes"    %-separated items (fortune(6) files); label = file name
//                 (the category), id = "<category>:<index>"
// Ids of "text"/"paragraphs" documents are "<file>:<index>" (0-based).
// Bytes are passed through as read: invalid UTF-8 is the cleaner's concern
// (see clean.h), except that the sentence splitter drops ill-formed bytes.
//
// Thread-safety: every function is thread-safe (no shared state).
#ifndef BERTPS_COMMON_TEXT_DOCUMENTS_H_
#define BERTPS_COMMON_TEXT_DOCUMENTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bertps::text {

struct Document {
  std::string id;
  std::string text;
  std::string label;  // empty when unlabelled
};

// Reads every document under `path` in `format` (above). NotFound for a
// missing path, InvalidArgument for an unknown format or a malformed JSON
// line (naming file and line).
absl::StatusOr<std::vector<Document>> ReadDocuments(const std::string& path,
                                                    const std::string& format);

// `s` with every ill-formed UTF-8 byte (see unicode.h DecodeUtf8) replaced
// by U+FFFD (replace) or dropped; *bad (if not null) gets their number.
std::string SanitizeUtf8(absl::string_view s, bool replace, int64_t* bad);

// Parses one file's contents (`name` only names ids and errors).
absl::StatusOr<std::vector<Document>> ParseDocuments(absl::string_view data,
                                                     const std::string& name,
                                                     const std::string& format);

// Splits `text` into sentences with ICU's English sentence BreakIterator
// (with ICU's standard abbreviation suppressions: "Mr. Smith" stays whole;
// "e.g." before a capital letter still ends a sentence).
// Each line of `text` is split on its own (a line break always ends a
// sentence); sentences are trimmed and empty ones dropped. Ill-formed UTF-8
// bytes are dropped.
std::vector<std::string> SplitSentences(absl::string_view text);

// Writes documents as create-pretraining-data reads them: each document's
// sentences (SplitSentences) one per line, a blank line after each
// document; documents without a sentence are skipped. Replaces `path`.
absl::Status WriteTextDocuments(const std::vector<Document>& docs,
                                const std::string& path);

// Writes one {"id","label","text"} JSON object per line (keys sorted; label
// omitted when empty). Ill-formed UTF-8 is replaced by U+FFFD (JSON must be
// UTF-8). Replaces `path`.
absl::Status WriteJsonl(const std::vector<Document>& docs,
                        const std::string& path);

}  // namespace bertps::text

#endif  // BERTPS_COMMON_TEXT_DOCUMENTS_H_
