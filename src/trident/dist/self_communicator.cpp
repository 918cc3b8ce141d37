#include "trident/dist/self_communicator.h"

#include "trident/dist/done_work.h"
#include "trident/ops/elementwise.h"

namespace trident::dist {

namespace {

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }

  std::unique_ptr<Work> all_reduce(Tensor& tensor, const CollectiveOptions&) override {
    check_defined(tensor, "all_reduce", "tensor");
    return done();
  }
  std::unique_ptr<Work> reduce_scatter(const Tensor& input, Tensor& output, const CollectiveOptions&) override {
    TRIDENT_CHECK(input.numel() == output.numel() && input.dtype() == output.dtype(),
                  "reduce_scatter on {}: input {} must match output {}", name_, input.describe(), output.describe());
    if (!input.is_same(output)) output.copy_from(input.view(output.shape()));
    return done();
  }
  std::unique_ptr<Work> all_gather(const Tensor& input, Tensor& output, const CollectiveOptions&) override {
    TRIDENT_CHECK(input.numel() == output.numel() && input.dtype() == output.dtype(),
                  "all_gather on {}: output {} must match input {}", name_, output.describe(), input.describe());
    if (!input.is_same(output)) output.copy_from(input.view(output.shape()));
    return done();
  }
  std::unique_ptr<Work> broadcast(Tensor& tensor, int root, const CollectiveOptions&) override {
    TRIDENT_CHECK(root == 0, "broadcast on {}: root {} outside a group of one", name_, root);
    (void)tensor;
    return done();
  }
  std::unique_ptr<Work> send(const Tensor&, int dst, int, const CollectiveOptions&) override {
    TRIDENT_FAIL("send on {}: no rank {} in a group of one", name_, dst);
  }
  std::unique_ptr<Work> recv(Tensor&, int src, int, const CollectiveOptions&) override {
    TRIDENT_FAIL("recv on {}: no rank {} in a group of one", name_, src);
  }
  void barrier(const CollectiveOptions&) override {}
  std::unique_ptr<Work> all_to_all(const Tensor& input, const std::vector<std::int64_t>& send_counts, Tensor& output,
                                   const std::vector<std::int64_t>& recv_counts, const CollectiveOptions&) override {
    check_all_to_all(input, send_counts, output, recv_counts);
    TRIDENT_CHECK(send_counts[0] == recv_counts[0], "all_to_all on {}: sends {} elements to itself but expects {}",
                  name_, send_counts[0], recv_counts[0]);
    if (input.numel() > 0) output.copy_from(input.view(output.shape()));
    return done();
  }
  std::shared_ptr<Communicator> split(const std::vector<std::vector<int>>& groups, const std::string&) override {
    TRIDENT_CHECK(groups.size() == 1 && groups[0] == std::vector<int>{0}, "split of {}: expected the group [0]", name_);
    return std::make_shared<SelfCommunicator>();
  }

 private:
  static std::unique_ptr<Work> done() { return std::make_unique<DoneWork>(); }
  std::string name_ = "self";
};

}  // namespace

std::shared_ptr<Communicator> self_communicator() { return std::make_shared<SelfCommunicator>(); }

}  // namespace trident::dist
