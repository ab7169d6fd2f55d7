// Pre-packing weights at compile time; see prepack.h.
#include "compiler/prepack.h"

#include "backends/cpu/prepacked.h"
#include "runtime/executor.h"

namespace ferry {

StatusOr<PrepackReport> prepack_weights(const std::shared_ptr<Model>& model, const std::string& device, int threads) {
  PrepackReport report;
  if (device != "cpu") return report;
  Graph& g = model->graph;
  for (Node& n : g.nodes) {
    n.attrs.erase(cpu::kPackedAttr);
    n.attrs.erase(cpu::kPackedKeyAttr);
  }
  cpu::PackRecorder recorder;
  {
    ExecutorOptions eo;
    eo.device = device;
    eo.opt_level = 0;  // the gear is optimized already; its kernels are the ones a load makes
    eo.threads = threads;
    ASSIGN_OR_RETURN(auto ex, Executor::create(model, eo));
  }
  for (Node& n : g.nodes) {
    if (n.outputs.empty()) continue;
    auto it = recorder.by_output.find(n.outputs[0]);
    if (it == recorder.by_output.end()) continue;
    // Only bytes packed from one of this node's own weights (an initializer it reads).
    bool own = false;
    for (const std::string& in : n.inputs) {
      auto w = g.initializers.find(in);
      if (w != g.initializers.end() && w->second.raw() == it->second.source) own = true;
    }
    // The few-channel int8 convolution packs a copy of its own weights made at load (KW taps as channels:
    // backends/cpu/dnnl_int8.cpp, init_tap_packing), as do the int8 conv / matmul split on hosts without
    // VNNI (int8_pairs_saturate there); their kinds say so, and the key still checks the layout and ISA.
    const std::string& k = it->second.key;
    if (!own && k.rfind("dnnl_int8_conv_taps|", 0) != 0 && k.rfind("dnnl_int8_conv_split|", 0) != 0 &&
        k.rfind("dnnl_int8_matmul_split|", 0) != 0)
      continue;
    Attribute bytes;
    bytes.type = AttrType::kTensor;
    bytes.t = it->second.bytes;
    Attribute key;
    key.type = AttrType::kString;
    key.s = it->second.key;
    report.bytes += it->second.bytes.nbytes();
    ++report.nodes;
    n.attrs[cpu::kPackedAttr] = std::move(bytes);
    n.attrs[cpu::kPackedKeyAttr] = std::move(key);
  }
  return report;
}

}  // namespace ferry
