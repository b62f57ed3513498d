/* pytorch/examples' vae/main.py in C, on Fashion-MNIST: a variational auto-encoder written as one
 * custom module (an encoder with two heads, the reparameterisation, a decoder), trained with one
 * Adam on BCE(sum) + KLD, as the original:
 *
 *     class VAE(nn.Module):                              typedef struct { cg_module *fc1, ...; } vae;
 *         def __init__(self):                            cg_module *vae_new(cg_device d)
 *             self.fc1 = nn.Linear(784, 400) ...            s->fc1 = cg_module_register_module(m, "fc1", ...)
 *         def forward(self, x):                          static cg_status vae_forward(...)
 *             mu, logvar = self.encode(x.view(-1, 784))
 *             z = self.reparameterize(mu, logvar)
 *             return self.decode(z), mu, logvar
 *
 * Run: vae [--device cuda] [--epochs 10] [--batch-size 128] [--lr 1e-3] [--seed 1]
 * --init FILE starts from PyTorch-written weights and batch orders (bench/vae.py --write-init), so the
 * two programs can be compared step for step; the last line gives the final test loss and the
 * training throughput (result work=vae ...). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "example_util.h"

/* ---- the model ----------------------------------------------------------------------------------- */
typedef struct vae {
    cg_module *fc1, *fc21, *fc22, *fc3, *fc4;
} vae;

/* h1 = relu(fc1(x)); mu = fc21(h1), logvar = fc22(h1) */
static void encode(const vae *v, const cg_tensor *x, cg_tensor **mu, cg_tensor **logvar) {
    cg_tensor *h1 = cg_relu(cg_module_forward(v->fc1, x));
    *mu = cg_module_forward(v->fc21, h1);
    *logvar = cg_module_forward(v->fc22, h1);
}

/* z = mu + eps * std, std = exp(logvar / 2), eps ~ N(0, 1) */
static cg_tensor *reparameterize(const cg_tensor *mu, const cg_tensor *logvar) {
    cg_tensor *std = cg_exp(cg_mul_scalar(logvar, 0.5f));
    cg_tensor *eps = cg_randn_like(std);
    return cg_add(mu, cg_mul(eps, std));
}

/* sigmoid(fc4(relu(fc3(z)))) */
static cg_tensor *decode(const vae *v, const cg_tensor *z) {
    cg_tensor *h3 = cg_relu(cg_module_forward(v->fc3, z));
    return cg_sigmoid(cg_module_forward(v->fc4, h3));
}

/* x (B, 784) -> reconstruction (B, 784), mu (B, 20), logvar (B, 20) */
static cg_status vae_forward(cg_module *self, int nin, const cg_tensor *const *in, int nout, cg_tensor **out) {
    const vae *v = cg_module_state(self);
    if (nin != 1 || nout != 3) return cg_set_error(CG_ERR_INVALID_ARG, "VAE: takes x, returns (recon, mu, logvar)");
    encode(v, in[0], &out[1], &out[2]);
    out[0] = out[1] && out[2] ? decode(v, reparameterize(out[1], out[2])) : NULL;
    return out[0] ? CG_OK : cg_last_status();
}

static cg_module *vae_new(cg_device d);
static cg_module *vae_clone(const cg_module *self, cg_device d) { return vae_new(d); }
static const cg_module_type vae_type = {.name = "VAE", .state_size = sizeof(vae), .forward_n = vae_forward, .clone = vae_clone};

static cg_module *vae_new(cg_device d) {
    cg_module *m = cg_module_new(&vae_type, d);
    if (!m) return NULL;
    vae *v = cg_module_state(m);
    v->fc1 = cg_module_register_module(m, "fc1", cg_linear_new(784, 400, true, d));
    v->fc21 = cg_module_register_module(m, "fc21", cg_linear_new(400, 20, true, d));
    v->fc22 = cg_module_register_module(m, "fc22", cg_linear_new(400, 20, true, d));
    v->fc3 = cg_module_register_module(m, "fc3", cg_linear_new(20, 400, true, d));
    v->fc4 = cg_module_register_module(m, "fc4", cg_linear_new(400, 784, true, d));
    if (!v->fc1 || !v->fc21 || !v->fc22 || !v->fc3 || !v->fc4) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

/* Reconstruction + KL divergence losses summed over all elements and the batch:
 * BCE(recon, x, sum) - 0.5 * sum(1 + logvar - mu^2 - exp(logvar)) (Kingma and Welling, appendix B). */
static cg_tensor *loss_function(const cg_tensor *recon, const cg_tensor *x, const cg_tensor *mu, const cg_tensor *logvar) {
    cg_tensor *bce = cg_binary_cross_entropy(recon, x, NULL, CG_REDUCTION_SUM);
    cg_tensor *terms = cg_sub(cg_sub(cg_add_scalar(logvar, 1.0f), cg_mul(mu, mu)), cg_exp(logvar));
    cg_tensor *kld = cg_mul_scalar(cg_sum(terms), -0.5f);
    return cg_add(bce, kld);
}

/* ---- data: the loader's shuffled batches, or the batch orders of an --init file --------------------------- */
typedef struct batches {
    cg_loader *loader;       /* without --init */
    const cg_tensor *images; /* with --init: (N, 784) all training images, and the epoch's order */
    int64_t *order, n, batch, at;
} batches;

/* The next batch x (B, 784) in the step's scope; NULL at the end of the epoch. */
static cg_tensor *next_batch(batches *b, cg_device d) {
    if (b->loader) {
        cg_tensor *x, *y;
        CHECK_OK(cg_loader_next(b->loader, &x, &y));
        return x;
    }
    if (b->at >= b->n) return NULL;
    int64_t rows = b->n - b->at < b->batch ? b->n - b->at : b->batch;
    cg_tensor *index = CHECK(cg_from_data_dtype(b->order + b->at, 1, &rows, CG_INT64, d));
    b->at += rows;
    return CHECK(cg_index_select(b->images, 0, index));
}

/* The order of one epoch from the --init file ("order.<epoch>": the permutation PyTorch's script drew). */
static void load_order(const cg_safetensors *st, int epoch, batches *b) {
    char name[32];
    snprintf(name, sizeof name, "order.%d", epoch);
    int k = cg_safetensors_find(st, name);
    eu_expect(k >= 0, "the --init file holds an order for every epoch (bench/vae.py --write-init --epochs)");
    cg_tensor *t = CHECK(cg_safetensors_tensor(st, k, cg_cpu()));
    eu_expect(cg_dtype_of(t) == CG_INT64 && cg_numel(t) == b->n, "the order is an int64 permutation of the images");
    CHECK_OK(cg_to_host_bytes(t, b->order, (size_t)b->n * sizeof(int64_t)));
    cg_tensor_free(t);
    b->at = 0;
}

/* ---- training and testing, as main.py's train() and test() --------------------------------------------- */
typedef struct run {
    cg_module *model;
    cg_optimizer *optimizer;
    cg_device device;
    int log_interval;
} run;

static double train_epoch(const run *r, batches *b, int epoch, int64_t n, double *seconds) {
    cg_module_train(r->model, true);
    cg_tensor *train_loss = CHECK(cg_zeros(0, NULL, r->device));
    CHECK_OK(cg_synchronize(r->device));
    double start = eu_now();
    int64_t seen = 0;
    for (int step = 0;; step++) {
        cg_scope *scope = cg_scope_begin();
        cg_tensor *x = next_batch(b, r->device);
        if (!x) {
            cg_scope_end(scope);
            break;
        }
        CHECK_OK(cg_optimizer_zero_grad(r->optimizer));
        cg_tensor *out[3]; /* recon_batch, mu, logvar */
        CHECK_OK(cg_module_call(r->model, 1, (const cg_tensor *const *)&x, 3, out));
        cg_tensor *loss = CHECK(loss_function(out[0], x, out[1], out[2]));
        CHECK_OK(cg_backward(loss));
        CHECK_OK(cg_optimizer_step(r->optimizer));
        bool grad = cg_set_grad_enabled(false);
        CHECK_OK(cg_add_(train_loss, loss)); /* train_loss += loss.item(), without a sync per step */
        cg_set_grad_enabled(grad);
        seen += cg_size(x, 0);
        if (r->log_interval > 0 && step % r->log_interval == 0)
            printf("Train Epoch: %d [%lld/%lld (%.0f%%)]\tLoss: %.6f\n", epoch, (long long)seen, (long long)n,
                   100.0 * (double)seen / (double)n, eu_item(loss) / (double)cg_size(x, 0));
        cg_scope_end(scope);
    }
    double total = eu_item(train_loss); /* waits for the epoch's work */
    *seconds = eu_now() - start;
    cg_tensor_free(train_loss);
    printf("====> Epoch: %d Average loss: %.4f\n", epoch, total / (double)n);
    return total / (double)n;
}

static double test_epoch(const run *r, cg_loader *test_loader, int64_t n) {
    cg_module_train(r->model, false);
    bool grad = cg_set_grad_enabled(false);
    cg_tensor *test_loss = CHECK(cg_zeros(0, NULL, r->device));
    for (;;) {
        cg_scope *scope = cg_scope_begin();
        cg_tensor *x, *y;
        CHECK_OK(cg_loader_next(test_loader, &x, &y));
        if (!x) {
            cg_scope_end(scope);
            break;
        }
        cg_tensor *out[3];
        CHECK_OK(cg_module_call(r->model, 1, (const cg_tensor *const *)&x, 3, out));
        CHECK_OK(cg_add_(test_loss, CHECK(loss_function(out[0], x, out[1], out[2]))));
        cg_scope_end(scope);
    }
    double total = eu_item(test_loss) / (double)n;
    cg_tensor_free(test_loss);
    cg_set_grad_enabled(grad);
    printf("====> Test set loss: %.4f\n", total);
    return total;
}

int main(int argc, char **argv) {
    const char *data_dir = getenv("CGRAD_FASHION_MNIST_DIR") ? getenv("CGRAD_FASHION_MNIST_DIR") : CG_FASHION_MNIST_DIR;
    const char *init_path = NULL;
    eu_take_string(&argc, argv, "--data", &data_dir);
    eu_take_string(&argc, argv, "--init", &init_path);
    int epochs = 10, seed = 1, log_interval = 0;
    int64_t batch = 128, limit = 0;
    float lr = 1e-3f;
    cg_device device = cg_default_device();
    eu_flag flags[] = {
        {"--batch-size", EU_SIZE, &batch, 1, "input batch size for training (default 128)"},
        {"--epochs", EU_INT, &epochs, 1, "number of epochs to train (default 10)"},
        {"--lr", EU_FLOAT, &lr, 0, "Adam's learning rate (default 1e-3)"},
        {"--seed", EU_INT, &seed, 0, "random seed (default 1)"},
        {"--log-interval", EU_INT, &log_interval, 0, "batches between training status lines (0: none)"},
        {"--device", EU_DEVICE, &device, 0, "where the model and the data live (default: the best present)"},
        {"--limit", EU_SIZE, &limit, 0, "use the first N training and test images only (0: all)"},
    };
    eu_parse_flags(argc, argv,
                   "trains pytorch/examples' VAE on Fashion-MNIST and prints the average training and test losses\n"
                   "  --data DIR      the IDX files (default $CGRAD_FASHION_MNIST_DIR, else " CG_FASHION_MNIST_DIR ")\n"
                   "  --init FILE     start from the weights and batch orders bench/vae.py --write-init wrote",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    cg_manual_seed((uint64_t)seed);

    /* pixels in [0, 1], as transforms.ToTensor(): mean 0, std 1 */
    cg_dataset *train = eu_fashion_mnist(data_dir, true, limit, 0.0f, 1.0f, device);
    cg_dataset *test = eu_fashion_mnist(data_dir, false, limit, 0.0f, 1.0f, device);
    int64_t n_train = cg_dataset_size(train), n_test = cg_dataset_size(test);
    cg_loader_options train_options = {.batch_size = batch, .shuffle = true, .seed = (uint64_t)seed, .flatten = true};
    cg_loader_options test_options = {.batch_size = batch, .flatten = true};
    cg_loader *test_loader = CHECK_PTR(cg_loader_new(test, test_options));

    cg_module *model = CHECK_PTR(vae_new(device));
    batches b = {.n = n_train, .batch = batch};
    cg_safetensors *init = NULL;
    cg_tensor *flat_images = NULL;
    if (init_path) {
        CHECK_OK(cg_load_safetensors_flags(model, init_path, CG_SAFETENSORS_ALLOW_UNEXPECTED));
        CHECK_OK(cg_safetensors_read(init_path, &init));
        flat_images = CHECK(cg_reshape(cg_dataset_images(train), 2, (int64_t[]){n_train, 784}));
        b.images = flat_images;
        b.order = malloc((size_t)n_train * sizeof *b.order);
        eu_expect(b.order != NULL, "host memory for the batch order");
    } else {
        b.loader = CHECK_PTR(cg_loader_new(train, train_options));
    }
    cg_adam_options adam = cg_adam_defaults();
    adam.lr = lr;
    run r = {model, CHECK_PTR(cg_adam_new(model, adam)), device, log_interval};

    double test_loss = NAN, first_loss = NAN, last_loss = NAN, *rates = malloc((size_t)epochs * sizeof *rates);
    eu_expect(rates != NULL, "host memory");
    for (int epoch = 1; epoch <= epochs; epoch++) {
        if (init) load_order(init, epoch - 1, &b);
        double seconds;
        double train_loss = train_epoch(&r, &b, epoch, n_train, &seconds);
        eu_expect(isfinite(train_loss), "the training loss is finite");
        if (epoch == 1) first_loss = train_loss;
        last_loss = train_loss;
        rates[epoch - 1] = (double)n_train / seconds;
        test_loss = test_epoch(&r, test_loader, n_test);
    }
    eu_expect(isfinite(test_loss), "the test loss is finite");
    eu_expect(epochs < 2 || last_loss < first_loss, "the training loss fell from the first epoch to the last");
    printf("result work=vae_e%d impl=cgrad seed=%d test_loss=%.4f images_per_s=%.0f\n", epochs, seed, test_loss,
           eu_median(rates, epochs));

    free(rates), free(b.order);
    cg_tensor_free(flat_images);
    cg_safetensors_free(init);
    cg_optimizer_free(r.optimizer);
    cg_module_free(model);
    cg_loader_free(b.loader);
    cg_loader_free(test_loader);
    cg_dataset_free(test);
    cg_dataset_free(train);
    return 0;
}
