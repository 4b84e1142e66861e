// TLS and bearer-token authentication for every bertps gRPC server and
// client.
//
// One SecurityConfig per process, read from files named by flags (never
// secrets on the command line):
//   --tls_ca=FILE        CA bundle: clients verify servers with it; servers
//                        verify client certificates with it (mutual TLS)
//   --tls_cert=FILE --tls_key=FILE
//                        this process's certificate and key: servers present
//                        them; clients present them for mutual TLS
//   --tls_require_client_cert
//                        this process's servers require a client certificate
//                        signed by --tls_ca
//   --token_file=FILE    this process's bearer token, sent as
//                        "authorization: Bearer TOKEN" on every outgoing RPC
//   --auth_tokens_file=FILE
//                        servers: accepted tokens, one "ROLE TOKEN [TEAM]"
//                        per line (ROLE worker or admin; TEAM, for admin
//                        tokens only, scopes the token to its team's jobs;
//                        '#' comments, blank lines ok)
//   --tls_reload_s=N     certificate files re-read every N seconds (0: at
//                        start only)
// The two token files are re-read when they change and on SIGHUP
// (LiveCredentials, CredentialWatcher); certificate files every
// --tls_reload_s (gRPC's certificate provider: new handshakes use them).
//   --tls_server_name=NAME
//                        override of the name checked in server certificates
// With none set everything is plaintext and unauthenticated (local use).
// A bearer token is only ever sent or accepted over TLS: a config with tokens
// but without TLS is refused by ValidateSecurityConfig.
//
// Authorization: each method maps to an Access level (MethodRoles). The
// server checks the token before the handler runs (a grpc
// AuthMetadataProcessor attached to the server credentials): a missing or
// unknown token is UNAUTHENTICATED, a valid token whose role is too weak is
// PERMISSION_DENIED; in both cases the handler never runs. Tokens are
// compared in constant time.
//
// Thread-safety: SecurityConfig is a plain value; the credentials and
// channels returned are thread-safe gRPC objects shared by their users.
#ifndef BERTPS_COMMON_SECURITY_H_
#define BERTPS_COMMON_SECURITY_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace bertps {

enum class AuthRole { kWorker, kAdmin };

// What a method requires. kWorker is satisfied by worker and admin tokens.
enum class Access { kOpen, kAnyToken, kWorker, kAdmin };

struct AcceptedToken {
  AuthRole role;
  std::string token;
  // An admin token's team: its holder submits jobs that the team owns and
  // sees, cancels and watches only those. Empty: a cluster admin (every
  // job; draining members). Worker tokens have none.
  std::string team;
};

class LiveCredentials;

struct SecurityConfig {
  std::string ca_pem;    // empty: clients use the system roots (if TLS)
  std::string cert_pem;  // this process's certificate chain
  std::string key_pem;   // its private key
  bool require_client_cert = false;
  // Servers with TLS but no accepted tokens check no caller at all: refused
  // by ValidateServing unless this says it is meant (--insecure_no_auth).
  bool insecure_no_auth = false;
  std::string server_name;  // empty: the host part of the target address
  std::string token;        // sent on outgoing calls; empty: none
  std::vector<AcceptedToken> accepted_tokens;  // empty: servers check none
  // The token files as they are now (rotation): set by
  // SecurityConfigFromFiles when a token file is named; servers then check
  // the accepted tokens and clients send the token that the files hold at
  // the call, not those read at start. Shared by every copy of the config.
  std::shared_ptr<LiveCredentials> live;
  // The certificate files (SecurityConfigFromFiles): with reload_s > 0,
  // servers and clients take their certificates and CA from the files as
  // they are now (checked every reload_s seconds; new connections use
  // them), not the PEM read at start. Empty: the PEM above, fixed.
  std::string ca_file, cert_file, key_file;
  int reload_s = 0;

  // Clients dial with TLS.
  bool client_tls() const { return !ca_pem.empty() || !cert_pem.empty(); }
  // Servers listen with TLS.
  bool server_tls() const { return !cert_pem.empty() && !key_pem.empty(); }
  // Servers check tokens.
  bool auth() const { return !accepted_tokens.empty(); }
};

// The file paths of a config (the flags, or bertpsctl's options).
struct SecurityFiles {
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  bool tls_require_client_cert = false;
  std::string token_file;
  std::string auth_tokens_file;
  std::string tls_server_name;
  bool insecure_no_auth = false;
  int tls_reload_s = 30;
};

// Reads the files and validates the result. Errors name the flag and file.
absl::StatusOr<SecurityConfig> SecurityConfigFromFiles(
    const SecurityFiles& files);
// SecurityConfigFromFiles of the process-wide flags above.
absl::StatusOr<SecurityConfig> SecurityConfigFromFlags();

// Consistency: cert and key together; mutual TLS needs a CA and a server
// certificate; tokens only with TLS.
absl::Status ValidateSecurityConfig(const SecurityConfig& config);
// A process that serves: when TLS is configured at all it must be able to
// serve TLS (so nothing listens in plaintext by accident), and a TLS server
// must check tokens (--auth_tokens_file) unless insecure_no_auth says that
// every client the CA vouches for may do everything. Every bertps server
// (coordinator, shard daemons, stage servers, health ports) runs it.
absl::Status ValidateServing(const SecurityConfig& config);

// The name of the caller's token as the server's handlers see it (the
// AuthContext property kTokenProperty set by the token check): "ROLE#N",
// N the token's line among the accepted ones of its role; empty when the
// server checks no tokens. The token itself never reaches a handler.
inline constexpr char kTokenProperty[] = "bertps.token";
inline constexpr char kRoleProperty[] = "bertps.role";
// The caller's team (AcceptedToken::team): set only for an admin token of a
// team (absent: a cluster admin, a worker token, or no tokens checked).
inline constexpr char kTeamProperty[] = "bertps.team";

// Parses an accepted-tokens file's text ("ROLE TOKEN [TEAM]" lines; a TEAM
// only for admin tokens, ValidTeamName).
// The longest bearer token accepted (--token_file, --auth_tokens_file): it
// travels as call metadata, which gRPC limits to 8 KiB in all.
inline constexpr size_t kMaxTokenBytes = 4096;

absl::StatusOr<std::vector<AcceptedToken>> ParseAuthTokens(
    absl::string_view text);
absl::StatusOr<AuthRole> ParseAuthRole(absl::string_view name);
// A team's name: 1 to 63 of [a-z0-9-], starting with a letter or digit.
bool ValidTeamName(absl::string_view team);
const char* AuthRoleName(AuthRole role);

// A fresh secret: `bytes` random bytes from the kernel (getrandom), as
// lowercase hex (member credentials, job keys).
std::string RandomSecret(int bytes = 32);

// Equality of two strings in time that depends only on their lengths.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);
// The role of `token` among `accepted` (every entry is compared, in constant
// time each); NOT_FOUND when none matches. With `name`, also the token's
// name ("ROLE#N", kTokenProperty) and with `team` its team.
absl::StatusOr<AuthRole> LookupToken(const std::vector<AcceptedToken>& accepted,
                                     absl::string_view token,
                                     std::string* name = nullptr,
                                     std::string* team = nullptr);
// A short fingerprint of a token for logs ("sha256:" and 12 hex digits): an
// unknown token's holder can be told apart without the token being written.
std::string TokenFingerprint(absl::string_view token);

// Method -> Access. Keys are full method names "/pkg.Service/Method" or a
// whole service "/pkg.Service/*"; the exact name wins. Methods listed nowhere
// get `otherwise`.
struct MethodRoles {
  std::map<std::string, Access> rules;
  Access otherwise = Access::kAdmin;
  Access Lookup(absl::string_view method) const;
};
// The bertps policy: ParameterServer and ClusterService need a worker (or
// admin) token; JobService SubmitJob/CancelJob need admin, its other methods
// any valid token; grpc.health.v1 and reflection are open.
MethodRoles DefaultMethodRoles();

// The decision for one call (what the server-side check applies):
// OK, UNAUTHENTICATED or PERMISSION_DENIED. `authorization` is the value of
// the "authorization" metadata (empty when absent).
absl::Status Authorize(const std::vector<AcceptedToken>& accepted,
                       const MethodRoles& roles, absl::string_view method,
                       absl::string_view authorization);

// Server credentials: TLS when the config has a certificate (mutual TLS when
// require_client_cert), else insecure; with accepted tokens, the token check
// of `roles` is attached (accepted tokens without a certificate: CHECK
// failure, see ValidateSecurityConfig). Pass them to
// ServerBuilder::AddListeningPort.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(
    const SecurityConfig& config,
    const MethodRoles& roles = DefaultMethodRoles());

// The token files of a running process, re-read when they change
// (CredentialWatcher) so that tokens are replaced without a restart: the
// new accepted tokens apply to the next call; calls already admitted run
// on. A file that cannot be read or parsed keeps the previous tokens (the
// error is logged, the process goes on as it was).
// Thread-safety: every method may be called from any thread.
class LiveCredentials {
 public:
  LiveCredentials(SecurityFiles files, std::string token,
                  std::vector<AcceptedToken> accepted);
  std::shared_ptr<const std::vector<AcceptedToken>> accepted() const;
  std::string token() const;
  // Re-reads the files that changed since they were last read (every named
  // file with `force`). OK when nothing changed or all changes were taken.
  absl::Status Reload(bool force = false);
  // Reloads that took a change.
  int64_t reloads() const;

 private:
  struct Stamp {
    uint64_t ino = 0;
    int64_t size = -1;
    int64_t mtime_ns = 0;
    bool operator==(const Stamp& o) const {
      return ino == o.ino && size == o.size && mtime_ns == o.mtime_ns;
    }
  };
  static Stamp StampOf(const std::string& path);

  const SecurityFiles files_;
  mutable absl::Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const std::vector<AcceptedToken>> accepted_
      ABSL_GUARDED_BY(mu_);
  Stamp token_stamp_ ABSL_GUARDED_BY(mu_);
  Stamp accepted_stamp_ ABSL_GUARDED_BY(mu_);
  int64_t reloads_ ABSL_GUARDED_BY(mu_) = 0;
};

// Re-reads a process's token files when they change (checked every
// `poll`) and at once on SIGHUP. Daemons block SIGHUP in every thread
// (BlockShutdownSignals) so that only this thread takes it. Stops and
// joins on destruction.
class CredentialWatcher {
 public:
  static std::unique_ptr<CredentialWatcher> Start(
      std::shared_ptr<LiveCredentials> live,
      absl::Duration poll = absl::Seconds(2));
  ~CredentialWatcher();

 private:
  CredentialWatcher() = default;
  void Run(std::shared_ptr<LiveCredentials> live, absl::Duration poll);
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A channel to `address`: TLS when client_tls() (presenting the certificate
// if any), the token on every call, server_name as the TLS target name.
std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& address, const SecurityConfig& config,
    grpc::ChannelArguments args = {});

}  // namespace bertps

#endif  // BERTPS_COMMON_SECURITY_H_
