// The process side of `trident launch`: runs the launcher and relays what it says (launcher_run.cpp).
#pragma once

#include <string>
#include <vector>

#include "trident/dist/launcher.h"

namespace trident::cli {

// Runs the launcher (args, the program first: dist::Launcher::command_line) until it exits, handing the
// user's SIGINT/SIGTERM/SIGTSTP on as launch_command.cpp describes; returns the exit status for launch.
int run_launcher(std::vector<std::string>& args, const dist::Launcher& launcher);

}  // namespace trident::cli
