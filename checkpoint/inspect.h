#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

namespace baton {

/// `baton checkpoint inspect DIR [--tensors]`: writes to `out` what the
/// checkpoint folder `dir` (a run's `checkpoint/`, holding step-N folders,
/// or one step-N folder) holds: the steps present (and leftovers of
/// unfinished saves), and for each step the layout that saved it, the train
/// state, the LR scheduler's step, the loader's state and its tensors'
/// count, size and files; with `list_tensors`, every tensor's dtype, whole
/// shape and where its bytes are (one file, or the slices that tile it,
/// with their offsets). Reads every byte of every tensor and checks it
/// against the index's CRC-32, its dtype and shape against the file's
/// header. Returns the problems found, each naming the file and the tensor
/// ("step-5/rank-00001.safetensors: tensor 'norm.weight': CRC-32 ..."); an
/// empty list means every byte checks out. Throws CheckpointError when
/// `dir` holds no checkpoint at all.
std::vector<std::string> inspect_checkpoint(
    const std::filesystem::path& dir,
    std::ostream& out,
    bool list_tensors = false);

}  // namespace baton
