#include "trainer/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

namespace baton {
namespace {

// The field numbers of event.proto and summary.proto.
constexpr uint32_t kEventWallTime = 1;     // double
constexpr uint32_t kEventStep = 2;         // int64
constexpr uint32_t kEventFileVersion = 3;  // string
constexpr uint32_t kEventSummary = 5;      // Summary
constexpr uint32_t kEventSessionLog = 7;   // SessionLog
constexpr uint32_t kSessionLogStatus = 1;  // SessionStatus
constexpr uint32_t kSessionLogStart = 1;   // SessionStatus.START
constexpr uint32_t kSummaryValue = 1;      // repeated Value
constexpr uint32_t kValueTag = 1;          // string
constexpr uint32_t kValueSimpleValue = 2;  // float

// Protobuf wire types.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;

constexpr const char* kFileVersion = "brain.Event:2";

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | wire_type);
}

// Little-endian, as the wire format and TFRecord store fixed-width values.
void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double(std::string& out, uint32_t field, double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(bits));
  put_key(out, field, kFixed64);
  put_le(out, bits, 8);
}

void put_float(std::string& out, uint32_t field, float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof(bits));
  put_key(out, field, kFixed32);
  put_le(out, bits, 4);
}

// The Event's wall_time and step; the caller adds the `what` field.
std::string event_header(int64_t step) {
  const double wall_time =
      std::chrono::duration<double>(
          std::chrono::system_clock::now().time_since_epoch())
          .count();
  std::string event;
  put_double(event, kEventWallTime, wall_time);
  put_key(event, kEventStep, kVarint);
  put_varint(event, static_cast<uint64_t>(step));
  return event;
}

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), a byte at a time
// through a table.
uint32_t crc32c(const std::string& data) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) {
        c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      }
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (const char ch : data) {
    crc = table[(crc ^ static_cast<uint8_t>(ch)) & 0xff] ^ (crc >> 8);
  }
  return crc ^ 0xFFFFFFFFu;
}

// TFRecord stores CRCs rotated and offset, so that a CRC of data holding
// CRCs is not degenerate.
uint32_t masked_crc32c(const std::string& data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string event_file_name() {
  static std::atomic<int> writers{0};
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) {
    std::strcpy(host, "localhost");
  }
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  char time[32];
  std::snprintf(time, sizeof(time), "%010lld", static_cast<long long>(seconds));
  return std::string("events.out.tfevents.") + time + "." + host + "." +
         std::to_string(getpid()) + "." + std::to_string(writers++);
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& folder) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) {
    throw std::runtime_error(
        "[tensorboard] cannot create the folder " + folder + ": " +
        ec.message() + "; metrics.tensorboard writes under job.dump_folder");
  }
  path_ = (std::filesystem::path(folder) / event_file_name()).string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw std::runtime_error(
        "[tensorboard] cannot create " + path_ + ": " + std::strerror(errno));
  }
  std::string event = event_header(0);
  put_bytes(event, kEventFileVersion, kFileVersion);
  write_record(event);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

void TensorBoardWriter::add_session_start(int64_t step) {
  std::string session_log;
  put_key(session_log, kSessionLogStatus, kVarint);
  put_varint(session_log, kSessionLogStart);
  std::string event = event_header(step);
  put_bytes(event, kEventSessionLog, session_log);
  write_record(event);
}

void TensorBoardWriter::add_scalars(
    int64_t step, const std::vector<TensorBoardScalar>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, kValueTag, tag);
    put_float(v, kValueSimpleValue, static_cast<float>(value));
    put_bytes(summary, kSummaryValue, v);
  }
  std::string event = event_header(step);
  put_bytes(event, kEventSummary, summary);
  write_record(event);
}

void TensorBoardWriter::write_record(const std::string& payload) {
  std::string length;
  put_le(length, payload.size(), 8);
  std::string record = length;
  put_le(record, masked_crc32c(length), 4);
  record += payload;
  put_le(record, masked_crc32c(payload), 4);
  // One record, one write: a crash leaves the earlier records whole.
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      throw std::runtime_error(
          "[tensorboard] cannot write " + path_ + ": " +
          std::strerror(n < 0 ? errno : EIO));
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace baton
