#include "common/security.h"

#include <openssl/sha.h>
#include <sys/random.h>

#include <cerrno>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/audit.h"
#include "common/security_files.h"
#include "common/status.h"
#include "common/tcp_tuning.h"
#include "glog/logging.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

ABSL_FLAG(std::string, tls_ca, "",
          "CA bundle (PEM file): clients verify servers with it; servers "
          "verify client certificates with it under --tls_require_client_cert.");
ABSL_FLAG(std::string, tls_cert, "",
          "This process's certificate chain (PEM file): servers present it; "
          "clients present it for mutual TLS.");
ABSL_FLAG(std::string, tls_key, "", "Private key (PEM file) of --tls_cert.");
ABSL_FLAG(bool, tls_require_client_cert, false,
          "Mutual TLS: this process's servers require a client certificate "
          "signed by --tls_ca.");
ABSL_FLAG(std::string, token_file, "",
          "File holding this process's bearer token, sent on every outgoing "
          "RPC (needs TLS).");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "Servers: file of accepted tokens, one 'ROLE TOKEN' per line, ROLE "
          "worker or admin.");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name checked in server certificates instead of the target's host.");
ABSL_FLAG(int, tls_reload_s, 30,
          "Certificate files (--tls_ca, --tls_cert, --tls_key) are re-read "
          "every this many seconds, so that they are replaced without a "
          "restart (new connections use them); 0: read at start only.");
ABSL_FLAG(bool, insecure_no_auth, false,
          "Servers: serve TLS without --auth_tokens_file, checking no token "
          "(every client the CA vouches for may do everything). Refused "
          "without this flag.");

namespace bertps {
namespace {

using security_internal::ReadAuthTokensFile;
using security_internal::ReadFlagFile;
using security_internal::ReadTokenFile;

constexpr char kAuthorization[] = "authorization";
constexpr char kBearer[] = "Bearer ";
constexpr char kPathKey[] = ":path";

// Certificates come from the files, re-read (rotation).
bool Reloads(const SecurityConfig& c) { return c.reload_s > 0; }

// What is known of a caller before its token is taken: the name in its
// client certificate (mutual TLS), else "a client without a certificate".
std::string CertName(const grpc::AuthContext& context) {
  for (const char* property : {GRPC_X509_CN_PROPERTY_NAME,
                               GRPC_X509_SAN_PROPERTY_NAME}) {
    std::vector<grpc::string_ref> v = context.FindPropertyValues(property);
    if (!v.empty()) return absl::StrCat("cert ", absl::string_view(v[0].data(), v[0].size()));
  }
  return "no client cert";
}

// One call's decision and what it learned of the caller.
struct Decision {
  absl::Status status;
  const char* reason = "";  // the audit reason when refused
  AuthRole role = AuthRole::kWorker;
  std::string name;  // "ROLE#N"
  std::string team;
  bool identified = false;
};

Decision Decide(const std::vector<AcceptedToken>& accepted,
                const MethodRoles& roles, absl::string_view method,
                absl::string_view authorization) {
  Decision d;
  const Access need = roles.Lookup(method);
  if (need == Access::kOpen && authorization.empty()) return d;
  if (authorization.empty()) {
    d.reason = kRefusedNoToken;
    d.status = absl::UnauthenticatedError(
        absl::StrCat(method, ": no bearer token (authorization metadata)"));
    return d;
  }
  if (!absl::StartsWith(authorization, kBearer)) {
    if (need == Access::kOpen) return d;
    d.reason = kRefusedNoToken;
    d.status = absl::UnauthenticatedError(
        absl::StrCat(method, ": authorization is not 'Bearer TOKEN'"));
    return d;
  }
  absl::StatusOr<AuthRole> role =
      LookupToken(accepted, authorization.substr(sizeof(kBearer) - 1),
                  &d.name, &d.team);
  if (!role.ok()) {
    if (need == Access::kOpen) return d;
    d.reason = kRefusedUnknownToken;
    d.name = TokenFingerprint(authorization.substr(sizeof(kBearer) - 1));
    d.status = absl::UnauthenticatedError(
        absl::StrCat(method, ": unknown bearer token"));
    return d;
  }
  d.role = *role;
  d.identified = true;
  if (need == Access::kAdmin && *role != AuthRole::kAdmin) {
    d.reason = kRefusedRole;
    d.status = absl::PermissionDeniedError(absl::StrCat(
        method, " needs an admin token; this token's role is ",
        AuthRoleName(*role)));
  }
  return d;
}

// Checks the token of each call before its handler runs.
class TokenProcessor : public grpc::AuthMetadataProcessor {
 public:
  TokenProcessor(std::vector<AcceptedToken> accepted,
                 std::shared_ptr<LiveCredentials> live, MethodRoles roles)
      : accepted_(std::move(accepted)),
        live_(std::move(live)),
        roles_(std::move(roles)) {}

  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& auth_metadata,
                       grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* /*response_metadata*/) override {
    absl::string_view method;
    absl::string_view authorization;
    for (const auto& [key, value] : auth_metadata) {
      absl::string_view k(key.data(), key.size());
      if (k == kPathKey) method = absl::string_view(value.data(), value.size());
      if (k == kAuthorization) {
        authorization = absl::string_view(value.data(), value.size());
      }
    }
    // The tokens as the files hold them now (rotation), else those of start.
    std::shared_ptr<const std::vector<AcceptedToken>> live;
    if (live_) live = live_->accepted();
    const Decision d = Decide(live ? *live : accepted_, roles_, method,
                              authorization);
    if (!d.status.ok()) {
      AuditRefusal(d.reason,
                   absl::StrCat(CertName(*context),
                                d.name.empty() ? "" : ", token ", d.name),
                   d.status.message());
      return grpc::Status(static_cast<grpc::StatusCode>(d.status.code()),
                          std::string(d.status.message()));
    }
    if (!authorization.empty()) {
      // Handlers never see the token.
      consumed_auth_metadata->insert(
          {kAuthorization, std::string(authorization)});
      if (d.identified) {
        context->AddProperty(kRoleProperty, AuthRoleName(d.role));
        context->AddProperty(kTokenProperty, d.name);
        if (!d.team.empty()) context->AddProperty(kTeamProperty, d.team);
      }
    }
    return grpc::Status::OK;
  }

 private:
  const std::vector<AcceptedToken> accepted_;
  const std::shared_ptr<LiveCredentials> live_;
  const MethodRoles roles_;
};

// Adds "authorization: Bearer TOKEN" to every call.
class TokenPlugin : public grpc::MetadataCredentialsPlugin {
 public:
  TokenPlugin(std::string token, std::shared_ptr<LiveCredentials> live)
      : value_(absl::StrCat(kBearer, token)), live_(std::move(live)) {}
  bool IsBlocking() const override { return false; }
  const char* GetType() const override { return "bertps-bearer"; }
  grpc::Status GetMetadata(
      grpc::string_ref /*service_url*/, grpc::string_ref /*method_name*/,
      const grpc::AuthContext& /*channel_auth_context*/,
      std::multimap<std::string, std::string>* metadata) override {
    // The token the file holds now (rotation), else that of start.
    std::string token = live_ ? live_->token() : std::string();
    metadata->insert({kAuthorization,
                      token.empty() ? value_ : absl::StrCat(kBearer, token)});
    return grpc::Status::OK;
  }

 private:
  const std::string value_;
  const std::shared_ptr<LiveCredentials> live_;
};

}  // namespace

const char* AuthRoleName(AuthRole role) {
  return role == AuthRole::kAdmin ? "admin" : "worker";
}

absl::StatusOr<AuthRole> ParseAuthRole(absl::string_view name) {
  if (name == "worker") return AuthRole::kWorker;
  if (name == "admin") return AuthRole::kAdmin;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown role '", name, "' (worker or admin)"));
}

absl::StatusOr<std::vector<AcceptedToken>> ParseAuthTokens(
    absl::string_view text) {
  std::vector<AcceptedToken> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (f.size() != 2 && f.size() != 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", line_no, ": expected 'ROLE TOKEN [TEAM]', got ", f.size(),
          " fields"));
    }
    absl::StatusOr<AuthRole> role = ParseAuthRole(f[0]);
    if (!role.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_no, ": ", role.status().message()));
    }
    if (f[1].size() < 16) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", line_no, ": token shorter than 16 characters"));
    }
    if (f[1].size() > kMaxTokenBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", line_no, ": token of ", f[1].size(), " bytes, longer than ",
          kMaxTokenBytes, " (a client could not send it: gRPC's metadata "
          "limit is 8 KiB)"));
    }
    std::string team;
    if (f.size() == 3) {
      if (*role != AuthRole::kAdmin) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", line_no, ": only admin tokens have a team (worker "
            "daemons serve every team's jobs)"));
      }
      if (!ValidTeamName(f[2])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", line_no, ": team name must be 1 to 63 of a-z, 0-9 and "
            "'-', starting with a letter or digit"));
      }
      team = std::string(f[2]);
    }
    for (const AcceptedToken& t : out) {
      if (ConstantTimeEquals(t.token, f[1])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", line_no, ": the same token is on an earlier line (each "
            "token names one role and team)"));
      }
    }
    out.push_back({*role, std::string(f[1]), std::move(team)});
  }
  if (out.empty()) return absl::InvalidArgumentError("no tokens");
  return out;
}

bool ValidTeamName(absl::string_view team) {
  if (team.empty() || team.size() > 63 || team[0] == '-') return false;
  for (char c : team) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-')) {
      return false;
    }
  }
  return true;
}

std::string TokenFingerprint(absl::string_view token) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(),
         digest);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "sha256:";
  for (int i = 0; i < 6; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // Walks all of `b` whatever the contents; a length difference is folded
  // into the result rather than returned early.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = a.size();
  for (size_t i = 0; i < b.size(); ++i) {
    const unsigned char x = n == 0 ? 0 : static_cast<unsigned char>(a[i % n]);
    diff |= x ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

absl::StatusOr<AuthRole> LookupToken(const std::vector<AcceptedToken>& accepted,
                                     absl::string_view token,
                                     std::string* name, std::string* team) {
  bool found = false;
  AuthRole role = AuthRole::kWorker;
  const std::string* found_team = nullptr;
  int index = 0;
  int of_role[2] = {0, 0};
  for (const AcceptedToken& t : accepted) {
    // No early exit: every accepted token is compared.
    const bool eq = !token.empty() && ConstantTimeEquals(token, t.token);
    const int n = of_role[t.role == AuthRole::kAdmin]++;
    if (eq && !found) {
      found = true;
      role = t.role;
      index = n;
      found_team = &t.team;
    }
  }
  if (!found) return absl::NotFoundError("unknown token");
  if (name != nullptr) *name = absl::StrCat(AuthRoleName(role), "#", index);
  if (team != nullptr) *team = *found_team;
  return role;
}

std::string RandomSecret(int bytes) {
  std::string raw(static_cast<size_t>(bytes), '\0');
  size_t got = 0;
  while (got < raw.size()) {
    const ssize_t n = getrandom(raw.data() + got, raw.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    // The kernel's generator does not fail once it is seeded; a process
    // without it cannot make credentials at all.
    CHECK_GT(n, 0) << "getrandom failed: errno " << errno;
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(raw.size() * 2);
  for (unsigned char c : raw) {
    hex.push_back(kHex[c >> 4]);
    hex.push_back(kHex[c & 15]);
  }
  return hex;
}

Access MethodRoles::Lookup(absl::string_view method) const {
  auto it = rules.find(std::string(method));
  if (it != rules.end()) return it->second;
  const size_t slash = method.rfind('/');
  if (slash != absl::string_view::npos && slash > 0) {
    it = rules.find(absl::StrCat(method.substr(0, slash), "/*"));
    if (it != rules.end()) return it->second;
  }
  return otherwise;
}

MethodRoles DefaultMethodRoles() {
  MethodRoles r;
  r.rules["/bertps.ParameterServer/*"] = Access::kWorker;
  r.rules["/bertps.ClusterService/*"] = Access::kWorker;
  r.rules["/bertps.JobService/*"] = Access::kAnyToken;
  r.rules["/bertps.JobService/SubmitJob"] = Access::kAdmin;
  r.rules["/bertps.JobService/CancelJob"] = Access::kAdmin;
  r.rules["/bertps.JobService/DrainMember"] = Access::kAdmin;
  r.rules["/bertps.JobService/RevokeMember"] = Access::kAdmin;
  r.rules["/grpc.health.v1.Health/*"] = Access::kOpen;
  r.rules["/grpc.reflection.v1alpha.ServerReflection/*"] = Access::kOpen;
  r.rules["/grpc.reflection.v1.ServerReflection/*"] = Access::kOpen;
  r.otherwise = Access::kAdmin;
  return r;
}

absl::Status Authorize(const std::vector<AcceptedToken>& accepted,
                       const MethodRoles& roles, absl::string_view method,
                       absl::string_view authorization) {
  return Decide(accepted, roles, method, authorization).status;
}

absl::Status ValidateSecurityConfig(const SecurityConfig& c) {
  if (c.cert_pem.empty() != c.key_pem.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: give both or neither");
  }
  if (c.require_client_cert && (c.ca_pem.empty() || !c.server_tls())) {
    return absl::InvalidArgumentError(
        "--tls_require_client_cert needs --tls_ca (to verify client "
        "certificates) and --tls_cert/--tls_key");
  }
  if (!c.token.empty() && !c.client_tls()) {
    return absl::InvalidArgumentError(
        "--token_file needs TLS (--tls_ca): a bearer token is never sent in "
        "plaintext");
  }
  if (c.auth() && !c.server_tls()) {
    return absl::InvalidArgumentError(
        "--auth_tokens_file needs TLS (--tls_cert/--tls_key): bearer tokens "
        "are never accepted in plaintext");
  }
  return absl::OkStatus();
}

absl::Status ValidateServing(const SecurityConfig& c) {
  if (c.client_tls() && !c.server_tls()) {
    return absl::InvalidArgumentError(
        "TLS is configured (--tls_ca) but this server has no "
        "--tls_cert/--tls_key: it would listen in plaintext");
  }
  if (c.server_tls() && !c.auth() && !c.insecure_no_auth) {
    return absl::InvalidArgumentError(
        "this server has TLS (--tls_cert/--tls_key) but no "
        "--auth_tokens_file: it would check no caller's token, so any "
        "client could submit jobs and drive the shards. Give it "
        "--auth_tokens_file, or --insecure_no_auth to serve so on purpose");
  }
  return ValidateSecurityConfig(c);
}

absl::StatusOr<SecurityConfig> SecurityConfigFromFiles(
    const SecurityFiles& f) {
  SecurityConfig c;
  if (!f.tls_ca.empty()) {
    absl::StatusOr<std::string> s = ReadFlagFile("tls_ca", f.tls_ca);
    if (!s.ok()) return s.status();
    c.ca_pem = std::move(*s);
    if (!absl::StrContains(c.ca_pem, "-----BEGIN CERTIFICATE-----")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls_ca: ", f.tls_ca, " holds no PEM certificate"));
    }
  }
  if (!f.tls_cert.empty()) {
    absl::StatusOr<std::string> s = ReadFlagFile("tls_cert", f.tls_cert);
    if (!s.ok()) return s.status();
    c.cert_pem = std::move(*s);
    if (!absl::StrContains(c.cert_pem, "-----BEGIN CERTIFICATE-----")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tls_cert: ", f.tls_cert, " holds no PEM certificate"));
    }
  }
  if (!f.tls_key.empty()) {
    absl::StatusOr<std::string> s = ReadFlagFile("tls_key", f.tls_key);
    if (!s.ok()) return s.status();
    c.key_pem = std::move(*s);
    if (!absl::StrContains(c.key_pem, "PRIVATE KEY-----")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls_key: ", f.tls_key, " holds no PEM private key"));
    }
  }
  c.require_client_cert = f.tls_require_client_cert;
  c.ca_file = f.tls_ca;
  c.cert_file = f.tls_cert;
  c.key_file = f.tls_key;
  c.reload_s = std::max(0, f.tls_reload_s);
  c.server_name = f.tls_server_name;
  c.insecure_no_auth = f.insecure_no_auth;
  if (!f.token_file.empty()) {
    ASSIGN_OR_RETURN(c.token, ReadTokenFile(f.token_file));
  }
  if (!f.auth_tokens_file.empty()) {
    ASSIGN_OR_RETURN(c.accepted_tokens, ReadAuthTokensFile(f.auth_tokens_file));
  }
  if (!f.token_file.empty() || !f.auth_tokens_file.empty()) {
    c.live = std::make_shared<LiveCredentials>(f, c.token, c.accepted_tokens);
  }
  absl::Status st = ValidateSecurityConfig(c);
  if (!st.ok()) return st;
  return c;
}

absl::StatusOr<SecurityConfig> SecurityConfigFromFlags() {
  SecurityFiles f;
  f.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  f.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  f.tls_key = absl::GetFlag(FLAGS_tls_key);
  f.tls_require_client_cert = absl::GetFlag(FLAGS_tls_require_client_cert);
  f.token_file = absl::GetFlag(FLAGS_token_file);
  f.auth_tokens_file = absl::GetFlag(FLAGS_auth_tokens_file);
  f.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  f.insecure_no_auth = absl::GetFlag(FLAGS_insecure_no_auth);
  f.tls_reload_s = absl::GetFlag(FLAGS_tls_reload_s);
  return SecurityConfigFromFiles(f);
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(
    const SecurityConfig& config, const MethodRoles& roles) {
  // Accepting tokens without TLS would leave every method open (gRPC runs
  // the token check only for secure credentials); ValidateSecurityConfig
  // refuses such a config, so reaching here is a programmer error.
  CHECK(!config.auth() || config.server_tls())
      << "accepted tokens without a server certificate";
  if (!config.server_tls()) return grpc::InsecureServerCredentials();
  const grpc_ssl_client_certificate_request_type request =
      config.require_client_cert
          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
          : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (Reloads(config) && !config.cert_file.empty()) {
    // The files as they are now, re-read every reload_s (rotation).
    const bool roots = config.require_client_cert && !config.ca_file.empty();
    auto provider =
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
            config.key_file, config.cert_file, roots ? config.ca_file : "",
            static_cast<unsigned>(config.reload_s));
    grpc::experimental::TlsServerCredentialsOptions o(provider);
    o.watch_identity_key_cert_pairs();
    if (roots) o.watch_root_certs();
    o.set_cert_request_type(request);
    creds = grpc::experimental::TlsServerCredentials(o);
  } else {
    grpc::SslServerCredentialsOptions o(request);
    o.pem_root_certs = config.ca_pem;
    o.pem_key_cert_pairs.push_back({config.key_pem, config.cert_pem});
    creds = grpc::SslServerCredentials(o);
  }
  if (config.auth()) {
    creds->SetAuthMetadataProcessor(std::make_shared<TokenProcessor>(
        config.accepted_tokens, config.live, roles));
  }
  return creds;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const SecurityConfig& config,
                                           grpc::ChannelArguments args) {
  AddTcpTuning(address, &args);
  if (!config.client_tls()) {
    // A token is never sent in plaintext (ValidateSecurityConfig refuses
    // such a config; a hand-made one simply dials without the token).
    return grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args);
  }
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (Reloads(config) && !config.ca_file.empty()) {
    // The CA (and this client's certificate) as the files hold them now.
    const bool identity = !config.cert_file.empty();
    auto provider =
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
            identity ? config.key_file : "", identity ? config.cert_file : "",
            config.ca_file, static_cast<unsigned>(config.reload_s));
    grpc::experimental::TlsChannelCredentialsOptions o;
    o.set_certificate_provider(provider);
    o.watch_root_certs();
    if (identity) o.watch_identity_key_cert_pairs();
    creds = grpc::experimental::TlsCredentials(o);
  } else {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = config.ca_pem;
    o.pem_private_key = config.key_pem;
    o.pem_cert_chain = config.cert_pem;
    creds = grpc::SslCredentials(o);
  }
  if (!config.token.empty()) {
    creds = grpc::CompositeChannelCredentials(
        creds, grpc::MetadataCredentialsFromPlugin(
                   std::make_unique<TokenPlugin>(config.token, config.live)));
  }
  if (!config.server_name.empty()) {
    args.SetSslTargetNameOverride(config.server_name);
  }
  return grpc::CreateCustomChannel(address, creds, args);
}

}  // namespace bertps
