// WordNet 3.0 synonyms and base forms, read from the database files of the
// Debian package wordnet-base (/usr/share/wordnet):
//
//   index.{noun,verb,adj,adv}  lemma -> offsets of the synsets it belongs to
//   data.{noun,verb,adj,adv}   one synset per line, at its byte offset:
//                              the lemmas of the synset (and pointers, gloss)
//   {noun,verb,adj,adv}.exc    irregular inflections: "geese goose"
//
// (formats: WordNet's wndb(5WN) and morphy(7WN) manual pages.)
//
// BaseForms is morphy: per part of speech, if the word is in that part's
// exception list, the word and its listed bases; otherwise the word and the
// results of one application of each detachment rule (noun: -s, -ses>-s,
// -xes>-x, -zes>-z, -ches>-ch, -shes>-sh, -men>-man, -ies>-y; verb: -s,
// -ies>-y, -es>-e, -es, -ed>-e, -ed, -ing>-e, -ing; adj: -er, -est, -er>-e,
// -est>-e; adv: none). Only candidates that are lemmas of that part of
// speech in the index are kept. (WordNet's C morphy also splits collocations
// word by word; that is not done here.)
//
// Synonyms(word) is every lemma of every synset of every base form of the
// word, '_' written as ' ', adjective position markers such as "(p)"
// dropped, WordNet's capitalisation kept ("Canis familiaris"), minus the word
// itself (compared ASCII case-insensitively), sorted by byte value without
// duplicates.
//
// Words are looked up ASCII-lowercased with ' ' read as '_' (WordNet's index
// is lowercase with underscores).
//
// Load parses and checks every file: each index offset must name a synset
// line of the data file, and each data line must start with its own byte
// offset; anything else is an error naming the file and line.
//
// Thread-safety: immutable after Load; const methods may be called
// concurrently. Ownership: a WordNet owns its tables (~60 MB for 3.0);
// movable, not copyable.
#ifndef BERTPS_COMMON_TEXT_WORDNET_H_
#define BERTPS_COMMON_TEXT_WORDNET_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bertps::text {

class WordNet {
 public:
  // Parts of speech, in the order of the database files.
  enum Pos : int { kNoun = 0, kVerb = 1, kAdj = 2, kAdv = 3 };
  static constexpr int kNumPos = 4;

  // Reads `dir`/{index,data}.{noun,verb,adj,adv} and `dir`/{pos}.exc.
  // NotFound if a file is missing, DataLoss if one is malformed.
  static absl::StatusOr<WordNet> Load(const std::string& dir);

  WordNet(WordNet&&) = default;
  WordNet& operator=(WordNet&&) = default;
  WordNet(const WordNet&) = delete;
  WordNet& operator=(const WordNet&) = delete;

  // Lemmas sharing a synset with any base form of `word` (see above).
  std::vector<std::string> Synonyms(absl::string_view word) const;
  // morphy over all four parts of speech: sorted, without duplicates, in
  // WordNet's spelling (lowercase, '_' between words).
  std::vector<std::string> BaseForms(absl::string_view word) const;
  // morphy for one part of speech, in morphy's order (word first).
  std::vector<std::string> BaseForms(absl::string_view word, Pos pos) const;

  // Number of synsets and of index lemmas of one part of speech.
  size_t num_synsets(Pos pos) const { return synset_begin_[pos].size(); }
  size_t num_lemmas(Pos pos) const;

 private:
  WordNet() = default;

  // Synset i of part p has lemmas lemmas_[p][synset_begin_[p][i] ..
  // synset_begin_[p][i+1]) (the last ends at lemmas_[p].size()).
  std::array<std::vector<std::string>, kNumPos> lemmas_;
  std::array<std::vector<uint32_t>, kNumPos> synset_begin_;
  // Index lemma -> its synsets' numbers, one map per part of speech.
  std::array<absl::flat_hash_map<std::string, std::vector<uint32_t>>, kNumPos>
      index_;
  // Exception list: inflected form -> bases.
  std::array<absl::flat_hash_map<std::string, std::vector<std::string>>,
             kNumPos>
      exceptions_;
};

}  // namespace bertps::text

#endif  // BERTPS_COMMON_TEXT_WORDNET_H_
