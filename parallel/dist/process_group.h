#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/dist/launch_env.h"

namespace baton::dist {

/// A collective or P2P operation failed or timed out. The message names the
/// operation, the group and, where the runtime can tell, the rank that was
/// lost ("rank 1 stopped answering").
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ReduceOp { kSum, kAvg, kMax, kMin };

class Runtime;

/// An operation in flight. wait() blocks until it is done or the group's
/// timeout passes, then runs any finishing work (the division of an
/// average, a copy back from an upcast buffer). A default Work is done.
class Work {
 public:
  Work();
  ~Work();
  Work(Work&&) noexcept;
  Work& operator=(Work&&) noexcept;

  /// Throws CommError on failure or timeout.
  void wait();
  /// Whether wait() would return at once.
  bool completed() const;

  struct Impl;
  explicit Work(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

/// One group of ranks and the operations the framework needs, over c10d
/// (Gloo on CPU, NCCL where libtorch has CUDA). Ranks in arguments are ranks
/// in this group. Every blocking call waits at most the runtime's current
/// timeout (comm.init_timeout_seconds until the first step is done, then
/// comm.train_timeout_seconds), or the group's own (GroupOptions::timeout:
/// the checkpoint's group waits for writers of large files). A group of one
/// rank does its operations
/// locally. Groups come from Runtime::world() and Runtime::new_group().
class ProcessGroup {
 public:
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  /// This process's rank in the group.
  int64_t rank() const;
  int64_t size() const;
  /// "world", "dp", "pp", ...
  const std::string& name() const;
  /// The global rank of each member, in group-rank order.
  const std::vector<int64_t>& global_ranks() const;
  /// "gloo", "nccl" or "local" (one rank).
  std::string backend() const;

  /// In place, on every member. Gloo lacks AVG (SUM then divide) and bf16 /
  /// fp16 reductions (reduced in float32 and copied back): done here.
  void all_reduce(at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  /// Same, returning at once; `tensor` holds the result after wait().
  Work all_reduce_async(at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  /// Copies `root`'s tensor into every member's.
  void broadcast(at::Tensor& tensor, int64_t root);
  /// Every member's `tensor`, stacked: (size, *tensor.sizes()).
  at::Tensor all_gather(const at::Tensor& tensor);
  /// Every member's `input` into the flat, contiguous `output` of size() x
  /// input.numel() elements, member r's at [r n, (r + 1) n), returning at
  /// once (fully sharded data parallel gathers a unit's shards this way).
  Work all_gather_into_async(at::Tensor& output, const at::Tensor& input);
  /// `input` is size() equal chunks (flat: chunk r at [r n, (r + 1) n) for
  /// n = output.numel()); member r gets the reduction of everyone's chunk r
  /// in `output`. On Gloo the chunks go all-to-all and each rank reduces
  /// what it received (bf16 and fp16 in float32), so a rank sends and
  /// receives (size - 1) / size of the input, as a ring would (c10d's Gloo
  /// reduce-scatter all-reduces the whole input); NCCL's own on GPUs.
  void reduce_scatter(
      at::Tensor& output,
      const at::Tensor& input,
      ReduceOp op = ReduceOp::kSum);
  /// Same, returning at once; `output` holds the result after wait().
  Work reduce_scatter_async(
      at::Tensor& output,
      const at::Tensor& input,
      ReduceOp op = ReduceOp::kSum);
  /// All-to-all with uneven splits along dim 0: the rows of `input`, split
  /// as `input_splits` (one count per member, summing to its rows), go to
  /// the members in order, and member r's rows for this one arrive in
  /// `output` (contiguous) at its `output_splits[r]` rows, in member order.
  /// The counts must agree (this rank's output_splits[r] is member r's
  /// input_splits for it): the caller exchanges them first (expert
  /// parallel's dispatch, an equal-split all_to_all of the counts). Empty
  /// splits: equal ones. Returns at once; `output` holds the rows after
  /// wait().
  Work all_to_all_async(
      at::Tensor& output,
      const at::Tensor& input,
      const std::vector<int64_t>& output_splits,
      const std::vector<int64_t>& input_splits);
  void all_to_all(
      at::Tensor& output,
      const at::Tensor& input,
      const std::vector<int64_t>& output_splits,
      const std::vector<int64_t>& input_splits);
  /// Point to point, matched by (peer, tag). The tensors must be contiguous.
  void send(const at::Tensor& tensor, int64_t dst, int64_t tag = 0);
  void recv(at::Tensor& tensor, int64_t src, int64_t tag = 0);
  Work isend(const at::Tensor& tensor, int64_t dst, int64_t tag = 0);
  Work irecv(at::Tensor& tensor, int64_t src, int64_t tag = 0);
  /// Returns when every member has called it.
  void barrier();

  /// A group of just this process (global rank `global_rank`): every
  /// operation is local. What a job of one rank, or a degree of 1, gets.
  static std::shared_ptr<ProcessGroup> single(
      const std::string& name, int64_t global_rank = 0);

  struct Impl;
  explicit ProcessGroup(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

/// Options of Runtime::init.
struct RuntimeOptions {
  /// "gloo" or "nccl".
  std::string backend = "gloo";
  /// Rendezvous (store connect, group creation) and the first step.
  std::chrono::milliseconds init_timeout{std::chrono::seconds(300)};
  /// Seconds between liveness heartbeats in the store.
  std::chrono::milliseconds heartbeat_interval{500};
  /// Entries of the process's flight recorder (parallel/dist/
  /// flight_recorder.h); 0: none.
  int64_t flight_recorder_entries = 0;
  /// Where every rank dumps it when an operation fails
  /// (`<job.dump_folder>/flight_recorder`); empty: nowhere.
  std::string flight_recorder_dir;
};

/// Options of Runtime::new_group.
struct GroupOptions {
  /// "gloo" or "nccl"; empty: the runtime's backend. A group that moves CPU
  /// tensors under an NCCL runtime asks for "gloo".
  std::string backend;
  /// This group's operations wait this long, whatever the runtime's
  /// current timeout; 0: the runtime's.
  std::chrono::milliseconds timeout{0};
};

/// The distributed runtime of one process: the rendezvous store, the world
/// group, sub-groups, and a heartbeat per rank in the store so that a failed
/// operation can say which rank was lost.
class Runtime : public std::enable_shared_from_this<Runtime> {
 public:
  /// Connects to the store (rank 0 hosts it unless env.store_hosted) and
  /// builds the world group. Blocks until every rank has arrived or
  /// init_timeout passes (CommError).
  static std::shared_ptr<Runtime> init(
      const LaunchEnv& env, const RuntimeOptions& options);
  /// The runtime this process initialised last, or null; main() uses it to
  /// report a failure to the other ranks.
  static std::shared_ptr<Runtime> current();
  ~Runtime();

  const LaunchEnv& env() const;
  const std::shared_ptr<ProcessGroup>& world() const;
  /// A group of the given global ranks (ascending, containing this rank),
  /// named `name`. Every member must create the same groups in the same
  /// order; non-members do not call it.
  std::shared_ptr<ProcessGroup> new_group(
      const std::vector<int64_t>& ranks,
      const std::string& name,
      const GroupOptions& options = {});

  /// Timeout of every later blocking operation in every group.
  void set_timeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const;

  /// Why operations fail: a rank's reported failure, ranks whose heartbeat
  /// stopped, or an unreachable store. Takes a few heartbeat intervals.
  std::string diagnose();
  /// Tells the other ranks, through the store, that this rank failed with
  /// `message`. Best effort: never throws.
  void report_failure(const std::string& message) noexcept;

  struct State;

 private:
  explicit Runtime(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

/// Hosts a rendezvous store on `port` (0: any free port) of this machine for
/// `baton --nproc`, whose children connect to it as clients.
class StoreServer {
 public:
  StoreServer(
      int64_t port, int64_t world_size, std::chrono::milliseconds timeout);
  ~StoreServer();
  int64_t port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton::dist
