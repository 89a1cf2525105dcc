#pragma once

// What app/cli.cpp (the parsers) and app/cli_usage.cpp (the usage table and
// texts) share and nothing else uses.

#include <string>

#include "app/cli.h"

namespace baton::cli_detail {

/// The usage of `command` ("train", "tokenizer train") in cli_commands().
const CommandUsage& command_usage_of(const std::string& command);

}  // namespace baton::cli_detail
