// The head kernels for baseline; CMakeLists.txt gives this file its
// instruction-set flags. Tile: chunks of 16 floats a product keeps in
// registers per row of a group of 4 (attention_kernel_impl.h).
#define BATON_ATTENTION_ISA_NS baseline
#define BATON_ATTENTION_TILE 1
#include "models/common/attention_kernel_impl.h"
