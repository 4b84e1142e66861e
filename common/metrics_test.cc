// The metrics endpoint keeps answering scrapes while clients hold half-sent
// requests open (a slow-loris): 50 such connections, then a scrape must be
// answered within 1 s.
#include "common/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "prometheus/counter.h"

namespace bertps {
namespace {

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// A whole GET /metrics; the response's text, or "" after `timeout`.
std::string Scrape(int port, std::chrono::milliseconds timeout) {
  const int fd = Connect(port);
  if (fd < 0) return "";
  const std::string req =
      "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return "";
  }
  std::string out;
  const auto end = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

TEST(MetricsEndpoint, ScrapesAnswerWhileFiftyClientsHoldHalfSentRequests) {
  auto m = MetricsEndpoint::Start("127.0.0.1:0");
  ASSERT_TRUE(m.ok()) << m.status();
  auto& family = prometheus::BuildCounter()
                     .Name("bertps_test_events_total")
                     .Help("test")
                     .Register((*m)->registry());
  family.Add({}).Increment(3);
  const int port = (*m)->port();
  ASSERT_NE(Scrape(port, std::chrono::seconds(5)).find(
                "bertps_test_events_total 3"),
            std::string::npos);
  std::vector<int> slow;
  for (int i = 0; i < 50; ++i) {
    const int fd = Connect(port);
    ASSERT_GE(fd, 0);
    const std::string half = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    ASSERT_EQ(write(fd, half.data(), half.size()),
              static_cast<ssize_t>(half.size()));
    slow.push_back(fd);
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string text = Scrape(port, std::chrono::milliseconds(1000));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_NE(text.find("bertps_test_events_total 3"), std::string::npos)
      << "no answer within 1 s (" << text.size() << " bytes)";
  EXPECT_LT(took, std::chrono::milliseconds(1000));
  for (int fd : slow) close(fd);
}

}  // namespace
}  // namespace bertps
