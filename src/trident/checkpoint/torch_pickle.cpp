// The restricted unpickler of checkpoint/torch_file.h: a stack machine over plain values, run on the
// opcodes a state dict's pickle uses. It calls nothing: the three allowed callables are recognised by
// name and their results built here (an empty dict, or a tensor record). Every object lives in one
// arena owned by the interpreter, so the memo and containers may alias (or even contain themselves)
// without ownership cycles, and the work is linear in the input's length.
#include <bit>
#include <cstring>
#include <deque>
#include <limits>
#include <set>
#include <unordered_map>
#include <utility>

#include "trident/checkpoint/torch_file.h"
#include "trident/core/error.h"

namespace trident::checkpoint {

namespace {

constexpr TorchStorageType kStorageTypes[] = {
    {"FloatStorage", 4, true, DType::f32}, {"DoubleStorage", 8, true, DType::f64},
    {"HalfStorage", 2, true, DType::f16},  {"BFloat16Storage", 2, true, DType::bf16},
    {"LongStorage", 8, true, DType::i64},  {"IntStorage", 4, true, DType::i32},
    {"ByteStorage", 1, true, DType::u8},   {"ShortStorage", 2, false, DType::f32},
    {"CharStorage", 1, false, DType::f32}, {"BoolStorage", 1, false, DType::f32},
};
constexpr std::size_t kMaxRank = 64;

enum class Kind { none, boolean, integer, floating, string, tuple, list, dict, global, storage, tensor };

const char* kind_name(Kind k) {
  constexpr const char* kNames[] = {"None",   "a bool", "an int",   "a float",   "a str",   "a tuple",
                                    "a list", "a dict", "a global", "a storage", "a tensor"};
  return kNames[static_cast<int>(k)];
}

// The globals the allow-list admits.
enum class Global { ordered_dict, rebuild_tensor_v2, rebuild_parameter, storage_type };

struct Object {
  Kind kind = Kind::none;
  bool boolean = false;
  std::int64_t integer = 0;
  double floating = 0;
  std::string text;                                  // string; a storage's key
  std::vector<Object*> items;                        // tuple, list
  std::vector<std::pair<Object*, Object*>> entries;  // dict
  Global global = Global::ordered_dict;
  const TorchStorageType* storage_type = nullptr;  // global storage_type; storage
  std::int64_t storage_numel = 0;                  // storage
  TorchTensorRecord tensor;                        // tensor (name left empty)
};

class Unpickler {
 public:
  Unpickler(std::span<const std::byte> in, std::string_view context) : in_(in), context_(context) {}

  std::vector<TorchTensorRecord> run() {
    while (true) {
      const std::size_t at = pos_;
      const auto op = static_cast<unsigned char>(byte());
      if (op == '.') break;  // STOP
      step(op, at);
    }
    TRIDENT_CHECK(stack_.size() == 1 && marks_.empty(),
                  "'{}': the pickle stops with {} values on its stack (expected the state dict alone)", context_,
                  stack_.size());
    return state_dict(stack_.back());
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> what, Args&&... args) const {
    TRIDENT_FAIL("'{}': {}", context_, fmt::format(what, std::forward<Args>(args)...));
  }

  // --- reading the stream ---
  const std::byte* take(std::size_t n) {
    if (n > in_.size() - pos_)
      fail("the pickle is truncated: {} more bytes needed at byte {}, but it ends at byte {}", n, pos_, in_.size());
    const std::byte* p = in_.data() + pos_;
    pos_ += n;
    return p;
  }
  std::byte byte() { return *take(1); }
  std::uint64_t unsigned_le(std::size_t n) {
    const std::byte* p = take(n);
    std::uint64_t v = 0;
    for (std::size_t i = n; i-- > 0;) v = (v << 8) | static_cast<unsigned char>(p[i]);
    return v;
  }
  std::string text(std::size_t n) {
    const std::byte* p = take(n);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  std::string line() {
    const std::size_t begin = pos_;
    while (true) {
      if (byte() == std::byte{'\n'})
        return std::string(reinterpret_cast<const char*>(in_.data() + begin), pos_ - 1 - begin);
    }
  }

  // --- objects ---
  Object* make(Kind kind) {
    objects_.emplace_back();
    objects_.back().kind = kind;
    return &objects_.back();
  }
  Object* make_int(std::int64_t v) {
    Object* o = make(Kind::integer);
    o->integer = v;
    return o;
  }
  void push(Object* o) { stack_.push_back(o); }
  Object* pop(const char* op) {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back()))
      fail("opcode {} at byte {} finds its stack empty", op, op_at_);
    Object* o = stack_.back();
    stack_.pop_back();
    return o;
  }
  Object* top(const char* op) {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back()))
      fail("opcode {} at byte {} finds its stack empty", op, op_at_);
    return stack_.back();
  }
  // The top `n` values, in stack order.
  std::vector<Object*> pop_n(std::size_t n, const char* op) {
    std::vector<Object*> items(n);
    for (std::size_t i = n; i-- > 0;) items[i] = pop(op);
    return items;
  }
  // The values above the topmost mark, which is removed.
  std::vector<Object*> pop_mark(const char* op) {
    if (marks_.empty()) fail("opcode {} at byte {} has no MARK before it", op, op_at_);
    const std::size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Object*> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  Object* tuple(std::vector<Object*> items) {
    Object* o = make(Kind::tuple);
    o->items = std::move(items);
    return o;
  }
  void memo_put(std::uint64_t index) { memo_[index] = top("PUT"); }
  void memo_get(std::uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail("opcode GET at byte {} reads memo entry {}, which was never stored", op_at_, index);
    push(it->second);
  }
  Object* expect(Object* o, Kind kind, const char* what) {
    if (o->kind != kind) fail("{} is {} (expected {})", what, kind_name(o->kind), kind_name(kind));
    return o;
  }
  void add_items(Object* list, const std::vector<Object*>& items, const char* op) {
    if (list->kind != Kind::list)
      fail("opcode {} at byte {} appends to {} (expected a list)", op, op_at_, kind_name(list->kind));
    list->items.insert(list->items.end(), items.begin(), items.end());
  }
  void set_items(Object* dict, const std::vector<Object*>& kv, const char* op) {
    if (dict->kind != Kind::dict)
      fail("opcode {} at byte {} sets items of {} (expected a dict)", op, op_at_, kind_name(dict->kind));
    if (kv.size() % 2 != 0) fail("opcode {} at byte {} has an odd number of keys and values", op, op_at_);
    for (std::size_t i = 0; i < kv.size(); i += 2) dict->entries.emplace_back(kv[i], kv[i + 1]);
  }

  // The allow-list: anything else is refused by name before it could be used.
  Object* global(const std::string& module, const std::string& name) {
    Object* o = make(Kind::global);
    if (module == "collections" && name == "OrderedDict") {
      o->global = Global::ordered_dict;
    } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
      o->global = Global::rebuild_tensor_v2;
    } else if (module == "torch._utils" && name == "_rebuild_parameter") {
      o->global = Global::rebuild_parameter;
    } else {
      for (const TorchStorageType& t : kStorageTypes) {
        if (module == "torch" && name == t.name) {
          o->global = Global::storage_type;
          o->storage_type = &t;
          return o;
        }
      }
      TRIDENT_FAIL(
          "'{}': refused global '{}.{}' in the pickle: a weights file may name only torch storages "
          "(torch.FloatStorage, ...), torch._utils._rebuild_tensor_v2 / _rebuild_parameter and "
          "collections.OrderedDict (nothing was run)",
          context_, module, name);
    }
    return o;
  }

  // BINPERSID: ('storage', torch.<T>Storage, key, location, numel), as torch.save writes a storage.
  Object* persistent_load(Object* pid) {
    expect(pid, Kind::tuple, "a persistent id");
    const auto& f = pid->items;
    if (f.size() != 5 || f[0]->kind != Kind::string || f[0]->text != "storage")
      fail("a persistent id is not ('storage', type, key, location, numel) (byte {})", op_at_);
    if (f[1]->kind != Kind::global || f[1]->global != Global::storage_type)
      fail("persistent id at byte {} names {} where a torch storage type belongs", op_at_, kind_name(f[1]->kind));
    expect(f[2], Kind::string, "a storage key");
    expect(f[3], Kind::string, "a storage location");
    expect(f[4], Kind::integer, "a storage's element count");
    if (f[4]->integer < 0) fail("storage '{}' has {} elements", f[2]->text, f[4]->integer);
    Object* s = make(Kind::storage);
    s->text = f[2]->text;
    s->storage_type = f[1]->storage_type;
    s->storage_numel = f[4]->integer;
    return s;
  }

  std::vector<std::int64_t> int_tuple(Object* o, const char* what) {
    expect(o, Kind::tuple, what);
    if (o->items.size() > kMaxRank) fail("{} has {} dimensions (at most {})", what, o->items.size(), kMaxRank);
    std::vector<std::int64_t> v;
    for (Object* i : o->items) v.push_back(expect(i, Kind::integer, what)->integer);
    return v;
  }

  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]).
  Object* rebuild_tensor(const std::vector<Object*>& a) {
    if (a.size() != 6 && a.size() != 7)
      fail("_rebuild_tensor_v2 at byte {} gets {} arguments (expected 6 or 7)", op_at_, a.size());
    Object* storage = expect(a[0], Kind::storage, "a tensor's storage");
    Object* t = make(Kind::tensor);
    TorchTensorRecord& r = t->tensor;
    r.storage = storage->text;
    r.type = storage->storage_type;
    r.storage_numel = storage->storage_numel;
    r.offset = expect(a[1], Kind::integer, "a tensor's storage offset")->integer;
    r.shape = Shape(int_tuple(a[2], "a tensor's size"));
    r.stride = int_tuple(a[3], "a tensor's stride");
    expect(a[4], Kind::boolean, "a tensor's requires_grad");
    check_view(r);
    return t;
  }

  // The view's elements must lie inside its storage: offset + Σ (size-1)·stride < numel.
  void check_view(const TorchTensorRecord& r) {
    if (r.stride.size() != r.shape.rank())
      fail("a tensor of size {} has {} strides (byte {})", r.shape, r.stride.size(), op_at_);
    if (r.offset < 0) fail("a tensor has storage offset {} (byte {})", r.offset, op_at_);
    std::int64_t numel = 1, last = r.offset;
    for (std::size_t d = 0; d < r.shape.rank(); ++d) {
      if (r.shape[d] < 0 || r.stride[d] < 0)
        fail("a tensor has size {} and stride [{}] (byte {})", r.shape, fmt::join(r.stride, ", "), op_at_);
      std::int64_t span = 0;
      if (__builtin_mul_overflow(numel, r.shape[d], &numel) ||
          (r.shape[d] > 0 &&
           (__builtin_mul_overflow(r.shape[d] - 1, r.stride[d], &span) || __builtin_add_overflow(last, span, &last))))
        fail("a tensor of size {} and stride [{}] overflows (byte {})", r.shape, fmt::join(r.stride, ", "), op_at_);
    }
    if (numel > 0 && last >= r.storage_numel)
      fail("a tensor of size {}, stride [{}] and offset {} reaches element {} of storage '{}', which holds {}", r.shape,
           fmt::join(r.stride, ", "), r.offset, last, r.storage, r.storage_numel);
    std::int64_t bytes = 0;
    if (__builtin_mul_overflow(r.storage_numel, static_cast<std::int64_t>(r.type->element_size), &bytes))
      fail("storage '{}' of {} elements overflows", r.storage, r.storage_numel);
  }

  Object* reduce(Object* callable, Object* args) {
    if (callable->kind != Kind::global) fail("opcode REDUCE at byte {} calls {}", op_at_, kind_name(callable->kind));
    expect(args, Kind::tuple, "REDUCE's arguments");
    switch (callable->global) {
      case Global::ordered_dict:
        if (!args->items.empty()) fail("collections.OrderedDict at byte {} gets arguments", op_at_);
        return make(Kind::dict);
      case Global::rebuild_tensor_v2:
        return rebuild_tensor(args->items);
      case Global::rebuild_parameter:
        if (args->items.size() != 3)
          fail("_rebuild_parameter at byte {} gets {} arguments (expected 3)", op_at_, args->items.size());
        return expect(args->items[0], Kind::tensor, "_rebuild_parameter's data");
      case Global::storage_type:
        break;
    }
    fail("opcode REDUCE at byte {} calls torch.{}, which is not a function", op_at_, callable->storage_type->name);
  }

  void step(unsigned char op, std::size_t at) {
    op_at_ = at;
    switch (op) {
      case 0x80: {  // PROTO
        const auto v = static_cast<unsigned char>(byte());
        if (v > 5) fail("pickle protocol {} (at most 5)", v);
        break;
      }
      case 0x95:  // FRAME (protocol 4): a length, then opcodes as usual
        take(8);
        break;
      case '(':  // MARK
        marks_.push_back(stack_.size());
        break;
      case ')':  // EMPTY_TUPLE
        push(tuple({}));
        break;
      case 't':
        push(tuple(pop_mark("TUPLE")));
        break;
      case 0x85:
      case 0x86:
      case 0x87:  // TUPLE1, TUPLE2, TUPLE3
        push(tuple(pop_n(op - 0x84u, "TUPLE1/2/3")));
        break;
      case ']':  // EMPTY_LIST
        push(make(Kind::list));
        break;
      case 'a':
      case 'e': {  // APPEND one value, APPENDS those above the mark
        const char* name = op == 'a' ? "APPEND" : "APPENDS";
        const std::vector<Object*> items = op == 'a' ? pop_n(1, name) : pop_mark(name);
        add_items(top(name), items, name);
        break;
      }
      case '}':  // EMPTY_DICT
        push(make(Kind::dict));
        break;
      case 's':
      case 'u': {  // SETITEM one key and value, SETITEMS those above the mark
        const char* name = op == 's' ? "SETITEM" : "SETITEMS";
        const std::vector<Object*> kv = op == 's' ? pop_n(2, name) : pop_mark(name);
        set_items(top(name), kv, name);
        break;
      }
      case 'N':
        push(make(Kind::none));
        break;
      case 0x88:
      case 0x89: {  // NEWTRUE, NEWFALSE
        Object* o = make(Kind::boolean);
        o->boolean = op == 0x88;
        push(o);
        break;
      }
      case 'K':  // BININT1
        push(make_int(static_cast<std::int64_t>(unsigned_le(1))));
        break;
      case 'M':  // BININT2
        push(make_int(static_cast<std::int64_t>(unsigned_le(2))));
        break;
      case 'J':  // BININT
        push(make_int(static_cast<std::int32_t>(static_cast<std::uint32_t>(unsigned_le(4)))));
        break;
      case 0x8a: {  // LONG1: n bytes of little-endian two's complement
        const auto n = static_cast<unsigned char>(byte());
        if (n > 8) fail("an integer of {} bytes at byte {} (at most 8)", n, op_at_);
        std::uint64_t v = n ? unsigned_le(n) : 0;
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~std::uint64_t{0} << (8 * n);  // sign-extend
        push(make_int(static_cast<std::int64_t>(v)));
        break;
      }
      case 'G': {  // BINFLOAT: big-endian IEEE double
        std::uint64_t bits = 0;
        const std::byte* p = take(8);
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<unsigned char>(p[i]);
        Object* o = make(Kind::floating);
        o->floating = std::bit_cast<double>(bits);
        push(o);
        break;
      }
      case 'X':     // BINUNICODE
      case 0x8c: {  // SHORT_BINUNICODE (protocol 4)
        const std::uint64_t n = unsigned_le(op == 'X' ? 4 : 1);
        Object* o = make(Kind::string);
        o->text = text(n);
        push(o);
        break;
      }
      case 'q':  // BINPUT
        memo_put(unsigned_le(1));
        break;
      case 'r':  // LONG_BINPUT
        memo_put(unsigned_le(4));
        break;
      case 0x94:  // MEMOIZE (protocol 4)
        memo_put(memo_.size());
        break;
      case 'h':  // BINGET
        memo_get(unsigned_le(1));
        break;
      case 'j':  // LONG_BINGET
        memo_get(unsigned_le(4));
        break;
      case 'c': {  // GLOBAL: "module\nname\n"
        const std::string module = line();
        const std::string name = line();
        push(global(module, name));
        break;
      }
      case 0x93: {  // STACK_GLOBAL (protocol 4)
        Object* name = expect(pop("STACK_GLOBAL"), Kind::string, "STACK_GLOBAL's name");
        Object* module = expect(pop("STACK_GLOBAL"), Kind::string, "STACK_GLOBAL's module");
        push(global(module->text, name->text));
        break;
      }
      case 'Q':
        push(persistent_load(pop("BINPERSID")));
        break;
      case 'R': {  // REDUCE
        Object* args = pop("REDUCE");
        Object* callable = pop("REDUCE");
        push(reduce(callable, args));
        break;
      }
      case 'b': {  // BUILD: only an OrderedDict's attributes (a state dict's _metadata), which are dropped
        Object* state = pop("BUILD");
        Object* target = top("BUILD");
        if (target->kind != Kind::dict || (state->kind != Kind::dict && state->kind != Kind::none))
          fail("opcode BUILD at byte {} sets {} on {} (only a dict's attributes are accepted)", op_at_,
               kind_name(state->kind), kind_name(target->kind));
        break;
      }
      default:
        fail("pickle opcode 0x{:02x} at byte {} is not one a state dict uses (nothing was run)", op, at);
    }
  }

  std::vector<TorchTensorRecord> state_dict(Object* root) {
    if (root->kind != Kind::dict)
      fail("the pickle holds {}, not a state dict (a dict of tensor names to tensors)", kind_name(root->kind));
    std::vector<TorchTensorRecord> out;
    std::set<std::string> seen;
    for (const auto& [k, v] : root->entries) {
      if (k->kind != Kind::string) fail("a state dict key is {} (expected a str)", kind_name(k->kind));
      if (v->kind != Kind::tensor)
        fail("entry '{}' of the state dict is {} (expected a tensor, as torch.save(model.state_dict()) writes)",
             k->text, kind_name(v->kind));
      if (!seen.insert(k->text).second) fail("tensor '{}' appears twice in the state dict", k->text);
      out.push_back(v->tensor);
      out.back().name = k->text;
    }
    return out;
  }

  std::span<const std::byte> in_;
  std::string_view context_;
  std::size_t pos_ = 0;
  std::size_t op_at_ = 0;
  std::deque<Object> objects_;
  std::vector<Object*> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, Object*> memo_;
};

}  // namespace

std::vector<TorchTensorRecord> parse_torch_pickle(std::span<const std::byte> pickle, std::string_view context) {
  return Unpickler(pickle, context).run();
}

}  // namespace trident::checkpoint
