"""pytorch/examples' vae/main.py, the PyTorch side of examples/vae.c: the same model, loss and
optimizer on Fashion-MNIST, read from the same IDX files, with the data set held on the device
(as cgrad's loader does) so that both sides time the training, not the data pipeline.

    python3 bench/vae.py --write-init FILE [--epochs 10] [--seed 1]
        writes the initial weights (state_dict names) and one batch order per epoch ("order.<e>",
        int64 permutations of the 60000 training images) as safetensors, for `vae --init FILE`.
    python3 bench/vae.py [--init FILE] [--device cuda] [--epochs 10] [--batch-size 128]
        trains; --init starts from that file's weights and batch orders. The last line reads
        "result work=vae_e<epochs> impl=pytorch seed=<s> test_loss=... images_per_s=..." (the median epoch's
        training throughput), as the C program's.
"""
import argparse
import statistics

import example_common as ec
import torch
import torch.nn.functional as F
from torch import nn


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        return mu + torch.randn_like(std) * std

    def decode(self, z):
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z))))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        return self.decode(self.reparameterize(mu, logvar)), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def write_init(path, epochs, seed, n_train):
    from safetensors.torch import save_file
    torch.manual_seed(seed)
    model = VAE()
    tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
    generator = torch.Generator().manual_seed(seed)
    for e in range(epochs):
        tensors[f"order.{e}"] = torch.randperm(n_train, generator=generator)
    save_file(tensors, path)
    print(f"wrote {path}: {len(tensors) - epochs} weights and {epochs} batch orders")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--limit", type=int, default=0, help="use the first N training and test images only (0: all)")
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)")
    parser.add_argument("--data", default=ec.DEFAULT_DIR)
    parser.add_argument("--init", help="weights and batch orders written by --write-init")
    parser.add_argument("--write-init", help="write initial weights and batch orders to this file, then exit")
    args = parser.parse_args()

    if args.write_init:
        write_init(args.write_init, args.epochs, args.seed, len(ec.read_idx(f"{args.data}/train-labels-idx1-ubyte.gz", 1)))
        return
    device = ec.setup(args.device, args.threads)
    torch.manual_seed(args.seed)
    # pixels in [0, 1], as transforms.ToTensor()
    train_x = ec.fashion_mnist(args.data, True, device, flat=True, limit=args.limit, normalize=None)[0]
    test_x = ec.fashion_mnist(args.data, False, device, flat=True, limit=args.limit, normalize=None)[0]
    model = VAE().to(device)
    orders = None
    if args.init:
        from safetensors.torch import load_file
        saved = load_file(args.init)
        model.load_state_dict({k: v for k, v in saved.items() if not k.startswith("order.")})
        orders = [saved[f"order.{e}"] for e in range(args.epochs)]
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    n, b = len(train_x), args.batch_size
    rates, test_loss = [], float("nan")
    for epoch in range(args.epochs):
        model.train()
        order = (orders[epoch] if orders is not None else torch.randperm(n)).to(device)
        train_loss = torch.zeros((), device=device)
        start = ec.now(device)
        for i in range(0, n, b):
            data = train_x[order[i:i + b]]
            optimizer.zero_grad()
            recon, mu, logvar = model(data)
            loss = loss_function(recon, data, mu, logvar)
            loss.backward()
            train_loss += loss.detach()  # no sync per step, as the C program
            optimizer.step()
        total = train_loss.item()
        rates.append(n / (ec.now(device) - start))
        print(f"====> Epoch: {epoch + 1} Average loss: {total / n:.4f}")
        model.eval()
        test_sum = torch.zeros((), device=device)
        with torch.no_grad():
            for i in range(0, len(test_x), b):
                data = test_x[i:i + b]
                recon, mu, logvar = model(data)
                test_sum += loss_function(recon, data, mu, logvar)
        test_loss = test_sum.item() / len(test_x)
        print(f"====> Test set loss: {test_loss:.4f}")
    ec.result(f"vae_e{args.epochs}", args.seed, test_loss=round(test_loss, 4), images_per_s=statistics.median(rates))


if __name__ == "__main__":
    main()
