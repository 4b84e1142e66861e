// Line-by-line tokenization of a text stream into token ids: for each input
// line (ended by '\n'; a last line without '\n' counts, an empty input has
// no lines), one output line of the ids of FullTokenizer::Encode(line),
// separated by single spaces (an empty line when there are none). A '\r'
// before the '\n' is whitespace to the tokenizer, so CRLF input works.
//
// Thread-safety: stateless function; the streams belong to the caller.
#ifndef BERTPS_COMMON_TEXT_TOKENIZE_LINES_H_
#define BERTPS_COMMON_TEXT_TOKENIZE_LINES_H_

#include <cstdint>
#include <istream>
#include <ostream>

#include "absl/status/status.h"
#include "common/text/tokenizer.h"

namespace bertps::text {

struct TokenizeLinesStats {
  int64_t lines = 0;
  int64_t bytes = 0;   // input bytes
  int64_t tokens = 0;  // ids written
};

// Reads `in` to its end in large chunks and writes to `out`. DataLoss if
// reading fails before the end, Unavailable if writing fails.
absl::Status TokenizeLines(const FullTokenizer& tokenizer, std::istream& in,
                           std::ostream& out,
                           TokenizeLinesStats* stats = nullptr);

}  // namespace bertps::text

#endif  // BERTPS_COMMON_TEXT_TOKENIZE_LINES_H_
