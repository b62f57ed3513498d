/* Recurrent layers front-end: the functional nn.LSTM and nn.GRU (cg_lstm, cg_gru: torch's _VF.lstm /
 * _VF.gru), a stack of layers, each optionally bidirectional.
 *
 * The weights are concatenated (on the tape) into one flat buffer in the kernels' order (kernel_args.h's
 * cg_rnn_args, which is cuDNN's weight-space order), and the stack runs as one node through the
 * backend's RNN kernels (src/cpu/cpu_rnn.c: GEMMs and a fused gate pass; src/cuda/cuda_rnn.c: cuDNN).
 * The node's output is one tensor (rows of batch hidden floats) holding y, h_n, c_n and copies of h0 and
 * c0 (for the backward); the outputs the caller gets are views of it. The node saves the backend's
 * reserve (what the backward needs: cuDNN's reserve space, the CPU's gate activations). Dropout between
 * layers (training, p > 0) runs the stack one layer at a time with cg_dropout between. bfloat16 and
 * float16 are computed in float32.
 *
 * The cells' step (cg__lstm_gates, cg__gru_gates: nn.LSTMCell, nn.GRUCell) is composed of recorded ops. */
#include "ops_rnn.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"
#include "checked.h"
#include "error.h"
#include "op_table.h"
#include "ops.h"
#include "tensor_impl.h"

/* ---- the gates, composed (shared with the cells) -------------------------------------------------------- */
static void free_all(int n, cg_tensor **t) {
    for (int i = 0; i < n; i++) cg_tensor_free(t[i]);
}

cg_status cg__lstm_gates(const cg_tensor *xp, const cg_tensor *hp, const cg_tensor *c, cg_tensor **h_out,
                         cg_tensor **c_out) {
    *h_out = *c_out = NULL;
    int64_t h = cg__t(hp)->shape[1] / 4;
    cg_tensor *t[13] = {NULL}; /* sum, 4 pieces, 4 activations, f c, i g, tanh c' ; c' in t[12] */
    bool ok = (t[0] = cg_add(xp, hp)) && cg_split(t[0], h, 1, 4, t + 1) == 4;
    for (int k = 0; ok && k < 4; k++) ok = (t[5 + k] = k == 2 ? cg_tanh(t[1 + k]) : cg_sigmoid(t[1 + k])) != NULL;
    ok = ok && (t[9] = cg_mul(t[6], c)) && (t[10] = cg_mul(t[5], t[7])) && (t[12] = cg_add(t[9], t[10])) &&
         (t[11] = cg_tanh(t[12])) && (*h_out = cg_mul(t[8], t[11]));
    if (ok) *c_out = t[12], t[12] = NULL;
    free_all(13, t);
    return ok ? CG_OK : cg_last_status();
}

cg_tensor *cg__gru_gates(const cg_tensor *xp, const cg_tensor *hp, const cg_tensor *h) {
    int64_t hidden = cg__t(hp)->shape[1] / 3;
    cg_tensor *t[16] = {NULL}, *out = NULL; /* xr xz xn, hr hz hn, r z sums, r, z, r hn, n sum, n, h - n, z (h - n) */
    bool ok = cg_split(xp, hidden, 1, 3, t) == 3 && cg_split(hp, hidden, 1, 3, t + 3) == 3 &&
              (t[6] = cg_add(t[0], t[3])) && (t[7] = cg_add(t[1], t[4])) && (t[8] = cg_sigmoid(t[6])) &&
              (t[9] = cg_sigmoid(t[7])) && (t[10] = cg_mul(t[8], t[5])) && (t[11] = cg_add(t[2], t[10])) &&
              (t[12] = cg_tanh(t[11])) && (t[13] = cg_sub(h, t[12])) && (t[14] = cg_mul(t[9], t[13])) &&
              (out = cg_add(t[12], t[14]));
    free_all(16, t);
    return ok ? out : NULL;
}

/* ---- what a call is ---------------------------------------------------------------------------------------- */
typedef struct rnn_spec {
    cg_rnn_mode mode;
    const char *fn;
    int gates;      /* G: 4 (LSTM), 3 (GRU) */
    int per;        /* weights per layer and direction: 4 with bias, 2 without */
    int dirs;       /* D */
    int layers;
    int64_t seq, batch, input, hidden;
} rnn_spec;

cg_rnn_options cg_rnn_defaults(void) { return (cg_rnn_options){.num_layers = 1, .bias = true}; }

static const char *weight_kind(int k) {
    static const char *const kind[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
    return kind[k];
}

/* "weights[5] (weight_hh_l1_reverse)" */
static const char *weight_name(const rnn_spec *s, int i, char *buf, size_t len) {
    int pd = i / s->per, l = pd / s->dirs;
    snprintf(buf, len, "weights[%d] (%s_l%d%s)", i, weight_kind(i % s->per), l, pd % s->dirs ? "_reverse" : "");
    return buf;
}

static cg_status check_live(const cg_tensor *t, const cg_tensor *input, const char *fn, const char *name) {
    CG_TRY(cg__check_tensor(t, fn, name));
    CG_TRY(cg__check_floating(t, fn, name));
    if (cg__t(t)->dtype != cg__t(input)->dtype)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: %s is %s but input is %s; convert with cg_to_dtype", fn, name,
                        cg_dtype_name(cg__t(t)->dtype), cg_dtype_name(cg__t(input)->dtype));
    return cg__check_same_device(input, t, fn);
}

/* Weight i's expected shape: w_ih (G H, in), w_hh (G H, H), biases (G H). */
static int weight_shape(const rnn_spec *s, int i, int64_t *shape) {
    int kind = i % s->per, layer = i / s->per / s->dirs;
    shape[0] = s->gates * s->hidden;
    if (kind >= 2) return 1;
    shape[1] = kind == 1 ? s->hidden : layer == 0 ? s->input : s->dirs * s->hidden;
    return 2;
}

/* Checks the weights and sets s->hidden from weight_hh_l0. */
static cg_status check_weights(rnn_spec *s, const cg_tensor *input, int n, const cg_tensor *const *w) {
    char name[64], sw[160], sx[160];
    for (int i = 0; i < n; i++) CG_TRY(check_live(w[i], input, s->fn, weight_name(s, i, name, sizeof name)));
    const cg_tensor_impl *hh = cg__t(w[1]);
    if (hh->ndim != 2 || hh->shape[1] < 1 || hh->shape[1] > INT_MAX / 8 || hh->shape[0] != s->gates * hh->shape[1])
        return cg__fail(CG_ERR_SHAPE, "%s: weight_hh_l0 must be (%d hidden_size, hidden_size) with hidden_size in [1, 2^28), "
                        "got %s", s->fn, s->gates, cg__shape_str(w[1], sw, sizeof sw));
    s->hidden = hh->shape[1];
    for (int i = 0; i < n; i++) {
        int64_t shape[2];
        int nd = weight_shape(s, i, shape);
        const cg_tensor_impl *wi = cg__t(w[i]);
        if (wi->ndim == nd && wi->shape[0] == shape[0] && (nd == 1 || wi->shape[1] == shape[1])) continue;
        char want[64];
        if (nd == 1) snprintf(want, sizeof want, "(%lld,)", (long long)shape[0]);
        else snprintf(want, sizeof want, "(%lld, %lld)", (long long)shape[0], (long long)shape[1]);
        if (i == 0 && wi->ndim == 2 && wi->shape[0] == shape[0])
            return cg__fail(CG_ERR_SHAPE, "%s: input %s has %lld features but weight_ih_l0 %s expects %lld", s->fn,
                            cg__shape_str(input, sx, sizeof sx), (long long)s->input, cg__shape_str(w[0], sw, sizeof sw),
                            (long long)wi->shape[1]);
        return cg__fail(CG_ERR_SHAPE, "%s: %s must be %s for input_size %lld and hidden_size %lld, got %s", s->fn,
                        weight_name(s, i, name, sizeof name), want, (long long)s->input, (long long)s->hidden,
                        cg__shape_str(w[i], sw, sizeof sw));
    }
    return CG_OK;
}

static cg_status check_state(const rnn_spec *s, const cg_tensor *input, const cg_tensor *t, const char *name) {
    if (!t) return CG_OK;
    CG_TRY(check_live(t, input, s->fn, name));
    const cg_tensor_impl *ti = cg__t(t);
    int64_t rows = (int64_t)s->layers * s->dirs;
    if (ti->ndim == 3 && ti->shape[0] == rows && ti->shape[1] == s->batch && ti->shape[2] == s->hidden) return CG_OK;
    char st[160];
    return cg__fail(CG_ERR_SHAPE, "%s: %s must be (num_layers * num_directions, batch, hidden_size) = (%lld, %lld, %lld), got %s",
                    s->fn, name, (long long)rows, (long long)s->batch, (long long)s->hidden, cg__shape_str(t, st, sizeof st));
}

/* Fills s from the arguments, checking them. */
static cg_status check_args(rnn_spec *s, const cg_tensor *input, const cg_tensor *h0, const cg_tensor *c0, int nweights,
                            const cg_tensor *const *w, const cg_rnn_options *o) {
    const char *fn = s->fn;
    char sx[160];
    CG_TRY(cg__check_tensor(input, fn, "input"));
    CG_TRY(cg__check_floating(input, fn, "input"));
    const cg_tensor_impl *xi = cg__t(input);
    if (xi->ndim != 3)
        return cg__fail(CG_ERR_SHAPE, "%s: expected input (seq, batch, input_size) (batch_first: (batch, seq, input_size)), got %s "
                        "(an unbatched input needs cg_unsqueeze first)", fn, cg__shape_str(input, sx, sizeof sx));
    s->seq = xi->shape[o->batch_first ? 1 : 0], s->batch = xi->shape[o->batch_first ? 0 : 1], s->input = xi->shape[2];
    if (s->seq < 1 || s->batch < 1 || s->input < 1)
        return cg__fail(CG_ERR_SHAPE, "%s: input %s needs at least one time step, one sequence and one feature", fn,
                        cg__shape_str(input, sx, sizeof sx));
    if (o->num_layers < 1 || o->num_layers > 1024)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: num_layers must be in [1, 1024], got %d", fn, o->num_layers);
    if (!(o->dropout >= 0.0f && o->dropout < 1.0f))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: dropout = %g must be in [0, 1)", fn, (double)o->dropout);
    s->layers = o->num_layers, s->dirs = o->bidirectional ? 2 : 1, s->per = o->bias ? 4 : 2;
    s->gates = s->mode == CG_RNN_LSTM ? 4 : 3;
    int expected = s->layers * s->dirs * s->per;
    if (nweights != expected || !w)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: expected %d weights (num_layers %d x %d direction%s x %d), got %d%s", fn,
                        expected, s->layers, s->dirs, s->dirs == 2 ? "s" : "", s->per, nweights, w ? "" : " (weights NULL)");
    CG_TRY(check_weights(s, input, nweights, w));
    if (s->mode == CG_RNN_LSTM && !h0 != !c0)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: h0 and c0 must be given together (or both NULL for zeros)", fn);
    CG_TRY(check_state(s, input, h0, "h0"));
    CG_TRY(check_state(s, input, c0, "c0"));
    /* every array the kernels see has an int element count (cuDNN's sizes are int) */
    int64_t widest = s->input > 2 * s->hidden ? s->input : 2 * s->hidden, n;
    if (s->seq > INT_MAX || s->batch > INT_MAX || s->input > INT_MAX || !cg__mul_i64(s->seq, s->batch, &n) ||
        !cg__mul_i64(n, widest, &n) || n > INT_MAX / 4 || !cg__mul_i64((int64_t)s->layers * 2, s->batch * s->hidden, &n) ||
        n > INT_MAX / 4)
        return cg__fail(CG_ERR_SHAPE, "%s: input %s with hidden_size %lld and %d layers is too large (every array must "
                        "hold fewer than 2^29 elements)", fn, cg__shape_str(input, sx, sizeof sx), (long long)s->hidden,
                        s->layers);
    return CG_OK;
}

/* ---- the stack as one node ---------------------------------------------------------------------------------- */
/* Where each part lives in the node's output (in floats). */
typedef struct rnn_layout {
    int64_t hy, cy, hx, cx, total;
} rnn_layout;

static rnn_layout layout_of(const cg_rnn_geom *g, bool has_h0, bool has_c0) {
    int64_t y = (int64_t)g->seq * g->batch * (g->bidirectional ? 2 : 1) * g->hidden;
    int64_t state = (int64_t)g->layers * (g->bidirectional ? 2 : 1) * g->batch * g->hidden;
    rnn_layout o;
    o.hy = y;
    o.cy = o.hy + state;
    o.hx = o.cy + (g->mode == CG_RNN_LSTM ? state : 0);
    o.cx = o.hx + (has_h0 && g->training ? state : 0);
    o.total = o.cx + (has_c0 && g->training ? state : 0);
    return o;
}

/* saved: x contiguous, the flat weights, the node's output, the backend's reserve; the node's params: */
typedef struct cg_rnn_params {
    cg_rnn_geom geom;
    bool has_h0, has_c0;
} cg_rnn_params;

static float *at(const cg_tensor *t, int64_t offset) { return cg__f32(t) + offset; }

/* Copies state (S floats, contiguous) into p at offset. */
static cg_status copy_state(const cg_tensor *state, cg_tensor *p, int64_t offset) {
    cg_tensor *c = cg__raw_contiguous(state);
    if (!c) return cg_last_status();
    int64_t bytes = cg__t(c)->numel * (int64_t)sizeof(float);
    cg_status s = cg__run_copy_blocks(cg__t(p)->device, &(cg_copy_blocks_args){cg__data(c), at(p, offset), 1, bytes, bytes, bytes});
    cg_tensor_free(c);
    return s;
}

static cg_status rnn_backward(cg_node *node, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_rnn_params *p = CG_NODE_PARAMS(node, cg_rnn_params);
    const cg_tensor *x = node->saved[0], *w = node->saved[1], *out = node->saved[2], *reserve = node->saved[3];
    rnn_layout o = layout_of(&p->geom, p->has_h0, p->has_c0);
    cg_device d = cg__t(x)->device;
    cg_tensor *gc = cg__raw_contiguous(g), *made[4] = {NULL, NULL, NULL, NULL};
    bool ok = gc && (made[0] = cg__tensor_new(3, node->in_shape[0], d)) &&
              (!p->has_h0 || (made[1] = cg__tensor_new(3, node->in_shape[1], d))) &&
              (!p->has_c0 || (made[2] = cg__tensor_new(3, node->in_shape[2], d))) &&
              (!node->needs_grad[3] || (made[3] = cg_zeros(1, node->in_shape[3], d)));
    cg_status s = ok ? CG_OK : cg_last_status();
    if (s == CG_OK) {
        bool lstm = p->geom.mode == CG_RNN_LSTM;
        cg_rnn_args a = {.geom = p->geom, .x = cg__f32(x), .w = cg__f32(w), .y = at(out, 0),
                         .hx = p->has_h0 ? at(out, o.hx) : NULL, .cx = p->has_c0 ? at(out, o.cx) : NULL,
                         .dy = at(gc, 0), .dhy = at(gc, o.hy), .dcy = lstm ? at(gc, o.cy) : NULL,
                         .dx = cg__f32(made[0]), .dhx = made[1] ? cg__f32(made[1]) : NULL,
                         .dcx = made[2] ? cg__f32(made[2]) : NULL, .dw = made[3] ? cg__f32(made[3]) : NULL,
                         .reserve = cg__data(reserve), .reserve_bytes = cg__t(reserve)->numel * (int64_t)sizeof(float)};
        s = cg__run_rnn_backward(d, &a);
    }
    cg_tensor_free(gc);
    for (int k = 0; k < 4; k++) {
        if (s == CG_OK && node->needs_grad[k]) grad_in[k] = made[k];
        else cg_tensor_free(made[k]);
    }
    return s;
}

/* A view of out (rows, batch hidden): a b c floats from offset (both whole rows), shaped (a, b, c). Rows,
 * not floats, so that the narrow's backward indexes a few rows, not every float. */
static cg_tensor *part(cg_tensor *out, int64_t offset, int64_t a, int64_t b, int64_t c) {
    int64_t width = cg__t(out)->shape[1];
    cg_tensor *rows = cg_narrow(out, 0, offset / width, a * b * c / width);
    cg_tensor *v = rows ? cg_view(rows, 3, (const int64_t[]){a, b, c}) : NULL;
    cg_tensor_free(rows);
    return v;
}

/* nl layers of the stack over x (L, N, in) with their weights w (nl D per), h0, c0 (nl D, N, H) or NULL:
 * y (L, N, D H), hn and cn (nl D, N, H; cn LSTM only), through the backend's RNN kernels, recorded as one
 * node. Inside the caller's scope. */
static cg_status stack_node(const rnn_spec *s, const cg_op_info *op, int nl, const cg_tensor *x, const cg_tensor *h0,
                             const cg_tensor *c0, const cg_tensor *const *w, cg_tensor **y, cg_tensor **hn,
                             cg_tensor **cn) {
    int nw = nl * s->dirs * s->per;
    cg_tensor **flat = calloc((size_t)nw, sizeof *flat);
    if (!flat) return cg__fail(CG_ERR_OOM, "%s: out of host memory", s->fn);
    bool ok = true;
    for (int i = 0; ok && i < nw; i++) ok = (flat[i] = cg_reshape(w[i], 1, (const int64_t[]){-1})) != NULL;
    cg_tensor *wflat = ok ? cg_cat(nw, (const cg_tensor *const *)flat, 0) : NULL; /* the weight space, on the tape */
    free(flat);
    const cg_tensor *inputs[4] = {x, h0, c0, wflat};
    cg_device d = cg__t(x)->device;
    cg_rnn_geom g = {.mode = s->mode, .seq = (int)s->seq, .batch = (int)s->batch, .input = (int)cg__t(x)->shape[2],
                     .hidden = (int)s->hidden, .layers = nl, .bidirectional = s->dirs == 2, .bias = s->per == 4,
                     .training = wflat && cg__should_record(4, inputs)};
    int64_t reserve_bytes = 0;
    cg_status st = wflat ? CG_OK : cg_last_status();
    if (st == CG_OK && g.training) st = cg__run_rnn_space(d, &(cg_rnn_args){.geom = g, .reserve_bytes_out = &reserve_bytes});
    rnn_layout o = layout_of(&g, h0 != NULL, c0 != NULL);
    int64_t reserve_floats = (reserve_bytes + (int64_t)sizeof(float) - 1) / (int64_t)sizeof(float);
    cg_tensor *xc = st == CG_OK ? cg__raw_contiguous(x) : NULL, *h0c = xc && h0 ? cg__raw_contiguous(h0) : NULL;
    cg_tensor *c0c = xc && c0 ? cg__raw_contiguous(c0) : NULL;
    /* every part is a whole number of rows of batch hidden floats */
    const int64_t out_shape[2] = {o.total / (s->batch * s->hidden), s->batch * s->hidden};
    cg_tensor *out = xc && (h0c || !h0) && (c0c || !c0) ? cg__tensor_new(2, out_shape, d) : NULL;
    cg_tensor *reserve = out && g.training ? cg__tensor_new(1, &reserve_floats, d) : NULL;
    if (st == CG_OK && (!out || (g.training && !reserve))) st = cg_last_status();
    if (st == CG_OK && g.training && h0) st = copy_state(h0c, out, o.hx); /* the backward's hx and cx */
    if (st == CG_OK && g.training && c0) st = copy_state(c0c, out, o.cx);
    if (st == CG_OK) {
        bool lstm = s->mode == CG_RNN_LSTM;
        cg_rnn_args a = {.geom = g, .x = cg__f32(xc), .hx = h0 ? cg__f32(h0c) : NULL, .cx = c0 ? cg__f32(c0c) : NULL,
                         .w = cg__f32(wflat), .y = at(out, 0), .hy = at(out, o.hy), .cy = lstm ? at(out, o.cy) : NULL,
                         .reserve = reserve ? cg__data(reserve) : NULL, .reserve_bytes = reserve_bytes};
        st = cg__run_rnn_forward(d, &a);
    }
    if (st == CG_OK && g.training) {
        const cg_tensor *saved[4] = {xc, wflat, out, reserve};
        cg_node *node = cg__record_op(out, op, 4, inputs, 4, saved);
        if (node) *CG_NODE_PARAMS(node, cg_rnn_params) = (cg_rnn_params){g, h0 != NULL, c0 != NULL};
        else st = cg_last_status();
    }
    int64_t rows = (int64_t)nl * s->dirs;
    if (st == CG_OK && (!(*y = part(out, 0, s->seq, s->batch, s->dirs * s->hidden)) ||
                        !(*hn = part(out, o.hy, rows, s->batch, s->hidden)) ||
                        (s->mode == CG_RNN_LSTM && !(*cn = part(out, o.cy, rows, s->batch, s->hidden)))))
        st = cg_last_status();
    return st; /* the rest is the caller's scope's */
}

/* ---- the stack ----------------------------------------------------------------------------------------------- */
/* nl layers from layer `first`. */
static cg_status run_layers(const rnn_spec *s, const cg_op_info *op, int first, int nl, const cg_tensor *x,
                            const cg_tensor *h0, const cg_tensor *c0, const cg_tensor *const *w, cg_tensor **y,
                            cg_tensor **hn, cg_tensor **cn) {
    int64_t row = (int64_t)first * s->dirs, rows = (int64_t)nl * s->dirs;
    cg_tensor *h = h0 && nl < s->layers ? cg_narrow(h0, 0, row, rows) : (cg_tensor *)h0;
    cg_tensor *c = c0 && nl < s->layers ? cg_narrow(c0, 0, row, rows) : (cg_tensor *)c0;
    if ((h0 && !h) || (c0 && !c)) return cg_last_status();
    return stack_node(s, op, nl, x, h, c, w + row * s->per, y, hn, cn);
}

/* out[0..2] (output, h_n, c_n) in float32, made in the caller's scope. */
static cg_status run_stack(const rnn_spec *s, const cg_op_info *op, const cg_tensor *input, const cg_tensor *h0,
                           const cg_tensor *c0, const cg_tensor *const *w, const cg_rnn_options *o, bool training,
                           cg_tensor **out) {
    bool drop = training && o->dropout > 0.0f && s->layers > 1;
    int chunk = drop ? 1 : s->layers, nchunks = s->layers / chunk;
    cg_tensor **hn = calloc((size_t)nchunks * 2, sizeof *hn), **cn = hn ? hn + nchunks : NULL;
    if (!hn) return cg__fail(CG_ERR_OOM, "%s: out of host memory", s->fn);
    cg_tensor *x = o->batch_first ? cg_transpose(input, 0, 1) : (cg_tensor *)input;
    cg_status st = x ? CG_OK : cg_last_status();
    for (int k = 0; st == CG_OK && k < nchunks; k++) {
        if (k > 0 && drop && !(x = cg_dropout(x, o->dropout, true))) st = cg_last_status();
        if (st == CG_OK) st = run_layers(s, op, k * chunk, chunk, x, h0, c0, w, &x, &hn[k], &cn[k]);
    }
    if (st == CG_OK && o->batch_first && !(x = cg_transpose(x, 0, 1))) st = cg_last_status();
    out[0] = x;
    if (st == CG_OK && !(out[1] = nchunks == 1 ? hn[0] : cg_cat(nchunks, (const cg_tensor *const *)hn, 0)))
        st = cg_last_status();
    if (st == CG_OK && s->mode == CG_RNN_LSTM &&
        !(out[2] = nchunks == 1 ? cn[0] : cg_cat(nchunks, (const cg_tensor *const *)cn, 0)))
        st = cg_last_status();
    free(hn);
    return st;
}

/* The public calls: checks, float32 conversion, and a scope of our own that keeps only the outputs. */
static cg_status rnn(cg_rnn_mode mode, const char *fn, const cg_op_info *op, const cg_tensor *input, const cg_tensor *h0,
                     const cg_tensor *c0, int nweights, const cg_tensor *const *weights, cg_rnn_options o, bool training,
                     cg_tensor **const *results) {
    int nout = mode == CG_RNN_LSTM ? 3 : 2;
    for (int k = 0; k < nout; k++)
        if (!results[k]) return cg__fail(CG_ERR_INVALID_ARG, "%s: output pointer %d is NULL", fn, k);
    for (int k = 0; k < nout; k++) *results[k] = NULL;
    rnn_spec s = {.mode = mode, .fn = fn};
    CG_TRY(check_args(&s, input, h0, c0, nweights, weights, &o));
    cg_dtype dt = cg__t(input)->dtype;
    const cg_tensor **w = malloc((size_t)nweights * sizeof *w);
    if (!w) return cg__fail(CG_ERR_OOM, "%s: out of host memory", fn);
    cg_scope *scope = cg_scope_begin();
    cg_status st = scope ? CG_OK : cg_last_status();
    const cg_tensor *x = input, *h = h0, *c = c0;
    for (int i = 0; i < nweights; i++) w[i] = weights[i];
    if (st == CG_OK && dt != CG_FLOAT32) { /* computed in float32; the conversions are on the tape */
        bool ok = (x = cg_to_dtype(input, CG_FLOAT32)) && (!h0 || (h = cg_to_dtype(h0, CG_FLOAT32))) &&
                  (!c0 || (c = cg_to_dtype(c0, CG_FLOAT32)));
        for (int i = 0; ok && i < nweights; i++) ok = (w[i] = cg_to_dtype(weights[i], CG_FLOAT32)) != NULL;
        if (!ok) st = cg_last_status();
    }
    cg_tensor *out[3] = {NULL, NULL, NULL};
    if (st == CG_OK) st = run_stack(&s, op, x, h, c, w, &o, training, out);
    bool kept = st == CG_OK;
    for (int k = 0; kept && k < nout; k++) cg_keep(out[k]);
    if (scope) cg_scope_end(scope);
    /* handles of the caller's scope, on the tape, in the input's dtype: for float32 an alias, whose
     * backward passes the gradient on as it is */
    for (int k = 0; kept && k < nout; k++) {
        if (st == CG_OK && !(*results[k] = cg_to_dtype(out[k], dt))) st = cg_last_status();
        cg_tensor_free(out[k]);
    }
    if (st != CG_OK)
        for (int k = 0; k < nout; k++) cg_tensor_free(*results[k]), *results[k] = NULL;
    free(w);
    return st == CG_OK ? CG_OK : cg__fail_context("%s", fn);
}

cg_status cg_lstm(const cg_tensor *input, const cg_tensor *h0, const cg_tensor *c0, int nweights,
                  const cg_tensor *const *weights, cg_rnn_options options, bool training, cg_tensor **output,
                  cg_tensor **h_n, cg_tensor **c_n) {
    return rnn(CG_RNN_LSTM, "cg_lstm", &cg__op_lstm, input, h0, c0, nweights, weights, options, training,
               (cg_tensor **[]){output, h_n, c_n});
}

cg_status cg_gru(const cg_tensor *input, const cg_tensor *h0, int nweights, const cg_tensor *const *weights,
                 cg_rnn_options options, bool training, cg_tensor **output, cg_tensor **h_n) {
    return rnn(CG_RNN_GRU, "cg_gru", &cg__op_gru, input, h0, NULL, nweights, weights, options, training,
               (cg_tensor **[]){output, h_n, NULL});
}

/* ---- op-table entries (src/op_table.h) ---------------------------------------------------------------------
 * Inputs x (L, N, I), w_ih (G H, I), w_hh (G H, H); param[0] num_layers, param[1] bidirectional; no bias,
 * and every layer and direction uses the same w_ih and w_hh (so I = D H where num_layers > 1: their
 * gradients are then sums over the uses, which the test checks too). The result: output, h_n (and c_n)
 * flattened and concatenated. */
static cg_tensor *rnn_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    bool lstm = op == &cg__op_lstm;
    cg_rnn_options o = {.num_layers = (int)c->param[0], .bidirectional = c->param[1] != 0};
    int nw = o.num_layers * (o.bidirectional ? 2 : 1) * 2;
    const cg_tensor *w[16];
    for (int i = 0; i < nw; i++) w[i] = in[1 + i % 2];
    cg_tensor *r[3] = {NULL, NULL, NULL}, *flat[3] = {NULL, NULL, NULL}, *result = NULL;
    int n = lstm ? 3 : 2;
    cg_status s = lstm ? cg_lstm(in[0], NULL, NULL, nw, w, o, true, &r[0], &r[1], &r[2])
                       : cg_gru(in[0], NULL, nw, w, o, true, &r[0], &r[1]);
    bool ok = s == CG_OK;
    for (int k = 0; ok && k < n; k++) ok = (flat[k] = cg_reshape(r[k], 1, (const int64_t[]){-1})) != NULL;
    if (ok) result = cg_cat(n, (const cg_tensor *const *)flat, 0);
    free_all(3, r), free_all(3, flat);
    return result;
}

static double sigmoid_d(double v) { return 1.0 / (1.0 + exp(-v)); }

/* One step of one sample: h, c (H) updated from the projections a = W_ih x, b = W_hh h (G H). */
static void ref_cell(bool lstm, int64_t hidden, const double *a, const double *b, double *h, double *c) {
    for (int64_t j = 0; j < hidden; j++) {
        if (lstm) {
            double i = sigmoid_d(a[j] + b[j]), f = sigmoid_d(a[hidden + j] + b[hidden + j]);
            double g = tanh(a[2 * hidden + j] + b[2 * hidden + j]), o = sigmoid_d(a[3 * hidden + j] + b[3 * hidden + j]);
            c[j] = f * c[j] + i * g;
            h[j] = o * tanh(c[j]);
        } else {
            double r = sigmoid_d(a[j] + b[j]), z = sigmoid_d(a[hidden + j] + b[hidden + j]);
            double n = tanh(a[2 * hidden + j] + r * b[2 * hidden + j]);
            h[j] = (1 - z) * n + z * h[j];
        }
    }
}

/* out[r] = sum_k m[r, k] v[k], m (rows, cols). */
static void ref_matvec(const double *m, const double *v, int64_t rows, int64_t cols, double *out) {
    for (int64_t r = 0; r < rows; r++) {
        double sum = 0.0;
        for (int64_t k = 0; k < cols; k++) sum += m[r * cols + k] * v[k];
        out[r] = sum;
    }
}

static cg_status rnn_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    bool lstm = op == &cg__op_lstm;
    int64_t L = in[0].shape[0], N = in[0].shape[1], I = in[0].shape[2], G = lstm ? 4 : 3, H = in[2].shape[1];
    int64_t nl = c->param[0], D = c->param[1] ? 2 : 1, ylen = L * N * D * H, state = nl * D * N * H;
    CG_TRY(cg__ref_alloc(out, 1, (int64_t[]){ylen + state * (lstm ? 2 : 1)}));
    double *cur = malloc((size_t)(L * N * (I > D * H ? I : D * H)) * sizeof(double));
    double *next = malloc((size_t)ylen * sizeof(double)), *a = malloc((size_t)(2 * G * H) * sizeof(double));
    double *h = malloc((size_t)(2 * H) * sizeof(double));
    if (!cur || !next || !a || !h) {
        free(cur), free(next), free(a), free(h), free(out->data);
        return cg__fail(CG_ERR_OOM, "rnn_reference: out of memory");
    }
    for (int64_t i = 0; i < L * N * I; i++) cur[i] = in[0].data[i];
    int64_t width = I;
    for (int64_t l = 0; l < nl; l++) {
        for (int64_t d = 0; d < D; d++)
            for (int64_t n = 0; n < N; n++) {
                for (int64_t j = 0; j < 2 * H; j++) h[j] = 0.0; /* h, then c */
                for (int64_t step = 0; step < L; step++) {
                    int64_t t = d ? L - 1 - step : step;
                    ref_matvec(in[1].data, cur + (t * N + n) * width, G * H, width, a);
                    ref_matvec(in[2].data, h, G * H, H, a + G * H);
                    ref_cell(lstm, H, a, a + G * H, h, h + H);
                    for (int64_t j = 0; j < H; j++) next[(t * N + n) * D * H + d * H + j] = h[j];
                }
                for (int64_t j = 0; j < H; j++) {
                    out->data[ylen + ((l * D + d) * N + n) * H + j] = h[j];
                    if (lstm) out->data[ylen + state + ((l * D + d) * N + n) * H + j] = h[H + j];
                }
            }
        for (int64_t i = 0; i < ylen; i++) cur[i] = next[i];
        width = D * H;
    }
    for (int64_t i = 0; i < ylen; i++) out->data[i] = next[i];
    free(cur), free(next), free(a), free(h);
    return CG_OK;
}

/* Small odd sizes, H = 2 or 3; values in [-1, 1] keep the gates away from saturation. */
#define RNN_DOMAIN(name, G)                                                                                          \
    static const cg_op_domain name = {                                                                               \
        .lo = {-1.0f, -1.0f, -1.0f}, .hi = {1.0f, 1.0f, 1.0f},                                                       \
        CG_OP_CASES({.ndim = {3, 2, 2}, .shape = {{3, 2, 5}, {G * 2, 5}, {G * 2, 2}}, .param = {1, 0}},              \
                    {.ndim = {3, 2, 2}, .shape = {{1, 3, 2}, {G * 3, 2}, {G * 3, 3}}, .param = {1, 0}},              \
                    {.ndim = {3, 2, 2}, .shape = {{4, 1, 3}, {G * 2, 3}, {G * 2, 2}}, .param = {1, 1}},              \
                    {.ndim = {3, 2, 2}, .shape = {{3, 2, 2}, {G * 2, 2}, {G * 2, 2}}, .param = {2, 0}},              \
                    {.ndim = {3, 2, 2}, .shape = {{2, 3, 4}, {G * 2, 4}, {G * 2, 2}}, .param = {2, 1}},              \
                    {.ndim = {3, 2, 2}, .shape = {{3, 2, 3}, {G * 3, 3}, {G * 3, 3}}, .transposed = {true, true, true}, \
                     .param = {1, 0}})}
RNN_DOMAIN(lstm_domain, 4);
RNN_DOMAIN(gru_domain, 3);

CG_OP_DEFINE(lstm) = {.name = "cg_lstm", .ninputs = 3, .dtypes = CG_OP_FLOATS, .grad_inputs = 7u, .domain = &lstm_domain,
                      .call = rnn_call, .reference = rnn_reference, .backward = rnn_backward};
CG_OP_DEFINE(gru) = {.name = "cg_gru", .ninputs = 3, .dtypes = CG_OP_FLOATS, .grad_inputs = 7u, .domain = &gru_domain,
                     .call = rnn_call, .reference = rnn_reference, .backward = rnn_backward};
