// Reading the token files, and re-reading them while the process runs
// (common/security.h: LiveCredentials, CredentialWatcher).
#include "common/security_files.h"

#include <signal.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/io/file_util.h"
#include "common/status.h"
#include "glog/logging.h"

namespace bertps {
namespace security_internal {

absl::StatusOr<std::string> ReadFlagFile(const char* flag,
                                         const std::string& path) {
  // PEM files and token lists: a MiB is far more than any of them needs.
  absl::StatusOr<std::string> text = io::ReadFileToString(path, 1 << 20);
  if (!text.ok()) return Annotate(text.status(), absl::StrCat("--", flag));
  return text;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> s = ReadFlagFile("token_file", path);
  if (!s.ok()) return s.status();
  std::string token(absl::StripAsciiWhitespace(*s));
  if (token.empty() || token.find_first_of(" \t\r\n") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--token_file: ", path, " must hold one token (no spaces)"));
  }
  if (token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--token_file: ", path, " holds a token of ", token.size(),
        " bytes, longer than ", kMaxTokenBytes,
        " (gRPC's metadata limit is 8 KiB)"));
  }
  return token;
}

absl::StatusOr<std::vector<AcceptedToken>> ReadAuthTokensFile(
    const std::string& path) {
  absl::StatusOr<std::string> s = ReadFlagFile("auth_tokens_file", path);
  if (!s.ok()) return s.status();
  absl::StatusOr<std::vector<AcceptedToken>> t = ParseAuthTokens(*s);
  if (!t.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--auth_tokens_file ", path, ": ", t.status().message()));
  }
  return t;
}

}  // namespace security_internal

using security_internal::ReadAuthTokensFile;
using security_internal::ReadTokenFile;

LiveCredentials::LiveCredentials(SecurityFiles files, std::string token,
                                 std::vector<AcceptedToken> accepted)
    : files_(std::move(files)),
      token_(std::move(token)),
      accepted_(std::make_shared<const std::vector<AcceptedToken>>(
          std::move(accepted))) {
  if (!files_.token_file.empty()) token_stamp_ = StampOf(files_.token_file);
  if (!files_.auth_tokens_file.empty()) {
    accepted_stamp_ = StampOf(files_.auth_tokens_file);
  }
}

LiveCredentials::Stamp LiveCredentials::StampOf(const std::string& path) {
  struct stat st;
  Stamp s;
  if (stat(path.c_str(), &st) != 0) return s;  // size -1: not there now
  s.ino = st.st_ino;
  s.size = st.st_size;
  s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 +
               st.st_mtim.tv_nsec;
  return s;
}

std::shared_ptr<const std::vector<AcceptedToken>> LiveCredentials::accepted()
    const {
  absl::MutexLock l(&mu_);
  return accepted_;
}

std::string LiveCredentials::token() const {
  absl::MutexLock l(&mu_);
  return token_;
}

int64_t LiveCredentials::reloads() const {
  absl::MutexLock l(&mu_);
  return reloads_;
}

absl::Status LiveCredentials::Reload(bool force) {
  absl::Status result;
  if (!files_.token_file.empty()) {
    const Stamp now = StampOf(files_.token_file);
    bool changed;
    {
      absl::MutexLock l(&mu_);
      changed = force || !(now == token_stamp_);
    }
    if (changed) {
      absl::StatusOr<std::string> t = ReadTokenFile(files_.token_file);
      if (t.ok()) {
        absl::MutexLock l(&mu_);
        const bool differs = *t != token_;
        token_ = std::move(*t);
        token_stamp_ = now;
        if (differs) {
          ++reloads_;
          LOG(INFO) << "--token_file " << files_.token_file
                    << ": the new token is sent from the next call on";
        }
      } else {
        result.Update(t.status());
      }
    }
  }
  if (!files_.auth_tokens_file.empty()) {
    const Stamp now = StampOf(files_.auth_tokens_file);
    bool changed;
    {
      absl::MutexLock l(&mu_);
      changed = force || !(now == accepted_stamp_);
    }
    if (changed) {
      absl::StatusOr<std::vector<AcceptedToken>> t =
          ReadAuthTokensFile(files_.auth_tokens_file);
      if (t.ok()) {
        const size_t n = t->size();
        absl::MutexLock l(&mu_);
        accepted_ =
            std::make_shared<const std::vector<AcceptedToken>>(std::move(*t));
        accepted_stamp_ = now;
        ++reloads_;
        LOG(INFO) << "--auth_tokens_file " << files_.auth_tokens_file << ": "
                  << n << " tokens accepted from the next call on";
      } else {
        result.Update(t.status());
      }
    }
  }
  if (!result.ok()) {
    LOG(ERROR) << "token files not reloaded, the previous tokens stay: "
               << result;
  }
  return result;
}

std::unique_ptr<CredentialWatcher> CredentialWatcher::Start(
    std::shared_ptr<LiveCredentials> live, absl::Duration poll) {
  if (!live) return nullptr;
  std::unique_ptr<CredentialWatcher> w(new CredentialWatcher());
  w->thread_ = std::thread(&CredentialWatcher::Run, w.get(), std::move(live),
                           poll);
  return w;
}

CredentialWatcher::~CredentialWatcher() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void CredentialWatcher::Run(std::shared_ptr<LiveCredentials> live,
                            absl::Duration poll) {
  // SIGHUP is taken by this thread alone (the daemons block it everywhere
  // before any thread starts; blocking it here too makes sigtimedwait
  // the only way it is seen).
  sigset_t hup;
  sigemptyset(&hup);
  sigaddset(&hup, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &hup, nullptr);
  const absl::Duration tick = std::min(poll, absl::Milliseconds(200));
  absl::Time next_poll = absl::Now() + poll;
  while (!stop_.load()) {
    const timespec ts = absl::ToTimespec(tick);
    const int sig = sigtimedwait(&hup, nullptr, &ts);
    if (sig == SIGHUP) {
      LOG(INFO) << "SIGHUP: re-reading the token files";
      live->Reload(/*force=*/true).IgnoreError();
      next_poll = absl::Now() + poll;
    } else if (absl::Now() >= next_poll) {
      live->Reload().IgnoreError();
      next_poll = absl::Now() + poll;
    }
  }
}

}  // namespace bertps
