// Preprocess items: raw text in, BERT TFRecord files out (docs/preprocess.md).
//
// An item is the documents k of one input file with k % parts == part, read
// in the job's input format. They are cleaned (CleanSpec), augmented (EDA,
// AugmentSpec: num_aug extra copies of each document, or of each training
// document for classification), tokenized (WordPiece, the job's vocab) and
// written as
//   pretrain:  output_dir/pretrain-<item>.tfrecord, create_pretraining_data's
//              instances over the item's documents (random next sentences
//              come from the item's own documents)
//   classify:  output_dir/{train,dev,test}-<item>.tfrecord; the split of a
//              document is a stable hash of (seed, its id)
// plus output_dir/report-<item>.json (what cleaning removed, counts).
// <item> is the 5-digit item index. Every file is written under a temporary
// name and renamed, so a reader never sees a partial file and two members
// doing the same item (a lease given away during a silence) leave one copy.
//
// Determinism: the output bytes are a pure function of (spec, item, input
// bytes): the randomness is keyed by the job seed and the input path and
// part (instances) or the document id (augmentation, splits), never by which
// member does the item, so 1 or N members write identical files.
//
// Thread-safety: a PreprocessItemRunner is used by one thread at a time.
#ifndef BERTPS_WORKER_PREPROCESS_ITEM_H_
#define BERTPS_WORKER_PREPROCESS_ITEM_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/text/tokenizer.h"
#include "common/text/wordnet.h"
#include "proto/coordinator.pb.h"

namespace bertps {

class PreprocessItemRunner {
 public:
  PreprocessItemRunner();
  ~PreprocessItemRunner();
  // One item; the vocabulary and WordNet are loaded once and kept.
  absl::StatusOr<WorkResult> Run(const JobSpec& spec, const WorkItem& item,
                                 const std::atomic<bool>& cancel);

 private:
  std::string vocab_path_;
  bool lower_ = true;
  std::unique_ptr<text::FullTokenizer> tokenizer_;
  std::string wordnet_dir_;
  std::unique_ptr<text::WordNet> wordnet_;
};

// Output file names of item `index` (without the directory); GZIP
// TFRecord files end in ".tfrecord.gz".
std::string PretrainOutputName(int index, bool gzip = false);
std::string ClassifyOutputName(const std::string& split, int index,
                               bool gzip = false);

}  // namespace bertps

#endif  // BERTPS_WORKER_PREPROCESS_ITEM_H_
