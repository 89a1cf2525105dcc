#pragma once

#include <string>
#include <vector>

namespace baton {

/// Choosing OpenBLAS's kernel set at start-up.
///
/// OpenBLAS picks its kernels for the CPU it finds, and a release older
/// than the CPU picks badly: Debian 12's 0.3.21 runs the generic SSE3
/// "Prescott" kernels on an Intel Xeon with AVX-512 it does not know
/// (matmul about 40 GFLOP/s against 309 with Cooperlake's) and Haswell's on
/// an AMD Zen 5. OPENBLAS_CORETYPE names the kernels to use instead, read
/// once when the library loads, before main: so `baton train` chooses, sets
/// it and starts again (with OMP_WAIT_POLICY, common/threads.h, in the same
/// restart), then checks a few products of the chosen kernels against a
/// float64 reference computed without BLAS before it trusts them, and
/// falls back to OpenBLAS's own choice, saying so, when they differ.

/// The variables of the choice: OpenBLAS's own, and Baton's marks that
/// carry it over the restart.
inline constexpr const char* kCoretypeVar = "OPENBLAS_CORETYPE";
/// The user's setting (auto | default | a kernel set), over the config's.
inline constexpr const char* kBlasKernelsVar = "BATON_BLAS_KERNELS";
/// Set by Baton with OPENBLAS_CORETYPE: the kernels it chose, and the ones
/// OpenBLAS had picked (for the log), and why.
inline constexpr const char* kChosenVar = "BATON_BLAS_CHOSEN";
inline constexpr const char* kDefaultVar = "BATON_BLAS_DEFAULT";
inline constexpr const char* kWhyVar = "BATON_BLAS_WHY";
/// Set when a chosen kernel set failed its check: the next start keeps
/// OpenBLAS's own.
inline constexpr const char* kRefusedVar = "BATON_BLAS_REFUSED";

/// The BLAS this process computes with.
struct BlasInfo {
  /// True when OpenBLAS serves sgemm_ (not merely loaded: Debian's
  /// liblapack.so.3 brings libopenblas in even where libblas.so.3 is
  /// another BLAS, e.g. BLIS through LD_LIBRARY_PATH).
  bool openblas = false;
  /// The file the process's sgemm_ comes from; "" when it has none.
  std::string sgemm_library;
  /// OpenBLAS's kernel set ("Haswell", "Prescott", ...); "" otherwise.
  std::string kernels;
  /// openblas_get_config(): version and build options; "" otherwise.
  std::string config;

  /// "OpenBLAS (OpenBLAS 0.3.21 DYNAMIC_ARCH ...), kernels Haswell".
  std::string describe() const;
};
BlasInfo loaded_blas();

/// The instruction sets the kernel sets need, as this CPU reports them.
struct CpuSimd {
  bool avx = false;
  bool avx2 = false;
  bool avx512f = false;
  bool avx512bf16 = false;
  /// "AMD EPYC 9B45" (the model name), for the log.
  std::string model;
};
CpuSimd cpu_simd();

/// The kernel sets Baton chooses between, in the order auto prefers them
/// (SkylakeX: AVX-512; Cooperlake: AVX-512 with BF16; Haswell: AVX2), and
/// every name training.blas_kernels accepts (also auto and default).
const std::vector<std::string>& known_kernel_sets();
std::vector<std::string> blas_kernels_values();

/// What the CPU lacks to run `kernels` ("AVX-512"), or "" when it has it
/// (or Baton does not know what the set needs: OpenBLAS checks itself).
std::string missing_instructions(
    const std::string& kernels, const CpuSimd& cpu);

/// What to start with: `kernels` to set OPENBLAS_CORETYPE to ("" = keep
/// what is loaded) and why, for the log.
struct KernelChoice {
  std::string kernels;
  std::string why;
};

/// The choice for `setting` (auto, default or a kernel set): auto takes the
/// first known set the CPU supports when OpenBLAS picked a slower one,
/// except those in `refused` (comma-separated: sets whose check failed). A
/// forced set the CPU lacks the instructions for throws ConfigError naming
/// `where`. Not OpenBLAS: keep.
KernelChoice choose_kernels(
    const std::string& setting,
    const BlasInfo& loaded,
    const CpuSimd& cpu,
    const std::string& refused,
    const std::string& where);

/// What `baton train` does about the kernels first, in each process that
/// runs a rank (or launches ranks): see prepare_blas_kernels.
struct BlasStartup {
  /// The process must start again: the environment now names the kernels
  /// to load (or, after a failed check, no longer does).
  bool restart = false;
  /// The line for the log: the BLAS, its kernels and why.
  std::string log;
  /// The line is a warning (a refused or ignored choice).
  bool warning = false;
};

/// Before the trainer is built. Without Baton's marks: chooses the kernels
/// for `setting` (BATON_BLAS_KERNELS, else training.blas_kernels; `where`
/// names which for errors) and, when they differ from those loaded, sets
/// OPENBLAS_CORETYPE and the marks and asks for a restart. An
/// OPENBLAS_CORETYPE already in the environment is the user's choice under
/// auto and default (kept, checked, and a warning names the set auto would
/// run when that is faster); a set named in `setting` overrides it. After
/// Baton's restart: checks the chosen kernels' products (`fail_check` makes the
/// check fail: the tests' fault injection) and, when they are wrong, marks them
/// refused, unsets OPENBLAS_CORETYPE and asks for another restart, so the run
/// goes on with the next set or OpenBLAS's own and says which it refused and
/// why.
BlasStartup prepare_blas_kernels(
    const std::string& setting, const std::string& where, bool fail_check);

/// Makes OpenBLAS compute on `threads` threads while alive and restores
/// its count after (openblas_set_num_threads); does nothing where the BLAS
/// serving sgemm_ is not OpenBLAS. OpenBLAS keeps its own threads beside
/// ATen's: a probe that times one core sets both.
class BlasThreadsGuard {
 public:
  explicit BlasThreadsGuard(int threads);
  ~BlasThreadsGuard();
  BlasThreadsGuard(const BlasThreadsGuard&) = delete;
  BlasThreadsGuard& operator=(const BlasThreadsGuard&) = delete;

 private:
  int previous_ = 0;  // 0: nothing to restore
};

/// OpenBLAS's thread count (openblas_get_num_threads); 0 where the BLAS is
/// not OpenBLAS.
int blas_threads();

/// Float32 products of a few odd shapes by the loaded BLAS against a
/// float64 reference computed by plain loops: "" when every element is
/// within 1e-4 of the reference's scale, else which product differed and by
/// how much.
std::string check_blas_products();

}  // namespace baton
