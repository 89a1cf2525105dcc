#pragma once

// TensorBoard event files, written without a protobuf library: the few
// messages Baton writes are encoded by hand (varints, fixed64 doubles,
// fixed32 floats, length-delimited fields) and framed as TFRecords (uint64
// length, masked CRC-32C of the length, payload, masked CRC-32C of the
// payload), as tensorboard/compat/proto/event.proto and summary.proto define
// them.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace baton {

/// One scalar of a summary: its tag and value (TensorBoard stores a float).
using TensorBoardScalar = std::pair<std::string, double>;

/// Appends Events to a new event file,
/// `<folder>/events.out.tfevents.<time>.<host>.<pid>.<n>`, the name
/// TensorBoard (and torch.utils.tensorboard) uses: seconds since the epoch,
/// ten digits, so that a folder's files sort in the order they were started;
/// `n` counts the writers of this process. The first record is the Event
/// with file_version "brain.Event:2". Each record reaches the operating
/// system in one write() before the call returns: a crash loses at most the
/// record being written. Errors throw std::runtime_error tagged
/// `[tensorboard]` naming the file and the system's reason.
class TensorBoardWriter {
 public:
  /// Creates `folder` (and its parents) and the event file.
  explicit TensorBoardWriter(const std::string& folder);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  /// An Event at `step` holding a SessionLog START: TensorBoard drops the
  /// events earlier files of the folder hold at `step` and after (a run
  /// resumed from a checkpoint trains those steps again).
  void add_session_start(int64_t step);
  /// An Event at `step` with one Summary value {tag, simple_value} per
  /// scalar, in order.
  void add_scalars(int64_t step, const std::vector<TensorBoardScalar>& scalars);
  /// The event file.
  const std::string& path() const {
    return path_;
  }

 private:
  void write_record(const std::string& payload);

  std::string path_;
  int fd_ = -1;
};

}  // namespace baton
