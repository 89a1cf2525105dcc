#include "parallel/dist/listen_socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace baton::dist {

int listen_socket(const std::string& host, int64_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc =
          ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
      rc != 0) {
    throw std::runtime_error(
        "cannot resolve '" + host + "' to listen on: " + ::gai_strerror(rc));
  }
  const int fd = ::socket(
      found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  const int one = 1;
  if (fd < 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      ::bind(fd, found->ai_addr, found->ai_addrlen) != 0 ||
      ::listen(fd, SOMAXCONN) != 0) {
    const int error = errno;
    ::freeaddrinfo(found);
    if (fd >= 0) {
      ::close(fd);
    }
    throw std::runtime_error(
        "cannot listen on " + host + ":" + service + ": " +
        std::strerror(error));
  }
  ::freeaddrinfo(found);
  return fd;
}

int64_t bound_port(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  return address.ss_family == AF_INET6
             ? ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port)
             : ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
}

}  // namespace baton::dist
