/* pytorch/examples' dcgan/main.py in C, on Fashion-MNIST at 32x32: a generator and a discriminator written
 * as custom modules holding an nn.Sequential `main` (so PyTorch's parameter names, main.0.weight, ...),
 * initialised by weights_init, trained against each other with BCELoss and two Adams:
 *
 *     class Generator(nn.Module):                        typedef struct { cg_module *main; ... } generator;
 *         def __init__(self):                            cg_module *generator_new(nz, ngf, d)
 *             self.main = nn.Sequential(                    g->main = cg_module_register_module(m, "main",
 *                 nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, ...     cg_sequential_new(...))
 *         def forward(self, input):                      static cg_tensor *generator_forward(...)
 *             return self.main(input)
 *     netG.apply(weights_init)                           cg_module_apply(netG, weights_init, NULL)
 *     criterion = nn.BCELoss()                           cg_binary_cross_entropy(output, label, NULL, MEAN)
 *     optimizerD = optim.Adam(netD.parameters(),         g.optimizerD = cg_adam_new(netD, {lr, beta1, 0.999})
 *                             lr, betas=(beta1, 0.999))
 *     for epoch ...: for i, data in ...:                 train_step(&g, real, noise): D on real, then on the
 *         (1) update D, (2) update G                     detached fake, then G through D on the same fake
 *
 * The 32x32 variant of upstream's 64x64 layout: Fashion-MNIST's 28x28 images padded by 2 pixels on each side
 * (transforms.Pad(2); the padding is black, -1 after Normalize((0.5,), (0.5,))); the generator has
 * ConvTranspose2d(nz, ngf*4, 4, 1, 0) -> 4x4, then stride-2 ConvTranspose2d(4, 2, 1) layers to 8, 16 and 32
 * (BatchNorm2d + ReLU between, Tanh at the end); the discriminator mirrors it with LeakyReLU(0.2), BatchNorm2d
 * on its inner layers, and a Sigmoid.
 *
 * Run: dcgan [--batchSize 64] [--nz 100] [--ngf 64] [--ndf 64] [--niter 25] [--lr 0.0002] [--beta1 0.5]
 *            [--outf .] [--manualSeed 1] [--netG FILE] [--netD FILE] [--dry-run] [--dataroot DIR] [--device cuda]
 * At the end of each epoch it writes <outf>/fake_samples_epoch_NNN.png (an 8-a-row grid of netG(fixed_noise),
 * libpng) and the netG_epoch_N / netD_epoch_N.safetensors checkpoints (parameters); real_samples.png once.
 * Differences from upstream: the flags also take --device, --limit N (the first N images), --log-interval
 * (a status line every N steps, default 100: upstream prints every step, and each line waits for the device),
 * --check-loss-falls (exit 1 unless the discriminator's loss over the last third of the steps is below
 * the first third's); the samples are written at the end of the epoch, not every 100 steps; --manualSeed
 * defaults to 1 (upstream draws one); --netG / --netD read safetensors parameters (these checkpoints, or a
 * PyTorch state_dict saved as safetensors, whose BatchNorm running statistics are not read); --dataset,
 * --workers, --imageSize, --ngpu and --accel are not offered (one data set, at 32x32, on --device);
 * Fashion-MNIST missing: exit 77 (CTest's "skipped").
 * --replay FILE runs the 50 steps tests/make_dcgan_fixtures.py recorded (PyTorch's initial weights, real
 * batches, noise and Adam settings) and prints each step's losses beside PyTorch's; --check-replay exits 1 unless every
 * errD and errG is within 1e-3 relative of PyTorch's. The last line of a training run reads
 * "result work=dcgan_... impl=cgrad seed=S loss_d=... loss_g=... images_per_s=..." (bench/dcgan.py's). */
#define _POSIX_C_SOURCE 200809L /* mkdir */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cgrad.h"
#include "example_util.h"
#include "png_grid.h"

#define NC 1                  /* Fashion-MNIST's images have one channel */
#define REAL_LABEL 1.0f
#define FAKE_LABEL 0.0f
#define REPLAY_RTOL 1e-3      /* the bound on each recorded step's errD and errG */

/* ---- nn.LeakyReLU(negative_slope): cgrad has it as a function (cg_leaky_relu), here as a layer --------- */
typedef struct leaky_relu {
    float negative_slope;
} leaky_relu;

static cg_tensor *leaky_relu_forward(cg_module *self, const cg_tensor *x) {
    return cg_leaky_relu(x, ((const leaky_relu *)cg_module_state(self))->negative_slope);
}

static cg_module *leaky_relu_new(float negative_slope);
static cg_module *leaky_relu_clone(const cg_module *self, cg_device d) {
    (void)d;
    return leaky_relu_new(((const leaky_relu *)cg_module_state(self))->negative_slope);
}
static const cg_module_type leaky_relu_type = {
    .name = "LeakyReLU", .state_size = sizeof(leaky_relu), .forward = leaky_relu_forward, .clone = leaky_relu_clone};

static cg_module *leaky_relu_new(float negative_slope) {
    cg_module *m = cg_module_new(&leaky_relu_type, cg_cpu());
    if (m) ((leaky_relu *)cg_module_state(m))->negative_slope = negative_slope;
    return m;
}

/* ---- the layers, as main.py writes them (bias=False convolutions, kernel 4) ---------------------------- */
static cg_module *conv_transpose(int64_t in, int64_t out, int64_t stride, int64_t padding, cg_device d) {
    cg_conv_transpose2d_layer_options o = cg_conv_transpose2d_layer_defaults(4);
    o.stride[0] = o.stride[1] = stride;
    o.padding[0] = o.padding[1] = padding;
    o.bias = false;
    return cg_conv_transpose2d_new(in, out, &o, d);
}

static cg_module *conv(int64_t in, int64_t out, int64_t stride, int64_t padding, cg_device d) {
    return cg_conv2d_new(in, out, 4, stride, padding, false, d);
}

static cg_module *batch_norm(int64_t features, cg_device d) { return cg_batch_norm2d_new(features, cg_norm_defaults(), d); }

/* nn.Sequential(*layers), or NULL (with every layer freed) when a layer or the container failed. */
static cg_module *sequential(int n, cg_module **layers) {
    bool made = true;
    for (int i = 0; i < n; i++) made = made && layers[i];
    cg_module *s = made ? cg_sequential_new(n, layers) : NULL;
    if (!s)
        for (int i = 0; i < n; i++) cg_module_free(layers[i]);
    return s;
}

/* ---- the models ------------------------------------------------------------------------------------------ */
typedef struct generator {
    cg_module *main;
    int64_t nz, ngf; /* for clone */
} generator;

/* noise (B, nz, 1, 1) -> images (B, 1, 32, 32) in [-1, 1] */
static cg_tensor *generator_forward(cg_module *self, const cg_tensor *input) {
    return cg_module_forward(((const generator *)cg_module_state(self))->main, input);
}

static cg_module *generator_new(int64_t nz, int64_t ngf, cg_device d);
static cg_module *generator_clone(const cg_module *self, cg_device d) {
    const generator *g = cg_module_state(self);
    return generator_new(g->nz, g->ngf, d);
}
static const cg_module_type generator_type = {
    .name = "Generator", .state_size = sizeof(generator), .forward = generator_forward, .clone = generator_clone};

static cg_module *generator_new(int64_t nz, int64_t ngf, cg_device d) {
    cg_module *layers[] = {
        conv_transpose(nz, ngf * 4, 1, 0, d),      batch_norm(ngf * 4, d), cg_relu_new(), /* (ngf*4) x 4 x 4 */
        conv_transpose(ngf * 4, ngf * 2, 2, 1, d), batch_norm(ngf * 2, d), cg_relu_new(), /* (ngf*2) x 8 x 8 */
        conv_transpose(ngf * 2, ngf, 2, 1, d),     batch_norm(ngf, d),     cg_relu_new(), /* ngf x 16 x 16 */
        conv_transpose(ngf, NC, 2, 1, d),          cg_tanh_new(),                         /* nc x 32 x 32 */
    };
    cg_module *m = cg_module_new(&generator_type, d);
    cg_module *main = sequential((int)(sizeof layers / sizeof layers[0]), layers);
    if (!m || !main) {
        cg_module_free(main);
        cg_module_free(m);
        return NULL;
    }
    generator *g = cg_module_state(m);
    g->nz = nz, g->ngf = ngf;
    if (!(g->main = cg_module_register_module(m, "main", main))) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

typedef struct discriminator {
    cg_module *main;
    int64_t ndf; /* for clone */
} discriminator;

/* images (B, 1, 32, 32) -> the probability that each is real (B): output.view(-1, 1).squeeze(1) */
static cg_tensor *discriminator_forward(cg_module *self, const cg_tensor *input) {
    cg_tensor *output = cg_module_forward(((const discriminator *)cg_module_state(self))->main, input); /* (B, 1, 1, 1) */
    return cg_reshape(output, 1, (const int64_t[]){-1});
}

static cg_module *discriminator_new(int64_t ndf, cg_device d);
static cg_module *discriminator_clone(const cg_module *self, cg_device d) {
    return discriminator_new(((const discriminator *)cg_module_state(self))->ndf, d);
}
static const cg_module_type discriminator_type = {.name = "Discriminator",
                                                  .state_size = sizeof(discriminator),
                                                  .forward = discriminator_forward,
                                                  .clone = discriminator_clone};

static cg_module *discriminator_new(int64_t ndf, cg_device d) {
    cg_module *layers[] = {
        conv(NC, ndf, 2, 1, d),                                    leaky_relu_new(0.2f), /* ndf x 16 x 16 */
        conv(ndf, ndf * 2, 2, 1, d),     batch_norm(ndf * 2, d),   leaky_relu_new(0.2f), /* (ndf*2) x 8 x 8 */
        conv(ndf * 2, ndf * 4, 2, 1, d), batch_norm(ndf * 4, d),   leaky_relu_new(0.2f), /* (ndf*4) x 4 x 4 */
        conv(ndf * 4, 1, 1, 0, d),       cg_sigmoid_new(),                               /* 1 x 1 x 1 */
    };
    cg_module *m = cg_module_new(&discriminator_type, d);
    cg_module *main = sequential((int)(sizeof layers / sizeof layers[0]), layers);
    if (!m || !main) {
        cg_module_free(main);
        cg_module_free(m);
        return NULL;
    }
    discriminator *s = cg_module_state(m);
    s->ndf = ndf;
    if (!(s->main = cg_module_register_module(m, "main", main))) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

/* main.py's weights_init, applied to every module: convolutions' weights N(0, 0.02), BatchNorm's weight
 * N(1, 0.02) and bias 0 (chosen by the class name, as there). */
static cg_status weights_init(cg_module *m, void *ctx) {
    (void)ctx;
    const char *classname = cg_module_type_name(m);
    if (strstr(classname, "Conv")) return cg_init_normal_(cg_module_get_parameter(m, "weight"), 0.0, 0.02);
    if (strstr(classname, "BatchNorm")) {
        cg_status s = cg_init_normal_(cg_module_get_parameter(m, "weight"), 1.0, 0.02);
        return s != CG_OK ? s : cg_init_zeros_(cg_module_get_parameter(m, "bias"));
    }
    return CG_OK;
}

/* ---- the two networks and their optimizers ---------------------------------------------------------------- */
typedef struct gan {
    cg_module *netG, *netD;
    cg_optimizer *optimizerG, *optimizerD;
    cg_device device;
} gan;

static gan gan_new(int64_t nz, int64_t ngf, int64_t ndf, float lr, float beta1, cg_device d) {
    gan g = {.device = d};
    g.netG = CHECK_PTR(generator_new(nz, ngf, d));
    CHECK_OK(cg_module_apply(g.netG, weights_init, NULL));
    g.netD = CHECK_PTR(discriminator_new(ndf, d));
    CHECK_OK(cg_module_apply(g.netD, weights_init, NULL));
    cg_adam_options adam = cg_adam_defaults(); /* betas (beta1, 0.999) */
    adam.lr = lr, adam.beta1 = beta1;
    g.optimizerD = CHECK_PTR(cg_adam_new(g.netD, adam));
    g.optimizerG = CHECK_PTR(cg_adam_new(g.netG, adam));
    return g;
}

static void gan_free(gan *g) {
    cg_optimizer_free(g->optimizerG);
    cg_optimizer_free(g->optimizerD);
    cg_module_free(g->netG);
    cg_module_free(g->netD);
}

/* ---- one iteration of main.py's loop ------------------------------------------------------------------------ */
/* errD = errD_real + errD_fake, errG, and D's mean outputs D(x), D(G(z)) before and after D's step: 0-dim
 * tensors of the caller's scope, not read back (reading waits for the device). */
typedef struct losses {
    cg_tensor *errD, *errG, *D_x, *D_G_z1, *D_G_z2;
} losses;

static cg_tensor *mean_of(const cg_tensor *output) {
    bool grad = cg_set_grad_enabled(false);
    cg_tensor *mean = CHECK(cg_mean(output));
    cg_set_grad_enabled(grad);
    return mean;
}

/* criterion(output, label) with label filled with value: nn.BCELoss() */
static cg_tensor *criterion(const cg_tensor *output, float value) {
    cg_tensor *label = CHECK(cg_full_like(output, value));
    return CHECK(cg_binary_cross_entropy(output, label, NULL, CG_REDUCTION_MEAN));
}

/* real (B, 1, 32, 32), noise (B, nz, 1, 1) */
static losses train_step(const gan *g, const cg_tensor *real, const cg_tensor *noise) {
    losses l;
    /* (1) Update D network: maximize log(D(x)) + log(1 - D(G(z))) */
    CHECK_OK(cg_module_zero_grad(g->netD));
    cg_tensor *output = CHECK(cg_module_forward(g->netD, real)); /* train with real */
    cg_tensor *errD_real = criterion(output, REAL_LABEL);
    CHECK_OK(cg_backward(errD_real));
    l.D_x = mean_of(output);
    cg_tensor *fake = CHECK(cg_module_forward(g->netG, noise)); /* train with fake */
    output = CHECK(cg_module_forward(g->netD, CHECK(cg_detach(fake))));
    cg_tensor *errD_fake = criterion(output, FAKE_LABEL);
    CHECK_OK(cg_backward(errD_fake));
    l.D_G_z1 = mean_of(output);
    bool grad = cg_set_grad_enabled(false);
    l.errD = CHECK(cg_add(errD_real, errD_fake));
    cg_set_grad_enabled(grad);
    CHECK_OK(cg_optimizer_step(g->optimizerD));

    /* (2) Update G network: maximize log(D(G(z))), on the same fake; fake labels are real for generator cost */
    CHECK_OK(cg_module_zero_grad(g->netG));
    output = CHECK(cg_module_forward(g->netD, fake));
    l.errG = criterion(output, REAL_LABEL);
    CHECK_OK(cg_backward(l.errG));
    l.D_G_z2 = mean_of(output);
    CHECK_OK(cg_optimizer_step(g->optimizerG));
    return l;
}

static void print_losses(int epoch, int niter, int64_t i, int64_t batches, const losses *l) {
    printf("[%d/%d][%lld/%lld] Loss_D: %.4f Loss_G: %.4f D(x): %.4f D(G(z)): %.4f / %.4f\n", epoch, niter, (long long)i,
           (long long)batches, eu_item(l->errD), eu_item(l->errG), eu_item(l->D_x), eu_item(l->D_G_z1),
           eu_item(l->D_G_z2));
}

/* ---- data and outputs -------------------------------------------------------------------------------------- */
/* Fashion-MNIST's training images (the first `limit` when limit > 0) on d as (N, 1, 32, 32) in [-1, 1]:
 * ToTensor(), Normalize((0.5,), (0.5,)), and 2 pixels of -1 (a black pixel, normalised) on every side. */
static cg_tensor *padded_images(const char *dir, int64_t limit, cg_device d) {
    cg_dataset *ds = eu_fashion_mnist(dir, true, limit, 0.5f, 0.5f, d);
    cg_scope *scope = cg_scope_begin();
    const cg_tensor *flat = cg_dataset_images(ds); /* (N, 28, 28) */
    int64_t n = cg_size(flat, 0), h = cg_size(flat, 1), w = cg_size(flat, 2);
    cg_tensor *x = CHECK(cg_reshape(flat, 4, (const int64_t[]){n, NC, h, w}));
    cg_tensor *side = CHECK(cg_full(4, (const int64_t[]){n, NC, h, 2}, -1.0f, d));
    cg_tensor *wide = CHECK(cg_cat(3, (const cg_tensor *const[]){side, x, side}, 3)); /* (N, 1, 28, 32) */
    cg_tensor *band = CHECK(cg_full(4, (const int64_t[]){n, NC, 2, w + 4}, -1.0f, d));
    cg_tensor *padded = cg_keep(CHECK(cg_cat(3, (const cg_tensor *const[]){band, wide, band}, 2)));
    cg_scope_end(scope);
    cg_dataset_free(ds);
    return padded;
}

/* vutils.save_image(fake, '<outf>/<name>'): an 8-a-row grid, padding 2, [-1, 1] to black..white */
static void save_image(const cg_tensor *images, const char *outf, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", outf, name);
    CHECK_OK(eu_write_png_grid(images, 8, 2, path));
}

/* The samples of fixed_noise and the checkpoints of the epoch. netG runs in training mode, as main.py's
 * netG(fixed_noise) does (its BatchNorm layers use the batch's statistics and update their running ones). */
static void save_epoch(const gan *g, const cg_tensor *fixed_noise, const char *outf, int epoch) {
    cg_scope *scope = cg_scope_begin();
    bool grad = cg_set_grad_enabled(false);
    char name[64], path[4096];
    snprintf(name, sizeof name, "fake_samples_epoch_%03d.png", epoch);
    save_image(CHECK(cg_module_forward(g->netG, fixed_noise)), outf, name);
    cg_set_grad_enabled(grad);
    snprintf(path, sizeof path, "%s/netG_epoch_%d.safetensors", outf, epoch);
    CHECK_OK(cg_save_safetensors(g->netG, path));
    snprintf(path, sizeof path, "%s/netD_epoch_%d.safetensors", outf, epoch);
    CHECK_OK(cg_save_safetensors(g->netD, path));
    cg_scope_end(scope);
}

/* ---- --replay: PyTorch's 50 recorded steps ----------------------------------------------------------------- */
static cg_tensor *replay_tensor(const cg_safetensors *st, const char *name, cg_device d) {
    int k = cg_safetensors_find(st, name);
    if (k < 0) {
        fprintf(stderr, "dcgan: the --replay file has no tensor \"%s\" (tests/make_dcgan_fixtures.py writes it)\n", name);
        exit(1);
    }
    return CHECK(cg_safetensors_tensor(st, k, d));
}

/* Copies "<prefix>.<name>" of st into each state-dict entry of m (parameters and BatchNorm's buffers). */
static void load_prefixed(cg_module *m, const cg_safetensors *st, const char *prefix, cg_device d) {
    bool grad = cg_set_grad_enabled(false);
    for (int i = 0; i < cg_module_state_dict_size(m); i++) {
        cg_scope *scope = cg_scope_begin();
        const char *name;
        cg_tensor *entry = CHECK(cg_module_state_dict_entry(m, i, &name));
        char key[256];
        snprintf(key, sizeof key, "%s.%s", prefix, name);
        CHECK_OK(cg_copy_(entry, replay_tensor(st, key, d)));
        cg_scope_end(scope);
    }
    cg_set_grad_enabled(grad);
}

/* The float values of a float32 tensor of st, in host memory (malloc'ed, n of them). */
static float *replay_values(const cg_safetensors *st, const char *name, int64_t n) {
    cg_tensor *t = replay_tensor(st, name, cg_cpu());
    eu_expect(cg_numel(t) == n, "the --replay file's losses have one value a step");
    float *v = malloc((size_t)n * sizeof *v);
    eu_expect(v != NULL, "host memory");
    CHECK_OK(cg_to_host(t, v, (size_t)n));
    cg_tensor_free(t);
    return v;
}

static double relative(double value, double reference) { return fabs(value - reference) / fabs(reference); }

/* The file (tests/make_dcgan_fixtures.py): netG.* / netD.* the initial state dicts; real (S, B, 1, 32, 32)
 * uint8 pixels (padding 0); noise (S, B, nz, 1, 1); errD, errG (S) PyTorch's losses; lr, beta1 (1) the
 * Adams' settings. The sizes (nz, ngf, ndf, B, S) and settings all come from the file. */
static int replay(const char *path, bool check, cg_device d) {
    cg_safetensors *st;
    CHECK_OK(cg_safetensors_read(path, &st));
    cg_tensor *real_all = replay_tensor(st, "real", d), *noise_all = replay_tensor(st, "noise", d);
    cg_tensor *g0 = replay_tensor(st, "netG.main.0.weight", cg_cpu()); /* (nz, ngf * 4, 4, 4) */
    cg_tensor *d0 = replay_tensor(st, "netD.main.0.weight", cg_cpu()); /* (ndf, nc, 4, 4) */
    eu_expect(cg_ndim(real_all) == 5 && cg_dtype_of(real_all) == CG_UINT8 && cg_ndim(noise_all) == 5 &&
                  cg_size(noise_all, 0) == cg_size(real_all, 0) && cg_size(noise_all, 1) == cg_size(real_all, 1),
              "the --replay file holds uint8 real (S, B, 1, 32, 32) and noise (S, B, nz, 1, 1)");
    int64_t steps = cg_size(real_all, 0), nz = cg_size(noise_all, 2), ngf = cg_size(g0, 1) / 4, ndf = cg_size(d0, 0);
    cg_tensor_free(g0), cg_tensor_free(d0);
    float *refD = replay_values(st, "errD", steps), *refG = replay_values(st, "errG", steps);
    float *lr = replay_values(st, "lr", 1), *beta1 = replay_values(st, "beta1", 1);
    printf("replaying %lld steps of %s: batch %lld, nz %lld, ngf %lld, ndf %lld, lr %g, beta1 %g\n", (long long)steps,
           path, (long long)cg_size(real_all, 1), (long long)nz, (long long)ngf, (long long)ndf, lr[0], beta1[0]);

    gan g = gan_new(nz, ngf, ndf, lr[0], beta1[0], d);
    load_prefixed(g.netG, st, "netG", d);
    load_prefixed(g.netD, st, "netD", d);
    double worstD = 0.0, worstG = 0.0;
    for (int64_t s = 0; s < steps; s++) {
        cg_scope *scope = cg_scope_begin();
        cg_tensor *pixels = CHECK(cg_to_dtype(CHECK(cg_select(real_all, 0, s)), CG_FLOAT32));
        /* ToTensor() then Normalize((0.5,), (0.5,)), as the script converts them */
        cg_tensor *real = CHECK(cg_div_scalar(CHECK(cg_sub_scalar(CHECK(cg_div_scalar(pixels, 255.0f)), 0.5f)), 0.5f));
        losses l = train_step(&g, real, CHECK(cg_select(noise_all, 0, s)));
        double errD = eu_item(l.errD), errG = eu_item(l.errG);
        double rD = relative(errD, refD[s]), rG = relative(errG, refG[s]);
        printf("[%2lld/%lld] Loss_D: %.6f (PyTorch %.6f, %.1e) Loss_G: %.6f (PyTorch %.6f, %.1e)\n", (long long)s,
               (long long)steps, errD, refD[s], rD, errG, refG[s], rG);
        worstD = rD > worstD || isnan(rD) ? rD : worstD;
        worstG = rG > worstG || isnan(rG) ? rG : worstG;
        cg_scope_end(scope);
    }
    printf("largest relative difference to PyTorch: errD %.2e, errG %.2e (bound %.0e)\n", worstD, worstG, REPLAY_RTOL);
    if (check) eu_expect(worstD <= REPLAY_RTOL && worstG <= REPLAY_RTOL, "every step's errD and errG within 1e-3 of PyTorch's");
    gan_free(&g);
    free(refD), free(refG), free(lr), free(beta1);
    cg_tensor_free(real_all), cg_tensor_free(noise_all);
    cg_safetensors_free(st);
    return 0;
}

/* ---- training ----------------------------------------------------------------------------------------------- */
typedef struct options {
    int64_t batch_size, nz, limit;
    int niter, seed, log_interval;
    bool dry_run, check_loss_falls;
    const char *outf;
} options;

/* One epoch over images (N, 1, 32, 32) in a fresh random order; returns its mean errD and errG and its
 * throughput in images a second (the loop's wall time, the device waited for at both ends). */
static void train_epoch(const gan *g, const options *o, const cg_tensor *images, int epoch, eu_losses *h, double *loss_d,
                        double *loss_g, double *rate) {
    int64_t n = cg_size(images, 0), batches = (n + o->batch_size - 1) / o->batch_size, steps = 0, seen = 0;
    cg_tensor *order = CHECK(cg_randperm(n, g->device)); /* DataLoader(shuffle=True) */
    cg_tensor *sum_d = CHECK(cg_zeros(0, NULL, g->device)), *sum_g = CHECK(cg_zeros(0, NULL, g->device));
    CHECK_OK(cg_synchronize(g->device));
    double start = eu_now();
    for (int64_t i = 0; i < batches; i++) {
        cg_scope *scope = cg_scope_begin();
        int64_t rows = n - seen < o->batch_size ? n - seen : o->batch_size;
        cg_tensor *real = CHECK(cg_index_select(images, 0, CHECK(cg_narrow(order, 0, seen, rows))));
        cg_tensor *noise = CHECK(cg_randn(4, (const int64_t[]){rows, o->nz, 1, 1}, g->device));
        losses l = train_step(g, real, noise);
        bool grad = cg_set_grad_enabled(false);
        CHECK_OK(cg_add_(sum_d, l.errD)); /* no wait for the device a step */
        CHECK_OK(cg_add_(sum_g, l.errG));
        cg_set_grad_enabled(grad);
        if (o->check_loss_falls) eu_losses_add(h, eu_item(l.errD)); /* the discriminator's, every step */
        if (o->log_interval > 0 && i % o->log_interval == 0) print_losses(epoch, o->niter, i, batches, &l);
        seen += rows, steps++;
        cg_scope_end(scope);
        if (o->dry_run) break;
    }
    *loss_d = eu_item(sum_d) / (double)steps; /* waits for the epoch's work */
    *loss_g = eu_item(sum_g) / (double)steps;
    *rate = (double)seen / (eu_now() - start);
    cg_tensor_free(order), cg_tensor_free(sum_d), cg_tensor_free(sum_g);
    printf("====> Epoch %d: mean Loss_D %.4f, Loss_G %.4f, %.0f images/s\n", epoch, *loss_d, *loss_g, *rate);
}

int main(int argc, char **argv) {
    const char *data_dir = getenv("CGRAD_FASHION_MNIST_DIR") ? getenv("CGRAD_FASHION_MNIST_DIR") : CG_FASHION_MNIST_DIR;
    const char *netG_path = NULL, *netD_path = NULL, *replay_path = NULL;
    options o = {.batch_size = 64, .nz = 100, .niter = 25, .seed = 1, .log_interval = 100, .outf = "."};
    eu_take_string(&argc, argv, "--data", &data_dir);
    eu_take_string(&argc, argv, "--dataroot", &data_dir);
    eu_take_string(&argc, argv, "--outf", &o.outf);
    eu_take_string(&argc, argv, "--netG", &netG_path);
    eu_take_string(&argc, argv, "--netD", &netD_path);
    eu_take_string(&argc, argv, "--replay", &replay_path);
    o.dry_run = eu_take_switch(&argc, argv, "--dry-run");
    o.check_loss_falls = eu_take_switch(&argc, argv, "--check-loss-falls");
    bool check_replay = eu_take_switch(&argc, argv, "--check-replay");
    int64_t ngf = 64, ndf = 64;
    float lr = 0.0002f, beta1 = 0.5f;
    cg_device device = cg_default_device();
    eu_flag flags[] = {
        {"--batchSize", EU_SIZE, &o.batch_size, 1, "input batch size"},
        {"--nz", EU_SIZE, &o.nz, 1, "size of the latent z vector"},
        {"--ngf", EU_SIZE, &ngf, 1, "generator width"},
        {"--ndf", EU_SIZE, &ndf, 1, "discriminator width"},
        {"--niter", EU_INT, &o.niter, 1, "number of epochs to train for"},
        {"--lr", EU_FLOAT, &lr, 0, "learning rate"},
        {"--beta1", EU_FLOAT, &beta1, 0, "beta1 for adam"},
        {"--manualSeed", EU_INT, &o.seed, 0, "manual seed"},
        {"--seed", EU_INT, &o.seed, 0, "the same as --manualSeed"},
        {"--log-interval", EU_INT, &o.log_interval, 0, "steps between status lines"},
        {"--device", EU_DEVICE, &device, 0, "where the models and the data live (default: the best present)"},
        {"--limit", EU_SIZE, &o.limit, 0, "use the first N training images only (0: all)"},
    };
    eu_parse_flags(argc, argv,
                   "pytorch/examples' DCGAN on Fashion-MNIST padded to 32x32\n"
                   "  --dataroot DIR      the IDX files (also --data; default $CGRAD_FASHION_MNIST_DIR, else " CG_FASHION_MNIST_DIR ")\n"
                   "  --outf DIR          folder to output images and model checkpoints (default .)\n"
                   "  --netG FILE         path to netG (to continue training; safetensors)\n"
                   "  --netD FILE         path to netD (to continue training; safetensors)\n"
                   "  --dry-run           check a single training cycle works (one step an epoch)\n"
                   "  --check-loss-falls  exit 1 unless the discriminator's loss over the last third of the\n"
                   "                      steps is below the first third's\n"
                   "  --replay FILE       run the steps tests/make_dcgan_fixtures.py recorded and print the losses\n"
                   "                      beside PyTorch's (sizes, lr and beta1 come from the file)\n"
                   "  --check-replay      with --replay: exit 1 unless every errD and errG is within 1e-3 relative",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    /* the widths stay far from int64's range, so the layer sizes (ngf * 4, ...) cannot overflow */
    eu_expect(o.nz <= 65536 && ngf <= 65536 && ndf <= 65536, "--nz, --ngf and --ndf are at most 65536");
    cg_manual_seed((uint64_t)o.seed);
    if (replay_path) return replay(replay_path, check_replay, device);
    eu_expect(!check_replay, "--check-replay goes with --replay FILE");
    if (!eu_have_fashion_mnist(data_dir)) {
        fprintf(stderr, "%s: Fashion-MNIST not found in %s (--dataroot DIR or $CGRAD_FASHION_MNIST_DIR): skipped\n", argv[0],
                data_dir);
        return 77;
    }
    if (mkdir(o.outf, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "%s: cannot make --outf %s: %s\n", argv[0], o.outf, strerror(errno));
        return 1;
    }
    printf("Random Seed: %d\n", o.seed);

    cg_tensor *images = padded_images(data_dir, o.limit, device);
    gan g = gan_new(o.nz, ngf, ndf, lr, beta1, device);
    /* the parameters; a PyTorch state_dict's BatchNorm running statistics are left out (training mode
     * normalises with each batch's own) */
    if (netG_path) CHECK_OK(cg_load_safetensors_flags(g.netG, netG_path, CG_SAFETENSORS_ALLOW_UNEXPECTED));
    if (netD_path) CHECK_OK(cg_load_safetensors_flags(g.netD, netD_path, CG_SAFETENSORS_ALLOW_UNEXPECTED));
    cg_tensor *fixed_noise = CHECK(cg_randn(4, (const int64_t[]){o.batch_size, o.nz, 1, 1}, device));
    {
        cg_scope *scope = cg_scope_begin();
        int64_t shown = cg_size(images, 0) < o.batch_size ? cg_size(images, 0) : o.batch_size;
        save_image(CHECK(cg_narrow(images, 0, 0, shown)), o.outf, "real_samples.png");
        cg_scope_end(scope);
    }

    eu_losses h = {0};
    double *rates = malloc((size_t)o.niter * sizeof *rates), loss_d = NAN, loss_g = NAN;
    eu_expect(rates != NULL, "host memory");
    for (int epoch = 0; epoch < o.niter; epoch++) {
        train_epoch(&g, &o, images, epoch, &h, &loss_d, &loss_g, &rates[epoch]);
        eu_expect(isfinite(loss_d) && isfinite(loss_g), "the losses are finite");
        save_epoch(&g, fixed_noise, o.outf, epoch); /* do checkpointing */
    }
    if (o.check_loss_falls) eu_expect_loss_fell(&h);
    char limit[32] = "";
    if (o.limit) snprintf(limit, sizeof limit, "_n%lld", (long long)o.limit);
    printf("result work=dcgan_e%d_b%lld_nz%lld_ngf%lld_ndf%lld%s impl=cgrad seed=%d loss_d=%.4f loss_g=%.4f images_per_s=%.0f\n",
           o.niter, (long long)o.batch_size, (long long)o.nz, (long long)ngf, (long long)ndf, limit, o.seed, loss_d, loss_g,
           eu_median(rates, o.niter));

    free(rates), free(h.v);
    cg_tensor_free(fixed_noise), cg_tensor_free(images);
    gan_free(&g);
    return 0;
}
