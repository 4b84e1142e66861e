// A TFRecord file of 8 pretraining examples of 16 tokens whose example 5
// holds token id 40000 (outside any test vocabulary): what the train
// workers' and the pipeline stages' batch reader must refuse, naming the
// file and the example's offset.
#ifndef BERTPS_TESTS_BAD_EXAMPLE_FILE_H_
#define BERTPS_TESTS_BAD_EXAMPLE_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "common/io/bert_example.h"
#include "common/io/tfrecord.h"
#include "common/status.h"

namespace bertps {

inline absl::Status WriteFileWithABadToken(const std::string& path) {
  ASSIGN_OR_RETURN(auto w, io::TFRecordWriter::Open(path));
  for (int i = 0; i < 8; ++i) {
    io::PretrainExample e;
    for (int j = 0; j < 16; ++j) {
      e.input_ids.push_back(i == 5 && j == 3 ? 40000 : 5);
      e.input_mask.push_back(1);
      e.segment_ids.push_back(0);
    }
    e.masked_lm_positions = {1, 2, 3};
    e.masked_lm_ids = {5, 5, 5};
    e.masked_lm_weights = {1, 1, 1};
    RETURN_IF_ERROR(w->Write(io::EncodePretrainExample(e)));
  }
  return w->Close();
}

}  // namespace bertps

#endif  // BERTPS_TESTS_BAD_EXAMPLE_FILE_H_
