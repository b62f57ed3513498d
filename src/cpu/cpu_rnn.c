/* The rnn family on the CPU (kernels/kernel_args.h: RNN_SPACE, RNN_FORWARD, RNN_BACKWARD; mirrors
 * src/cuda/cuda_rnn.c): a stack of LSTM or GRU layers, each layer and direction as one GEMM for the
 * input projection of every time step, then per time step one GEMM of h_{t-1} with W_hh and a fused
 * pass over the gates. The backward runs the steps in reverse with the same fused pass, one GEMM per
 * step for dh_{t-1}, and the weights' gradients as one GEMM each over all steps.
 *
 * The reserve holds, per layer and direction (pseudo-layer p = layer D + direction), the gates after
 * their activations (L, N, G H: LSTM i f g o, GRU r z n) and a state (L, N, H: the LSTM's c_t, the
 * GRU's W_hn h_{t-1} + b_hn, which r scales), then every layer's output but the last's (L, N, D H; the
 * last one is y). Every sum runs in an order fixed by the shapes: the same bits on every run. */
#include "cpu/cpu.h"
#include "allocator.h"
#include "backend.h"
#include "error.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

typedef struct rnn_dims {
    int G, D, H, L, N, layers;
    bool lstm, bias;
    int64_t rows, gh, dh; /* L N, G H, D H */
} rnn_dims;

static rnn_dims dims_of(const cg_rnn_geom *g) {
    rnn_dims r = {.G = g->mode == CG_RNN_LSTM ? 4 : 3, .D = g->bidirectional ? 2 : 1, .H = g->hidden, .L = g->seq,
                  .N = g->batch, .layers = g->layers, .lstm = g->mode == CG_RNN_LSTM, .bias = g->bias};
    r.rows = (int64_t)r.L * r.N, r.gh = (int64_t)r.G * r.H, r.dh = (int64_t)r.D * r.H;
    return r;
}

static int64_t pseudo_floats(const rnn_dims *r) { return r->rows * (r->gh + r->H); }
static int64_t reserve_floats(const rnn_dims *r) {
    return r->layers * r->D * pseudo_floats(r) + (int64_t)(r->layers - 1) * r->rows * r->dh;
}
/* Layer l's output (l < layers - 1) in the reserve. */
static float *layer_out(const rnn_dims *r, float *reserve, int l) {
    return reserve + r->layers * r->D * pseudo_floats(r) + (int64_t)l * r->rows * r->dh;
}

/* Pseudo-layer p's weights (or their gradients) in the packed buffer (kernel_args.h's order). */
typedef struct rnn_weights {
    float *w_ih, *w_hh, *b_ih, *b_hh; /* biases NULL without bias */
    int64_t in;                       /* w_ih's columns */
} rnn_weights;

static rnn_weights weights_of(const rnn_dims *r, const cg_rnn_geom *g, const float *packed, int p) {
    int64_t off = 0;
    rnn_weights w = {0};
    for (int q = 0; q <= p; q++) {
        w.in = q < r->D ? g->input : r->dh;
        float *base = (float *)packed + off;
        w.w_ih = base, w.w_hh = base + r->gh * w.in;
        w.b_ih = r->bias ? w.w_hh + r->gh * r->H : NULL, w.b_hh = r->bias ? w.b_ih + r->gh : NULL;
        off += r->gh * (w.in + r->H) + (r->bias ? 2 * r->gh : 0);
    }
    return w;
}

static float sigmoidf(float v) { return 1.0f / (1.0f + expf(-v)); }
static float at_or_zero(const float *v, int64_t i) { return v ? v[i] : 0.0f; }

/* c (m, n) = op(a) op(b) (op: transposed or not) + beta c: beta 0 overwrites, 1 adds. */
static void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                 int64_t ldb, float beta, float *c, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k,
                1.0f, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

/* One direction's view of a step. */
typedef struct rnn_step {
    int64_t t, tp;        /* this step's time and the previous step's (valid when not first) */
    bool first;
    const float *h_prev;  /* (N, H) rows ld_h apart, or NULL (zeros) */
    int64_t ld_h;
    const float *c_prev;  /* LSTM: (N, H), or NULL */
} rnn_step;

static rnn_step step_of(const rnn_dims *r, int d, int s, const float *hx, const float *cx, const float *out,
                        const float *state) {
    rnn_step st = {.t = d ? r->L - 1 - s : s, .first = s == 0};
    st.tp = d ? st.t + 1 : st.t - 1;
    if (st.first) st.h_prev = hx, st.ld_h = r->H, st.c_prev = cx;
    else st.h_prev = out + st.tp * r->N * r->dh + d * r->H, st.ld_h = r->dh, st.c_prev = state + st.tp * r->N * r->H;
    return st;
}

/* ---- forward ---------------------------------------------------------------------------------------- */
/* The gates of sample n at step st: act holds W_ih x (in), then the activations; q = W_hh h_{t-1}. */
static void gates_forward(const rnn_dims *r, const rnn_weights *w, const rnn_step *st, int64_t n, float *act,
                          const float *q, float *state, float *h_out) {
    int64_t H = r->H;
    for (int64_t j = 0; j < H; j++) {
        float hp = st->h_prev ? st->h_prev[n * st->ld_h + j] : 0.0f;
        if (r->lstm) {
            float v[4];
            for (int k = 0; k < 4; k++)
                v[k] = act[k * H + j] + q[k * H + j] + at_or_zero(w->b_ih, k * H + j) + at_or_zero(w->b_hh, k * H + j);
            float i = sigmoidf(v[0]), f = sigmoidf(v[1]), g = tanhf(v[2]), o = sigmoidf(v[3]);
            float c = f * at_or_zero(st->c_prev, n * H + j) + i * g;
            act[j] = i, act[H + j] = f, act[2 * H + j] = g, act[3 * H + j] = o;
            state[j] = c;
            h_out[j] = o * tanhf(c);
        } else {
            float rg = sigmoidf(act[j] + q[j] + at_or_zero(w->b_ih, j) + at_or_zero(w->b_hh, j));
            float z = sigmoidf(act[H + j] + q[H + j] + at_or_zero(w->b_ih, H + j) + at_or_zero(w->b_hh, H + j));
            float hn = q[2 * H + j] + at_or_zero(w->b_hh, 2 * H + j);
            float nn = tanhf(act[2 * H + j] + at_or_zero(w->b_ih, 2 * H + j) + rg * hn);
            act[j] = rg, act[H + j] = z, act[2 * H + j] = nn;
            state[j] = hn;
            h_out[j] = (1.0f - z) * nn + z * hp;
        }
    }
}

/* h_{t-1} W_hh^T into q (N, G H), zeros when h_{t-1} is. */
static void recurrent_projection(const rnn_dims *r, const rnn_weights *w, const rnn_step *st, float *q) {
    if (st->h_prev) gemm(false, true, r->N, r->gh, r->H, st->h_prev, st->ld_h, w->w_hh, r->H, 0.0f, q, r->gh);
    else memset(q, 0, (size_t)(r->N * r->gh) * sizeof(float));
}

static void forward_direction(const rnn_dims *r, const cg_rnn_args *a, int p, const float *in, int64_t in_w,
                              float *reserve, float *out, float *q) {
    int d = p % r->D;
    rnn_weights w = weights_of(r, &a->geom, a->w, p);
    float *act = reserve + p * pseudo_floats(r), *state = act + r->rows * r->gh;
    const float *hx = a->hx ? a->hx + p * r->N * r->H : NULL, *cx = a->cx ? a->cx + p * r->N * r->H : NULL;
    gemm(false, true, r->rows, r->gh, in_w, in, in_w, w.w_ih, in_w, 0.0f, act, r->gh); /* every step's W_ih x */
    for (int s = 0; s < r->L; s++) {
        rnn_step st = step_of(r, d, s, hx, cx, out, state);
        recurrent_projection(r, &w, &st, q);
        CG_CPU_FOR(n, r->N, r->N * r->gh, {
            int64_t row = st.t * r->N + n;
            gates_forward(r, &w, &st, n, act + row * r->gh, q + n * r->gh, state + row * r->H,
                          out + row * r->dh + d * r->H);
        });
    }
    int64_t last = d ? 0 : r->L - 1;
    for (int64_t n = 0; n < r->N; n++) {
        memcpy(a->hy + (p * r->N + n) * r->H, out + (last * r->N + n) * r->dh + d * r->H, (size_t)r->H * sizeof(float));
        if (r->lstm)
            memcpy(a->cy + (p * r->N + n) * r->H, state + (last * r->N + n) * r->H, (size_t)r->H * sizeof(float));
    }
}

cg_status cg__cpu_rnn_space(const void *raw, int index) {
    const cg_rnn_args *a = raw;
    rnn_dims r = dims_of(&a->geom);
    *a->reserve_bytes_out = reserve_floats(&r) * (int64_t)sizeof(float);
    return CG_OK;
}

cg_status cg__cpu_rnn_forward(const void *raw, int index) {
    const cg_rnn_args *a = raw;
    CG_TRY(cg__cpu_enter());
    rnn_dims r = dims_of(&a->geom);
    /* scratch from the caching allocator: q (N, G H), then in inference a reserve of our own */
    size_t q_bytes = (size_t)(r.N * r.gh) * sizeof(float);
    size_t bytes = q_bytes + (a->geom.training ? 0 : (size_t)reserve_floats(&r) * sizeof(float));
    float *q = cg__alloc(cg_cpu(), bytes);
    if (!q) return cg__fail_context("cg_lstm / cg_gru: the layers' scratch");
    float *reserve = a->geom.training ? a->reserve : q + r.N * r.gh;
    const float *in = a->x;
    int64_t in_w = a->geom.input;
    for (int l = 0; l < r.layers; l++) {
        float *out = l == r.layers - 1 ? a->y : layer_out(&r, reserve, l);
        for (int d = 0; d < r.D; d++) forward_direction(&r, a, l * r.D + d, in, in_w, reserve, out, q);
        in = out, in_w = r.dh;
    }
    cg__free(cg_cpu(), q, bytes);
    return CG_OK;
}

/* ---- backward ----------------------------------------------------------------------------------------- */
/* The gradients of sample n's gates at step st from dh (the total gradient of h_t, here overwritten
 * with the part of dh_{t-1} that does not go through W_hh) and dc (LSTM: of c_t, overwritten with that of
 * c_{t-1}): gx of the input projection's pre-activations, gh of the recurrent one's (the GRU's differ in n). */
static void gates_backward(const rnn_dims *r, const rnn_step *st, int64_t n, const float *act, const float *state,
                           float *dh, float *dc, float *gx, float *gh) {
    int64_t H = r->H;
    for (int64_t j = 0; j < H; j++) {
        float g = dh[j];
        if (r->lstm) {
            float i = act[j], f = act[H + j], gg = act[2 * H + j], o = act[3 * H + j], tc = tanhf(state[j]);
            float dct = dc[j] + g * o * (1.0f - tc * tc);
            gx[j] = dct * gg * i * (1.0f - i);
            gx[H + j] = dct * at_or_zero(st->c_prev, n * H + j) * f * (1.0f - f);
            gx[2 * H + j] = dct * i * (1.0f - gg * gg);
            gx[3 * H + j] = g * tc * o * (1.0f - o);
            dc[j] = dct * f;
            dh[j] = 0.0f;
        } else {
            float rg = act[j], z = act[H + j], nn = act[2 * H + j], hn = state[j];
            float hp = st->h_prev ? st->h_prev[n * st->ld_h + j] : 0.0f;
            float dn = g * (1.0f - z) * (1.0f - nn * nn);
            gx[j] = gh[j] = dn * hn * rg * (1.0f - rg);
            gx[H + j] = gh[H + j] = g * (hp - nn) * z * (1.0f - z);
            gx[2 * H + j] = dn;
            gh[2 * H + j] = dn * rg;
            dh[j] = g * z;
        }
    }
}

/* Scratch of the backward, each sized for the widest layer. */
typedef struct rnn_scratch {
    float *gx, *gh;   /* (L N, G H); the LSTM's gh is gx */
    float *hprev;     /* (L N, H): h_{t-1} of each step, for W_hh's gradient */
    float *dh, *dc;   /* (N, H) */
    float *din[2];    /* (L N, D H): the gradient of a layer's input, for the layer below */
} rnn_scratch;

/* out[j] += the sum over rows of g (rows, cols), in row order. */
static void add_column_sums(const float *g, int64_t rows, int64_t cols, float *out) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) out[j] += g[i * cols + j];
}

/* Pseudo-layer p: dy (L N, D H, its direction's columns), its input `in` (L N, in_w) and output; din
 * (L N, in_w) written (first direction) or added to. */
static void backward_direction(const rnn_dims *r, const cg_rnn_args *a, int p, const float *in, int64_t in_w,
                               const float *out, const float *dy, float *din, rnn_scratch *sc) {
    int d = p % r->D;
    rnn_weights w = weights_of(r, &a->geom, a->w, p);
    const float *act = (const float *)a->reserve + p * pseudo_floats(r), *state = act + r->rows * r->gh;
    const float *hx = a->hx ? a->hx + p * r->N * r->H : NULL, *cx = a->cx ? a->cx + p * r->N * r->H : NULL;
    int64_t NH = (int64_t)r->N * r->H;
    for (int64_t i = 0; i < NH; i++) {
        sc->dh[i] = at_or_zero(a->dhy, p * NH + i);
        if (r->lstm) sc->dc[i] = at_or_zero(a->dcy, p * NH + i);
    }
    float *gh = r->lstm ? sc->gx : sc->gh;
    for (int s = r->L - 1; s >= 0; s--) {
        rnn_step st = step_of(r, d, s, hx, cx, out, state);
        CG_CPU_FOR(n, r->N, r->N * r->gh, {
            int64_t row = st.t * r->N + n;
            float *dhn = sc->dh + n * r->H;
            for (int64_t j = 0; j < r->H; j++) dhn[j] += dy[row * r->dh + d * r->H + j];
            gates_backward(r, &st, n, act + row * r->gh, state + row * r->H, dhn, r->lstm ? sc->dc + n * r->H : NULL,
                           sc->gx + row * r->gh, gh + row * r->gh);
        });
        /* dh_{t-1} (+)= gh_t W_hh */
        gemm(false, false, r->N, r->H, r->gh, gh + st.t * r->N * r->gh, r->gh, w.w_hh, r->H, r->lstm ? 0.0f : 1.0f,
             sc->dh, r->H);
        for (int64_t n = 0; a->dw && n < r->N; n++) /* h_{t-1}, zeros before the first step without hx */
            for (int64_t j = 0; j < r->H; j++)
                sc->hprev[(st.t * r->N + n) * r->H + j] = st.h_prev ? st.h_prev[n * st.ld_h + j] : 0.0f;
    }
    if (a->dhx) memcpy(a->dhx + p * NH, sc->dh, (size_t)NH * sizeof(float));
    if (a->dcx) memcpy(a->dcx + p * NH, sc->dc, (size_t)NH * sizeof(float));
    gemm(false, false, r->rows, in_w, r->gh, sc->gx, r->gh, w.w_ih, in_w, d == 0 ? 0.0f : 1.0f, din, in_w);
    if (!a->dw) return;
    rnn_weights dw = weights_of(r, &a->geom, a->dw, p);
    gemm(true, false, r->gh, in_w, r->rows, sc->gx, r->gh, in, in_w, 1.0f, dw.w_ih, in_w);
    gemm(true, false, r->gh, r->H, r->rows, gh, r->gh, sc->hprev, r->H, 1.0f, dw.w_hh, r->H);
    if (!r->bias) return;
    add_column_sums(sc->gx, r->rows, r->gh, dw.b_ih);
    add_column_sums(gh, r->rows, r->gh, dw.b_hh);
}

static cg_status backward(const rnn_dims *r, const cg_rnn_args *a, rnn_scratch *sc) {
    const float *dy = a->dy;
    for (int l = r->layers - 1; l >= 0; l--) {
        const float *in = l == 0 ? a->x : layer_out(r, a->reserve, l - 1);
        const float *out = l == r->layers - 1 ? a->y : layer_out(r, a->reserve, l);
        int64_t in_w = l == 0 ? a->geom.input : r->dh;
        float *din = l == 0 ? a->dx : sc->din[l % 2];
        for (int d = 0; d < r->D; d++) backward_direction(r, a, l * r->D + d, in, in_w, out, dy, din, sc);
        dy = din;
    }
    return CG_OK;
}

cg_status cg__cpu_rnn_backward(const void *raw, int index) {
    const cg_rnn_args *a = raw;
    CG_TRY(cg__cpu_enter());
    rnn_dims r = dims_of(&a->geom);
    size_t gates = (size_t)(r.rows * r.gh), states = (size_t)(r.N * r.H), layer = (size_t)(r.rows * r.dh);
    size_t hprev = (size_t)(r.rows * r.H), din = r.layers > 1 ? 2 * layer : 0;
    size_t bytes = (2 * gates + hprev + 2 * states + din) * sizeof(float);
    float *buf = cg__alloc(cg_cpu(), bytes); /* the caching allocator's: a step allocates nothing from the system */
    if (!buf) return cg__fail_context("cg_lstm / cg_gru: the backward's scratch");
    rnn_scratch sc = {.gx = buf, .gh = buf + gates, .hprev = buf + 2 * gates, .dh = buf + 2 * gates + hprev};
    sc.dc = sc.dh + states;
    sc.din[0] = sc.dc + states, sc.din[1] = sc.din[0] + layer;
    cg_status s = backward(&r, a, &sc);
    cg__free(cg_cpu(), buf, bytes);
    return s;
}
