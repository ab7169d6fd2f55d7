// Data-parallel building blocks: DDP's bucket assignment, DistributedSampler's shards, the
// rendezvous store (set/get/wait, timeouts, lost ranks, duplicate ranks) and the Gloo
// communicator's collectives between two in-process ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "train/communicator.h"
#include "train/ddp.h"
#include "train/tcp_store.h"
#include "two_ranks.h"

namespace ferry {
namespace {

using testing::free_local_port;
using testing::run_two_ranks;

TEST(TrainDdp, BucketsFollowDdpReverseOrderAndCaps) {
  // e (5) and d (7M floats = 28 MB) reach the 1 MB first cap; c, b, a stay under 25 MB.
  const std::vector<std::string> params = {"a", "b", "c", "d", "e"};
  const std::vector<int64_t> numels = {100, 300000, 10, 7000000, 5};
  const auto buckets = assign_buckets(params, numels);
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0].params, (std::vector<std::string>{"e", "d"}));
  EXPECT_EQ(buckets[0].offsets, (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(buckets[0].numel, 7000005);
  EXPECT_EQ(buckets[1].params, (std::vector<std::string>{"c", "b", "a"}));
  EXPECT_EQ(buckets[1].numel, 300110);
}

TEST(TrainDdp, ShardsAreDistributedSamplers) {
  // torch DistributedSampler(5 rows, 2 replicas, shuffle=False): [0, 2, 4] and [1, 3, 0] (padded).
  const std::vector<int64_t> order = {0, 1, 2, 3, 4};
  EXPECT_EQ(shard_size(5, 2), 3);
  std::vector<int64_t> r0, r1;
  for (int64_t i = 0; i < 3; ++i) {
    r0.push_back(shard_row(order, i, 0, 2));
    r1.push_back(shard_row(order, i, 1, 2));
  }
  EXPECT_EQ(r0, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(r1, (std::vector<int64_t>{1, 3, 0}));
}

TEST(TrainDdp, StoreSetsWaitsAndNamesLostRanks) {
  auto server = TcpStoreServer::listen(0);
  ASSERT_TRUE(server.is_ok()) << server.status().message();
  const int port = server.value()->port();
  auto a = TcpStoreClient::connect("127.0.0.1", port, 0, 5);
  auto b = TcpStoreClient::connect("127.0.0.1", port, 1, 5);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  auto dup = TcpStoreClient::connect("127.0.0.1", port, 1, 5);
  ASSERT_FALSE(dup.is_ok());
  EXPECT_NE(dup.status().message().find("RANK=1"), std::string::npos) << dup.status().message();
  ASSERT_TRUE(b.value()->set("k", {'v'}).is_ok());
  auto v = a.value()->get("k", 1);
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ(v.value(), std::vector<char>{'v'});
  std::vector<std::string> missing;
  EXPECT_FALSE(a.value()->wait({"k", "absent"}, 0.2, &missing).is_ok());
  EXPECT_EQ(missing, std::vector<std::string>{"absent"});
  b.value().reset();  // rank 1 leaves without a goodbye
  std::vector<int> lost;
  for (int i = 0; i < 100 && lost.empty(); ++i) {
    auto l = a.value()->lost_ranks();
    ASSERT_TRUE(l.is_ok());
    lost = l.value();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(lost, std::vector<int>{1});
}

TEST(TrainDdp, GlooCollectivesBetweenTwoRanks) {
  Status status[2];
  std::vector<float> sums[2], bcast[2];
  std::vector<int64_t> gathered[2];
  run_two_ranks(
      [&](int r, Communicator& cm) {
        sums[r] = {1.0f + r, 10.0f * (r + 1), -2.0f};
        bcast[r] = {static_cast<float>(r), 7.0f + r};
        Status s1 = cm.allreduce_sum(sums[r])->wait(20);
        Status s2 = cm.broadcast(bcast[r], 0)->wait(20);
        auto g = cm.allgather(100 + r);
        Status s3 = cm.barrier();
        if (g.is_ok()) gathered[r] = g.value();
        return !s1.is_ok() ? s1 : !s2.is_ok() ? s2 : !g.is_ok() ? g.status() : s3;
      },
      status);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(status[r].is_ok()) << "rank " << r << ": " << status[r].message();
    EXPECT_EQ(sums[r], (std::vector<float>{3.0f, 30.0f, -4.0f}));
    EXPECT_EQ(bcast[r], (std::vector<float>{0.0f, 7.0f}));
    EXPECT_EQ(gathered[r], (std::vector<int64_t>{100, 101}));
  }
}

TEST(TrainDdp, MissingRankIsNamedWithTheAddress) {
  const int port = free_local_port();
  ASSERT_NE(port, 0);
  DistConfig c;
  c.rank = 0;
  c.world_size = 3;
  c.master_port = port;
  c.timeout_s = 0.5;
  auto comm = create_communicator(c);
  ASSERT_FALSE(comm.is_ok());
  const std::string& m = comm.status().message();
  EXPECT_NE(m.find("ranks 1, 2 never arrived"), std::string::npos) << m;
  EXPECT_NE(m.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << m;
}

}  // namespace
}  // namespace ferry
