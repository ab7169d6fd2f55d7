// The cpu backend's kernel pin (backends/backend.h kKernelChoiceAttr, set by `ferry compile --tune`):
// a pin the kernel table honours makes that kernel, -1 makes the reference kernel, and a pin the table
// no longer matches (a file tuned by another build, whose table had other factories, or on another
// ISA) makes what an unpinned node gets, not the reference kernel.
#include <gtest/gtest.h>

#include <typeinfo>

#include "backends/backend.h"
#include "ir/graph.h"
#include "ops/registry.h"

namespace ferry {
namespace {

struct PinCase {
  Graph graph;
  Node node;
  const OpSchema* schema = nullptr;
  std::unique_ptr<Backend> backend;

  PinCase() {
    graph.value_types["x"] = TensorType{DType::kF32, Shape::of({2, 64})};
    graph.value_types["y"] = TensorType{DType::kF32, Shape::of({2, 64})};
    node.name = "relu_0";
    node.op_type = "Relu";
    node.inputs = {"x"};
    node.outputs = {"y"};
    auto s = resolve_schema(node, 17);
    EXPECT_TRUE(s.is_ok()) << s.status().message();
    if (s.is_ok()) schema = s.value();
    auto b = make_backend("cpu");
    EXPECT_TRUE(b.is_ok()) << b.status().message();
    if (b.is_ok()) backend = std::move(b.value());
  }
  std::unique_ptr<Kernel> make(const int64_t* pin) {
    Node n = node;
    if (pin) {
      Attribute a;
      a.type = AttrType::kInt;
      a.i = *pin;
      n.attrs[kKernelChoiceAttr] = a;
    }
    auto k = backend->create_kernel(n, *schema, graph);
    EXPECT_TRUE(k.is_ok()) << k.status().message();
    return k.is_ok() ? std::move(k.value()) : nullptr;
  }
};

TEST(KernelPin, StalePinTakesTheUnpinnedKernelNotTheReference) {
  PinCase c;
  ASSERT_TRUE(c.schema && c.backend);
  auto choices = c.backend->kernel_choices(c.node, *c.schema, c.graph);
  ASSERT_TRUE(choices.is_ok());
  ASSERT_FALSE(choices.value().empty()) << "Relu has no optimized CPU kernel to pin";

  std::unique_ptr<Kernel> unpinned = c.make(nullptr);
  ASSERT_NE(unpinned, nullptr);
  const std::type_info& optimized = typeid(*unpinned);

  const int64_t first = choices.value().front();
  std::unique_ptr<Kernel> k = c.make(&first);
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(typeid(*k), optimized);

  const int64_t reference = -1;
  k = c.make(&reference);
  ASSERT_NE(k, nullptr);
  EXPECT_NE(typeid(*k), optimized) << "a -1 pin must make the reference kernel";

  // Past the end of the table: what a file tuned by a build with more factories for Relu carries.
  const int64_t stale = 1000;
  k = c.make(&stale);
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(typeid(*k), optimized) << "a stale pin fell back to the reference kernel";
}

}  // namespace
}  // namespace ferry
