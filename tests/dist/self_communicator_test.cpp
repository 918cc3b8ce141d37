// SelfCommunicator (a group of one, no MPI): all_to_all is a copy of the one block.
#include "trident/dist/self_communicator.h"

#include <gtest/gtest.h>

#include "trident/core/error.h"

namespace trident::dist {
namespace {

TEST(SelfCommunicator, AllToAllCopiesTheBlockInEveryDType) {
  auto c = self_communicator();
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::i64}) {
    const Tensor in = Tensor::from_vector(std::vector<double>{3, 1, 4, 1, 5}, {5}).to(dt);
    Tensor out = Tensor::zeros({5}, dt);
    auto work = c->all_to_all(in, {5}, out, {5});
    EXPECT_TRUE(work->test());
    work->wait();
    EXPECT_EQ(out.to(DType::f64).to_vector<double>(), (std::vector<double>{3, 1, 4, 1, 5})) << dtype_name(dt);
  }
  EXPECT_EQ(c->traffic().all_to_all_bytes, 0);  // nothing leaves the rank
  Tensor none = Tensor::empty({0});
  c->all_to_all(none, {0}, none, {0})->wait();
}

TEST(SelfCommunicator, AllToAllCountsAreTheRanksOwn) {
  auto c = self_communicator();
  EXPECT_EQ(c->all_to_all_counts({7}), (std::vector<std::int64_t>{7}));
  EXPECT_THROW(c->all_to_all_counts({1, 2}), Error);
}

TEST(SelfCommunicator, AllToAllArgumentErrorsNameTheProblem) {
  auto c = self_communicator();
  const Tensor in = Tensor::zeros({4});
  Tensor out = Tensor::zeros({4});
  auto message = [&](const std::vector<std::int64_t>& send, Tensor& o, const std::vector<std::int64_t>& recv) {
    try {
      c->all_to_all(in, send, o, recv);
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_NE(message({4, 0}, out, {4}).find("send_counts has 2 entries, expected 1"), std::string::npos);
  EXPECT_NE(message({3}, out, {4}).find("send_counts sum to 3, but input"), std::string::npos);
  Tensor small = Tensor::zeros({3});
  EXPECT_NE(message({4}, small, {3}).find("sends 4 elements to itself but expects 3"), std::string::npos);
  Tensor same = in;
  EXPECT_NE(message({4}, same, {4}).find("share memory"), std::string::npos);
}

}  // namespace
}  // namespace trident::dist
