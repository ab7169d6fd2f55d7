// `ferry serve`'s config.pbtxt parsing and validation, and the KServe v2 request decoder
// (src/serve/model_config.h, kserve_json.h): messages name the file, line, field and input.
#include <gtest/gtest.h>

#include "serve/kserve_json.h"
#include "serve/model_config.h"

namespace ferry::serve {
namespace {

ValueInfo batched(const std::string& name, DType dt = DType::kF32) {
  return {name, {dt, Shape({Dim::symbolic("N"), Dim(4)})}};
}

TEST(ServeConfig, UnknownFieldsAreWarningsWithTheirLine) {
  auto p = parse_model_config("name: \"m\"\nmax_batch_size: 2\nmodel_warmup [ { name: \"w\" } ]\n", "m/config.pbtxt");
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  ASSERT_EQ(p.value().warnings.size(), 1u);
  EXPECT_NE(p.value().warnings[0].find("m/config.pbtxt:3:"), std::string::npos) << p.value().warnings[0];
  EXPECT_NE(p.value().warnings[0].find("model_warmup"), std::string::npos) << p.value().warnings[0];
  EXPECT_EQ(p.value().config.max_batch_size(), 2);
}

TEST(ServeConfig, SyntaxErrorsNameLineAndColumn) {
  auto p = parse_model_config("name: \"m\"\ninput [ { name: \"x\" data_type: TYPE_FP99 } ]\n", "m/config.pbtxt");
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("m/config.pbtxt:2:"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("TYPE_FP99"), std::string::npos) << p.status().message();
}

TEST(ServeConfig, DerivedFromABatchingModel) {
  inference::ModelConfig c;
  std::vector<std::string> w;
  ASSERT_TRUE(complete_and_validate(&c, {batched("x")}, {batched("y")}, {}, "m", &w).is_ok());
  EXPECT_EQ(c.max_batch_size(), kDefaultMaxBatchSize);
  EXPECT_TRUE(c.has_dynamic_batching());
  ASSERT_EQ(c.input_size(), 1);
  EXPECT_EQ(c.input(0).data_type(), inference::TYPE_FP32);
  ASSERT_EQ(c.input(0).dims_size(), 1);  // the batch axis is not in dims
  EXPECT_EQ(c.input(0).dims(0), 4);
  EXPECT_EQ(c.instance_group(0).count(), 1);
}

// Triton's server-side completion of backend, platform and default_model_filename (its
// AutoCompleteBackendFields): what `GET .../config` and gRPC ModelConfig show Triton's clients.
TEST(ServeConfig, BackendFieldsCompletedAsTriton) {
  inference::ModelConfig onnx;
  complete_backend_fields(&onnx, "model.onnx", /*compiled=*/false);
  EXPECT_EQ(onnx.backend(), "onnxruntime");
  EXPECT_EQ(onnx.platform(), "onnxruntime_onnx");
  EXPECT_EQ(onnx.default_model_filename(), "model.onnx");
  inference::ModelConfig platform_only;
  platform_only.set_platform("onnxruntime_onnx");
  complete_backend_fields(&platform_only, "net.onnx", false);
  EXPECT_EQ(platform_only.backend(), "onnxruntime");
  EXPECT_EQ(platform_only.default_model_filename(), "net.onnx");
  inference::ModelConfig backend_only;
  backend_only.set_backend("onnxruntime");
  complete_backend_fields(&backend_only, "model.onnx", false);
  EXPECT_EQ(backend_only.platform(), "onnxruntime_onnx");
  // A compiled model: backend "ferry", no platform (Triton's metadata then shows the backend).
  inference::ModelConfig compiled;
  complete_backend_fields(&compiled, "model.ferry", /*compiled=*/true);
  EXPECT_EQ(compiled.backend(), "ferry");
  EXPECT_EQ(compiled.platform(), "");
  EXPECT_EQ(compiled.default_model_filename(), "model.ferry");
  inference::ModelConfig given;
  given.set_backend("ferry");
  given.set_default_model_filename("other.ferry");
  complete_backend_fields(&given, "other.ferry", true);
  EXPECT_EQ(given.backend(), "ferry");
  EXPECT_EQ(given.default_model_filename(), "other.ferry");
}

// --disable-auto-complete-config: nothing is derived; a config without its tensors is refused
// naming the flag, a complete one passes.
TEST(ServeConfig, AutoCompleteDisabledNeedsEveryTensorListed) {
  inference::ModelConfig empty;
  std::vector<std::string> w;
  Status st = complete_and_validate(&empty, {batched("x")}, {batched("y")}, {}, "m/config.pbtxt", &w, /*auto_complete=*/false);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("m/config.pbtxt: lists no inputs and --disable-auto-complete-config"), std::string::npos) << st.message();
  auto p = parse_model_config("max_batch_size: 4 input [ { name: \"x\" data_type: TYPE_FP32 dims: [4] } ]", "m/config.pbtxt");
  ASSERT_TRUE(p.is_ok());
  inference::ModelConfig no_outputs = p.value().config;
  st = complete_and_validate(&no_outputs, {batched("x")}, {batched("y")}, {}, "m/config.pbtxt", &w, false);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("lists no outputs"), std::string::npos) << st.message();
  p = parse_model_config("max_batch_size: 4 input [ { name: \"x\" data_type: TYPE_FP32 dims: [4] } ] "
                         "output [ { name: \"y\" data_type: TYPE_FP32 dims: [4] } ]", "m/config.pbtxt");
  ASSERT_TRUE(p.is_ok());
  inference::ModelConfig full = p.value().config;
  st = complete_and_validate(&full, {batched("x")}, {batched("y")}, {}, "m/config.pbtxt", &w, false);
  EXPECT_TRUE(st.is_ok()) << st.message();
}

TEST(ServeConfig, MismatchesAreNamed) {
  auto check = [](const std::string& text, const std::string& needle) {
    auto p = parse_model_config(text, "m/config.pbtxt");
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    std::vector<std::string> w;
    inference::ModelConfig c = p.value().config;
    Status st = complete_and_validate(&c, {batched("x")}, {batched("y")}, {}, "m/config.pbtxt", &w);
    ASSERT_FALSE(st.is_ok()) << text;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  check("max_batch_size: 4 input [ { name: \"z\" data_type: TYPE_FP32 dims: [4] } ]", "input 'z' is not an input of the model");
  check("max_batch_size: 4 input [ { name: \"x\" data_type: TYPE_INT32 dims: [4] } ]", "data_type TYPE_INT32 but the model's input is TYPE_FP32");
  check("max_batch_size: 4 input [ { name: \"x\" data_type: TYPE_FP32 dims: [5] } ]", "dims [5] but the model's input has dims [4]");
  check("max_batch_size: 0 input [ { name: \"x\" data_type: TYPE_FP32 dims: [4] } ]", "have rank 1 but the model's input has dims [-1,4]");
  check("max_batch_size: 4 input [ { name: \"x\" data_type: TYPE_FP32 dims: [4] } ] dynamic_batching { preferred_batch_size: 8 }",
        "preferred_batch_size 8 is outside 1..4");
  check("platform: \"tensorrt_plan\"", "platform 'tensorrt_plan' is not supported");
  check("max_batch_size: 4 parameters { key: \"threads\" value { string_value: \"x\" } }", "parameters \"threads\" is 'x'");
}

TEST(ServeConfig, FixedBatchDimensionCannotBatch) {
  inference::ModelConfig c;
  c.set_max_batch_size(8);
  ValueInfo fixed{"x", {DType::kF32, Shape({Dim(1), Dim(4)})}};
  std::vector<std::string> w;
  Status st = complete_and_validate(&c, {fixed}, {fixed}, {}, "m", &w);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("fixed first dimension 1"), std::string::npos) << st.message();
}

// Triton's `reshape` (model_config.proto ModelTensorReshape) and `format`: Triton's quick-start
// densenet_onnx config loads as written, without a warning; reshapes that disagree with their dims
// or with the model are refused naming both shapes and the fix.
TEST(ServeConfig, TritonReshapeAndFormat) {
  const std::string densenet =
      "name: \"densenet_onnx\"\nplatform: \"onnxruntime_onnx\"\nmax_batch_size : 0\n"
      "input [ { name: \"data_0\" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 2, 2 ] reshape { shape: [ 1, 3, 2, 2 ] } } ]\n"
      "output [ { name: \"fc6_1\" data_type: TYPE_FP32 dims: [ 1000 ] reshape { shape: [ 1, 1000, 1, 1 ] } } ]\n";
  ValueInfo data{"data_0", {DType::kF32, Shape({Dim(1), Dim(3), Dim(2), Dim(2)})}};
  ValueInfo fc{"fc6_1", {DType::kF32, Shape({Dim(1), Dim(1000), Dim(1), Dim(1)})}};
  auto p = parse_model_config(densenet, "densenet_onnx/config.pbtxt");
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_TRUE(p.value().warnings.empty()) << p.value().warnings[0];
  inference::ModelConfig c = p.value().config;
  std::vector<std::string> w;
  Status st = complete_and_validate(&c, {data}, {fc}, {}, "densenet_onnx/config.pbtxt", &w);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(input_specs(c)[0].dims, (std::vector<int64_t>{3, 2, 2}));  // what clients send
  EXPECT_EQ(output_specs(c)[0].dims, (std::vector<int64_t>{1000}));
  ASSERT_EQ(input_reshapes(c).size(), 1u);
  EXPECT_EQ(input_reshapes(c)[0].to, (std::vector<int64_t>{1, 3, 2, 2}));
  EXPECT_EQ(output_reshapes(c)[0].from, (std::vector<int64_t>{1, 1000, 1, 1}));
  EXPECT_NE(config_to_json(c).find("\"reshape\":{\"shape\":[1,3,2,2]}"), std::string::npos) << config_to_json(c);

  auto refused = [&](const std::string& in, const std::string& needle, const std::string& mbs = "0") {
    auto q = parse_model_config("max_batch_size: " + mbs + " input [ { name: \"data_0\" data_type: TYPE_FP32 " + in +
                                " } ] output [ { name: \"fc6_1\" data_type: TYPE_FP32 dims: [ 1, 1000, 1, 1 ] } ]", "m/config.pbtxt");
    ASSERT_TRUE(q.is_ok()) << q.status().message();
    inference::ModelConfig k = q.value().config;
    Status s = complete_and_validate(&k, {data}, {fc}, {}, "m/config.pbtxt", &w);
    ASSERT_FALSE(s.is_ok()) << in;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  refused("dims: [ 3, 2, 2 ] reshape { shape: [ 1, 3, 2, 3 ] }",
          "m/config.pbtxt: input 'data_0': dims [3,2,2] and reshape { shape: [1,3,2,3] } hold 12 and 18 elements");
  refused("dims: [ 12 ] reshape { shape: [ 1, 12 ] }",
          "reshape { shape: [1,12] } (dims [12]) but the model's input has dims [1,3,2,2]; the reshape is the shape the model takes: "
          "write reshape { shape: [1,3,2,2] }");
  refused("dims: [ 3, 2, 2 ]", "a model that takes another shape than clients send needs reshape { shape: [1,3,2,2] }");
  refused("dims: [ 1 ] reshape { shape: [ ] }", "with max_batch_size 0 would leave the tensor no elements");
  refused("dims: [ -1, 2 ] reshape { shape: [ 1, 3, 2, 2 ] }", "do not hold the same elements");
  refused("dims: [ 3, 2, 2 ] reshape { shape: [ 1, 3, 0, 2 ] }", "a reshape size is >= 1 or -1");
  refused("format: FORMAT_NCHW dims: [ 12 ] reshape { shape: [ 1, 3, 2, 2 ] }", "format FORMAT_NCHW needs 3 dims");

  // -1 dims: the sizes between them hold as many elements; at run time each -1 takes the size of its counterpart.
  ValueInfo any{"data_0", {DType::kF32, Shape({Dim(1), Dim(3), Dim::symbolic("H"), Dim(2)})}};
  auto q = parse_model_config("input [ { name: \"data_0\" data_type: TYPE_FP32 dims: [ 3, -1, 2 ] reshape { shape: [ 1, 3, -1, 2 ] } } ]",
                              "m/config.pbtxt");
  ASSERT_TRUE(q.is_ok());
  inference::ModelConfig k = q.value().config;
  st = complete_and_validate(&k, {any}, {fc}, {}, "m/config.pbtxt", &w);
  EXPECT_TRUE(st.is_ok()) << st.message();
  auto r = reshape_dims({2, 4, 5, 6}, {2, 4, -1, 6}, {8, -1, 1, 6});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r.value(), (std::vector<int64_t>{8, 5, 1, 6}));
  r = reshape_dims({1}, {1}, {});
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r.value().empty());
  EXPECT_FALSE(reshape_dims({3, 2, 2}, {3, 2, 2}, {1, 3, 2, 3}).is_ok());
}

ModelSignature sig() {
  ModelSignature s;
  s.name = "m";
  s.max_batch = 4;
  s.inputs = {{"x", DType::kF32, {2}}, {"k", DType::kI8, {-1}}};
  s.outputs = {{"y", DType::kF32, {2}}};
  return s;
}

TEST(ServeKserve, DecodesJsonAndBinaryTensors) {
  const std::string json = R"({"inputs":[{"name":"x","datatype":"FP32","shape":[2,2],"data":[[1,2],[3,4.5]]},)"
                           R"({"name":"k","datatype":"INT8","shape":[2,1],"parameters":{"binary_data_size":2}}]})";
  const std::string body = json + std::string("\x05\xfb", 2);
  auto d = decode_infer_request(body, static_cast<int64_t>(json.size()), sig());
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d.value().request.batch, 2);
  const Tensor& x = d.value().request.inputs[0].second;
  EXPECT_EQ(x.dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(x.data<float>()[3], 4.5f);
  EXPECT_EQ(d.value().request.inputs[1].second.data<int8_t>()[1], -5);
}

TEST(ServeKserve, ErrorsSayExpectedAndGiven) {
  auto err = [](const std::string& body) {
    auto d = decode_infer_request(body, -1, sig());
    return d.is_ok() ? std::string("ok") : d.status().message();
  };
  EXPECT_NE(err(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,2],"data":[1,2]},{"name":"k","datatype":"INT8","shape":[1,1],"data":[300]}]})")
                .find("input 'k': value 0 (300) is not a INT8 value"),
            std::string::npos);
  EXPECT_NE(err(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,2],"data":[1,2]},{"name":"k","datatype":"INT8","shape":[2,1],"data":[1,2]}]})")
                .find("input 'k' has batch size 2 but input 'x' has 1"),
            std::string::npos);
  EXPECT_NE(err(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[4000000000,2],"data":[]}]})").find("outside 1..4"), std::string::npos);
  EXPECT_NE(err(std::string(100000, '[')).find("malformed JSON"), std::string::npos);  // deep nesting: no recursion
}

}  // namespace
}  // namespace ferry::serve
