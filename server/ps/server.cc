#include "server/ps/server.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "grpcpp/grpcpp.h"

namespace bertps {
namespace ps {

absl::StatusOr<std::unique_ptr<ShardServer>> ShardServer::Start(
    const ShardOptions& options, const std::string& address,
    std::vector<std::string> peers) {
  std::unique_ptr<ShardServer> s(new ShardServer(std::move(peers)));
  ASSIGN_OR_RETURN(s->core_, ShardCore::Create(options, &s->link_));
  s->service_ = std::make_unique<ShardService>(s->core_.get());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(),
                           &s->port_);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
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
