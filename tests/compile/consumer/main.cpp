// The C++ wrapper from an installed package: lists devices, loads, runs once on zeros.
// usage: consumer_cpp MODEL
#include <cstdio>
#include <vector>

#include <ferry/ferry.hpp>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  try {
    ferry::Runtime rt;
    for (const auto& d : ferry::Runtime::devices()) std::printf("device %s\n", d.c_str());
    ferry::Model model(argv[1]);
    std::vector<unsigned char> in(model.input(0).size_bytes), out(model.output(0).size_bytes);
    ferry::Dataset ins, outs;
    ins.add(in);
    outs.add(out);
    model.execute(ins, outs);
    std::printf("ran: output rank %zu\n", outs.dims(0).size());
    return 0;
  } catch (const ferry::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
