/* nn.LSTM, nn.GRU (a stack of layers: cg_lstm / cg_gru, src/ops_rnn.c), nn.LSTMCell and nn.GRUCell (one
 * step, composed of ops). Parameters under PyTorch's names and in its order (weight_ih_l0, weight_hh_l0,
 * bias_ih_l0, bias_hh_l0, then _reverse, then layer 1 ...; the cells' weight_ih, weight_hh, bias_ih,
 * bias_hh), all drawn from U(-1/sqrt(hidden), 1/sqrt(hidden)) as PyTorch's reset_parameters. They are
 * read from the registry at every call, so a tied parameter replaces the registered one. Called through
 * cg_module_call: (input[, h0[, c0]]) -> (output, h_n[, c_n]) for the layers, (input[, h[, c]]) ->
 * (h'[, c']) for the cells; fewer outputs may be asked for (the first ones); inputs without their batch
 * dim (unbatched, as PyTorch's) give outputs without it. */
#include "nn/module.h"
#include "backend.h"
#include "checked.h"
#include "error.h"
#include "ops_rnn.h"
#include "tensor_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct rnn_state {
    cg_rnn_mode mode;
    bool cell;
    int64_t input_size, hidden_size;
    cg_rnn_options o; /* a cell: bias only */
} rnn_state;

static const char *type_name(const rnn_state *s) {
    return s->mode == CG_RNN_LSTM ? (s->cell ? "LSTMCell" : "LSTM") : (s->cell ? "GRUCell" : "GRU");
}

/* The outputs the caller did not ask for are freed; out[k] for k < nout are kept. */
static void hand_out(cg_tensor **made, int nmade, int nout, cg_tensor **out) {
    for (int k = 0; k < nmade; k++) {
        if (k < nout) out[k] = made[k];
        else cg_tensor_free(made[k]);
    }
}

static cg_status check_counts(const rnn_state *s, int nin, int nout) {
    int states = s->mode == CG_RNN_LSTM ? 2 : 1, outs = s->cell ? states : states + 1;
    bool in_ok = nin == 1 || nin == 1 + states;
    if (in_ok && nout >= 1 && nout <= outs) return CG_OK;
    const char *ins = s->mode == CG_RNN_LSTM ? "input or (input, h0, c0)" : "input or (input, h0)";
    const char *outs_names = s->cell ? (s->mode == CG_RNN_LSTM ? "h', c'" : "h'")
                                     : (s->mode == CG_RNN_LSTM ? "output, h_n, c_n" : "output, h_n");
    return cg__fail(CG_ERR_INVALID_ARG, "cg_module_call: a %s takes %s and returns up to %d outputs (%s); called with %d "
                    "input%s and %d output%s", type_name(s), ins, outs, outs_names, nin, nin == 1 ? "" : "s", nout,
                    nout == 1 ? "" : "s");
}

static cg_status layers_forward(cg_module *m, int nin, const cg_tensor *const *in, int nout, cg_tensor **out) {
    const cg_module_impl *mi = cg__m(m);
    const rnn_state *s = mi->state;
    const cg_tensor **w = malloc((size_t)mi->nown * sizeof *w);
    if (!w) return cg__fail(CG_ERR_OOM, "%s: out of host memory", type_name(s));
    for (int i = 0; i < mi->nown; i++) w[i] = mi->own[i].tensor;
    cg_tensor *made[3] = {NULL, NULL, NULL};
    const cg_tensor *h0 = nin > 1 ? in[1] : NULL;
    cg_status st = s->mode == CG_RNN_LSTM
                       ? cg_lstm(in[0], h0, nin > 2 ? in[2] : NULL, mi->nown, w, s->o, mi->training, &made[0], &made[1], &made[2])
                       : cg_gru(in[0], h0, mi->nown, w, s->o, mi->training, &made[0], &made[1]);
    free(w);
    if (st != CG_OK) return cg__fail_context("%s", type_name(s));
    hand_out(made, s->mode == CG_RNN_LSTM ? 3 : 2, nout, out);
    return CG_OK;
}

static cg_status check_cell_state(const rnn_state *s, const cg_tensor *x, const cg_tensor *t, const char *name) {
    char st[160], sx[160];
    const cg_tensor_impl *ti = cg__t(t);
    if (ti->ndim == 2 && ti->shape[0] == cg__t(x)->shape[0] && ti->shape[1] == s->hidden_size) return CG_OK;
    return cg__fail(CG_ERR_SHAPE, "%s: %s must be (batch, hidden_size) = (%lld, %lld) for input %s, got %s", type_name(s),
                    name, (long long)cg__t(x)->shape[0], (long long)s->hidden_size, cg__shape_str(x, sx, sizeof sx),
                    cg__shape_str(t, st, sizeof st));
}

static cg_status check_cell(const rnn_state *s, int nin, const cg_tensor *const *in) {
    char sx[160];
    const cg_tensor_impl *xi = cg__t(in[0]);
    if (xi->ndim != 2 || xi->shape[1] != s->input_size)
        return cg__fail(CG_ERR_SHAPE, "%s: expected input (batch, input_size = %lld), got %s", type_name(s),
                        (long long)s->input_size, cg__shape_str(in[0], sx, sizeof sx));
    static const char *const names[2] = {"h", "c"};
    for (int k = 1; k < nin; k++) CG_TRY(check_cell_state(s, in[0], in[k], names[k - 1]));
    return CG_OK;
}

/* One step: h' (and c') from x (N, I) and h, c (N, H), or zeros. */
static cg_status cell_forward(cg_module *m, int nin, const cg_tensor *const *in, int nout, cg_tensor **out) {
    const cg_module_impl *mi = cg__m(m);
    const rnn_state *s = mi->state;
    CG_TRY(check_cell(s, nin, in));
    const cg_tensor *b_ih = mi->nown > 2 ? mi->own[2].tensor : NULL, *b_hh = mi->nown > 2 ? mi->own[3].tensor : NULL;
    const int64_t nh[2] = {cg__t(in[0])->shape[0], s->hidden_size};
    cg_device d = cg__t(in[0])->device;
    cg_dtype dt = cg__t(in[0])->dtype;
    cg_tensor *zero[2] = {NULL, NULL}, *xp = NULL, *hp = NULL, *made[2] = {NULL, NULL};
    const cg_tensor *h = nin > 1 ? in[1] : (zero[0] = cg_zeros_dtype(2, nh, dt, d));
    const cg_tensor *c = s->mode != CG_RNN_LSTM ? NULL : nin > 2 ? in[2] : (zero[1] = cg_zeros_dtype(2, nh, dt, d));
    bool ok = h && (c || s->mode != CG_RNN_LSTM) && (xp = cg_linear(in[0], mi->own[0].tensor, b_ih)) &&
              (hp = cg_linear(h, mi->own[1].tensor, b_hh));
    if (ok && s->mode == CG_RNN_LSTM) ok = cg__lstm_gates(xp, hp, c, &made[0], &made[1]) == CG_OK;
    else if (ok) ok = (made[0] = cg__gru_gates(xp, hp, h)) != NULL;
    cg_tensor_free(xp), cg_tensor_free(hp), cg_tensor_free(zero[0]), cg_tensor_free(zero[1]);
    if (!ok) return cg__fail_context("%s", type_name(s));
    hand_out(made, s->mode == CG_RNN_LSTM ? 2 : 1, nout, out);
    return CG_OK;
}

static cg_status batched_forward(cg_module *m, int nin, const cg_tensor *const *in, int nout, cg_tensor **out) {
    const rnn_state *s = cg__m(m)->state;
    return s->cell ? cell_forward(m, nin, in, nout, out) : layers_forward(m, nin, in, nout, out);
}

/* PyTorch's unbatched call: the input without its batch dim (the layers' (L, I), the cells' (I)) and the
 * states without theirs ((num_layers D, H), (H)) run as a batch of one, the outputs' batch dim dropped. */
static cg_status unbatched_forward(cg_module *m, int nin, const cg_tensor *const *in, int nout, cg_tensor **out) {
    const rnn_state *s = cg__m(m)->state;
    int xdim = s->cell || s->o.batch_first ? 0 : 1, sdim = s->cell ? 0 : 1, state_ndim = s->cell ? 1 : 2;
    for (int k = 1; k < nin; k++)
        if (cg__t(in[k])->ndim != state_ndim) {
            char sx[160], st[160];
            return cg__fail(CG_ERR_SHAPE, "%s: for the unbatched input %s the states must be unbatched too (%d-D), got %s",
                            type_name(s), cg__shape_str(in[0], sx, sizeof sx), state_ndim, cg__shape_str(in[k], st, sizeof st));
        }
    cg_tensor *b[3] = {NULL, NULL, NULL};
    cg_status st = CG_OK;
    for (int k = 0; st == CG_OK && k < nin; k++)
        if (!(b[k] = cg_unsqueeze(in[k], k == 0 ? xdim : sdim))) st = cg_last_status();
    if (st == CG_OK) st = batched_forward(m, nin, (const cg_tensor *const *)b, nout, out);
    for (int k = 0; st == CG_OK && k < nout; k++) {
        cg_tensor *one = out[k];
        if (!(out[k] = cg_squeeze(one, k == 0 && !s->cell ? xdim : sdim))) st = cg_last_status();
        cg_tensor_free(one);
    }
    for (int k = 0; k < 3; k++) cg_tensor_free(b[k]);
    return st;
}

static cg_status rnn_forward_n(cg_module *m, int nin, const cg_tensor *const *in, int nout, cg_tensor **out) {
    const rnn_state *s = cg__m(m)->state;
    CG_TRY(check_counts(s, nin, nout));
    bool unbatched = cg__t(in[0])->ndim == (s->cell ? 1 : 2);
    return unbatched ? unbatched_forward(m, nin, in, nout, out) : batched_forward(m, nin, in, nout, out);
}

static cg_module *rnn_create(const rnn_state *config, cg_device d);

static cg_module *rnn_clone(const cg_module *m, cg_device d) { return rnn_create(cg__m(m)->state, d); }

/* Each kind under its PyTorch name in errors (the type's name); one forward serves them all. */
static const cg_module_type lstm_type = {
    .name = "LSTM", .state_size = sizeof(rnn_state), .forward_n = rnn_forward_n, .clone = rnn_clone};
static const cg_module_type gru_type = {
    .name = "GRU", .state_size = sizeof(rnn_state), .forward_n = rnn_forward_n, .clone = rnn_clone};
static const cg_module_type lstm_cell_type = {
    .name = "LSTMCell", .state_size = sizeof(rnn_state), .forward_n = rnn_forward_n, .clone = rnn_clone};
static const cg_module_type gru_cell_type = {
    .name = "GRUCell", .state_size = sizeof(rnn_state), .forward_n = rnn_forward_n, .clone = rnn_clone};

static const cg_module_type *type_of(const rnn_state *s) {
    return s->mode == CG_RNN_LSTM ? (s->cell ? &lstm_cell_type : &lstm_type) : (s->cell ? &gru_cell_type : &gru_type);
}

/* Parameters of the right shapes for config, values unspecified. */
static cg_module *rnn_create(const rnn_state *config, cg_device d) {
    cg_module *m = cg_module_new(type_of(config), d);
    if (!m) return NULL;
    rnn_state *s = cg__m(m)->state;
    *s = *config;
    int64_t gh = (s->mode == CG_RNN_LSTM ? 4 : 3) * s->hidden_size;
    int layers = s->cell ? 1 : s->o.num_layers, dirs = !s->cell && s->o.bidirectional ? 2 : 1;
    static const char *const kind[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
    for (int l = 0; l < layers; l++)
        for (int dir = 0; dir < dirs; dir++)
            for (int k = 0; k < (s->o.bias ? 4 : 2); k++) {
                char name[64];
                if (s->cell) snprintf(name, sizeof name, "%s", kind[k]);
                else snprintf(name, sizeof name, "%s_l%d%s", kind[k], l, dir ? "_reverse" : "");
                int64_t in = k == 1 ? s->hidden_size : l == 0 ? s->input_size : dirs * s->hidden_size;
                if (!cg__module_new_parameter(m, name, k < 2 ? 2 : 1, (const int64_t[]){gh, in})) {
                    cg_module_free(m);
                    return NULL;
                }
            }
    return m;
}

static cg_module *rnn_new(const rnn_state *config, cg_device d, const char *fn) {
    const cg_rnn_options *o = &config->o;
    if (config->input_size <= 0 || config->hidden_size <= 0 || config->input_size > INT32_MAX ||
        config->hidden_size > INT32_MAX / 8)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: input_size (%lld) and hidden_size (%lld) must be positive (and "
                            "below 2^31, hidden_size below 2^28)", fn, (long long)config->input_size,
                            (long long)config->hidden_size);
    if (!config->cell && (o->num_layers < 1 || o->num_layers > 1024))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: num_layers must be in [1, 1024], got %d", fn, o->num_layers);
    if (!config->cell && !(o->dropout >= 0.0f && o->dropout < 1.0f))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: dropout = %g must be in [0, 1)", fn, (double)o->dropout);
    int64_t widest = config->input_size > 2 * config->hidden_size ? config->input_size : 2 * config->hidden_size, n;
    if (!cg__mul_i64(4 * config->hidden_size, widest, &n))
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: a weight of 4 hidden_size (%lld) x %lld is too large: its size overflows "
                            "64 bits", fn, (long long)config->hidden_size, (long long)widest);
    if (!cg__backend_for(d)) return (cg__fail_context("%s", fn), NULL);
    cg_module *m = rnn_create(config, d);
    if (!m) return (cg__fail_context("%s", fn), NULL);
    if (cg__module_init_uniform(m, 1.0f / sqrtf((float)config->hidden_size)) != CG_OK || cg__module_ready(m, fn) != CG_OK) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

cg_module *cg_lstm_new(int64_t input_size, int64_t hidden_size, cg_rnn_options options, cg_device d) {
    return rnn_new(&(rnn_state){CG_RNN_LSTM, false, input_size, hidden_size, options}, d, "cg_lstm_new");
}

cg_module *cg_gru_new(int64_t input_size, int64_t hidden_size, cg_rnn_options options, cg_device d) {
    return rnn_new(&(rnn_state){CG_RNN_GRU, false, input_size, hidden_size, options}, d, "cg_gru_new");
}

cg_module *cg_lstm_cell_new(int64_t input_size, int64_t hidden_size, bool bias, cg_device d) {
    return rnn_new(&(rnn_state){CG_RNN_LSTM, true, input_size, hidden_size, {.num_layers = 1, .bias = bias}}, d,
                   "cg_lstm_cell_new");
}

cg_module *cg_gru_cell_new(int64_t input_size, int64_t hidden_size, bool bias, cg_device d) {
    return rnn_new(&(rnn_state){CG_RNN_GRU, true, input_size, hidden_size, {.num_layers = 1, .bias = bias}}, d,
                   "cg_gru_cell_new");
}
