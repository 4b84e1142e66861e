// Test helpers of the shard tests: a small BERT config, and a PeerLink that
// delivers straight to in-process cores (with their answers, as the gRPC
// link does).
#ifndef BERTPS_SERVER_PS_SHARD_TEST_UTIL_H_
#define BERTPS_SERVER_PS_SHARD_TEST_UTIL_H_

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/ps/shard.h"

namespace bertps {
namespace ps {

inline BertConfig Small() {
  BertConfig c;
  c.vocab_size = 30;
  c.hidden_size = 8;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.intermediate_size = 16;
  c.max_position_embeddings = 8;
  return c;
}

class LocalLink : public PeerLink {
 public:
  void Add(ShardCore* c) {
    absl::MutexLock l(&mu_);
    cores_.push_back(c);
  }
  void Set(int shard, ShardCore* c) {
    absl::MutexLock l(&mu_);
    if (static_cast<int>(cores_.size()) <= shard) cores_.resize(shard + 1);
    cores_[shard] = c;
  }
  absl::Status Send(int to, const ExchangeRequest& r, absl::Time,
                    const std::atomic<bool>*) override {
    return Core(to)->ReceiveExchange(r);
  }
  absl::Status SendAll(const std::vector<int>& to, const ExchangeRequest& r,
                       absl::Time, const std::atomic<bool>*,
                       std::vector<ExchangeResponse>* replies) override {
    if (replies != nullptr) replies->assign(to.size(), ExchangeResponse());
    for (size_t i = 0; i < to.size(); ++i) {
      absl::Status st = Core(to[i])->ReceiveExchange(
          r, replies != nullptr ? &(*replies)[i] : nullptr);
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }

 private:
  ShardCore* Core(int shard) {
    absl::MutexLock l(&mu_);
    return cores_[shard];
  }
  absl::Mutex mu_;
  std::vector<ShardCore*> cores_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_SERVER_PS_SHARD_TEST_UTIL_H_
