#pragma once

#include <cstdint>
#include <string>

namespace baton::dist {

/// A listening TCP socket bound to `host`'s first address and `port` (0: a
/// free one), for a TCPStore server to take over (masterListenFd).
///
/// c10d's own server listens on every interface of a dual-stack socket;
/// this one listens on the interface the job named (MASTER_ADDR) alone, and
/// its clients arrive in that address's own family. Both matter: the store
/// has no authentication, and c10d's server names each client by a reverse
/// lookup of its address, which for the IPv4-mapped address a dual-stack
/// socket reports (::ffff:127.0.0.1) misses /etc/hosts and asks DNS: where
/// no DNS server answers, each such lookup waits 5 s (2.15 on this
/// project's machines: one two-rank pipeline test took 16 s with c10d's
/// socket, 6 s with this one; the rest was the clients' own lookups, which
/// the tests' rank threads avoid by meeting in a FileStore).
int listen_socket(const std::string& host, int64_t port);

/// The port `fd` listens on.
int64_t bound_port(int fd);

}  // namespace baton::dist
