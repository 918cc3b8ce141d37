#include "trident/dist/launcher.h"

#include <fmt/format.h>

#include <csignal>
#include <cstdlib>

#include "trident/core/error.h"

namespace trident::dist {

MpiFamily mpi_family_of(std::string_view library_version) {
  return library_version.find("Open MPI") != std::string_view::npos ? MpiFamily::open_mpi : MpiFamily::mpich;
}

const char* family_name(MpiFamily family) { return family == MpiFamily::open_mpi ? "Open MPI" : "MPICH"; }

namespace {

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") + 1 - b);
}

// A slot count: a whole number from 1 up.
int parse_slots(std::string_view text, const std::string& path, int line, std::string_view what) {
  int n = 0;
  bool ok = !text.empty() && text.size() <= 6;
  for (char c : text) {
    ok = ok && c >= '0' && c <= '9';
    if (ok) n = n * 10 + (c - '0');
  }
  TRIDENT_CHECK(ok && n >= 1, "launch: --hostfile '{}' line {}: '{}' is not a slot count (a whole number from 1)",
                path, line, what);
  return n;
}

}  // namespace

std::vector<HostSlots> parse_hostfile(std::string_view text, const std::string& path, MpiFamily family, bool& native) {
  std::vector<HostSlots> hosts;
  native = true;
  int number = 0;
  for (std::size_t start = 0; start <= text.size();) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++number;
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    // The host is the first word; Hydra writes its slots after a colon, Open MPI as words after it.
    const std::size_t word_end = line.find_first_of(" \t");
    std::string_view host = line.substr(0, word_end);
    std::string_view rest = word_end == std::string_view::npos ? std::string_view{} : trim(line.substr(word_end));
    HostSlots h;
    bool hydra_line = false, extra = false;
    if (const auto colon = host.find(':'); colon != std::string_view::npos) {
      h.slots = parse_slots(host.substr(colon + 1), path, number, host);
      host = host.substr(0, colon);
      hydra_line = true;
      extra = !rest.empty();  // Hydra's per-host options
    } else {
      while (!rest.empty()) {
        const std::size_t w = rest.find_first_of(" \t");
        const std::string_view word = rest.substr(0, w);
        rest = w == std::string_view::npos ? std::string_view{} : trim(rest.substr(w));
        if (word.starts_with("slots=")) {
          h.slots = parse_slots(word.substr(6), path, number, word);
        } else {
          extra = true;  // max_slots=, ... (Open MPI's own)
          TRIDENT_CHECK(family == MpiFamily::open_mpi,
                        "launch: --hostfile '{}' line {}: '{}' is Open MPI's; trident is built against MPICH, whose "
                        "Hydra launcher takes 'host:slots' lines (e.g. 'node1:2')",
                        path, number, word);
        }
      }
    }
    TRIDENT_CHECK(!host.empty(), "launch: --hostfile '{}' line {}: no host name before '{}'", path, number, line);
    if (hydra_line && family == MpiFamily::open_mpi) {
      TRIDENT_CHECK(!extra, "launch: --hostfile '{}' line {}: '{}' has Hydra's options after the host; trident is "
                            "built against Open MPI, whose mpirun takes 'host slots=N' lines",
                    path, number, line);
      native = false;
    }
    // Open MPI's `host slots=N` is not Hydra's (a bare `host` is both).
    if (!hydra_line && family == MpiFamily::mpich && h.slots > 0) native = false;
    h.host = std::string(host);
    hosts.push_back(std::move(h));
  }
  TRIDENT_CHECK(!hosts.empty(), "launch: --hostfile '{}' names no hosts (one host a line, e.g. '{}')", path,
                family == MpiFamily::open_mpi ? "node1 slots=2" : "node1:2");
  return hosts;
}

std::string format_hostfile(const std::vector<HostSlots>& hosts, MpiFamily family) {
  std::string text;
  for (const HostSlots& h : hosts) {
    if (h.slots == 0) {
      text += h.host + "\n";
    } else if (family == MpiFamily::open_mpi) {
      text += fmt::format("{} slots={}\n", h.host, h.slots);
    } else {
      text += fmt::format("{}:{}\n", h.host, h.slots);
    }
  }
  return text;
}

std::vector<std::string> Launcher::programs() const {
  if (family_ == MpiFamily::open_mpi) return {"mpirun", "mpiexec", "mpirun.openmpi"};
  return {"mpiexec.hydra", "mpiexec", "mpirun", "mpiexec.mpich"};
}

std::vector<std::string> Launcher::version_markers() const {
  if (family_ == MpiFamily::open_mpi) return {"Open MPI", "OpenRTE"};
  return {"HYDRA", "Intel(R) MPI"};
}

const char* Launcher::package() const { return family_ == MpiFamily::open_mpi ? "openmpi-bin" : "mpich"; }

std::vector<std::string> Launcher::command_line(const std::string& program, const LaunchPlan& plan) const {
  std::vector<std::string> args = {program};
  const auto add = [&](std::initializer_list<std::string> more) { args.insert(args.end(), more); };
  if (family_ == MpiFamily::open_mpi) {
    add({"-np", std::to_string(plan.ranks), "--bind-to", "none", "-x", "OMPI_MCA_mpi_yield_when_idle=1"});
    if (plan.oversubscribe) add({"--oversubscribe"});
    if (!plan.hostfile.empty()) add({"--hostfile", plan.hostfile});
    if (plan.as_root) add({"--allow-run-as-root"});
    for (const std::string& v : plan.set_env) add({"-x", v});
    // Local ranks inherit mpirun's environment; -x also sends these to other hosts' ranks.
    for (const std::string& name : plan.pass_env) add({"-x", name});
  } else {
    // Hydra: no binding, oversubscription and root by default; the whole environment goes to every
    // rank (-genvall), so pass_env needs nothing.
    add({"-n", std::to_string(plan.ranks)});
    if (!plan.hostfile.empty()) add({"-f", plan.hostfile});
    for (const std::string& v : plan.set_env) {
      const auto eq = v.find('=');
      add({"-genv", v.substr(0, eq), eq == std::string::npos ? std::string() : v.substr(eq + 1)});
    }
  }
  args.insert(args.end(), plan.command.begin(), plan.command.end());
  return args;
}

int Launcher::stop_signal(int signal) const {
  if (signal == SIGINT) return SIGUSR1;
  // Hydra forwards SIGTERM as it is (SIGINT it forwards too, but with notes on its stdout and then an
  // exit status of 0, whatever the ranks' status).
  return family_ == MpiFamily::open_mpi ? SIGUSR2 : SIGTERM;
}

int Launcher::end_signal() const { return family_ == MpiFamily::open_mpi ? SIGTERM : SIGINT; }

}  // namespace trident::dist
