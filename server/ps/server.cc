#include "server/ps/server.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/tcp_tuning.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"

namespace bertps {
namespace ps {
namespace {

constexpr int kIdleServerThreads = 8;

}  // namespace

absl::StatusOr<std::unique_ptr<ShardServer>> ShardServer::Start(
    const ShardOptions& options, const std::string& address,
    std::vector<std::string> peers, const SecurityConfig& security) {
  ASSIGN_OR_RETURN(std::unique_ptr<ShardServer> s,
                   StartIdle(address, security));
  RETURN_IF_ERROR(s->Install(options, std::move(peers)));
  return s;
}

absl::Status ShardServer::Install(const ShardOptions& options,
                                  std::vector<std::string> peers,
                                  std::vector<std::string> backups) {
  link_.SetAddresses(std::move(peers));
  replicas_.Reset();  // joins of the previous install end first
  // The peer calls of this install name its job and keys.
  const PeerScope scope{options.job_id, options.job_key, options.shard_key,
                        own_capability_};
  link_.SetScope(scope);
  replicas_.SetScope(scope);
  replicas_.SetBackups(options.backup ? std::vector<std::string>()
                                      : std::move(backups));
  ASSIGN_OR_RETURN(std::unique_ptr<ShardCore> core,
                   ShardCore::Create(options, &link_, &replicas_));
  if (std::shared_ptr<ShardCore> old = service_->core(); old && on_retire_) {
    on_retire_(*old);
  }
  service_->Install(std::shared_ptr<ShardCore>(std::move(core)));
  return absl::OkStatus();
}

void ShardServer::Uninstall() {
  replicas_.Reset();
  if (std::shared_ptr<ShardCore> old = service_->core(); old && on_retire_) {
    on_retire_(*old);
  }
  service_->Install(nullptr);
}

absl::StatusOr<std::unique_ptr<ShardServer>> ShardServer::StartIdle(
    const std::string& address, const SecurityConfig& security) {
  // Nothing listens under a security configuration that does not hold.
  RETURN_IF_ERROR(ValidateServing(security));
  std::unique_ptr<ShardServer> s(new ShardServer({}, security));
  s->service_ = std::make_unique<ShardService>();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, ServerCredentials(security), &s->port_);
  AddTcpTuning(&builder);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE,
                             kMinReadChunkBytes);
  // The clients' keepalive pings (wire.h) are welcome at any rate, also
  // while no data flows (a pull waiting for its version): never answered
  // with GOAWAY.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 0);
  // Pulls, pushes and announces are callback calls (no thread while they
  // wait); the synchronous calls left are short and rare. gRPC's default
  // keeps 2 idle threads for them and ends the others; up to
  // kIdleServerThreads idle threads are kept instead (no thread started
  // per checkpoint of a busy shard).
  builder.SetSyncServerOption(
      grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, kIdleServerThreads);
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address));
  }
  s->host_ = address.substr(0, address.rfind(':'));
  return s;
}

ShardServer::~ShardServer() { Shutdown(); }

void ShardServer::ServeHealthService(const std::string& service) {
  if (server_ && server_->GetHealthCheckService() != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(service, true);
  }
}

std::string ShardServer::address() const {
  return absl::StrCat(host_ == "0.0.0.0" ? "127.0.0.1" : host_, ":", port_);
}

void ShardServer::Shutdown() {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
  }
}

}  // namespace ps
}  // namespace bertps
