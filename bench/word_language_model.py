"""pytorch/examples' word_language_model (an LSTM RNNModel, clip_grad_norm_, plain SGD with the learning
rate divided by 4 when the validation loss does not improve), the PyTorch side of
examples/word_language_model.c: the same model, data split, batchify, schedule and flags, on the
characters of Shakespeare read from the same file, the data held on the device.

    python3 bench/word_language_model.py [--bench] [--device cuda] [--seed 1111] [--limit N] ...

The tokens are the distinct bytes of the whole file, sorted; its first 90% (size * 9 // 10 bytes) is the
training text, the rest the validation text. --bench is the measured configuration: one epoch over the
whole corpus (--epochs 1) with upstream's other defaults (lr 20, clip 0.25, batch 20, bptt 35, 2 x 200).
The last line reads "result work=wlm_e<epochs>[_mb<N>][_n<N>] impl=pytorch seed=<s> val_ppl=<the best
epoch's validation perplexity> tokens_per_s=<the median epoch's training throughput>", as the C
program's. As the C program, the training loss is summed on the device (no sync per step, where
upstream calls loss.item() at every batch).
"""
import argparse
import math
import os
import statistics

import example_common as ec
import torch
import torch.nn.functional as F
from torch import nn

DEFAULT_DATA = os.environ.get("CGRAD_SHAKESPEARE") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", ".deps", "shakespeare", "shakespeare.txt")


class RNNModel(nn.Module):
    """model.py's RNNModel with rnn_type 'LSTM'."""

    def __init__(self, ntoken, ninp, nhid, nlayers, dropout, tie_weights):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            if nhid != ninp:
                raise ValueError("when using --tied, nhid must be equal to emsize")
            self.decoder.weight = self.encoder.weight
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)
        self.nlayers, self.nhid = nlayers, nhid

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        return self.decoder(self.drop(output)).view(-1, self.ntoken), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def read_corpus(path, limit):
    """The token ids of the training and validation texts (int64 tensors) and the vocabulary size."""
    with open(path, "rb") as f:
        text = f.read()
    vocab = sorted(set(text))
    stoi = torch.full((256,), -1, dtype=torch.int64)
    stoi[torch.tensor(vocab)] = torch.arange(len(vocab))
    if 0 < limit < len(text):
        text = text[:limit]
    ids = stoi[torch.frombuffer(bytearray(text), dtype=torch.uint8).long()]
    n_train = len(text) * 9 // 10
    return ids[:n_train], ids[n_train:], len(vocab)


def batchify(data, bsz, device):
    """(n) -> (n // bsz, bsz): bsz equal columns, the remainder trimmed."""
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous().to(device)


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


def repackage_hidden(h):
    return tuple(v.detach() for v in h)


def train(args, model, train_data, lr, epoch, log, device):
    """One epoch; returns the tokens trained on and the loop's wall time."""
    model.train()
    total_loss = torch.zeros((), device=device)
    since_log = 0
    hidden = model.init_hidden(args.batch_size)
    nbatches = (len(train_data) - 1 + args.bptt - 1) // args.bptt
    if 0 < args.max_batches < nbatches:
        nbatches = args.max_batches
    tokens = 0
    start = log_start = ec.now(device)
    for batch in range(nbatches):
        data, targets = get_batch(train_data, batch * args.bptt, args.bptt)
        hidden = repackage_hidden(hidden)
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = F.cross_entropy(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        total_loss += loss.detach()
        tokens += targets.numel()
        since_log += 1
        if args.log_interval > 0 and batch % args.log_interval == 0 and batch > 0:
            cur_loss = total_loss.item() / since_log
            now = ec.now(device)
            print(f"| epoch {epoch:3d} | {batch:5d}/{(len(train_data) - 1) // args.bptt:5d} batches | lr {lr:02.2f} | "
                  f"ms/batch {(now - log_start) * 1000 / since_log:5.2f} | loss {cur_loss:5.2f} | "
                  f"ppl {math.exp(cur_loss):8.2f}", flush=True)
            log.append(cur_loss)
            total_loss.zero_()
            since_log, log_start = 0, now
            if args.dry_run:
                break
    return tokens, ec.now(device) - start


def evaluate(args, model, data_source, eval_batch_size):
    model.eval()
    total_loss = torch.zeros((), device=data_source.device)
    hidden = model.init_hidden(eval_batch_size)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, args.bptt):
            data, targets = get_batch(data_source, i, args.bptt)
            output, hidden = model(data, hidden)
            total_loss += len(data) * F.cross_entropy(output, targets)
    return total_loss.item() / (len(data_source) - 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--emsize", type=int, default=200)
    parser.add_argument("--nhid", type=int, default=200)
    parser.add_argument("--nlayers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=20)
    parser.add_argument("--clip", type=float, default=0.25)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch_size", type=int, default=20)
    parser.add_argument("--bptt", type=int, default=35)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--tied", action="store_true")
    parser.add_argument("--seed", type=int, default=1111)
    parser.add_argument("--log-interval", type=int, default=200)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default)")
    parser.add_argument("--limit", type=int, default=0, help="use the first N bytes of the corpus only (0: all)")
    parser.add_argument("--max-batches", type=int, default=0, help="training batches per epoch (0: all)")
    parser.add_argument("--bench", action="store_true", help="the measured configuration: --epochs 1 unless given")
    args = parser.parse_args()
    if args.bench:  # the measured configuration, as the C program's --bench: defaults that flags override
        parser.set_defaults(epochs=1)
        args = parser.parse_args()

    device = ec.setup(args.device, args.threads)
    torch.manual_seed(args.seed)
    eval_batch_size = 10
    train_ids, val_ids, ntokens = read_corpus(args.data, args.limit)
    train_data = batchify(train_ids, args.batch_size, device)
    val_data = batchify(val_ids, eval_batch_size, device)
    print(f"vocab size ({ntokens}), {len(train_ids)} training and {len(val_ids)} validation characters")
    model = RNNModel(ntokens, args.emsize, args.nhid, args.nlayers, args.dropout, args.tied).to(device)

    lr, best_val_loss, rates, log = args.lr, None, [], []
    for epoch in range(1, args.epochs + 1):
        start = ec.now(device)
        tokens, seconds = train(args, model, train_data, lr, epoch, log, device)
        rates.append(tokens / seconds)
        val_loss = evaluate(args, model, val_data, eval_batch_size)
        print("-" * 89)
        print(f"| end of epoch {epoch:3d} | time: {ec.now(device) - start:5.2f}s | valid loss {val_loss:5.2f} | "
              f"valid ppl {math.exp(val_loss):8.2f}")
        print("-" * 89, flush=True)
        if best_val_loss is None or val_loss < best_val_loss:
            best_val_loss = val_loss
        else:
            lr /= 4.0
    work = f"wlm_e{args.epochs}" + (f"_mb{args.max_batches}" if args.max_batches > 0 else "") + \
        (f"_n{args.limit}" if args.limit > 0 else "")
    ec.result(work, args.seed, val_ppl=math.exp(best_val_loss), tokens_per_s=float(statistics.median(rates)))


if __name__ == "__main__":
    main()
