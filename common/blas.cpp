#include "common/blas.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/text.h"

namespace baton {

namespace {

std::string trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\n");
  const auto end = s.find_last_not_of(" \t\n");
  return begin == std::string::npos ? "" : s.substr(begin, end - begin + 1);
}

/// What each known kernel set needs, in the order auto prefers them, and
/// its speed class for float32 (0 fastest). Cooperlake's sgemm is
/// SkylakeX's (it adds bf16 kernels, which libtorch's bf16 matmul does not
/// call): auto takes SkylakeX, the one tested on more CPUs, and keeps
/// Cooperlake where OpenBLAS picked it. Measured on an AMD EPYC (Zen 5,
/// where 0.3.21 picks Haswell): the 1024-square sgemm at 487 GFLOP/s with
/// SkylakeX against 240 with Haswell, the debug model's step 1.6x faster.
struct KernelSet {
  const char* name;
  bool (*supported)(const CpuSimd&);
  const char* needs;
  int speed;
};

const std::vector<KernelSet>& kernel_sets() {
  static const std::vector<KernelSet> kSets = {
      {"SkylakeX", [](const CpuSimd& c) { return c.avx512f; }, "AVX-512", 0},
      {"Cooperlake",
       [](const CpuSimd& c) { return c.avx512f && c.avx512bf16; },
       "AVX-512 with BF16",
       0},
      {"Haswell", [](const CpuSimd& c) { return c.avx2; }, "AVX2", 1},
  };
  return kSets;
}

/// The speed class of `kernels`; 2 for a set Baton does not choose (older,
/// generic ones: Prescott, Nehalem, ...).
int speed_rank(const std::string& kernels) {
  for (const auto& s : kernel_sets()) {
    if (to_lower(s.name) == to_lower(kernels)) {
      return s.speed;
    }
  }
  return 2;
}

/// Whether `name` is in the comma-separated `list`.
bool listed(const std::string& list, const std::string& name) {
  std::istringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (to_lower(trim(item)) == to_lower(name)) {
      return true;
    }
  }
  return false;
}

template <class F>
F openblas_symbol(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_DEFAULT, name));
}

/// The file of the shared object that defines `symbol` as the process
/// resolves it; "" when none does.
std::string defining_file(const char* symbol) {
  void* address = ::dlsym(RTLD_DEFAULT, symbol);
  Dl_info where{};
  if (address == nullptr || ::dladdr(address, &where) == 0 ||
      where.dli_fname == nullptr) {
    return "";
  }
  return where.dli_fname;
}

/// Whether the loaded object `file`, or a library it depends on, is
/// OpenBLAS. Debian's libblas.so.3 for OpenBLAS is a shim over
/// libopenblas.so.0; BLIS's is not, though Debian's liblapack.so.3 still
/// brings libopenblas into the process beside it.
bool is_openblas(const std::string& file) {
  void* handle = ::dlopen(file.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) {
    return false;
  }
  const bool found = ::dlsym(handle, "openblas_get_corename") != nullptr;
  ::dlclose(handle);
  return found;
}

}  // namespace

std::string BlasInfo::describe() const {
  if (!openblas) {
    return sgemm_library.empty()
               ? "not OpenBLAS (no openblas_get_corename in the process)"
               : "not OpenBLAS (sgemm_ from " + sgemm_library + ")";
  }
  return "OpenBLAS (" + config + "), kernels " + kernels;
}

BlasInfo loaded_blas() {
  BlasInfo info;
  info.sgemm_library = defining_file("sgemm_");
  using Name = char* (*)();
  const auto corename = openblas_symbol<Name>("openblas_get_corename");
  // OpenBLAS computes unless the sgemm_ the process calls is another
  // library's (a libtorch that calls no sgemm_ leaves only the first test).
  if (corename == nullptr ||
      (!info.sgemm_library.empty() && !is_openblas(info.sgemm_library))) {
    return info;
  }
  info.openblas = true;
  info.kernels = corename();
  if (const auto config = openblas_symbol<Name>("openblas_get_config")) {
    info.config = trim(config());
  }
  return info;
}

CpuSimd cpu_simd() {
  CpuSimd cpu;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) {
      continue;
    }
    const std::string key = trim(line.substr(0, colon));
    const std::string value = line.substr(colon + 1);
    if (key == "model name" && cpu.model.empty()) {
      cpu.model = trim(value);
    } else if (key == "flags") {
      std::istringstream flags(value);
      std::string f;
      while (flags >> f) {
        cpu.avx |= f == "avx";
        cpu.avx2 |= f == "avx2";
        cpu.avx512f |= f == "avx512f";
        cpu.avx512bf16 |= f == "avx512_bf16";
      }
      break;  // the first core's; they are alike
    }
  }
  return cpu;
}

const std::vector<std::string>& known_kernel_sets() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const auto& s : kernel_sets()) {
      names.push_back(s.name);
    }
    return names;
  }();
  return kNames;
}

std::vector<std::string> blas_kernels_values() {
  std::vector<std::string> values = {"auto", "default"};
  for (const auto& name : known_kernel_sets()) {
    values.push_back(name);
  }
  // Older sets OpenBLAS has, which a user may force (never chosen).
  for (const char* name : {"Zen", "Sandybridge", "Nehalem", "Prescott"}) {
    values.push_back(name);
  }
  return values;
}

std::string missing_instructions(
    const std::string& kernels, const CpuSimd& cpu) {
  for (const auto& s : kernel_sets()) {
    if (to_lower(s.name) == to_lower(kernels)) {
      return s.supported(cpu) ? "" : s.needs;
    }
  }
  // The older sets a user may force: Zen's kernels are Haswell's.
  if (to_lower(kernels) == "zen" && !cpu.avx2) {
    return "AVX2";
  }
  if (to_lower(kernels) == "sandybridge" && !cpu.avx) {
    return "AVX";
  }
  return "";
}

KernelChoice choose_kernels(
    const std::string& setting,
    const BlasInfo& loaded,
    const CpuSimd& cpu,
    const std::string& refused,
    const std::string& where) {
  if (!loaded.openblas) {
    return {"", "the BLAS is not OpenBLAS: nothing to choose"};
  }
  if (to_lower(setting) == "default") {
    return {"", "training.blas_kernels is default: OpenBLAS's own choice"};
  }
  if (to_lower(setting) != "auto") {
    const auto& values = blas_kernels_values();
    if (std::none_of(values.begin(), values.end(), [&](const auto& v) {
          return to_lower(v) == to_lower(setting);
        })) {
      throw_config_error(
          where,
          "training.blas_kernels: '" + setting +
              "' is not a kernel set Baton knows; allowed: one of " +
              join(values, ", "));
    }
    if (listed(refused, setting)) {
      return {
          "",
          "forced " + setting +
              ", whose products failed the check: OpenBLAS's own kept"};
    }
    const std::string missing = missing_instructions(setting, cpu);
    if (!missing.empty()) {
      throw_config_error(
          where,
          "training.blas_kernels: " + setting + " needs " + missing +
              ", which this CPU (" + cpu.model +
              ") lacks; allowed: auto, default, or a kernel set it runs");
    }
    if (to_lower(setting) == to_lower(loaded.kernels)) {
      return {"", "forced " + setting + ", which OpenBLAS picked itself"};
    }
    return {setting, "forced by training.blas_kernels"};
  }
  for (const auto& s : kernel_sets()) {
    if (!s.supported(cpu) || listed(refused, s.name)) {
      continue;
    }
    if (speed_rank(s.name) >= speed_rank(loaded.kernels)) {
      return {"", "OpenBLAS's own choice is the fastest set this CPU runs"};
    }
    return {
        s.name,
        std::string("this CPU has ") + s.needs + " and OpenBLAS picked " +
            loaded.kernels};
  }
  return {"", "no faster kernel set for this CPU"};
}

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

}  // namespace

BlasStartup prepare_blas_kernels(
    const std::string& setting, const std::string& where, bool fail_check) {
  const BlasInfo loaded = loaded_blas();
  const std::string chosen = env(kChosenVar);
  std::string refused = env(kRefusedVar);
  const auto checked = [&](bool may_fail) {
    if (fail_check && may_fail) {
      return std::string(
          "its check was made to fail (BATON_INJECT_FAULT=badblas)");
    }
    return check_blas_products();
  };
  if (!chosen.empty()) {
    // This process was started with the kernels Baton chose.
    if (to_lower(loaded.kernels) != to_lower(chosen)) {
      ::unsetenv(kChosenVar);
      return {
          false,
          "blas: " + loaded.describe() + ": OpenBLAS did not take " +
              kCoretypeVar + "=" + chosen + " (a build without DYNAMIC_ARCH?)",
          true};
    }
    if (const std::string problem = checked(true); !problem.empty()) {
      refused += (refused.empty() ? "" : ",") + chosen;
      ::setenv(kRefusedVar, refused.c_str(), 1);
      ::unsetenv(kCoretypeVar);
      ::unsetenv(kChosenVar);
      return {
          true,
          "blas: refused the " + chosen + " kernels: " + problem +
              "; starting again without them",
          true};
    }
    return {
        false,
        "blas: " + loaded.describe() + ", chosen over OpenBLAS's own " +
            env(kDefaultVar) + " (" + env(kWhyVar) +
            "); its products match a float64 reference" +
            (refused.empty() ? "" : "; refused: " + refused)};
  }
  const std::string lowered = to_lower(setting);
  const std::string users = env(kCoretypeVar);
  if (!users.empty() && (lowered == "auto" || lowered == "default")) {
    // An explicit OPENBLAS_CORETYPE is the user's choice; a kernel set
    // named in Baton's own setting overrides it.
    const std::string problem = checked(false);
    const KernelChoice would =
        choose_kernels("auto", loaded, cpu_simd(), refused, where);
    std::string text = "blas: " + loaded.describe() + ", from " + kCoretypeVar +
                       "=" + users + " in the environment";
    text += problem.empty() ? "; its products match a float64 reference"
                            : "; its products are wrong: " + problem +
                                  " (unset " + kCoretypeVar + ")";
    if (!would.kernels.empty()) {
      text += "; auto would run " + would.kernels + " (" + would.why +
              "): unset " + kCoretypeVar +
              " or set training.blas_kernels=" + would.kernels;
    }
    return {false, text, !problem.empty() || !would.kernels.empty()};
  }
  const KernelChoice choice =
      choose_kernels(setting, loaded, cpu_simd(), refused, where);
  if (choice.kernels.empty()) {
    return {
        false,
        "blas: " + loaded.describe() + " (" + choice.why + ")" +
            (refused.empty() ? "" : "; refused: " + refused),
        !refused.empty()};
  }
  ::setenv(kCoretypeVar, choice.kernels.c_str(), 1);
  ::setenv(kChosenVar, choice.kernels.c_str(), 1);
  ::setenv(kDefaultVar, loaded.kernels.c_str(), 1);
  ::setenv(kWhyVar, choice.why.c_str(), 1);
  return {
      true,
      "blas: " + choice.kernels + " kernels over OpenBLAS's " + loaded.kernels +
          " (" + choice.why + "): starting again with " + kCoretypeVar + "=" +
          choice.kernels};
}

namespace {

using GetThreads = int (*)();
using SetThreads = void (*)(int);

}  // namespace

int blas_threads() {
  if (!loaded_blas().openblas) {
    return 0;
  }
  const auto get = openblas_symbol<GetThreads>("openblas_get_num_threads");
  return get != nullptr ? get() : 0;
}

BlasThreadsGuard::BlasThreadsGuard(int threads) {
  const auto set = openblas_symbol<SetThreads>("openblas_set_num_threads");
  previous_ = blas_threads();
  if (previous_ > 0 && set != nullptr) {
    set(threads);
  } else {
    previous_ = 0;
  }
}

BlasThreadsGuard::~BlasThreadsGuard() {
  if (previous_ > 0) {
    openblas_symbol<SetThreads>("openblas_set_num_threads")(previous_);
  }
}

std::string check_blas_products() {
  // Shapes that are no multiple of any kernel's block, and one that is.
  const std::vector<std::array<int64_t, 3>> shapes = {
      {67, 129, 71}, {256, 256, 256}, {5, 300, 33}};
  auto gen = at::make_generator<at::CPUGeneratorImpl>(12345);
  for (const auto& [m, k, n] : shapes) {
    const at::Tensor a = at::randn({m, k}, gen);
    const at::Tensor b = at::randn({k, n}, gen);
    const at::Tensor got = at::mm(a, b).to(at::kDouble).contiguous();
    const at::Tensor ad = a.to(at::kDouble).contiguous();
    const at::Tensor bd = b.to(at::kDouble).contiguous();
    const double* pa = ad.data_ptr<double>();
    const double* pb = bd.data_ptr<double>();
    const double* pg = got.data_ptr<double>();
    double worst = 0.0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          sum += pa[i * k + p] * pb[p * n + j];
        }
        // Relative to the size of a sum of k unit products.
        worst = std::max(worst, std::abs(pg[i * n + j] - sum) / std::sqrt(k));
      }
    }
    if (!(worst <= 1e-4)) {
      std::ostringstream s;
      s << m << "x" << k << " by " << k << "x" << n
        << " differs from a float64 reference by " << worst
        << " (scaled by sqrt(k); allowed: 1e-4)";
      return s.str();
    }
  }
  return "";
}

}  // namespace baton
