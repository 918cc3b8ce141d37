#include "trident/dist/flight_recorder.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

namespace trident::dist::flight {

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

struct Entry {
  Ticket ticket = 0;  // 0: empty
  Call call;
  Clock::time_point start, end;
  bool done = false;
  bool noted = false;  // a note was left for it
};

// Written by the thread that drives the communicators, read by the watchdog's thread.
struct Record {
  std::mutex mutex;
  std::array<Entry, kEntries> entries;
  Ticket next = 1;
  std::string dir;
  int rank = -1;
  std::uint64_t token = 0;
  std::vector<std::string> hosts;
};

Record& the_record() {
  static Record* r = new Record();  // never destroyed: the watchdog may report while the process exits
  return *r;
}

std::string show_bytes(std::int64_t b) {
  if (b >= (std::int64_t{1} << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20));
  if (b >= 1024) return fmt::format("{:.1f} KiB", static_cast<double>(b) / 1024);
  return fmt::format("{} B", b);
}

std::string note_path(const std::string& dir, int rank) { return (fs::path(dir) / fmt::format("rank-{}.note", rank)).string(); }

// A note: "token\tgroup\tseq\tmembers\twhat" (members: the group's world ranks, comma-separated).
struct Note {
  std::uint64_t token = 0;
  std::string group;
  std::int64_t seq = 0;
  std::vector<int> members;
  std::string what;
};

bool read_note(const std::string& path, Note& n) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return false;
  std::istringstream fields(line);
  std::string token, seq, members;
  if (!std::getline(fields, token, '\t') || !std::getline(fields, n.group, '\t') || !std::getline(fields, seq, '\t') ||
      !std::getline(fields, members, '\t') || !std::getline(fields, n.what))
    return false;
  try {
    n.token = std::stoull(token);
    n.seq = std::stoll(seq);
    n.members.clear();
    std::istringstream list(members);
    for (std::string m; std::getline(list, m, ',');) n.members.push_back(std::stoi(m));
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

std::string who(const Record& r, int rank) {
  const std::string host = rank >= 0 && static_cast<std::size_t>(rank) < r.hosts.size() ? r.hosts[static_cast<std::size_t>(rank)] : "";
  return host.empty() ? fmt::format("rank {}", rank) : fmt::format("rank {} on {}", rank, host);
}

// Copies `text` into `out` (N bytes), cut at N − 1 and terminated.
template <std::size_t N>
void copy_cut(char (&out)[N], std::string_view text) {
  const std::size_t n = std::min(text.size(), N - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

}  // namespace

Call::Call(std::string_view op_, std::string_view context_, std::shared_ptr<const Group> group_, std::int64_t seq_,
           int rank_, int size_, std::int64_t bytes_)
    : group(std::move(group_)), seq(seq_), rank(rank_), size(size_), bytes(bytes_) {
  copy_cut(op, op_);
  copy_cut(context, context_);
}

std::string describe(const Call& c) {
  const std::string_view group = c.group ? std::string_view(c.group->name) : std::string_view("?");
  if (c.context[0] == '\0') return fmt::format("{} #{} on {} (rank {} of {})", c.op, c.seq, group, c.rank, c.size);
  return fmt::format("{} #{} ({}) on {} (rank {} of {})", c.op, c.seq, c.context, group, c.rank, c.size);
}

Ticket record(const Call& call, Clock::time_point now) {
  Record& r = the_record();
  std::lock_guard<std::mutex> lock(r.mutex);
  const Ticket t = r.next++;
  Entry& e = r.entries[t % kEntries];
  e.ticket = t;
  e.call = call;
  e.start = now;
  e.done = false;
  e.noted = false;
  return t;
}

std::string describe(Ticket ticket) {
  Record& r = the_record();
  std::lock_guard<std::mutex> lock(r.mutex);
  const Entry& e = r.entries[ticket % kEntries];
  return e.ticket == ticket ? describe(e.call) : std::string("a collective");
}

void finished(Ticket ticket, Clock::time_point end) {
  Record& r = the_record();
  std::lock_guard<std::mutex> lock(r.mutex);
  Entry& e = r.entries[ticket % kEntries];
  if (e.ticket != ticket) return;
  e.done = true;
  e.end = end;
  if (e.noted) {  // the long wait ended: the note no longer holds
    std::error_code ec;
    fs::remove(note_path(r.dir, r.rank), ec);
    e.noted = false;
  }
}

std::vector<std::string> report() {
  Record& r = the_record();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<const Entry*> kept;
  for (const Entry& e : r.entries) {
    if (e.ticket != 0) kept.push_back(&e);
  }
  std::sort(kept.begin(), kept.end(), [](const Entry* a, const Entry* b) { return a->ticket < b->ticket; });
  const Clock::time_point now = Clock::now();
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  std::vector<std::string> lines;
  for (const Entry* e : kept) {
    lines.push_back(fmt::format("{}: {}, started {:.1f} s ago, {}", describe(e->call), show_bytes(e->call.bytes),
                                seconds(now - e->start),
                                e->done ? fmt::format("done in {:.1f} ms", 1e3 * seconds(e->end - e->start))
                                        : std::string("in flight")));
  }
  return lines;
}

void set_directory(const std::string& dir) {
  Record& r = the_record();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.dir = dir;
  if (dir.empty()) return;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (r.rank >= 0) fs::remove(note_path(dir, r.rank), ec);  // an earlier job's note of this rank
}

void set_job(int world_rank, std::uint64_t token, std::vector<std::string> hosts) {
  Record& r = the_record();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.rank = world_rank;
  r.token = token;
  r.hosts = std::move(hosts);
}

std::string host_of(int world_rank) {
  Record& r = the_record();
  std::lock_guard<std::mutex> lock(r.mutex);
  return world_rank >= 0 && static_cast<std::size_t>(world_rank) < r.hosts.size() ? r.hosts[static_cast<std::size_t>(world_rank)] : "";
}

void note_waiting(Ticket ticket) {
  if (ticket == 0) return;
  Record& r = the_record();
  std::lock_guard<std::mutex> lock(r.mutex);
  Entry& e = r.entries[ticket % kEntries];
  if (r.dir.empty() || r.rank < 0 || e.ticket != ticket || e.done || e.noted || !e.call.group) return;
  const std::string path = note_path(r.dir, r.rank), tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << r.token << '\t' << e.call.group->name << '\t' << e.call.seq << '\t'
        << fmt::format("{}", fmt::join(e.call.group->world_ranks, ",")) << '\t' << describe(e.call) << '\n';
    if (!out) return;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  e.noted = !ec;
}

std::string peers(Ticket ticket, double wait_s) {
  if (ticket == 0) return "";
  note_waiting(ticket);  // a deadline shorter than the first check leaves the note only now
  Record& r = the_record();
  std::string dir;
  std::shared_ptr<const Group> group;
  std::int64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    const Entry& e = r.entries[ticket % kEntries];
    if (r.dir.empty() || e.ticket != ticket || !e.call.group) return "";
    dir = r.dir;
    group = e.call.group;
    seq = e.call.seq;
  }
  std::vector<int> others;
  for (int m : group->world_ranks) {
    if (m != r.rank) others.push_back(m);
  }
  if (others.empty()) return "";
  // A peer that entered the call later than this rank leaves its note later: wait for it, a little.
  const Clock::time_point until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_s));
  std::vector<Note> notes(others.size());
  std::vector<bool> seen(others.size(), false);
  for (;;) {
    bool all = true;
    for (std::size_t i = 0; i < others.size(); ++i) {
      if (!seen[i]) seen[i] = read_note(note_path(dir, others[i]), notes[i]) && notes[i].token == r.token;
      all = all && seen[i];
    }
    if (all || Clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::vector<std::string> missing, elsewhere, same;
  for (std::size_t i = 0; i < others.size(); ++i) {
    if (!seen[i]) {
      missing.push_back(who(r, others[i]));
    } else if (notes[i].group == group->name && notes[i].seq == seq) {
      same.push_back(who(r, others[i]));
    } else {
      // Follow the chain one step: in the call that member waits in, who never arrived?
      std::vector<std::string> absent;
      for (int m : notes[i].members) {
        if (m == others[i] || m == r.rank) continue;
        Note further;
        if (!(read_note(note_path(dir, m), further) && further.token == r.token)) absent.push_back(who(r, m));
      }
      elsewhere.push_back(fmt::format("{} waits in {}{}", who(r, others[i]), notes[i].what,
                                      absent.empty() ? std::string()
                                                     : fmt::format(", where {} never arrived", fmt::join(absent, ", "))));
    }
  }
  std::string out;
  if (!missing.empty()) {
    out += fmt::format("; {} never reached it (stopped, dead or cut off from this host)", fmt::join(missing, ", "));
  }
  if (!elsewhere.empty()) out += fmt::format("; {}", fmt::join(elsewhere, "; "));
  if (missing.empty() && elsewhere.empty()) {
    out += fmt::format("; every other member ({}) waits in it too: the data between them is not arriving (a network "
                       "fault?)",
                       fmt::join(same, ", "));
  }
  return out;
}

}  // namespace trident::dist::flight
