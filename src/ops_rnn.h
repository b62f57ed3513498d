/* The step of an LSTM and a GRU cell from projected inputs, composed of recorded ops (src/ops_rnn.c),
 * shared by the layers' composed path and nn.LSTMCell / nn.GRUCell (src/nn/rnn.c). Layer: ops. */
#ifndef CGRAD_OPS_RNN_H
#define CGRAD_OPS_RNN_H

#include "cgrad/core.h"

/* xp = x W_ih^T + b_ih and hp = h W_hh^T + b_hh, both (N, G H), gates in PyTorch's order. LSTM (G = 4):
 * c' = sigmoid(f) c + sigmoid(i) tanh(g), h' = sigmoid(o) tanh(c'), c (N, H). GRU (G = 3): r, z from
 * the sums, n = tanh(xn + r hn), h' = n + z (h - n). New tensors (intermediates freed); NULL on failure
 * (recorded). */
cg_status cg__lstm_gates(const cg_tensor *xp, const cg_tensor *hp, const cg_tensor *c, cg_tensor **h_out,
                         cg_tensor **c_out);
cg_tensor *cg__gru_gates(const cg_tensor *xp, const cg_tensor *hp, const cg_tensor *h);

#endif
