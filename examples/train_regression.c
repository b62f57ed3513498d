/* Trains a linear model to convergence on data with a known answer, and checks the answer.
 *
 * In PyTorch this is:
 *
 *   W_true, b_true = ..., ...                      # (out, in), (out)
 *   x = torch.randn(n, in, device=device)
 *   y = x @ W_true.T + b_true + 0.01 * torch.randn(n, out, device=device)
 *   model = torch.nn.Linear(in, out).to(device)
 *   optimizer = torch.optim.SGD(model.parameters(), lr=lr)
 *   loss_fn = torch.nn.MSELoss()
 *   for epoch in range(epochs):
 *       for xb, yb in zip(x.split(batch), y.split(batch)):
 *           optimizer.zero_grad()
 *           loss = loss_fn(model(xb), yb)
 *           loss.backward()
 *           optimizer.step()
 *
 * then model.weight and model.bias should equal W_true and b_true up to the noise. The program
 * prints the loss every few epochs and the recovered weights next to the true ones, and exits 1
 * when they differ by more than the tolerance. The data are made on the device and stay there;
 * the only reads back are the printed losses and the final weights. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "example_util.h"

#define NOISE 0.01f     /* standard deviation of the noise added to y */
#define TOLERANCE 0.02  /* on max |W - W_true| and max |b - b_true| */

typedef struct {
    int nbatches;
    cg_tensor **x; /* nbatches of (batch, in) */
    cg_tensor **y; /* nbatches of (batch, out) */
} dataset;

/* The known answer: small, distinct, easy to read values. */
static float true_weight(int64_t o, int64_t i) { return 0.25f * (float)((o * 7 + i * 5) % 9 - 4); }
static float true_bias(int64_t o) { return 0.5f - 0.25f * (float)(o % 5); }

/* x ~ N(0, 1), y = x W_true^T + b_true + NOISE * N(0, 1), split into batches, made on d. */
static dataset make_data(const cg_tensor *w_true, const cg_tensor *b_true, int64_t n, int64_t batch,
                         cg_device d) {
    dataset ds;
    int64_t in = cg_size(w_true, 1), out = cg_size(w_true, 0);
    ds.nbatches = (int)((n + batch - 1) / batch);
    ds.x = calloc((size_t)ds.nbatches, sizeof *ds.x);
    ds.y = calloc((size_t)ds.nbatches, sizeof *ds.y);
    eu_expect(ds.x && ds.y, "host allocation for the batches");
    bool previous = cg_set_grad_enabled(false); /* data, not part of any graph */
    for (int b = 0; b < ds.nbatches; b++) {
        int64_t rows = n - b * batch < batch ? n - b * batch : batch;
        cg_scope *scope = cg_scope_begin(); /* frees the temporaries; the batch is kept */
        cg_tensor *x = CHECK(cg_randn(CG_SHAPE(rows, in), d));
        cg_tensor *clean = CHECK(cg_linear(x, w_true, b_true));
        cg_tensor *noise = CHECK(cg_mul_scalar(CHECK(cg_randn(CG_SHAPE(rows, out), d)), NOISE));
        ds.x[b] = cg_keep(x);
        ds.y[b] = cg_keep(CHECK(cg_add(clean, noise)));
        cg_scope_end(scope);
    }
    cg_set_grad_enabled(previous);
    return ds;
}

static void free_data(dataset *ds) {
    for (int b = 0; b < ds->nbatches; b++) {
        cg_tensor_free(ds->x[b]);
        cg_tensor_free(ds->y[b]);
    }
    free(ds->x);
    free(ds->y);
}

/* MSE over the whole data set, without recording a tape (model.eval(); torch.no_grad()). */
static double full_loss(cg_module *model, const dataset *ds, int64_t n) {
    bool previous = cg_set_grad_enabled(false);
    double sum = 0.0;
    for (int b = 0; b < ds->nbatches; b++) {
        cg_scope *scope = cg_scope_begin();
        cg_tensor *pred = CHECK(cg_module_forward(model, ds->x[b]));
        float loss;
        CHECK_OK(cg_item(CHECK(cg_mse_loss(pred, ds->y[b], CG_REDUCTION_SUM)), &loss));
        sum += loss;
        cg_scope_end(scope);
    }
    cg_set_grad_enabled(previous);
    return sum / ((double)n * (double)cg_size(ds->y[0], 1));
}

static void print_row(const char *label, const float *v, int64_t n) {
    printf("  %-9s [", label);
    int64_t shown = n < 8 ? n : 8;
    for (int64_t i = 0; i < shown; i++) printf("%s%8.4f", i ? ", " : "", v[i]);
    printf("%s]\n", n > shown ? ", ..." : "");
}

int main(int argc, char **argv) {
    cg_device device = cg_default_device();
    int64_t in = 8, out = 2, n = 1024, batch = 64;
    int epochs = 20;
    float lr = 0.1f;
    eu_flag flags[] = {
        {"--lr", EU_FLOAT, &lr, 0, "SGD learning rate (> 0)"},
        {"--device", EU_DEVICE, &device, 0, "where the model and the data live"},
        {"--epochs", EU_INT, &epochs, 1, "passes over the data"},
        {"--in", EU_SIZE, &in, 1, "input features"},
        {"--out", EU_SIZE, &out, 1, "outputs"},
        {"--n", EU_SIZE, &n, 1, "examples"},
        {"--batch", EU_SIZE, &batch, 1, "examples per SGD step"},
    };
    eu_parse_flags(argc, argv,
                   "fits Linear(in, out) with SGD + MSELoss to y = x W_true^T + b_true + noise and "
                   "checks that W_true and b_true come back",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    if (device.type == CG_CPU && !cg_cuda_is_available())
        printf("no GPU: %s. Running on the CPU.\n", cg_cuda_unavailable_reason());
    cg_manual_seed(0);

    /* The known answer, on the device */
    float *w_host = malloc((size_t)(out * in) * sizeof *w_host);
    float *b_host = malloc((size_t)out * sizeof *b_host);
    eu_expect(w_host && b_host, "host allocation for the true weights");
    for (int64_t o = 0; o < out; o++) {
        b_host[o] = true_bias(o);
        for (int64_t i = 0; i < in; i++) w_host[o * in + i] = true_weight(o, i);
    }
    cg_tensor *w_true = CHECK(cg_from_data(w_host, CG_SHAPE(out, in), device)); /* (out, in) */
    cg_tensor *b_true = CHECK(cg_from_data(b_host, CG_SHAPE(out), device));     /* (out) */
    dataset data = make_data(w_true, b_true, n, batch, device);

    char dev[192];
    printf("fitting Linear(%lld, %lld) on %s: %lld examples, batches of %lld, SGD(lr=%g), "
           "MSELoss, noise %g\n",
           (long long)in, (long long)out, eu_device_desc(device, dev, sizeof dev), (long long)n,
           (long long)batch, (double)lr, (double)NOISE);

    cg_module *model = cg_linear_regression_new(in, out, device);
    eu_expect(model != NULL, cg_last_error());
    cg_optimizer *optimizer = cg_sgd_new(model, (cg_sgd_options){.lr = lr});
    eu_expect(optimizer != NULL, cg_last_error());

    double loss = full_loss(model, &data, n);
    printf("epoch %4d  loss %.6f\n", 0, loss);
    int every = epochs >= 10 ? epochs / 10 : 1;
    for (int epoch = 1; epoch <= epochs; epoch++) {
        for (int b = 0; b < data.nbatches; b++) {
            cg_scope *scope = cg_scope_begin(); /* the step's tensors and tape, freed together */
            CHECK_OK(cg_optimizer_zero_grad(optimizer));
            cg_tensor *pred = CHECK(cg_module_forward(model, data.x[b]));
            CHECK_OK(cg_backward(CHECK(cg_mse_loss(pred, data.y[b], CG_REDUCTION_MEAN))));
            CHECK_OK(cg_optimizer_step(optimizer));
            cg_scope_end(scope);
        }
        if (epoch % every == 0 || epoch == epochs) {
            loss = full_loss(model, &data, n);
            printf("epoch %4d  loss %.6f\n", epoch, loss);
        }
    }
    printf("(the noise alone gives a loss of about %.6f)\n", (double)(NOISE * NOISE));

    /* The recovered weights next to the true ones */
    float *w = malloc((size_t)(out * in) * sizeof *w);
    float *bias = malloc((size_t)out * sizeof *bias);
    eu_expect(w && bias, "host allocation for the weights");
    const char *name_w, *name_b;
    CHECK_OK(cg_to_host(CHECK(cg_module_parameter(model, 0, &name_w)), w, (size_t)(out * in)));
    CHECK_OK(cg_to_host(CHECK(cg_module_parameter(model, 1, &name_b)), bias, (size_t)out));
    double err_w = 0.0, err_b = 0.0;
    for (int64_t k = 0; k < out * in; k++) {
        double e = fabs((double)w[k] - (double)w_host[k]);
        if (!(e <= err_w)) err_w = e; /* NaN makes err_w NaN, which fails the check */
    }
    for (int64_t o = 0; o < out; o++) {
        double e = fabs((double)bias[o] - (double)b_host[o]);
        if (!(e <= err_b)) err_b = e;
    }
    int64_t rows = out < 4 ? out : 4;
    printf("\nrecovered (%s, %s) and true values:\n", name_w, name_b);
    for (int64_t o = 0; o < rows; o++) {
        char label[32];
        snprintf(label, sizeof label, "W[%lld]", (long long)o);
        print_row(label, w + o * in, in);
        print_row("W_true", w_host + o * in, in);
    }
    if (out > rows) printf("  ... (%lld more rows)\n", (long long)(out - rows));
    print_row("b", bias, out);
    print_row("b_true", b_host, out);
    printf("max |W - W_true| = %.2e, max |b - b_true| = %.2e (tolerance %g)\n", err_w, err_b,
           TOLERANCE);
    eu_expect(isfinite(loss), "the loss is finite");
    eu_expect(err_w <= TOLERANCE && err_b <= TOLERANCE,
              "the trained model recovers W_true and b_true within the tolerance");
    printf("recovered the true weights\n");

    free(w);
    free(bias);
    cg_optimizer_free(optimizer);
    cg_module_free(model);
    free_data(&data);
    cg_tensor_free(b_true);
    cg_tensor_free(w_true);
    free(b_host);
    free(w_host);
    return 0;
}
