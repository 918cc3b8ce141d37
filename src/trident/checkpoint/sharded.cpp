#include "trident/checkpoint/sharded.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "trident/core/atomic_file.h"
#include "trident/core/error.h"
#include "trident/core/interrupt.h"

namespace trident::checkpoint {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string piece_name(const TensorPiece& p) {
  return fmt::format("{}@{}", p.key, fmt::join(p.offsets, ","));
}

std::string hex64(std::uint64_t v) { return fmt::format("{:016x}", v); }

// Whether the boxes at offsets `a` and `b` with extents `a_shape` and `b_shape` share an element.
bool boxes_overlap(const std::vector<std::int64_t>& a, const Shape& a_shape, const std::vector<std::int64_t>& b,
                   const Shape& b_shape) {
  for (std::size_t d = 0; d < a.size(); ++d)
    if (std::max(a[d], b[d]) >= std::min(a[d] + a_shape[d], b[d] + b_shape[d])) return false;
  return true;
}

// The run-state fields a training resumes from, when present: a hand-edited or damaged meta.json makes
// the checkpoint fail to open (and a resume skip it by name), never resume at step -3.
void validate_meta(const json& meta, const std::string& dir, const std::string& meta_path) {
  auto count = [&](const char* key) {
    if (!meta.contains(key)) return;
    const json& v = meta[key];
    TRIDENT_CHECK(v.is_number_integer() && v.get<std::int64_t>() >= 0,
                  "'{}': \"{}\" must be an integer >= 0, got {}", meta_path, key, v.dump());
  };
  for (const char* key : {"step", "consumed_samples", "optimizer_step", "loss_scale_good_steps", "seed"}) count(key);
  if (meta.contains("loss_scale")) {
    const json& v = meta["loss_scale"];
    TRIDENT_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0,
                  "'{}': \"loss_scale\" must be a finite number >= 0, got {}", meta_path, v.dump());
  }
  // The directory step_N holds step N.
  const std::string name = fs::path(dir).filename().string();
  std::size_t end = 5;
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  std::int64_t named_step = -1;
  if (name.starts_with("step_") && end > 5 && (end == name.size() || name[end] == '.') &&
      std::from_chars(name.data() + 5, name.data() + end, named_step).ec == std::errc() && meta.contains("step")) {
    TRIDENT_CHECK(meta["step"].get<std::int64_t>() == named_step,
                  "'{}': \"step\" is {}, but the directory is that of step {}", meta_path, meta["step"].dump(),
                  named_step);
  }
  // Every rank of the layout that wrote it left a shard, which meta.json must list (and so verify).
  if (meta.contains("layout")) {
    const json& layout = meta["layout"];
    TRIDENT_CHECK(layout.is_object() && layout.contains("world_size") && layout["world_size"].is_number_integer() &&
                      layout["world_size"].get<std::int64_t>() >= 1 &&
                      layout["world_size"].get<std::int64_t>() <= static_cast<std::int64_t>(meta["files"].size()),
                  "'{}': \"layout\" must give a world_size from 1 to the {} files listed, got {}", meta_path,
                  meta["files"].size(), layout.dump());
    const std::int64_t world = layout["world_size"].get<std::int64_t>();
    for (std::int64_t r = 0; r < world; ++r) {
      const std::string shard = fmt::format("shard-{:05d}.safetensors", r);
      TRIDENT_CHECK(meta["files"].contains(shard), "'{}': \"files\" does not list {} of rank {} (world_size {})",
                    meta_path, shard, r, world);
    }
  }
}

}  // namespace

std::uint64_t write_shard(const std::string& path, const std::vector<TensorPiece>& pieces) {
  SafetensorsWriter writer;
  for (const TensorPiece& p : pieces) {
    TRIDENT_CHECK(p.data.defined() && p.offsets.size() == p.global_shape.rank() && p.data.rank() == p.global_shape.rank(),
                  "checkpoint piece '{}': {} at {} offsets does not fit global shape {}", p.key,
                  p.data.defined() ? p.data.describe() : "undefined", p.offsets.size(), p.global_shape);
    const std::string name = piece_name(p);
    writer.set_metadata(name, json{{"key", p.key}, {"global_shape", p.global_shape.dims()}, {"offsets", p.offsets}}.dump());
    writer.add(name, p.data);
  }
  writer.write(path);
  return file_checksum(path);
}

std::uint64_t file_checksum(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TRIDENT_CHECK(fd >= 0, "cannot open '{}' to verify its checksum", path);
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  std::vector<char> buf(1 << 20);
  ssize_t n;
  while ((n = ::read(fd, buf.data(), buf.size())) > 0) XXH64_update(state, buf.data(), static_cast<std::size_t>(n));
  ::close(fd);
  const std::uint64_t h = XXH64_digest(state);
  XXH64_freeState(state);
  return h;
}

CheckpointReader::CheckpointReader(const std::string& dir) : dir_(dir) {
  const fs::path meta_path = fs::path(dir) / "meta.json";
  std::ifstream in(meta_path);
  TRIDENT_CHECK(in.good(), "checkpoint '{}' has no readable meta.json (incomplete or not a checkpoint)", dir);
  try {
    meta_ = json::parse(in);
  } catch (const json::parse_error& e) {
    TRIDENT_FAIL("'{}' is not valid JSON: {}", meta_path.string(), e.what());
  }
  TRIDENT_CHECK(meta_.is_object(), "'{}' must hold a JSON object", meta_path.string());
  const json version = meta_.value("format_version", json(0));
  TRIDENT_CHECK(version == kFormatVersion, "checkpoint '{}' has format version {}, this trident reads version {}", dir,
                version.dump(), kFormatVersion);
  TRIDENT_CHECK(meta_.contains("files") && meta_["files"].is_object() && !meta_["files"].empty(),
                "'{}': meta.json lists no files", meta_path.string());
  validate_meta(meta_, dir, meta_path.string());
  for (auto it = meta_["files"].begin(); it != meta_["files"].end(); ++it) {
    // Checkpoint files sit directly in the directory: a name that reaches elsewhere ("../x", "/etc/x")
    // is damage or mischief, not a checkpoint.
    const fs::path listed(it.key());
    TRIDENT_CHECK(!it.key().empty() && listed == listed.filename() && it.key() != "." && it.key() != "..",
                  "'{}': file name '{}' is not a plain file name in the checkpoint directory", meta_path.string(),
                  it.key());
    const std::string path = (fs::path(dir) / it.key()).string();
    TRIDENT_CHECK(fs::exists(path), "checkpoint '{}': file '{}' listed in meta.json is missing", dir, it.key());
    TRIDENT_CHECK(it.value().is_string(), "'{}': the checksum of '{}' must be a string, got {}", meta_path.string(),
                  it.key(), it.value().dump());
    const std::string expected = it.value().get<std::string>();
    interruption_point(LongWait::checkpoint_load);  // each file read whole: a resume's long wait
    const std::string actual = hex64(file_checksum(path));
    TRIDENT_CHECK(actual == expected, "checkpoint file '{}' is corrupted: checksum {} but meta.json records {}", path,
                  actual, expected);
    if (it.key().ends_with(".safetensors")) {
      auto f = std::make_shared<SafetensorsFile>(SafetensorsFile::open(path));
      const std::size_t file_index = files_.size();
      for (const auto& [name, text] : f->metadata()) {
        if (name == "format") continue;
        TRIDENT_CHECK(f->contains(name), "'{}': metadata names tensor '{}' that the file lacks", path, name);
        Piece piece{file_index, name, {}, f->info(name).shape};
        Shape global;
        std::string key;
        try {
          const json m = json::parse(text);
          key = m.at("key").get<std::string>();
          global = Shape(m.at("global_shape").get<std::vector<std::int64_t>>());
          piece.offsets = m.at("offsets").get<std::vector<std::int64_t>>();
        } catch (const json::exception& e) {
          TRIDENT_FAIL("'{}': metadata of tensor '{}' is not {{\"key\", \"global_shape\", \"offsets\"}}: {}", path,
                       name, e.what());
        }
        // read() indexes pieces by the global shape's rank and copies them by their extents: the piece must
        // lie inside the global shape.
        TRIDENT_CHECK(checked_numel(global) >= 0,
                      "'{}': tensor '{}' has global shape {} (expected non-negative dimensions, under 2^63 elements)",
                      path, key, global);
        TRIDENT_CHECK(piece.offsets.size() == global.rank() && piece.shape.rank() == global.rank(),
                      "'{}': piece '{}' of tensor '{}' has shape {} and {} offsets; its global shape {} has rank {}",
                      path, name, key, piece.shape, piece.offsets.size(), global, global.rank());
        for (std::size_t d = 0; d < global.rank(); ++d) {
          TRIDENT_CHECK(piece.offsets[d] >= 0 && piece.offsets[d] <= global[d] - piece.shape[d],
                        "'{}': piece '{}' of tensor '{}' (shape {} at [{}]) exceeds its global shape {}", path, name,
                        key, piece.shape, fmt::join(piece.offsets, ", "), global);
        }
        auto [slot, inserted] = index_.try_emplace(key, Entry{global, {}});
        TRIDENT_CHECK(slot->second.global_shape == global, "checkpoint '{}': tensor '{}' has global shape {} in one "
                      "file and {} in '{}'", dir, key, slot->second.global_shape, global, path);
        const bool duplicate = std::any_of(slot->second.pieces.begin(), slot->second.pieces.end(), [&](const Piece& q) {
          return q.offsets == piece.offsets && q.shape == piece.shape;
        });
        if (!duplicate) slot->second.pieces.push_back(std::move(piece));
      }
      files_.push_back(std::move(f));
    }
  }
  // read() proves a box is covered exactly once by counting the elements the pieces give it, which
  // holds only for disjoint pieces (identical replicas were merged above).
  for (const auto& [key, e] : index_) {
    for (std::size_t i = 0; i < e.pieces.size(); ++i) {
      for (std::size_t j = i + 1; j < e.pieces.size(); ++j) {
        const Piece& a = e.pieces[i];
        const Piece& b = e.pieces[j];
        TRIDENT_CHECK(!boxes_overlap(a.offsets, a.shape, b.offsets, b.shape),
                      "checkpoint '{}': pieces of tensor '{}' overlap: {} at [{}] in '{}' and {} at [{}] in '{}'", dir,
                      key, a.shape, fmt::join(a.offsets, ", "), files_[a.file]->path(), b.shape,
                      fmt::join(b.offsets, ", "), files_[b.file]->path());
      }
    }
  }
}

const Shape& CheckpointReader::global_shape(const std::string& key) const {
  auto it = index_.find(key);
  TRIDENT_CHECK(it != index_.end(), "checkpoint '{}' has no tensor '{}'", dir_, key);
  return it->second.global_shape;
}

std::vector<std::string> CheckpointReader::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, e] : index_) out.push_back(k);
  return out;
}

Tensor CheckpointReader::read(const std::string& key, DType dtype) const {
  const Shape& g = global_shape(key);
  return read(key, std::vector<std::int64_t>(g.rank(), 0), g, dtype);
}

Tensor CheckpointReader::read(const std::string& key, const std::vector<std::int64_t>& offsets, const Shape& shape,
                              DType dtype) const {
  auto it = index_.find(key);
  TRIDENT_CHECK(it != index_.end(), "checkpoint '{}' has no tensor '{}' (expected a box {} of it)", dir_, key, shape);
  const Entry& e = it->second;
  const std::size_t r = e.global_shape.rank();
  TRIDENT_CHECK(offsets.size() == r && shape.rank() == r,
                "checkpoint tensor '{}' has global shape {}, but a box of shape {} was requested", key,
                e.global_shape, shape);
  for (std::size_t d = 0; d < r; ++d) {
    TRIDENT_CHECK(offsets[d] >= 0 && shape[d] >= 0 && shape[d] <= e.global_shape[d] - offsets[d],
                  "checkpoint tensor '{}' has global shape {}; the requested box {} at [{}] exceeds it", key,
                  e.global_shape, shape, fmt::join(offsets, ", "));
  }
  // The parts of the pieces inside the box, in global coordinates. Pieces are disjoint (checked on
  // opening), so the parts cover the box exactly once when their sizes add up to its size. Checked
  // before allocating: a global shape no pieces fill must not size the output.
  struct Part {
    const Piece* piece;
    std::vector<std::int64_t> lo, extent;
  };
  std::vector<Part> parts;
  std::int64_t covered = 0;
  for (const Piece& p : e.pieces) {
    Part part{&p, std::vector<std::int64_t>(r), std::vector<std::int64_t>(r)};
    bool empty = false;
    for (std::size_t d = 0; d < r; ++d) {
      part.lo[d] = std::max(offsets[d], p.offsets[d]);
      part.extent[d] = std::min(offsets[d] + shape[d], p.offsets[d] + p.shape[d]) - part.lo[d];
      if (part.extent[d] <= 0) empty = true;
    }
    if (empty) continue;
    covered += Shape(part.extent).numel();
    parts.push_back(std::move(part));
  }
  TRIDENT_CHECK(covered == shape.numel(),
                "checkpoint '{}': the pieces of tensor '{}' cover {} of the {} elements of the requested box {} at [{}]",
                dir_, key, covered, shape.numel(), shape, fmt::join(offsets, ", "));
  Tensor out = Tensor::empty(shape, dtype);
  const std::size_t esz = dtype_size(dtype);
  for (const Part& part : parts) {
    const Piece& p = *part.piece;
    std::vector<std::int64_t> in_piece(r), in_out(r);
    for (std::size_t d = 0; d < r; ++d) {
      in_piece[d] = part.lo[d] - p.offsets[d];
      in_out[d] = part.lo[d] - offsets[d];
    }
    Tensor box = files_[p.file]->read_box(p.tensor, in_piece, Shape(part.extent)).to(dtype);
    // Place the box (row runs along the last dimension).
    if (r == 0) {
      std::memcpy(out.raw_data(), box.raw_data(), esz);
      continue;
    }
    const std::int64_t run = part.extent[r - 1];
    const std::int64_t rows = box.numel() / run;
    for (std::int64_t row = 0; row < rows; ++row) {
      std::int64_t rem = row, off = in_out[r - 1], stride = shape[r - 1];
      for (std::size_t d = r - 1; d-- > 0;) {
        off += (rem % part.extent[d] + in_out[d]) * stride;
        rem /= part.extent[d];
        stride *= shape[d];
      }
      std::memcpy(static_cast<char*>(out.raw_data()) + static_cast<std::size_t>(off) * esz,
                  static_cast<const char*>(box.raw_data()) + static_cast<std::size_t>(row * run) * esz,
                  static_cast<std::size_t>(run) * esz);
    }
  }
  return out;
}

std::string begin_checkpoint(const std::string& final_dir) {
  const std::string tmp = final_dir + ".tmp";
  fs::remove_all(tmp);  // a previous attempt that died half-way
  fs::create_directories(tmp);
  crash_point("checkpoint directory created");
  return tmp;
}

void commit_checkpoint(const std::string& tmp_dir, const std::string& final_dir, json meta,
                       const std::vector<std::string>& files, const std::string& latest_file) {
  meta["format_version"] = kFormatVersion;
  json sums = json::object();
  for (const std::string& f : files) sums[f] = hex64(file_checksum((fs::path(tmp_dir) / f).string()));
  meta["files"] = sums;
  write_file_atomically(fs::path(tmp_dir) / "meta.json", meta.dump(2) + "\n");
  fsync_directory(tmp_dir);
  crash_point("meta.json written");
  // A checkpoint of this step may exist already (a resumed run redoing steps
  // whose checkpoint was committed but never named by `latest`): move it aside
  // first, so no moment lacks a complete checkpoint of every older step.
  const std::string replaced = final_dir + ".replaced";
  if (fs::exists(final_dir)) {
    fs::remove_all(replaced);
    fs::rename(final_dir, replaced);
    crash_point("old checkpoint of the same step moved aside");
  }
  fs::rename(tmp_dir, final_dir);
  fsync_directory(fs::path(final_dir).parent_path().string());
  crash_point("checkpoint directory renamed into place");
  if (!latest_file.empty()) {
    write_file_atomically(latest_file, fs::path(final_dir).filename().string() + "\n");
    crash_point("latest updated");
  }
  fs::remove_all(replaced);
}

std::string read_latest(const std::string& latest_file) {
  std::ifstream in(latest_file);
  if (!in.good()) return "";
  std::string name;
  std::getline(in, name);
  if (name.empty()) return "";
  const fs::path dir = fs::path(latest_file).parent_path() / name;
  return fs::exists(dir / "meta.json") ? dir.string() : "";
}

namespace {

// The step of a checkpoint directory name and how it was left: "step_N" (committed, 0), "step_N.tmp"
// (written, not renamed: 1), "step_N.replaced" (an older save of that step, moved aside: 2); -1 otherwise.
std::pair<std::int64_t, int> parse_checkpoint_name(const std::string& name) {
  if (!name.starts_with("step_")) return {-1, 0};
  std::size_t end = 5;
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  std::int64_t step = 0;
  // No digits, or more than an int64 holds: not a step.
  if (end == 5 || std::from_chars(name.data() + 5, name.data() + end, step).ec != std::errc()) return {-1, 0};
  const std::string rest = name.substr(end);
  if (rest.empty()) return {step, 0};
  if (rest == ".tmp") return {step, 1};
  if (rest == ".replaced") return {step, 2};
  return {-1, 0};
}

// Committed checkpoint directories under `root` (step_ followed by digits only), oldest step first
// (by number: step_100000000 is newer than step_99999999).
std::vector<fs::path> committed_checkpoints(const std::string& root) {
  std::vector<std::pair<std::int64_t, fs::path>> found;
  if (!fs::exists(root)) return {};
  for (const auto& entry : fs::directory_iterator(root)) {
    const auto [step, state] = parse_checkpoint_name(entry.path().filename().string());
    if (entry.is_directory() && step >= 0 && state == 0) found.emplace_back(step, entry.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> dirs;
  for (auto& [step, dir] : found) dirs.push_back(std::move(dir));
  return dirs;
}

// What identifies a checkpoint's model: the bytes of its config.json ("" without one).
std::string model_identity(const fs::path& dir) {
  std::ifstream in(dir / "config.json", std::ios::binary);
  if (!in.good()) return "";
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The checkpoint at `dir`, opened and verified; null (and the reason in `why`) when it does not open.
std::unique_ptr<CheckpointReader> try_open(const fs::path& dir, std::string* why) {
  try {
    return std::make_unique<CheckpointReader>(dir.string());
  } catch (const Error& e) {
    if (why) *why = e.message();
  } catch (const Interrupted&) {
    throw;  // a signal during the verification (core/interrupt.h), not a checkpoint that fails it
  } catch (const std::exception& e) {
    // Whatever else goes wrong reading it (a filesystem error, say), this one cannot be resumed from:
    // the caller tries the next.
    if (why) *why = fmt::format("checkpoint '{}': {}", dir.string(), e.what());
  }
  return nullptr;
}

}  // namespace

std::unique_ptr<CheckpointReader> open_latest_valid_checkpoint(const std::string& root,
                                                               std::vector<std::string>* skipped) {
  const std::string named = read_latest((fs::path(root) / "latest").string());
  std::string why;
  if (!named.empty()) {
    if (auto reader = try_open(named, &why)) return reader;
    if (skipped) skipped->push_back(why);
  }
  // Newest step first; for one step the committed directory, then a complete save a kill left
  // unrenamed, then the older save it was replacing (both only exist after a crash mid-commit).
  std::vector<std::tuple<std::int64_t, int, fs::path>> candidates;
  if (fs::exists(root)) {
    for (const auto& entry : fs::directory_iterator(root)) {
      const auto [step, state] = parse_checkpoint_name(entry.path().filename().string());
      if (!entry.is_directory() || step < 0) continue;
      if (state > 0 && !fs::exists(entry.path() / "meta.json")) continue;  // an unfinished write
      candidates.emplace_back(-step, state, entry.path());
    }
  }
  std::sort(candidates.begin(), candidates.end());
  for (const auto& [minus_step, state, dir] : candidates) {
    if (!named.empty() && fs::exists(named) && fs::equivalent(dir, named)) continue;
    if (auto reader = try_open(dir, &why)) return reader;
    if (skipped) skipped->push_back(why);
  }
  return nullptr;
}

std::string latest_valid_checkpoint(const std::string& root, std::vector<std::string>* skipped) {
  const auto reader = open_latest_valid_checkpoint(root, skipped);
  return reader ? reader->dir() : std::string();
}

void prune_checkpoints(const std::string& root, std::int64_t keep, const std::string& latest_dir,
                       const std::vector<std::string>& also_keep) {
  if (keep <= 0 || !fs::exists(root)) return;
  const std::vector<fs::path> all = committed_checkpoints(root);
  if (all.empty()) return;
  const fs::path newest = latest_dir.empty() ? all.back() : fs::path(latest_dir);
  // Only checkpoints of the newest one's model take turns: a run directory that also holds another model's
  // checkpoints (another configuration trained there) keeps them, so rotation never deletes the last one.
  const std::string model = model_identity(newest);
  std::vector<fs::path> dirs;
  for (const fs::path& d : all)
    if (model_identity(d) == model) dirs.push_back(d);
  const std::int64_t excess = static_cast<std::int64_t>(dirs.size()) - keep;
  for (std::int64_t i = 0; i < excess; ++i) {
    const fs::path& dir = dirs[static_cast<std::size_t>(i)];
    if (fs::equivalent(dir, newest)) continue;
    if (std::find(also_keep.begin(), also_keep.end(), dir.filename().string()) != also_keep.end()) continue;
    fs::remove_all(dirs[static_cast<std::size_t>(i)]);
    crash_point("old checkpoint pruned");
  }
  // What a crash mid-commit left (an unrenamed .tmp, a .replaced older copy) is superseded once a
  // newer checkpoint is committed.
  for (const auto& entry : fs::directory_iterator(root)) {
    const auto [step, state] = parse_checkpoint_name(entry.path().filename().string());
    if (step >= 0 && state > 0 && entry.is_directory() &&
        step <= parse_checkpoint_name(all.back().filename().string()).first) {
      fs::remove_all(entry.path());
    }
  }
}

}  // namespace trident::checkpoint
