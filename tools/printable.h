// Printable: text from the network made safe to print on a terminal.
// Job names, reasons, events and error messages come from whoever submitted
// the job or runs the daemons; printed raw, a newline forges a line and an
// ANSI/OSC escape sequence rewrites the screen, the window title or the
// clipboard. Every code point that is not printable is escaped:
//   C0 controls and DEL      \n \r \t \e, else \xNN
//   C1 controls (U+0080-9F)  \u0085 ...
//   bidirectional overrides and isolates (U+202A-202E, U+2066-2069),
//   line and paragraph separators (U+2028, U+2029)   \u202e ...
//   bytes that are not UTF-8 \xNN
// Everything else, non-ASCII letters included, is kept; a backslash is
// doubled, so the output reads back unambiguously.
// Thread-safety: a pure function.
#ifndef BERTPS_TOOLS_PRINTABLE_H_
#define BERTPS_TOOLS_PRINTABLE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace bertps {

std::string Printable(absl::string_view text);

}  // namespace bertps

#endif  // BERTPS_TOOLS_PRINTABLE_H_
