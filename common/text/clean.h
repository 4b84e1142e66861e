// Cleaning of text documents before tokenization: a fixed sequence of steps,
// each enabled by CleanOptions, each counted in a CleanReport.
//
// Steps, in order (the name is the step's key in the report):
//   email       strip_email: the document is a raw e-mail; only the Subject
//               and the readable body stay (ExtractEmailText, email.h). It
//               reads the raw bytes (charsets), so it runs first
//   utf8        always: ill-formed UTF-8 bytes are dropped (each counts as a
//               removed character); never fails, never crashes
//   html        strip_html: StripHtml below
//   dict        strip_dict_markup: StripDictMarkup below (GCIDE)
//   control     strip_control: StripControl below
//   normalize   normalization "NFC" or "NFKC" (utf8proc); "none" skips it.
//               chars_removed is the net change (negative when NFKC expands
//               a ligature such as U+FB01 into "fi")
//   whitespace  normalize_whitespace: NormalizeWhitespace below
//   stopwords   remove_stopwords: RemoveStopwords below
//   empty       always: documents with no non-space character are removed
//   length      min_chars / max_chars (code points, 0 = no limit) and
//               min_words (whitespace-separated words) filters
//   dedup_exact dedup_exact: a document whose text equals an earlier kept
//               document's text is removed
//   dedup_near  dedup_near: MinHash / LSH near-duplicate removal, below
// Documents keep their order; removal never reorders.
//
// Near duplicates: a document's shingles are the hashes of its runs of
// `shingle_words` consecutive words (split at spaces, tabs and newlines,
// ASCII letters lower-cased, punctuation and digits kept; the whole document
// is one shingle when shorter). Its MinHash signature has `minhash_perms`
// values (hash functions seeded from `seed`), cut into bands of r rows;
// documents that share a band are candidates, and a candidate is removed
// when the exact Jaccard similarity of its shingle set with an earlier kept
// document is >= near_threshold. A pair of similarity s is a candidate with
// probability 1 - (1 - s^r)^(perms / r); by default (lsh_bands 0) r is the
// largest power of two for which a pair at the threshold is missed with
// probability at most 1e-6 (LshBandsFor), so the threshold is honoured;
// thresholds too low for any banding of the permutations are refused. The
// result depends only on the documents, their order and the options.
//
// Thread-safety: the functions are pure and thread-safe. CleanReport is a
// plain value (not synchronized).
#ifndef BERTPS_COMMON_TEXT_CLEAN_H_
#define BERTPS_COMMON_TEXT_CLEAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/text/documents.h"

namespace bertps::text {

struct CleanOptions {
  std::string normalization = "NFC";  // NFC, NFKC or none
  bool strip_control = true;
  bool strip_email = false;
  bool strip_html = false;
  bool strip_dict_markup = false;
  bool normalize_whitespace = true;
  bool dedup_exact = false;
  bool dedup_near = false;
  double near_threshold = 0.8;  // Jaccard similarity of shingle sets
  int min_chars = 0;
  int max_chars = 0;
  int min_words = 0;
  bool remove_stopwords = false;
  uint64_t seed = 1;
  int shingle_words = 5;
  int minhash_perms = 128;  // must be a multiple of lsh_bands
  int lsh_bands = 0;        // 0: LshBandsFor(near_threshold, minhash_perms)
};

// The number of LSH bands for near_threshold t and `perms` permutations: the
// most bands (fewest rows r = perms / bands, a power of two dividing perms)
// such that a pair of similarity t is missed, (1 - t^r)^(perms / r), with
// probability <= kMaxNearMiss; with r = 1 already too likely to miss,
// InvalidArgument naming the lowest threshold `perms` can serve.
inline constexpr double kMaxNearMiss = 1e-6;
absl::StatusOr<int> LshBandsFor(double threshold, int perms);

// What each step removed.
struct CleanStepReport {
  std::string step;
  int64_t documents_removed = 0;
  int64_t chars_removed = 0;  // code points (net; see "normalize")
};

struct CleanReport {
  int64_t documents_in = 0;
  int64_t documents_out = 0;
  int64_t chars_in = 0;   // code points of the input (ill-formed bytes: 1)
  int64_t chars_out = 0;
  std::vector<CleanStepReport> steps;  // steps that ran, in order

  // The entry of `step`, appended (zero) when absent.
  CleanStepReport& Step(absl::string_view step);
  // Adds `other`'s counts (steps matched by name; new ones appended).
  void Merge(const CleanReport& other);
  // {"documents_in":..,"documents_out":..,"chars_in":..,"chars_out":..,
  //  "steps":[{"step":"utf8","documents_removed":0,"chars_removed":3},..]}
  std::string ToJson() const;
};

// Runs the enabled steps over `docs`. InvalidArgument for bad options
// (unknown normalization, near_threshold outside (0, 1], shingle_words < 1,
// minhash_perms not a positive multiple of lsh_bands, negative limits).
// `report` may be null; otherwise the run's counts are added to it.
absl::StatusOr<std::vector<Document>> CleanDocuments(std::vector<Document> docs,
                                                     const CleanOptions& options,
                                                     CleanReport* report);

// ---- the steps on one text (valid UTF-8 in, valid UTF-8 out)

// HTML to text: <script>/<style> elements and <!-- comments --> removed with
// their content; tags removed (block-level tags such as p, br, div, li, tr,
// h1-h6 become a line break); character references decoded: numeric
// (&#233; &#xE9;) and the common named ones (&amp; &lt; &gt; &quot; &apos;
// &nbsp; typographic quotes and dashes, &copy; &reg; &trade; &hellip; and
// the Latin-1 accented letters &eacute; &Uuml; ... composed with NFC);
// unknown names are left as they are.
std::string StripHtml(absl::string_view html);

// GCIDE markup to text, for both forms of the dictionary:
//  - dictd (Debian dict-gcide): the headword's pronunciation \Ab"a*cus\ and a
//    respelling in parentheses right after it are removed; {cross refs} lose
//    their braces; letters written in brackets become Unicode: a mark before
//    a letter (['e] acute, [`e] grave, ["u] diaeresis, [~n] tilde, [=a] or
//    [-a] macron, [.a] dot above, [,c] cedilla, [^o] circumflex) or a caret
//    after it ([a^] breve), and named letters and signs ([ae] [oe] [eth]
//    [thorn] [yogh] [ng] [sect] [deg] [root] [pounds] Greek letter names
//    like [alpha] [Delta] ...) resolved by their Unicode names through ICU;
//    lines that are only a source note in brackets ([1913 Webster],
//    [PJC], [WordNet 1.5]) are removed; other brackets ([Obs.]) stay.
//  - the original GCIDE files: <ae/>-style entities (same names) become
//    letters, other <tags> are removed, their content kept.
std::string StripDictMarkup(absl::string_view text);

// Removes Unicode control and format characters: categories Cc (except
// tab, line feed, carriage return), Cf, Co (private use) and Cn
// (unassigned); a backspace (U+0008) also erases the character before it
// on its line (overstriking, as in fortunes: "___\b\b\band" -> "and").
std::string StripControl(absl::string_view text);

// NFC or NFKC (form "NFC"/"NFKC") with utf8proc.
absl::StatusOr<std::string> NormalizeUnicode(absl::string_view text,
                                             absl::string_view form);

// CR LF and lone CR -> LF; every other Unicode space (Zs, tab, VT, FF, NEL,
// U+2028, U+2029 ...) -> " "; runs of spaces collapse to one; lines are
// trimmed; runs of blank lines collapse to one blank line; leading and
// trailing blank lines are removed. Line structure otherwise stays.
std::string NormalizeWhitespace(absl::string_view text);

// Removes the words (whitespace-separated, compared lower-case after
// trimming ASCII punctuation around them) of the English stop-word list
// StopWords(); punctuation around a removed word stays.
std::string RemoveStopwords(absl::string_view text);
const std::vector<std::string>& StopWords();

}  // namespace bertps::text

#endif  // BERTPS_COMMON_TEXT_CLEAN_H_
