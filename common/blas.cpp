#include "common/blas.h"

#include <dlfcn.h>

#include <array>

namespace baton {

namespace {

std::string trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\n");
  const auto end = s.find_last_not_of(" \t\n");
  return begin == std::string::npos ? "" : s.substr(begin, end - begin + 1);
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

}  // namespace

std::string BlasInfo::describe() const {
  if (sgemm_library.empty()) {
    return "no sgemm_ in the process";
  }
  return (version.empty() ? std::string("a BLAS") : version) +
         " (sgemm_ from " + sgemm_library + ")";
}

BlasInfo loaded_blas() {
  BlasInfo info;
  info.sgemm_library = defining_file("sgemm_");
  using MklVersion = void (*)(char*, int);
  using OpenBlasConfig = char* (*)();
  if (const auto mkl = reinterpret_cast<MklVersion>(
          ::dlsym(RTLD_DEFAULT, "MKL_Get_Version_String"))) {
    std::array<char, 256> buffer{};
    mkl(buffer.data(), static_cast<int>(buffer.size()));
    info.version = trim(buffer.data());
  } else if (
      const auto openblas = reinterpret_cast<OpenBlasConfig>(
          ::dlsym(RTLD_DEFAULT, "openblas_get_config"))) {
    info.version = "OpenBLAS " + trim(openblas());
  }
  return info;
}

}  // namespace baton
