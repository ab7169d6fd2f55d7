// `ferry serve`'s trace extension (src/serve/trace.h) without a socket: sampling by trace_rate,
// trace_count counting down, a model's override and its removal, all-or-nothing updates, and the
// records written to the trace file.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "serve/trace.h"

namespace ferry::serve {
namespace {

using Changes = std::vector<std::pair<std::string, std::optional<std::vector<std::string>>>>;

std::string trace_path() { return ::testing::TempDir() + "ferry_trace_" + std::to_string(getpid()) + ".jsonl"; }

TEST(ServeTrace, RateCountAndModelOverride) {
  const std::string path = trace_path();
  std::remove(path.c_str());
  auto t = Tracer::open(path, TraceSettings());
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  Tracer& tr = *t.value();
  EXPECT_EQ(tr.sample("m"), 0u);  // OFF
  ASSERT_TRUE(tr.update("", Changes{{"trace_level", std::vector<std::string>{"TIMESTAMPS"}}, {"trace_rate", std::vector<std::string>{"3"}}}).is_ok());
  std::vector<uint64_t> ids;
  for (int i = 0; i < 7; ++i) ids.push_back(tr.sample("m"));
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 0, 0, 2, 0, 0, 3}));  // requests 1, 4 and 7
  // A model's override copies the global settings it does not name; removing it reverts.
  ASSERT_TRUE(tr.update("quiet", Changes{{"trace_level", std::vector<std::string>{"OFF"}}}).is_ok());
  EXPECT_EQ(tr.settings("quiet")[2].second, std::vector<std::string>{"3"});  // trace_rate copied
  for (int i = 0; i < 4; ++i) EXPECT_EQ(tr.sample("quiet"), 0u);
  ASSERT_TRUE(tr.update("quiet", Changes{}).is_ok());
  EXPECT_EQ(tr.settings("quiet")[1].second, std::vector<std::string>{"TIMESTAMPS"});
  // trace_count: two more, then none.
  ASSERT_TRUE(tr.update("", Changes{{"trace_rate", std::vector<std::string>{"1"}}, {"trace_count", std::vector<std::string>{"2"}}}).is_ok());
  EXPECT_NE(tr.sample("m"), 0u);
  EXPECT_NE(tr.sample("m"), 0u);
  EXPECT_EQ(tr.sample("m"), 0u);
  EXPECT_EQ(tr.settings("")[3].second, std::vector<std::string>{"0"});
  // All or nothing: a bad setting leaves the rate as it was.
  Status bad = tr.update("", Changes{{"trace_rate", std::vector<std::string>{"5"}}, {"trace_level", std::vector<std::string>{"OFF", "TENSORS"}}});
  EXPECT_NE(bad.message().find("OFF cannot be listed with another level"), std::string::npos) << bad.message();
  EXPECT_FALSE(tr.update("", Changes{{"log_frequency", std::vector<std::string>{"-2"}}}).is_ok());
  EXPECT_EQ(tr.settings("")[2].second, std::vector<std::string>{"1"});
  EXPECT_FALSE(tr.update("", Changes{{"trace_file", std::vector<std::string>{"/elsewhere"}}}).is_ok());
  EXPECT_FALSE(tr.update_json("", "{\"trace_rate\": 5}").is_ok());  // Triton's values are strings

  InferTimestamps ts{20, 30, 40, 50, 60};
  tr.record(9, "m", 2, "r1", 10, ts, 70);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(),
            "{\"id\":9,\"model_name\":\"m\",\"model_version\":2,\"request_id\":\"r1\",\"timestamps\":[{\"name\":\"REQUEST_START\",\"ns\":10},"
            "{\"name\":\"QUEUE_START\",\"ns\":20},{\"name\":\"COMPUTE_START\",\"ns\":30},{\"name\":\"COMPUTE_INPUT_END\",\"ns\":40},"
            "{\"name\":\"COMPUTE_OUTPUT_START\",\"ns\":50},{\"name\":\"COMPUTE_END\",\"ns\":60},{\"name\":\"REQUEST_END\",\"ns\":70}]}\n");
  std::remove(path.c_str());
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// trace_level TENSORS: the inputs as queued and the outputs, Triton's records, after the trace's
// own line (no timestamps without TIMESTAMPS); a failed request has no output records.
TEST(ServeTrace, TensorsLevel) {
  const std::string path = trace_path();
  std::remove(path.c_str());
  TraceSettings ts;
  ts.tensors = true;
  ts.rate = 1;
  auto t = Tracer::open(path, ts);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  Tracer& tr = *t.value();
  EXPECT_EQ(tr.settings("")[1].second, std::vector<std::string>{"TENSORS"});
  const uint64_t id = tr.sample("m");
  ASSERT_EQ(id, 1u);
  TensorList in = {{"x", Tensor::from_vector<float>({0.5f, -1.0f, 3.25f, 1e-3f}, {2, 2})},
                   {"s", Tensor::from_vector<std::string>({"a,b"}, {1})}};
  tr.record_inputs(id, in);
  TensorList out = {{"y", Tensor::from_vector<int64_t>({7, -8, 9}, {3})}};
  tr.record(id, "m", 1, "r", 10, InferTimestamps{}, 20, &out);
  const uint64_t failed = tr.sample("m");
  tr.record_inputs(failed, in);
  tr.record(failed, "m", 1, "", 30, InferTimestamps{}, 40, nullptr);
  EXPECT_EQ(read_all(path),
            "{\"id\":1,\"model_name\":\"m\",\"model_version\":1,\"request_id\":\"r\"}\n"
            "{\"id\":1,\"activity\":\"TENSOR_QUEUE_INPUT\",\"tensor\":{\"name\":\"x\",\"data\":\"0.5,-1,3.25,0.00100000005\",\"shape\":\"2,2\",\"dtype\":\"FP32\"}}\n"
            "{\"id\":1,\"activity\":\"TENSOR_QUEUE_INPUT\",\"tensor\":{\"name\":\"s\",\"data\":\"\\\"a,b\\\"\",\"shape\":\"1\",\"dtype\":\"BYTES\"}}\n"
            "{\"id\":1,\"activity\":\"TENSOR_BACKEND_OUTPUT\",\"tensor\":{\"name\":\"y\",\"data\":\"7,-8,9\",\"shape\":\"3\",\"dtype\":\"INT64\"}}\n"
            "{\"id\":2,\"model_name\":\"m\",\"model_version\":1}\n"
            "{\"id\":2,\"activity\":\"TENSOR_QUEUE_INPUT\",\"tensor\":{\"name\":\"x\",\"data\":\"0.5,-1,3.25,0.00100000005\",\"shape\":\"2,2\",\"dtype\":\"FP32\"}}\n"
            "{\"id\":2,\"activity\":\"TENSOR_QUEUE_INPUT\",\"tensor\":{\"name\":\"s\",\"data\":\"\\\"a,b\\\"\",\"shape\":\"1\",\"dtype\":\"BYTES\"}}\n");
  std::remove(path.c_str());
}

// log_frequency N: a scope's traces go to FILE.0, FILE.1, ..., N a file (Triton's indexed files);
// 0 again: back to FILE.
TEST(ServeTrace, LogFrequencyIndexedFiles) {
  const std::string path = trace_path();
  for (const std::string& p : {path, path + ".0", path + ".1", path + ".2"}) std::remove(p.c_str());
  TraceSettings ts;
  ts.timestamps = true;
  ts.rate = 1;
  auto t = Tracer::open(path, ts);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  Tracer& tr = *t.value();
  ASSERT_TRUE(tr.update("", Changes{{"log_frequency", std::vector<std::string>{"2"}}}).is_ok());
  EXPECT_EQ(tr.settings("")[4].second, std::vector<std::string>{"2"});
  for (int i = 0; i < 3; ++i) {
    const uint64_t id = tr.sample("m");
    std::string request_id = "r";
    request_id += std::to_string(id);
    tr.record(id, "m", 1, request_id, 1, InferTimestamps{}, 2);
  }
  ASSERT_TRUE(tr.update("", Changes{{"log_frequency", std::vector<std::string>{"0"}}}).is_ok());
  const uint64_t id = tr.sample("m");
  tr.record(id, "m", 1, "r4", 1, InferTimestamps{}, 2);
  auto ids = [](const std::string& text) {
    std::string out;
    for (size_t p = text.find("\"request_id\":\""); p != std::string::npos; p = text.find("\"request_id\":\"", p + 1))
      out += text.substr(p + 14, 2) + " ";
    return out;
  };
  EXPECT_EQ(ids(read_all(path + ".0")), "r1 r2 ");
  EXPECT_EQ(ids(read_all(path + ".1")), "r3 ");
  EXPECT_EQ(ids(read_all(path)), "r4 ");
  EXPECT_FALSE(std::ifstream(path + ".2").good());
  for (const std::string& p : {path, path + ".0", path + ".1"}) std::remove(p.c_str());
}

TEST(ServeTrace, NoFileNoTracing) {
  auto t = Tracer::open("", TraceSettings());
  ASSERT_TRUE(t.is_ok());
  Status st = t.value()->update("", Changes{{"trace_level", std::vector<std::string>{"TIMESTAMPS"}}});
  EXPECT_NE(st.message().find("start `ferry serve --trace-file PATH`"), std::string::npos) << st.message();
  TraceSettings on;
  on.timestamps = true;
  EXPECT_FALSE(Tracer::open("", on).is_ok());
}

}  // namespace
}  // namespace ferry::serve
