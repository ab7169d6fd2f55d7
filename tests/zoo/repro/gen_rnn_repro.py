#!/usr/bin/env python3
"""Tiny LSTM / GRU reproducers for the zoo's bilstm_* and gru_* cases (one RNN node
each, hidden 4, seq 5, batch 2), in the zoo's case layout so run_fidelity.sh checks them:

    /usr/bin/python3 tests/zoo/repro/gen_rnn_repro.py --out /tmp/rnn_repro
    tests/zoo/run_fidelity.sh build/ferry /tmp/rnn_repro

Cases (opset 13 and 17 each):
  lstm_bidir    LSTM direction=bidirectional, initial_h and initial_c given, B (bias) given,
                no sequence_lens, layout 0 ([seq, batch, ...]): outputs Y [5,2,2,4] -> the
                torch export Transposes/Reshapes it to [5,2,8]; Y_h, Y_c [2,2,4]
  lstm_fwd      LSTM forward, no initial state (zeros)
  gru_lbr       GRU forward, linear_before_reset=1 (PyTorch's formula), initial_h given
  gru_bidir     GRU bidirectional, linear_before_reset=1, no initial state
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "e2e"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from casegen import main as casegen_main  # noqa: E402

SEQ, BATCH, IN, HID = 5, 2, 3, 4


class LSTMWithState(nn.Module):
    def __init__(self, bidir):
        super().__init__()
        self.rnn = nn.LSTM(IN, HID, bidirectional=bidir)

    def forward(self, x, h0, c0):
        y, (h, c) = self.rnn(x, (h0, c0))
        return y, h, c


class LSTMNoState(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(IN, HID)

    def forward(self, x):
        y, (h, c) = self.rnn(x)
        return y, h, c


class GRUWithState(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(IN, HID)

    def forward(self, x, h0):
        return self.rnn(x, h0)


class GRUBidir(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(IN, HID, bidirectional=True)

    def forward(self, x):
        return self.rnn(x)


def seeded(ctor):
    def build():
        torch.manual_seed(1)
        return ctor().eval()
    return build


def inputs(dirs, with_c):
    def make():
        g = torch.Generator().manual_seed(5)
        xs = [torch.randn(SEQ, BATCH, IN, generator=g)]
        if dirs:
            xs.append(torch.randn(dirs, BATCH, HID, generator=g))
            if with_c:
                xs.append(torch.randn(dirs, BATCH, HID, generator=g))
        return xs
    return make


def spec(name, build, make, input_names, output_names, opset):
    case = f"{name}_op{opset}"
    return dict(name=case, model=name, build=build, build_key=name, opset=opset, input_names=input_names,
                output_names=output_names, dynamic_axes=None, export_inputs=make, subcases=[(case, make)],
                batch_dim=1)


EXPORTS = []
for op in (13, 17):
    EXPORTS += [
        spec("lstm_bidir", seeded(lambda: LSTMWithState(True)), inputs(2, True), ["x", "h0", "c0"],
             ["y", "h_n", "c_n"], op),
        spec("lstm_fwd", seeded(LSTMNoState), inputs(0, False), ["x"], ["y", "h_n", "c_n"], op),
        spec("gru_lbr", seeded(GRUWithState), inputs(1, False), ["x", "h0"], ["y", "h_n"], op),
        spec("gru_bidir", seeded(GRUBidir), inputs(0, False), ["x"], ["y", "h_n"], op),
    ]

if __name__ == "__main__":
    sys.exit(casegen_main(EXPORTS, __doc__, default_threads=1))
