// The flight recorder: the last collectives this process started, kept so that a timeout can show what
// came before the call that stalled (PyTorch's NCCL flight recorder keeps the same), and the peer check
// that names the rank a stalled collective waits for.
//
// Each entry is the call's description — operation, its sequence number on its group ("all_reduce #57"),
// the group and this rank in it — with its bytes, its start time and, once it finished, its end. The
// watchdog prints the entries after its timeout line, oldest first.
//
// The peer check. A rank that has waited on a collective for half its timeout leaves a note in a
// directory every rank sees (the run directory's flight/): its rank, host, the group and the sequence
// number it waits in. When the call times out, the rank reads the notes of the group's other members:
// one that left no note did not reach the call — it is stopped, dead, or cut off from the others — and
// one whose note names another call is stuck there. The timeout line says which. Notes carry the job's
// token (drawn at start-up), so an earlier job's notes are ignored, and a call that completes removes its
// note.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace trident::dist::flight {

using Ticket = std::uint64_t;

// A communicator's group: its name and its members' ranks in the job (the world).
struct Group {
  std::string name;
  std::vector<int> world_ranks;
};

// A collective as the record keeps it: plain fields, copied without formatting (a collective of a few
// microseconds must not pay for its own name); describe() makes the words when they are needed.
struct Call {
  char op[64] = {};        // "all_to_all", "send to 3 (tag 7)" (cut at 63 bytes)
  char context[96] = {};   // the caller's words, "moe dispatch in model.layers.0.mlp" ("" none)
  std::shared_ptr<const Group> group;
  std::int64_t seq = 0;    // its sequence number on the group
  int rank = 0, size = 1;  // this rank in the group
  std::int64_t bytes = 0;

  Call() = default;
  Call(std::string_view op, std::string_view context, std::shared_ptr<const Group> group, std::int64_t seq, int rank,
       int size, std::int64_t bytes);
};
// "all_to_all #12 (moe dispatch) on ep group [0, 1] (rank 0 of 2)".
std::string describe(const Call& call);

// Records a collective that starts at `start` (a caller that has just read the clock passes it on: the
// blocking path reads it once per call); returns its ticket.
Ticket record(const Call& call, std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now());
// describe() of a recorded collective ("a collective" once newer ones have pushed it out).
std::string describe(Ticket ticket);
// Marks the collective done and removes its note, if it left one (a no-op once newer collectives have
// pushed it out of the record).
void finished(Ticket ticket, std::chrono::steady_clock::time_point end = std::chrono::steady_clock::now());
// The recorded collectives, oldest first, one line each:
// "all_reduce #57 on dp group [0, 2] (rank 0 of 2): 4.0 MiB, started 10.2 s ago, in flight".
std::vector<std::string> report();

// The directory of the notes ("": no notes, no peer check), this rank's world rank, the job's token and
// every world rank's host. Set at start-up (mpi_world, the trainer).
void set_directory(const std::string& dir);
void set_job(int world_rank, std::uint64_t token, std::vector<std::string> hosts);
// The host of a world rank ("" when unknown).
std::string host_of(int world_rank);

// Half way to the deadline of `ticket`'s call: leaves this rank's note (once).
void note_waiting(Ticket ticket);
// At the deadline: waits up to `wait_s` for the notes of the group's other members and returns what they
// say, e.g. "; rank 3 on node2 never reached it (stopped, dead or cut off)" ("" without a directory, a
// group or another member).
std::string peers(Ticket ticket, double wait_s);

// How many collectives the record keeps.
inline constexpr int kEntries = 8;

}  // namespace trident::dist::flight
